"""The README and docs/ run as written: every fenced code block is run by a test unless the line
before its opening fence is the marker ``<!-- excerpt -->`` (a fragment, or a command that needs
a cluster or takes minutes). ``text`` blocks are output, diagrams and file layouts, never run.

* README.md: each ``python`` block (the numpy and PyTorch quick starts) runs alone, twice, in a
  fresh directory, as a user pasting it into a script would (PYTHONPATH set as the README says).
  Its ``cpp`` block is compiled and run by ctest (``readme:cpp_quick_start``). The sample output
  of ``make demo`` is checked against what examples/quickstart.py prints.
* docs/*.md: a page's ``python`` blocks run in order as one script, in a fresh directory, as a
  reader following the page in one session would (format.md's reader imports the
  ``xdl_trace_pb2`` that protoc writes there, as its comment says).
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

EXCERPT = "<!-- excerpt -->"
LANGUAGES = {"python", "sh", "cpp", "cmake", "text"}
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(path):
    """[(line, language, code, excerpt)] of the fenced blocks of a Markdown file."""
    text = open(path, encoding="utf-8").read()
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        out.append((line, m.group(1), m.group(2), before == EXCERPT))
    return out


README = os.path.join(REPO, "README.md")
DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
PAGES = [README] + DOCS


def run_python(code, cwd, timeout=300):
    if "from xdl_trace_pb2 import" in code:  # format.md's reader: protoc's output, as it says.
        if shutil.which("protoc") is None:
            pytest.skip("protoc is not installed")
        protos = glob.glob(os.path.join(REPO, "proto", "*.proto"))
        subprocess.run(
            ["protoc", "-I", os.path.join(REPO, "proto"), f"--python_out={cwd}", *protos],
            check=True,
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("MPLBACKEND", "Agg")
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_every_block_is_run_or_marked_an_excerpt(page):
    problems = []
    for line, language, _, excerpt in blocks(page):
        where = f"{os.path.relpath(page, REPO)}:{line}"
        if language not in LANGUAGES:
            problems.append(f"{where}: language {language!r} is not one of {sorted(LANGUAGES)}")
        elif language in ("python", "text") or excerpt:
            continue
        elif page == README and language == "cpp":
            continue  # ctest readme:cpp_quick_start compiles and runs it.
        else:
            problems.append(f"{where}: a {language} block no test runs: mark it {EXCERPT}")
    assert not problems, "\n".join(problems)


def test_readme_cpp_block_is_the_ctest_one():
    cpp = [b for b in blocks(README) if b[1] == "cpp" and not b[3]]
    assert len(cpp) == 1  # cmake/ExtractReadmeBlock.cmake takes the first.
    assert "int main()" in cpp[0][2] and "Ok((*tracer)->Step(step, step)" in cpp[0][2]
    cmake = open(os.path.join(REPO, "tests", "cpp", "CMakeLists.txt")).read()
    assert "readme:cpp_quick_start" in cmake and "ExtractReadmeBlock.cmake" in cmake


README_PYTHON = [b for b in blocks(README) if b[1] == "python" and not b[3]]


@pytest.mark.parametrize("block", README_PYTHON, ids=lambda b: f"README.md:{b[0]}")
def test_readme_quick_start_runs_as_printed_twice(block, tmp_path):
    line, _, code, _ = block
    if "import torch" in code:
        pytest.importorskip("torch")
    for attempt in (1, 2):  # A second run into the same directory (a new run there) works too.
        result = run_python(code, tmp_path)
        assert result.returncode == 0, f"README.md:{line}, run {attempt}:\n{result.stderr}"
        assert "Warning" not in result.stderr, result.stderr


def test_readme_has_numpy_and_pytorch_quick_starts():
    codes = [b[2] for b in README_PYTHON]
    assert any("import numpy" in c and "send_gradient" in c for c in codes)
    torch_code = next(c for c in codes if "import torch" in c)
    assert "xdl.watch(model, optimizer=opt)" in torch_code and "loss" in torch_code
    assert "write_report" in torch_code
    assert len(torch_code.strip().splitlines()) <= 20


def test_readme_says_how_to_import_from_elsewhere():
    text = open(README).read()
    assert "pip install --no-build-isolation ." in text
    assert "PYTHONPATH" in text


def _doc_script(page):
    return "\n".join(
        code for _, language, code, excerpt in blocks(page) if language == "python" and not excerpt
    )


DOC_PAGES = [p for p in DOCS if _doc_script(p)]


@pytest.mark.parametrize("page", DOC_PAGES, ids=os.path.basename)
def test_docs_python_blocks_run_in_order(page, tmp_path):
    script = _doc_script(page)
    if "xdl_trace.dask" in script:
        pytest.importorskip("dask.array")
        pytest.importorskip("pandas")
    result = run_python(script, tmp_path)
    assert result.returncode == 0, f"{os.path.relpath(page, REPO)}:\n{result.stderr}"


def test_format_md_reader_verifies_a_written_file(tmp_path):
    (reader,) = [
        code
        for _, language, code, excerpt in blocks(os.path.join(REPO, "docs", "format.md"))
        if language == "python" and not excerpt
    ]
    check = (
        "import numpy as np, xdl_trace as xdl\n"
        "xdl.trace_tensor('x', np.arange(3.0))\n"
        "with xdl.TraceHook(output_dir='t') as hook:\n"
        "    for _ in range(4):\n"
        "        hook.step()\n" + reader + "\nassert len(verify('t/train.trace.0.1')) == 4\n"
    )
    result = run_python(check, tmp_path)
    assert result.returncode == 0, result.stderr


# --- make demo's sample output ------------------------------------------------------------------


def _readme_sample():
    text = open(README).read()
    section = text[text.index("## What `make demo` shows") :]
    (sample,) = [code for _, language, code, _ in blocks_of(section) if language == "text"][:1]
    return sample


def blocks_of(text):
    return [(0, m.group(1), m.group(2), False) for m in FENCE.finditer(text)]


def test_readme_sample_output_is_what_the_demo_prints(tmp_path):
    """Each line of the README's sample is a line the demo prints, in order; a line "  ..."
    stands for any number of lines."""
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", "quickstart.py"), "build/demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, MPLBACKEND="Agg"),
    )
    assert result.returncode == 0, result.stderr

    # Byte counts vary with the Header (host name, argv): compared as "N bytes".
    def normalized(text):
        return re.sub(r"\b\d+ bytes\b", "N bytes", text).splitlines()

    printed = normalized(result.stdout.replace(sys.executable, "/usr/bin/python3"))
    expected = normalized(_readme_sample())
    at = 0
    skipping = False
    for want in expected:
        if want.strip() == "...":
            skipping = True
            continue
        if skipping:
            while at < len(printed) and printed[at] != want:
                at += 1
        assert at < len(printed) and printed[at] == want, (
            f"README.md's sample output of `make demo` is out of date: expected {want!r}, "
            f"the demo printed {printed[at] if at < len(printed) else 'nothing more'!r}; "
            f"it printed:\n{result.stdout}"
        )
        at += 1
        skipping = False
