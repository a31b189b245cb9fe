"""Write modes (docs/writer.md, "Write modes"): what auto runs, identical records in every mode,
no torn value, inline under a failing writer, inline with overflow "drop" refused, stats."""

import os
import subprocess
import sys

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import errors

AUTO_REASON_START = "auto: the IO thread writes while training goes on"


def test_inline_with_overflow_drop_is_refused_naming_both_keys(cfg):
    with pytest.raises(errors.InvalidArgumentError) as info:
        xdl.TraceHook(dict(cfg, write_mode="inline", overflow="drop"))
    message = str(info.value)
    assert "'write_mode'" in message and "'overflow'" in message and "'drop'" in message
    with pytest.raises(errors.InvalidArgumentError, match="'write_mode'"):
        xdl.TraceHook(dict(cfg, write_mode="sometimes"))


def test_stats_report_the_resolved_mode_and_why(cfg):
    xdl.trace_tensor("x", np.zeros(3))
    hook = xdl.TraceHook(cfg)  # write_mode "auto", the default
    assert hook.stats()["write_mode_reason"] is None  # No tracer yet.
    with hook:
        hook.step()
        stats = hook.stats()
        assert stats["write_mode"] == "io_thread"  # As the core resolves "auto".
        assert stats["write_mode_reason"].startswith(AUTO_REASON_START)
        assert "docs/writer.md" in stats["write_mode_reason"]
    assert hook.stats()["write_mode"] == "io_thread"  # Kept after end().
    assert hook.stats()["write_mode_reason"].startswith(AUTO_REASON_START)
    for mode in ("inline", "io_thread"):
        with xdl.TraceHook(dict(cfg, write_mode=mode)) as forced:
            forced.step()
            assert forced.stats()["write_mode"] == mode
            assert forced.stats()["write_mode_reason"] == "set in config"


def _columns_and_steps(raw_record):
    # Fields 1-4 (steps, columns, timestamp); the host spans (field 6) hold clock readings.
    record = type(raw_record)()
    record.CopyFrom(raw_record)
    record.ClearField("host_span")
    record.ClearField("device_trace")
    return record.SerializeToString()


def _run(out_dir, mode, read_trace, steps=4, sizes=(3, 1023, 1024, 1025, 250_000)):
    xdl.clear()
    rng = np.random.default_rng(5)
    # Around the size inline writes in place (4096 bytes), and large.
    arrays = [np.zeros(n, dtype=np.float32) for n in sizes]
    for i, array in enumerate(arrays):
        xdl.trace_tensor(f"v{i}", array)
    xdl.trace_tensor("last_hist", arrays[-1], summary="histogram")
    step_value = {"i": 0}
    xdl.trace_callback("provided", lambda: np.full(5000, step_value["i"], dtype=np.float64))
    config = {
        "output_dir": out_dir,
        "on_error": "raise",
        "fsync": False,
        "write_mode": mode,
    }
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            step_value["i"] = step
            for array in arrays:
                array[:] = rng.standard_normal(array.size)
            hook.step()
        assert hook.stats()["write_mode"] == mode
    (trace,) = read_trace(out_dir)
    return trace


def test_inline_and_io_thread_write_identical_records(tmp_path, read_trace):
    io_thread = _run(str(tmp_path / "io"), "io_thread", read_trace)
    inline = _run(str(tmp_path / "inline"), "inline", read_trace)
    assert inline.keys == io_thread.keys
    assert len(inline.raw) == len(io_thread.raw) == 4
    for a, b in zip(io_thread.raw, inline.raw):
        a.timestamp = b.timestamp = 0  # Wall clock at each step.
        a.crc32c = b.crc32c = 0  # Of bytes that hold the timestamp.
        assert _columns_and_steps(a) == _columns_and_steps(b)
    assert inline.meta.closed_cleanly and inline.meta.record_count == 4


@pytest.mark.parametrize("mode", ["io_thread", "inline"])
def test_a_change_after_step_returns_never_reaches_the_file(cfg, read_trace, mode):
    # 4 MiB: written from its own memory when inline.
    weights = np.zeros(1 << 20, dtype=np.float32)
    xdl.trace_tensor("w", weights)
    config = dict(cfg, write_mode=mode)
    with xdl.TraceHook(config) as hook:
        for step in range(1, 9):
            weights[:] = step
            hook.step()
            weights[:] = -1  # The next in-place update, right after the step.
    (trace,) = read_trace(cfg["output_dir"])
    for step, column in enumerate(trace.column("w"), start=1):
        assert np.all(column == step), step


def _efbig_inline_script(out):
    return f"""
import resource, signal, sys
import numpy as np
sys.path.insert(0, {os.path.dirname(os.path.dirname(xdl.__file__))!r})
import xdl_trace as xdl
from xdl_trace import errors
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write(2) fails with EFBIG instead.
resource.setrlimit(resource.RLIMIT_FSIZE, (40000, resource.RLIM_INFINITY))
x = np.zeros(2000, dtype=np.float32)  # 8 KB: written from its own memory.
xdl.trace_tensor("x", x)
hook = xdl.TraceHook({{"output_dir": {out!r}, "on_error": "raise", "fsync": False,
                       "write_mode": "inline"}})
errors_seen = []
with hook:
    for step in range(30):
        try:
            hook.step()
        except errors.TraceIOError as e:
            errors_seen.append(str(e))
        x[:] = step  # Never read by a write once step() returned.
    try:
        hook.end()
    except errors.TraceIOError:
        pass
stats = hook.stats()
assert stats["write_mode"] == "inline", stats
assert errors_seen and len(set(errors_seen)) == 1, errors_seen  # Sticky.
assert stats["records_written"] + stats["records_dropped"] == 30, stats
assert stats["records_dropped"] == len(errors_seen), stats
print("ERROR:", errors_seen[0])
"""


def test_inline_under_a_failing_writer_returns_the_error_and_never_hangs(tmp_path):
    out = str(tmp_path / "out")
    result = subprocess.run(
        [sys.executable, "-c", _efbig_inline_script(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "File too large" in result.stdout
    assert os.path.join(out, "train.trace.0.1") in result.stdout


def test_defaults_are_the_cpp_ones_which_the_docs_state(out_dir):
    from xdl_trace import _core
    from xdl_trace.write.hook import build_config

    from conftest import REPO

    built, _ = build_config({"output_dir": out_dir})
    default = _core.TraceConfig()
    assert default.write_mode == _core.WriteMode.AUTO == built.write_mode
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        rows = {
            line.split("|")[1].strip().strip("`"): line.split("|")[2].strip()
            for line in f
            if line.startswith("| `") and line.count("|") >= 4
        }
    assert rows["write_mode"] == '`"auto"`'
    assert "split_copy_min_mb" not in rows and not hasattr(default, "split_copy_min_mb")
