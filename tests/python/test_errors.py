"""Bad inputs from issue 3: each is rejected (or handled) with an error that names what was wrong."""

import contextlib
import os
import warnings

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import errors


@pytest.mark.parametrize(
    "value",
    [
        np.array([object()], dtype=object),
        np.array([1 + 2j]),
        np.array(["a", "b"]),
        np.array([b"a"]),
        np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]),
        np.array(["2020-01-01"], dtype="datetime64[D]"),
    ],
    ids=["object", "complex", "str", "bytes", "structured", "datetime"],
)
def test_unsupported_dtypes_are_type_errors_naming_the_key(value):
    with pytest.raises(TypeError, match="'bad_key'.*unsupported dtype"):
        xdl.trace_tensor("bad_key", value)
    assert xdl.keys() == []


def test_strings_and_none_values_are_rejected():
    with pytest.raises(TypeError, match="'s'"):
        xdl.trace_tensor("s", "hello")
    with pytest.raises(TypeError, match="'n'"):
        xdl.trace_tensor("n", None)


def test_non_contiguous_arrays_are_handled(cfg, read_trace):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    transposed = base.T  # F-order view
    strided = base[:, ::2]
    swapped = base.astype(">f4")  # Big-endian
    xdl.trace_tensor("t", transposed)
    xdl.trace_tensor("s", strided)
    xdl.trace_tensor("b", swapped)
    with xdl.TraceHook(cfg) as hook:
        hook.step()
        base += 100  # Views see the update: copied to contiguous at each traced step.
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    np.testing.assert_array_equal(trace.column("t")[1], base.T)
    np.testing.assert_array_equal(trace.column("s")[1], base[:, ::2])
    np.testing.assert_array_equal(trace.column("b")[0], np.arange(24).reshape(4, 6))


def test_callback_returning_non_array_is_type_error_naming_the_key(cfg):
    xdl.trace_callback("cb", lambda: {"not": "an array"}, scope="sc")
    with xdl.TraceHook(cfg, scope="sc") as hook:
        with pytest.raises(TypeError, match="'sc/cb'.*returned dict"):
            hook.step()


@pytest.mark.parametrize("bad", [None, "text", object()])
def test_callback_returning_various_non_arrays(cfg, bad):
    xdl.trace_callback("cb", lambda: bad)
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(errors.CallbackError, match="'cb'"):
            hook.step()


def test_callback_returning_unsupported_dtype(cfg):
    xdl.trace_callback("cb", lambda: np.array([1j]))
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(TypeError, match="'cb'.*unsupported dtype complex128"):
            hook.step()


def test_callback_raising_is_type_error_naming_the_key_with_cause(cfg, read_trace):
    def boom():
        raise ZeroDivisionError("division by zero in user code")

    xdl.trace_tensor("ok", np.zeros(1))
    xdl.trace_callback("boom", boom)
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(TypeError, match="'boom' raised ZeroDivisionError") as info:
            hook.step()
        assert isinstance(info.value, errors.CallbackError)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
    # No record for the failed step.
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.records == []


def test_callback_errors_under_on_error_warn_continue_and_count(cfg, read_trace):
    state = {"fail": True}

    def flaky():
        if state["fail"]:
            raise RuntimeError("flaky")
        return np.ones(1)

    xdl.trace_callback("flaky", flaky)
    hook = xdl.TraceHook(dict(cfg, on_error="warn"))
    with pytest.warns(RuntimeWarning, match="'flaky' raised RuntimeError"):
        with hook:
            assert hook.step() is True  # Written, with the failing key's column empty.
            assert hook.step() is True
            state["fail"] = False
            assert hook.step() is True
    stats = hook.stats()
    assert stats["column_errors"] == 2 and stats["steps_traced"] == 3
    assert "flaky" in stats["last_step_error"]
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 1, 2]
    assert [c.size for c in trace.column("flaky")] == [0, 0, 1]


