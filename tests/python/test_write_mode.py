"""Write modes (docs/design.md, "Write modes"): the auto rule, identical records in every mode,
no torn value, inline under a failing writer, inline with overflow "drop" refused, stats."""

import os
import subprocess
import sys
import types

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import errors
from xdl_trace.hook import resolve_write_mode

BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture
def machine(monkeypatch):
    """machine(cores, torch_threads=None, **env): this process seen with `cores` CPUs in its
    affinity, torch imported with that thread count (None: not imported), and only the BLAS
    variables given."""

    def set_up(cores, torch_threads=None, **env):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
        for name in BLAS_ENV:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        if torch_threads is None:
            monkeypatch.delitem(sys.modules, "torch", raising=False)
        else:
            fake = types.ModuleType("torch")
            fake.get_num_threads = lambda: torch_threads
            monkeypatch.setitem(sys.modules, "torch", fake)

    return set_up


@pytest.mark.parametrize(
    "cores,torch_threads,env,mode,reason",
    [
        # BLAS threads default to one per core: none spare.
        (2, None, {}, "inline", "2 cores, 2 compute threads (BLAS default): no spare core"),
        (
            2,
            None,
            {"OPENBLAS_NUM_THREADS": "1"},
            "io_thread",
            "2 cores, 1 compute threads (OPENBLAS_NUM_THREADS): a core is spare for the IO thread",
        ),
        # OPENBLAS_NUM_THREADS is consulted before OMP_NUM_THREADS.
        (4, None, {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "4"}, "io_thread", None),
        (4, None, {"OMP_NUM_THREADS": "4,2"}, "inline", None),  # OpenMP's nested form.
        (4, None, {"MKL_NUM_THREADS": "3"}, "io_thread", None),
        (4, None, {"OMP_NUM_THREADS": "many"}, "inline", None),  # Not a count: the default.
        # torch counts when imported; the larger count wins.
        (
            2,
            2,
            {"OPENBLAS_NUM_THREADS": "1"},
            "inline",
            "2 cores, 2 compute threads (torch): no spare core",
        ),
        (
            2,
            1,
            {"OMP_NUM_THREADS": "1"},
            "io_thread",
            "2 cores, 1 compute threads (OMP_NUM_THREADS, torch): a core is spare for the IO thread",
        ),
        (8, 16, {"OPENBLAS_NUM_THREADS": "1"}, "inline", None),
        (1, None, {"OPENBLAS_NUM_THREADS": "1"}, "inline", None),  # One core: never spare.
    ],
)
def test_auto_resolution(machine, cores, torch_threads, env, mode, reason):
    machine(cores, torch_threads, **env)
    got_mode, got_reason = resolve_write_mode("auto", "block")
    assert got_mode == mode
    if reason is not None:
        assert got_reason == reason
    assert got_reason.startswith(f"{cores} cores, ")


def test_auto_never_picks_inline_under_drop_and_explicit_modes_stay(machine):
    machine(2)  # No spare core.
    assert resolve_write_mode("auto", "block")[0] == "inline"
    mode, reason = resolve_write_mode("auto", "drop")
    assert mode == "io_thread" and "drop" in reason
    assert resolve_write_mode("io_thread", "block") == ("io_thread", "set in config")
    assert resolve_write_mode("inline", "block") == ("inline", "set in config")


def test_inline_with_overflow_drop_is_refused_naming_both_keys(cfg):
    with pytest.raises(errors.InvalidArgumentError) as info:
        xdl.TraceHook(dict(cfg, write_mode="inline", overflow="drop"))
    message = str(info.value)
    assert "'write_mode'" in message and "'overflow'" in message and "'drop'" in message
    with pytest.raises(errors.InvalidArgumentError, match="'write_mode'"):
        xdl.TraceHook(dict(cfg, write_mode="sometimes"))


