"""What a new user meets first: the version, import errors, messages in Python terms, `xdl-trace info`
on an unclosed run, "did you mean" for config keys, and the progress bar (issue 13); then (issue 23)
no silent empty traces, hints where a new user stumbles (a notebook cell re-run, send_gradient for
a torch parameter, a read-only output_dir), keyword config, and a CLI that speaks CLI (--run, no
file left behind on error, export that refuses what it cannot write and names the fields of what
it writes)."""

import csv
import io
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import trace_file_maker as tm
import xdl_trace as xdl
from xdl_trace import cli
from xdl_trace.read import progress

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


# --- The first hour, second pass (issue 23) ----------------------------------------------------


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "run")


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_run(out_dir, steps=3, **keys):
    """One run into out_dir tracing `keys` (name -> array, or name -> (array, summary))."""
    for name, value in keys.items():
        value, summary = value if isinstance(value, tuple) else (value, None)
        xdl.trace_tensor(name, value, summary=summary)
    with xdl.TraceHook(output_dir=out_dir, fsync=False) as hook:
        for _ in range(steps):
            hook.step()
    xdl.clear()
    return hook.run_id


# --- row 4: no silent empty trace ------------------------------------------------------------


def test_begin_with_no_keys_warns(out_dir):
    with pytest.warns(RuntimeWarning, match=r"no keys are registered .*scope ''"):
        with xdl.TraceHook({"output_dir": out_dir}) as hook:
            hook.step()


def test_registering_inside_a_running_hook_warns_once_that_it_goes_to_the_next(out_dir):
    xdl.trace_tensor("x", np.ones(2))
    with xdl.TraceHook({"output_dir": out_dir}) as hook:
        with pytest.warns(RuntimeWarning) as caught:
            xdl.trace_tensor("late", np.ones(2))
            xdl.trace_callback("later", lambda: np.ones(1))
        assert hook.keys == ["x"]
        hook.step()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "'late' was registered after TraceHook.begin()" in message
    assert "next hook" in message and out_dir in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # No hook runs now: nothing to warn about.
        xdl.trace_tensor("after", np.ones(2))


def test_registering_into_a_scope_the_running_hook_does_not_trace_is_quiet(out_dir):
    xdl.trace_tensor("x", np.ones(2))
    with xdl.TraceHook({"output_dir": out_dir}) as hook:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            xdl.trace_tensor("y", np.ones(2), scope="eval")
        hook.step()


# --- row 5: a re-run notebook cell -----------------------------------------------------------


def test_registering_a_key_twice_hints_clear():
    w = np.ones(3)
    xdl.trace_variable("w", w)
    with pytest.raises(ValueError, match=r"'w': key is already registered.*xdl\.clear\(\)"):
        xdl.trace_variable("w", w)
    with pytest.raises(ValueError, match=r"xdl\.clear\(\)"):
        xdl.watch({"w": w})
    xdl.trace_tensor("t", w, scope="s")
    with pytest.raises(ValueError, match=r"'s/t': key is already registered.*xdl\.clear\('s'\)"):
        xdl.trace_callback("t", lambda: w, scope="s")


def test_watching_a_torch_model_again_hints_clear():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    xdl.watch(model)
    with pytest.raises(ValueError, match=r"already registered.*xdl\.clear\(\)"):
        xdl.watch(model)
    xdl.clear()
    assert xdl.watch(model)  # After clear() the cell runs again.


# --- row 6: send_gradient for a torch parameter -----------------------------------------------


def test_send_gradient_of_a_torch_parameter_says_it_is_read_from_grad():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(2, 1))
    for name in xdl.trace_collection(model):
        xdl.trace_gradient(name)
    model(torch.ones(1, 2)).sum().backward()
    with pytest.raises(xdl.errors.NotFoundError) as error:
        xdl.send_gradient("0.weight", model[0].weight.grad)
    assert str(error.value) == (
        "xdl_trace: send_gradient('0.weight', ...): '0.weight' is a torch tensor: its gradient "
        "is read from .grad at each traced step; send_gradient is not needed"
    )
    xdl.clear()
    xdl.watch(model)  # watch() reads .grad the same way.
    with pytest.raises(xdl.errors.NotFoundError, match="send_gradient is not needed"):
        xdl.send_gradient("0.bias", model[0].bias.grad)


# --- row 9: keyword config ---------------------------------------------------------------------


def test_trace_hook_takes_keyword_config_and_a_directory(out_dir, tmp_path):
    xdl.trace_tensor("x", np.arange(3.0))
    with xdl.TraceHook(output_dir=out_dir, fsync=False, filter=2) as hook:
        for _ in range(4):
            hook.step()
    assert hook.stats()["records_written"] == 2
    other = str(tmp_path / "positional")
    with xdl.TraceHook(other) as hook:  # As SummaryWriter(log_dir).
        hook.step()
    assert len(list(xdl.open_trace(other).records())) == 1
    with xdl.TraceHook({"output_dir": out_dir}, max_file_m_size=2) as hook:  # Both: merged.
        hook.step()
    with pytest.raises(ValueError, match=r"'max_pending_mib' \(did you mean 'max_pending_mb'"):
        xdl.TraceHook(output_dir=out_dir, max_pending_mib=4)
    with pytest.raises(ValueError, match="'output_dir' is given twice"):
        xdl.TraceHook({"output_dir": out_dir}, output_dir=other)
    with pytest.raises(ValueError, match="'output_dir' is required"):
        xdl.TraceHook()