def test_summary_returning_non_array_names_the_key(cfg):
    xdl.trace_tensor("x", np.zeros(3), summary=lambda a: "nope")
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(TypeError, match="summary for key 'x' returned str"):
            hook.step()


def test_unknown_summary_name():
    with pytest.raises(ValueError, match="unknown summary 'median'"):
        xdl.trace_tensor("x", np.zeros(3), summary="median")


def test_duplicate_keys_are_value_errors_naming_the_key():
    xdl.trace_tensor("k", np.zeros(1))
    with pytest.raises(ValueError, match="'k'.*already registered"):
        xdl.trace_variable("k", np.zeros(1))
    with pytest.raises(errors.InvalidArgumentError):
        xdl.trace_callback("k", lambda: 1.0)


def test_unknown_config_keys_list_the_valid_ones(out_dir):
    with pytest.raises(ValueError) as info:
        xdl.TraceHook({"output_dir": out_dir, "max_file_size": 10, "bogus": 1})
    message = str(info.value)
    assert "'bogus'" in message and "'max_file_size'" in message
    for key in xdl.CONFIG_KEYS:
        assert key in message


@pytest.mark.parametrize(
    "key,value",
    [
        ("max_file_m_size", 0),
        ("max_file_m_size", "big"),
        ("max_pending_mb", -1),
        ("overflow", "spill"),
        ("on_error", "ignore"),
        ("rank", -1),
        ("fsync", "yes"),
        ("output_file_name", "a/b"),
        ("device_tracers", [1]),
    ],
)
def test_bad_config_values_name_the_key(out_dir, key, value):
    with pytest.raises(ValueError, match=f"'{key}'"):
        xdl.TraceHook({"output_dir": out_dir, key: value})


def test_output_dir_required():
    with pytest.raises(ValueError, match="output_dir"):
        xdl.TraceHook({})


@pytest.mark.parametrize("url", ["hdfs://namenode/traces", "swift://c/t", "s3://bucket/x"])
def test_remote_schemes_are_not_supported(url):
    with pytest.raises(errors.NotSupportedError, match="not supported"):
        xdl.TraceHook({"output_dir": url})