def test_stats_report_the_resolved_mode_and_why(cfg, machine):
    xdl.trace_tensor("x", np.zeros(3))
    hook = xdl.TraceHook(cfg)
    assert hook.stats()["write_mode_reason"] is None  # Not resolved before begin().
    machine(2, None, OPENBLAS_NUM_THREADS="2")
    with hook:
        hook.step()
        stats = hook.stats()
        assert stats["write_mode"] == "inline"
        assert (
            stats["write_mode_reason"]
            == "2 cores, 2 compute threads (OPENBLAS_NUM_THREADS): no spare core"
        )
    # Resolved again at the next begin().
    machine(2, None, OPENBLAS_NUM_THREADS="1")
    with hook:
        hook.step()
        assert hook.stats()["write_mode"] == "io_thread"
    assert hook.stats()["write_mode"] == "io_thread"  # Kept after end().
    with xdl.TraceHook(dict(cfg, write_mode="inline")) as forced:
        forced.step()
        assert forced.stats()["write_mode"] == "inline"
        assert forced.stats()["write_mode_reason"] == "set in config"


def _columns_and_steps(raw_record):
    # Fields 1-4 (steps, columns, timestamp); the host spans (field 6) hold clock readings.
    record = type(raw_record)()
    record.CopyFrom(raw_record)
    record.ClearField("host_span")
    record.ClearField("device_trace")
    return record.SerializeToString()


def _run(
    out_dir, mode, read_trace, steps=4, split_copy_min_mb=0, sizes=(3, 1023, 1024, 1025, 250_000)
):
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
        "split_copy_min_mb": split_copy_min_mb,
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
        assert _columns_and_steps(a) == _columns_and_steps(b)
    assert inline.meta.closed_cleanly and inline.meta.record_count == 4


@pytest.mark.parametrize(
    "sizes",
    [
        (3, 200_000),  # About 0.85 MB with the other entries: below a 1 MB threshold.
        (3, 16_383, 230_000),  # About 1 MB.
        (3, 65_537, 262_145, 1 << 20),  # Above, with remainders of chunks and columns.
    ],
)
def test_a_split_copy_writes_the_bytes_one_thread_writes(tmp_path, read_trace, sizes):
    one = _run(str(tmp_path / "one"), "io_thread", read_trace, sizes=sizes)
    split = _run(str(tmp_path / "split"), "io_thread", read_trace, split_copy_min_mb=1, sizes=sizes)
    assert len(split.raw) == len(one.raw) == 4
    for a, b in zip(one.raw, split.raw):
        a.timestamp = b.timestamp = 0
        assert _columns_and_steps(a) == _columns_and_steps(b)


def test_split_copy_min_mb_must_be_a_finite_number_at_least_zero(cfg):
    for value in (-1, float("inf"), float("nan")):
        with pytest.raises(errors.InvalidArgumentError, match="'split_copy_min_mb'"):
            xdl.TraceHook(dict(cfg, split_copy_min_mb=value))


@pytest.mark.parametrize(
    "mode,split_copy_min_mb", [("io_thread", 0), ("io_thread", 1), ("inline", 0)]
)
def test_a_change_after_step_returns_never_reaches_the_file(
    cfg, read_trace, mode, split_copy_min_mb
):
    # 4 MiB: written in place when inline, 16 chunks of a split copy.
    weights = np.zeros(1 << 20, dtype=np.float32)
    xdl.trace_tensor("w", weights)
    config = dict(cfg, write_mode=mode, split_copy_min_mb=split_copy_min_mb)
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
    from xdl_trace.hook import build_config

    from conftest import REPO

    built, _ = build_config({"output_dir": out_dir})
    default = _core.TraceConfig()
    assert default.write_mode == _core.WriteMode.AUTO == built.write_mode
    assert default.split_copy_min_mb == 0 == built.split_copy_min_mb
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        rows = {
            line.split("|")[1].strip().strip("`"): line.split("|")[2].strip()
            for line in f
            if line.startswith("| `") and line.count("|") >= 4
        }
    assert rows["write_mode"] == '`"auto"`'
    assert float(rows["split_copy_min_mb"]) == default.split_copy_min_mb