# --- row 13: a read-only output_dir -------------------------------------------------------------


def _read_only_dir(tmp_path):
    d = tmp_path / "read_only"
    d.mkdir()
    d.chmod(0o555)
    try:
        open(d / "probe", "w").close()  # root ignores the mode bits: try sysfs instead.
    except OSError:
        return str(d)
    if os.path.isdir("/sys/kernel") and not os.access("/sys/kernel", os.W_OK):
        return "/sys/kernel"
    try:
        open("/sys/kernel/xdl_probe", "w").close()
    except OSError:
        return "/sys/kernel"
    pytest.skip("no read-only directory available to this user")


def test_read_only_output_dir_is_named_not_its_lock_file(tmp_path):
    read_only = _read_only_dir(tmp_path)
    xdl.trace_tensor("x", np.ones(2))
    with pytest.raises(xdl.errors.TraceIOError) as error:
        xdl.TraceHook(output_dir=read_only).begin()
    message = str(error.value)
    assert message.startswith(f"xdl_trace: config 'output_dir': '{read_only}' is not writable")
    assert ".lock" not in message


# --- row 7: the CLI says --run --------------------------------------------------------------------


def test_cli_asks_for_run_as_an_option_and_dump_all_names_each_run(out_dir, capsys):
    first = write_run(out_dir, x=np.ones(2))
    second = write_run(out_dir, x=np.ones(2))
    for command in (["dump"], ["export", "-o", os.path.join(out_dir, "x.npz")]):
        code, _, err = run_cli(capsys, command[0], out_dir, *command[1:])
        assert code == 1
        assert "--run latest" in err and "--run all" in err and "run='" not in err, err
        assert first in err and second in err
    # A report draws them all (as TensorBoard a logdir), and says how to pick one.
    code, _, err = run_cli(capsys, "report", out_dir, "-o", os.path.join(out_dir, "r.html"))
    assert code == 0 and "holds 2 runs: each is drawn" in err and "--run latest" in err, err
    code, out, _ = run_cli(capsys, "dump", out_dir, "--run", "all")
    assert code == 0
    heads = [line for line in out.splitlines() if line.startswith("rank:")]
    assert len(heads) == 6
    assert sum(f"run: {first}" in line for line in heads) == 3
    assert sum(f"run: {second}" in line for line in heads) == 3
    code, out, _ = run_cli(capsys, "dump", out_dir, "--run", "latest")
    assert "run:" not in out  # One run: nothing to tell apart.


# --- row 10: no output file on error ---------------------------------------------------------------


def test_timeline_error_leaves_no_output_file(out_dir, tmp_path, capsys):
    write_run(out_dir, x=np.ones(2))
    output = tmp_path / "t.json"
    code, _, err = run_cli(capsys, "timeline", out_dir, "--run", "nope", "-o", output)
    assert code == 1 and "'nope' matches no run" in err
    assert not output.exists()
    assert os.listdir(tmp_path) == ["run"]  # No temporary file either.
    code, _, _ = run_cli(capsys, "timeline", out_dir, "-o", output)
    assert code == 0 and output.exists()


# --- rows 11 and 12: export ------------------------------------------------------------------------


def test_export_csv_of_vector_keys_is_refused_before_writing(out_dir, tmp_path, capsys):
    write_run(out_dir, v=np.arange(4.0), m=np.ones((2, 2)), loss=np.float32(1.5))
    output = tmp_path / "x.csv"
    code, _, err = run_cli(capsys, "export", out_dir, "--keys", "v,m", "-o", output)
    assert code == 2
    assert "'v', 'm'" in err and "npz" in err
    assert not output.exists()
    code, _, err = run_cli(capsys, "export", out_dir, "--keys", "v,loss", "-o", output)
    assert code == 2 and "'v'" in err and not output.exists()  # Asked for: refused.
    code, _, err = run_cli(capsys, "export", out_dir, "-o", output)  # All keys: those that fit.
    assert code == 0 and "skipping non-scalar keys: v, m (use npz)" in err
    assert next(csv.reader(open(output)))[5:] == ["loss"]
    os.remove(output)
    xdl.clear()
    vectors_only = os.path.join(str(tmp_path), "vectors")
    write_run(vectors_only, v=np.arange(4.0))
    code, _, err = run_cli(capsys, "export", vectors_only, "-o", output)
    assert code == 2 and "'v'" in err and "npz" in err and not output.exists()


def test_export_npz_names_the_fields_of_stats_keys(out_dir, tmp_path, capsys):
    x = np.arange(4.0)
    write_run(out_dir, x=(x, "stats"), raw=x)
    output = str(tmp_path / "x.npz")
    code, _, _ = run_cli(capsys, "export", out_dir, "-o", output)
    assert code == 0
    with np.load(output) as z:
        stats = z["rank0/keys/x"]
        assert stats.shape == (3,)
        assert stats.dtype.names == tuple(cli.STATS_FIELDS)
        np.testing.assert_array_equal(stats["max"], [3.0, 3.0, 3.0])
        np.testing.assert_array_equal(stats["count"], [4, 4, 4])
        assert z["rank0/keys/raw"].shape == (3, 4) and z["rank0/keys/raw"].dtype.names is None