def test_file_url_is_a_local_path(tmp_path, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    with xdl.TraceHook({"output_dir": "file://" + str(tmp_path / "f"), "fsync": False}) as hook:
        hook.step()
    assert len(read_trace(tmp_path / "f")) == 1


def test_unwritable_output_dir_raises_naming_the_path(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    bad = str(blocker / "traces")  # A directory below a regular file: fails even for root.
    xdl.trace_tensor("x", np.zeros(1))
    hook = xdl.TraceHook({"output_dir": bad, "on_error": "warn"})
    with pytest.raises(errors.TraceError, match="a_file"):
        hook.begin()  # begin() raises whatever on_error says.
    assert not hook.running


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_output_dir_is_an_os_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(OSError, match="ro"):
            xdl.TraceHook({"output_dir": str(ro)}).begin()
    finally:
        ro.chmod(0o700)


def test_bad_rank_environment(monkeypatch):
    monkeypatch.setenv("RANK", "three")
    with pytest.raises(ValueError, match="RANK='three'"):
        xdl.detect_rank()


def test_write_error_mid_run_under_warn_keeps_training(cfg, tmp_path):
    # A removed output directory: later writes fail; the hook warns, counts, never hangs.
    import shutil

    xdl.trace_tensor("x", np.zeros(1000))
    hook = xdl.TraceHook(dict(cfg, on_error="warn", max_file_m_size=0.005))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with hook:
            hook.step()
            hook.flush()
            shutil.rmtree(cfg["output_dir"])
            for _ in range(10):
                hook.step()
    stats = hook.stats()
    assert stats["steps_seen"] == 11
    assert stats["step_errors"] + stats["records_dropped"] > 0


# ---- Hostile configuration and write errors (issue 9) ----


@pytest.mark.parametrize(
    "key,value",
    [
        ("output_file_name", "a\0b"),
        ("output_file_name", "."),
        ("output_file_name", ".."),
        ("output_file_name", "n" * 179),
        ("output_dir", "\0trace"),  # Appended to the test's own directory.
        ("max_file_m_size", float("inf")),
        ("max_file_m_size", float("nan")),
        ("max_pending_mb", float("inf")),
        ("meta_interval_s", float("inf")),
        ("meta_interval_s", float("-inf")),
        ("meta_interval_s", float("nan")),
    ],
)
def test_impossible_config_values_are_value_errors_naming_the_key(tmp_path, key, value):
    if key == "output_dir":
        value = str(tmp_path / "out") + value
    config = {"output_dir": str(tmp_path / "out"), key: value}
    with pytest.raises(errors.InvalidArgumentError, match=f"'{key}'"):
        xdl.TraceHook(config).begin()
    assert not os.path.exists(tmp_path / "out")  # Refused before any file exists.


def test_huge_finite_limits_saturate(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(10))
    config = dict(cfg, max_file_m_size=1e13, max_pending_mb=1e13, meta_interval_s=1e12)
    with xdl.TraceHook(config) as hook:
        for _ in range(5):
            hook.step()
    files = read_trace(cfg["output_dir"])
    assert len(files) == 1  # No rollover at every record.
    assert files[0].meta.record_count == 5


def _efbig_script(out):
    return f"""
import resource, signal, sys
import numpy as np
sys.path.insert(0, {os.path.dirname(os.path.dirname(xdl.__file__))!r})
import xdl_trace as xdl
from xdl_trace import errors
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write(2) fails with EFBIG instead.
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.RLIM_INFINITY))
xdl.trace_tensor("x", np.zeros(1000, dtype=np.float32))
hook = xdl.TraceHook({{"output_dir": {out!r}, "on_error": "raise", "fsync": False}})
try:
    with hook:
        for _ in range(100):
            hook.step()
except errors.TraceIOError as e:
    assert isinstance(e, OSError), type(e).__mro__
    print("TraceIOError:", e)
    sys.exit(0)
except Exception as e:
    print("wrong type:", type(e).__name__, e)
    sys.exit(1)
print("no error")
sys.exit(1)
"""


def test_efbig_is_a_trace_io_error_naming_the_file(tmp_path):
    import subprocess
    import sys

    out = str(tmp_path / "out")
    result = subprocess.run(
        [sys.executable, "-c", _efbig_script(out)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "File too large" in result.stdout
    assert os.path.join(out, "train.trace.0.1") in result.stdout


def test_removed_output_dir_is_a_trace_io_error(cfg):
    import shutil

    xdl.trace_tensor("x", np.zeros(10))
    hook = xdl.TraceHook(cfg)
    hook.begin()
    hook.step()
    hook.flush()
    shutil.rmtree(cfg["output_dir"])
    with pytest.raises(errors.TraceIOError, match="No such file or directory") as info:
        hook.step()
        hook.end()
    with contextlib.suppress(errors.TraceIOError):
        hook.end()
    assert isinstance(info.value, OSError)
    assert cfg["output_dir"] in str(info.value)


def test_a_planted_link_at_the_next_data_file_is_refused_and_not_followed(cfg, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    xdl.trace_tensor("x", np.zeros(1000, dtype=np.float32))
    hook = xdl.TraceHook(dict(cfg, max_file_m_size=0.001))  # A file per record.
    hook.begin()
    hook.step()
    hook.flush()
    nxt = os.path.join(cfg["output_dir"], "train.trace.0.2")
    os.symlink(victim, nxt)
    with pytest.raises(errors.TraceIOError, match="symbolic link") as info:
        hook.step()
        hook.end()
    with contextlib.suppress(errors.TraceIOError):
        hook.end()
    assert nxt in str(info.value)
    assert victim.read_bytes() == b"precious"
    assert os.path.islink(nxt)
