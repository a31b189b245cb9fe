"""scripts/check_python_layers.py (run by `make lint`): this tree passes, and a scratch copy of
xdl_trace/ with one break planted fails: a library module importing the CLI, a circle closed by a
lazy import inside a function, the CLI named to importlib, a private name taken across modules, one
wing importing the other."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

CHECK = os.path.join(REPO, "scripts", "check_python_layers.py")

# case -> (file of xdl_trace/, text appended to it, what the check must say)
PLANTED = {
    "a library module imports the CLI": (
        "read/analysis.py",
        "\nfrom ..cli import command\n",
        "xdl_trace/read/analysis.py:",
    ),
    "a lazy import closes a circle": (
        "read/selection.py",
        "\n\ndef _planted():\n    from . import reader\n\n    return reader\n",
        "import circle: xdl_trace.read.reader -> xdl_trace.read.selection -> xdl_trace.read.reader",
    ),
    "a module takes another's private name": (
        "dask.py",
        "\n_PLANTED = _reader._BATCH\n",
        "xdl_trace.dask takes xdl_trace.read.reader._BATCH",
    ),
    "a module imports another's private name": (
        "read/report.py",
        "\nfrom .report_html import _anchor\n",
        "xdl_trace.read.report takes xdl_trace.read.report_html._anchor",
    ),
    "importlib names the CLI": (
        "read/timeline.py",
        '\nimport importlib\n\n_cli = importlib.import_module("xdl_trace.cli")\n',
        "xdl_trace.read.timeline imports xdl_trace.cli",
    ),
    "the read wing imports the write wing": (
        "read/timeline.py",
        "\n\ndef _planted():\n    from ..write import hook\n\n    return hook\n",
        "xdl_trace.read.timeline imports xdl_trace.write.hook: the write and read wings never",
    ),
    "the write wing imports the read wing": (
        "write/watch.py",
        "\nfrom ..read.reader import open_trace\n",
        "xdl_trace.write.watch imports xdl_trace.read.reader: the write and read wings never",
    ),
}


def _check(root):
    return subprocess.run(
        [sys.executable, CHECK, root], capture_output=True, text=True, timeout=120
    )


def _scratch_copy(tmp_path):
    root = tmp_path / "tree"
    skip = shutil.ignore_patterns("*.so", "__pycache__", "report_assets", "plugins")
    shutil.copytree(os.path.join(REPO, "xdl_trace"), root / "xdl_trace", ignore=skip)
    return str(root)


def test_this_tree_keeps_its_python_layers():
    result = _check(REPO)
    assert result.returncode == 0, result.stderr
    assert "python layers ok" in result.stdout


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_break_fails_the_check(tmp_path, case):
    name, text, message = PLANTED[case]
    root = _scratch_copy(tmp_path)
    clean = _check(root)
    assert clean.returncode == 0, clean.stderr  # The copy holds before the break.
    with open(os.path.join(root, "xdl_trace", name), "a", encoding="utf-8") as f:
        f.write(text)
    broken = _check(root)
    assert broken.returncode == 1, broken.stdout
    assert message in broken.stderr, broken.stderr
    assert "python layers: " in broken.stderr  # (The CLI imports the library: a circle too.)
