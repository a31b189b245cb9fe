"""What a new user meets first: the version, import errors, messages in Python terms, `xdl-trace info`
on an unclosed run, "did you mean" for config keys, and the progress bar (issue 13)."""

import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import trace_file_maker as tm
import xdl_trace as xdl
from xdl_trace import cli, progress

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cfg(tmp_path):
    return {"output_dir": str(tmp_path / "run"), "fsync": False}


# --- version -------------------------------------------------------------------------------


def test_one_version_for_python_cpp_and_the_cli(capsys):
    assert re.fullmatch(r"\d+\.\d+\.\d+", xdl.__version__)
    assert xdl._core.__version__ == xdl.__version__  # CMake read it from xdl_trace/_version.py.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"xdl-trace {xdl.__version__} ")


@pytest.mark.filterwarnings("ignore:Support for")
def test_pyproject_takes_the_version_from_the_package(monkeypatch):
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml")
    monkeypatch.chdir(REPO)  # setuptools resolves attr: against the project root.
    config = pyprojecttoml.read_configuration(os.path.join(REPO, "pyproject.toml"), expand=True)
    assert "version" in config["project"]["dynamic"] or "version" in config["project"]
    assert config["project"]["version"] == xdl.__version__


def test_import_error_names_the_interpreter_and_the_fix(tmp_path):
    # An interpreter where the extension cannot load: block xdl_trace._core.
    script = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'xdl_trace._core':\n"
        "            raise ImportError('blocked for the test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import xdl_trace\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImportError: xdl_trace" in result.stderr
    assert sys.executable in result.stderr
    assert "/usr/bin/python3" in result.stderr and "make build" in result.stderr


# --- messages in Python terms --------------------------------------------------------------


def test_a_missing_gradient_says_to_call_send_gradient(cfg):
    xdl.trace_gradient("w")
    with xdl.TraceHook(dict(cfg, on_error="raise")) as hook:
        with pytest.raises(xdl.errors.FailedPreconditionError) as error:
            hook.step()
    message = str(error.value)
    assert "xdl_trace.send_gradient('w', value)" in message
    assert "'gradient/w'" in message
    for cpp_name in ("MissingGradientPolicy", "kEmptyColumn", "SendGradient", "Registry::"):
        assert cpp_name not in message


def test_send_gradient_of_an_unregistered_name_lists_the_registered_ones():
    xdl.trace_gradient("w")
    xdl.trace_gradient("bias", scope="layer1")
    with pytest.raises(LookupError) as error:
        xdl.send_gradient("weights", np.ones(3))
    assert isinstance(error.value, xdl.errors.NotFoundError)
    message = str(error.value)
    assert "send_gradient('weights'" in message and "'bias', 'w'" in message
    xdl.send_gradient("w", np.ones(3))  # A registered name is accepted.

    xdl.clear("layer1")
    with pytest.raises(xdl.errors.NotFoundError, match="registered: 'w'$"):
        xdl.send_gradient("bias", np.ones(1))
    xdl.clear()
    with pytest.raises(xdl.errors.NotFoundError, match="registered: none"):
        xdl.send_gradient("w", np.ones(1))


def test_unknown_config_key_suggests_the_near_miss(cfg):
    with pytest.raises(ValueError) as error:
        xdl.TraceHook(dict(cfg, max_pending_mib=4, zzz=1))
    message = str(error.value)
    assert "'max_pending_mib' (did you mean 'max_pending_mb'?)" in message
    assert "'zzz'," in message or "'zzz';" in message  # No suggestion for a far miss.
    assert "did you mean" not in message.split("'zzz'")[1].split(";")[0]


def test_device_tracer_errors_name_the_config_key(cfg, tmp_path):
    with pytest.raises(xdl.errors.TraceError) as error:
        xdl.TraceHook(dict(cfg, device_tracers=["no_such_tracer"])).begin()
    message = str(error.value)
    assert message.startswith("device_tracers: 'no_such_tracer'")
    assert "libxdl_trace_no_such_tracer.so not found in [" in message
    with pytest.raises(xdl.errors.TraceError, match="^device_tracers: plugin '"):
        xdl.TraceHook(dict(cfg, device_tracers=[str(tmp_path / "none.so")])).begin()


def test_cupti_by_name_is_found_or_unavailable_never_not_built(cfg):
    xdl.trace_tensor("x", np.arange(3.0))
    with xdl.TraceHook(dict(cfg, device_tracers=["cupti"])) as hook:
        hook.step()
    status = hook.stats()["device_tracer_status"]
    assert status.startswith("cupti: ")
    assert "not built" not in status
    if os.path.exists("/usr/local/cuda/include/cupti.h"):  # The build made the plugin.
        assert "not found" not in status
        print("device_tracer_status:", status)  # Here, without a GPU: unavailable (reported).


# --- xdl-trace info ------------------------------------------------------------------------


def test_info_shows_dropped_records_and_scans_an_unclosed_rank(tmp_path, capsys):
    d = str(tmp_path)
    keys = ["w", "loss"]
    tm.write_file(
        f"{d}/train.trace.0.1",
        keys,
        tm.simple_records(range(4)),
        meta_overrides={"dropped_records": 2},
    )
    # Rank 1: its Meta (written early) says 1 record; 5 are in the file, then half a frame.
    records = tm.simple_records(range(5))
    tm.write_file(
        f"{d}/train.trace.1.1",
        keys,
        tm.simple_records(range(5)),
        tail=b"\x40\x00\x00",
        closed=False,
        meta_overrides={"record_count": 1},
    )

    assert cli.main(["info", d]) == 0
    out = capsys.readouterr().out
    assert "rank 0: closed cleanly; 2 records dropped" in out
    assert "rank 1: NOT closed: still being written, or the writer stopped (crash)" in out
    assert "scanning found 5 complete records" in out and "torn" in out

    assert cli.main(["info", d, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rank_status"] == [
        {"rank": 0, "closed_cleanly": True, "dropped_records": 2},
        {"rank": 1, "closed_cleanly": False, "dropped_records": 0},
    ]
    assert info["files"][0]["scanned"] is None
    assert info["files"][1]["records"] == 1
    assert info["files"][1]["scanned"] == {"records": 5, "torn_tail": True}


# --- progress ------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_uses_tqdm_on_a_terminal():
    pytest.importorskip("tqdm")
    tty = _Tty()
    with cli.Progress(2000, "verify", stream=tty) as p:
        assert p.enabled
        p(2000)
    assert "verify [" in tty.getvalue() and "100.0%" in tty.getvalue()


def test_progress_without_tqdm_draws_nothing(monkeypatch):
    monkeypatch.setattr(progress, "_tqdm", None)
    tty = _Tty()
    with cli.Progress(1000, "verify", stream=tty) as p:
        assert not p.enabled
        p(1000)
    assert tty.getvalue() == ""
    assert p.done == 1000
