"""pip installs the checkout offline into a --system-site-packages venv (CMake-driven build_ext);
the installed package works from outside the repository and puts `xdl-trace` on PATH."""

import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, compile_test_plugin

# A persistent CMake/setuptools build directory inside this checkout's (ignored) build/ keeps
# re-runs incremental (the first run compiles the core: a minute or two on a small machine);
# being per checkout, a CMake cache made from another source tree is never reused.
BUILD_DIR = os.path.join(REPO, "build", "pip-test")


@pytest.mark.slow
def test_pip_install_in_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120
    )
    python = str(venv / "bin" / "python")
    env = dict(
        os.environ,
        XDL_TRACE_BUILD_DIR=BUILD_DIR,
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    env.pop("PYTHONPATH", None)

    def run(args, timeout, **kwargs):
        """Runs `args` in the venv's environment, outside the checkout."""
        return subprocess.run(args, timeout=timeout, env=env, cwd=str(tmp_path), **kwargs)

    run(
        [python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "-q", REPO],
        timeout=1200,
        check=True,
    )
    # The console script is on the venv's PATH.
    cli = run(
        [str(venv / "bin" / "xdl-trace"), "--help"], timeout=60, capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stderr
    assert "usage" in cli.stdout.lower()
    version = run(
        [str(venv / "bin" / "xdl-trace"), "--version"], timeout=60, capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.startswith("xdl-trace 0."), version.stdout
    # The import comes from the venv, not the checkout, and traces to disk.
    out = tmp_path / "out"
    script = f"""
import numpy as np, xdl_trace as xdl, os
assert "site-packages" in xdl.__file__, xdl.__file__
assert os.path.exists(os.path.join(os.path.dirname(xdl.__file__), "tools", "read_trace.py"))
xdl.trace_tensor("x", np.arange(3.0))
with xdl.TraceHook({{"output_dir": {str(out)!r}}}) as hook:
    hook.step()
assert hook.stats()["records_written"] == 1
# The report's page template, styles and script are package data (report_assets/).
from xdl_trace.read import report
page = report.render_html(report.build_report({str(out)!r}))
assert "<script>window.addEventListener" in page and "function chart(spec, el)" in page
# The stand-alone reader script reads the files with the descriptor set shipped beside it.
import subprocess, sys
tool = os.path.join(os.path.dirname(xdl.__file__), "tools")
assert os.path.exists(os.path.join(tool, "xdl_trace.protoset"))
shown = subprocess.run([sys.executable, os.path.join(tool, "read_trace.py"), {str(out)!r}],
                       capture_output=True, text=True)
assert shown.returncode == 0 and "gstep: " in shown.stdout, shown.stderr
print(xdl.__file__)
"""
    imported = run([python, "-c", script], timeout=120, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert str(venv) in imported.stdout
    assert os.path.exists(out / "train.trace.0.1")

    # A TensorFlow profiler plugin that leaves TF_SetStatus undefined loads from the installed
    # package: libxdl_trace_tf_c.so ships in plugins/ beside _core and is found there.
    source = "fake_tf_profiler_plugin.c"
    plugins = {
        "ok": compile_test_plugin(tmp_path, source, "fake_tf_ok"),
        "fails": compile_test_plugin(tmp_path, source, "fake_tf_fails", ["XDL_FAKE_TF_INIT_FAILS"]),
    }
    if plugins["ok"] is not None:
        script = f"""
import numpy as np, xdl_trace as xdl, os
lib = os.path.join(os.path.dirname(xdl.__file__), "plugins", "libxdl_trace_tf_c.so")
assert os.path.exists(lib), lib
xdl.trace_tensor("x", np.arange(3.0))
config = {{"output_dir": {str(tmp_path / "tf")!r}, "device_tracers": [{plugins["ok"]!r}]}}
with xdl.TraceHook(config) as hook:
    hook.step()
print(hook.stats()["device_tracer_status"], hook.stats()["device_events"] > 0)
try:
    config = {{"output_dir": {str(tmp_path / "tf2")!r}, "device_tracers": [{plugins["fails"]!r}]}}
    with xdl.TraceHook(config) as hook:
        hook.step()
except Exception as error:
    print(error)
"""
        tf = run([python, "-c", script], timeout=120, capture_output=True, text=True)
        assert tf.returncode == 0, tf.stderr
        assert tf.stdout.startswith("fake_tf: ok True"), tf.stdout
        # The plugin's TF_SetStatus call resolved to ours: its message comes back.
        assert "TF_InitProfiler failed: FAILED_PRECONDITION" in tf.stdout, tf.stdout
        assert "no fake device present" in tf.stdout, tf.stdout

    # Where the CUDA toolkit is present the CUPTI plugin ships in the wheel and is found by
    # name beside the installed _core (here without a GPU it reports itself unavailable).
    if os.path.exists("/usr/local/cuda/include/cupti.h"):
        script = f"""
import numpy as np, xdl_trace as xdl, os
plugin = os.path.join(os.path.dirname(xdl.__file__), "plugins", "libxdl_trace_cupti.so")
assert os.path.exists(plugin), plugin
# Test support (the synthetic GPU, tests/plugins/cupti) never ships.
assert sorted(os.listdir(os.path.dirname(plugin))) == ["libxdl_trace_cupti.so", "libxdl_trace_tf_c.so"]
xdl.trace_tensor("x", np.arange(3.0))
with xdl.TraceHook({{"output_dir": {str(tmp_path / "cupti")!r}, "device_tracers": ["cupti"]}}) as h:
    h.step()
print(h.stats()["device_tracer_status"])
"""
        cupti = run([python, "-c", script], timeout=120, capture_output=True, text=True)
        assert cupti.returncode == 0, cupti.stderr
        assert cupti.stdout.startswith("cupti: "), cupti.stdout
        # Found beside _core (no build path is compiled into the wheel): ran, or no GPU.
        assert "not found" not in cupti.stdout and "not built" not in cupti.stdout, cupti.stdout


def _readme_install_lines():
    """The README's install block ("Use it from your own scripts"), as printed."""
    text = open(os.path.join(REPO, "README.md")).read()
    start = text.index("## Use it from your own scripts")
    block = text[text.index("```sh\n", start) + len("```sh\n") :]
    return block[: block.index("```")]


@pytest.mark.slow
def test_readme_install_works_as_printed_and_reuses_the_build(tmp_path):
    """Issue 34: Debian 12's pip refuses the system Python (PEP 668), so the README installs
    into a venv; from a checkout `make build` built, the install reuses that build. Runs the
    README's lines as printed (HOME in tmp_path, so ~ is there) and prints how long they took."""
    cache = os.path.join(REPO, "build", "CMakeCache.txt")
    if not os.path.exists(cache) or f"Python_EXECUTABLE:UNINITIALIZED={sys.executable}\n" not in (
        open(cache).read()
    ):
        pytest.skip("build/ is not a `make build` for this interpreter: nothing to reuse")
    lines = _readme_install_lines()
    assert "venv --system-site-packages ~/.venvs/xdl_trace" in lines
    env = dict(os.environ, HOME=str(tmp_path), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    for var in ("PYTHONPATH", "XDL_TRACE_BUILD_DIR", "XDL_TRACE_CMAKE_ARGS", "VIRTUAL_ENV"):
        env.pop(var, None)
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", lines + "\n"],
        cwd=REPO,
        env=dict(env, PIP_VERBOSE="1"),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"README install (venv + pip install from the built checkout): {took:.1f} s")
    assert "xdl_trace: reusing the build in " + os.path.join(REPO, "build") in done.stdout + (
        done.stderr
    )
    python = str(tmp_path / ".venvs" / "xdl_trace" / "bin" / "python")
    script = "import xdl_trace, os; print(xdl_trace.__file__); print(xdl_trace._core.__file__)"
    imported = subprocess.run(
        [python, "-c", script], cwd=str(tmp_path), env=env, capture_output=True, text=True
    )
    assert imported.returncode == 0, imported.stderr
    assert str(tmp_path / ".venvs") in imported.stdout  # Installed, not the checkout.
    version = subprocess.run(
        [str(tmp_path / ".venvs" / "xdl_trace" / "bin" / "xdl-trace"), "--version"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert version.returncode == 0 and version.stdout.strip()
