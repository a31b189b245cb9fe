"""TraceHook: config, lifecycle (begin/end/atexit), steps and gsteps, eval files, rank, stats."""

import os
import subprocess
import sys

import numpy as np
import pytest

import xdl_trace as xdl

from conftest import REPO


def test_context_manager_writes_and_closes_cleanly(cfg, read_trace):
    xdl.trace_tensor("x", np.arange(3.0))
    with xdl.TraceHook(cfg) as hook:
        assert hook.running
        for _ in range(5):
            assert hook.step() is True
    assert not hook.running
    (trace,) = read_trace(cfg["output_dir"])
    assert len(trace.records) == 5
    assert [r[1] for r in trace.records] == [0, 1, 2, 3, 4]  # lstep
    assert trace.meta.closed_cleanly and trace.meta.record_count == 5
    assert trace.meta.gstep_begin == 0 and trace.meta.gstep_end == 4


def test_explicit_gstep_is_stamped(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    with xdl.TraceHook(cfg) as hook:
        for gstep in (100, 105, 110):
            hook.step(gstep=gstep)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [100, 105, 110]
    assert [r[1] for r in trace.records] == [0, 1, 2]


def test_eval_hook_writes_test_files_with_fixed_gstep(cfg, read_trace):
    xdl.trace_tensor("acc", np.ones(1), scope="eval")
    with xdl.TraceHook(cfg, is_training=False, gstep=1000, scope="eval") as hook:
        for _ in range(3):
            hook.step(gstep=7)  # The fixed gstep wins.
    assert read_trace(cfg["output_dir"], prefix="train") == []
    (trace,) = read_trace(cfg["output_dir"], prefix="test")
    assert trace.gsteps() == [1000, 1000, 1000]
    assert [r[1] for r in trace.records] == [0, 1, 2]
    assert os.path.basename(trace.path) == "test.trace.0.1"


def test_filter_with_fixed_gstep_sees_the_local_step(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    with xdl.TraceHook(cfg, gstep=50, filter=xdl.Every(2)) as hook:
        results = [hook.step() for _ in range(5)]
    assert results == [True, False, True, False, True]
    (trace,) = read_trace(cfg["output_dir"])
    assert [r[1] for r in trace.records] == [0, 2, 4]


def test_end_is_idempotent_and_stats_survive(cfg):
    xdl.trace_tensor("x", np.zeros(10))
    hook = xdl.TraceHook(cfg, filter=xdl.Every(2))
    hook.begin()
    for _ in range(4):
        hook.step()
    hook.end()
    hook.end()
    stats = hook.stats()
    assert stats["steps_traced"] == 2 and stats["records_written"] == 2
    assert stats["steps_seen"] == 4 and stats["steps_skipped"] == 2
    assert stats["files_written"] == 1 and stats["bytes_written"] > 0
    assert stats["last_error"] is None and stats["step_errors"] == 0


def test_step_without_begin_begins(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    hook = xdl.TraceHook(cfg)
    hook.step()
    hook.end()
    assert len(read_trace(cfg["output_dir"])[0].records) == 1


def test_restart_continues_after_the_highest_index(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    for _ in range(2):
        with xdl.TraceHook(cfg) as hook:
            hook.step()
    traces = read_trace(cfg["output_dir"])
    assert [os.path.basename(t.path) for t in traces] == ["train.trace.0.1", "train.trace.0.2"]


def test_config_keys_are_passed_to_the_core(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(2000, np.float32))  # ~8 kB per record
    c = dict(cfg, output_file_name="run", rank=3, max_file_m_size=0.02, overflow="drop")
    with xdl.TraceHook(c) as hook:
        for _ in range(6):
            hook.step()
    traces = read_trace(cfg["output_dir"], name="run", rank=3)
    assert len(traces) >= 2  # Rolled over at 20 kB.
    assert sum(len(t.records) for t in traces) == 6
    assert all(t.meta.rank == 3 for t in traces)


@pytest.mark.parametrize(
    "env,rank",
    [
        ({}, 0),
        ({"RANK": "2"}, 2),
        ({"OMPI_COMM_WORLD_RANK": "4"}, 4),
        ({"PMI_RANK": "5"}, 5),
        ({"SLURM_PROCID": "6"}, 6),
        ({"SLURM_PROCID": "6", "RANK": "1"}, 1),
    ],
)
def test_rank_detection_order(env, rank):
    assert xdl.detect_rank(env) == rank


def test_rank_from_environment_names_the_files(cfg, read_trace, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "7")
    xdl.trace_tensor("x", np.zeros(1))
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    assert len(read_trace(cfg["output_dir"], rank=7)) == 1


def test_atexit_flushes_a_hook_that_was_never_ended(tmp_path, read_trace):
    out = tmp_path / "atexit"
    script = f"""
import sys
sys.path.insert(0, {REPO!r})
import numpy as np, xdl_trace as xdl
xdl.trace_tensor("x", np.arange(4.0))
hook = xdl.TraceHook({{"output_dir": {str(out)!r}, "fsync": False}})
for _ in range(3):
    hook.step()
# No end(): the atexit handler flushes and closes.
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    (trace,) = read_trace(out)
    assert len(trace.records) == 3
    assert trace.meta.closed_cleanly


def test_hook_keys_before_and_after_begin(cfg):
    xdl.trace_tensor("a", np.zeros(1))
    hook = xdl.TraceHook(cfg)
    assert hook.keys == ["a"]
    with hook:
        with pytest.warns(RuntimeWarning, match="'b' was registered after TraceHook.begin"):
            xdl.trace_tensor("b", np.zeros(1))
        assert hook.keys == ["a"]


def test_two_hooks_share_registrations(cfg, tmp_path, read_trace):
    xdl.trace_tensor("x", np.ones(1))
    other = dict(cfg, output_dir=str(tmp_path / "other"))
    with xdl.TraceHook(cfg) as a, xdl.TraceHook(other, filter=xdl.Every(2)) as b:
        for _ in range(4):
            a.step()
            b.step()
    assert len(read_trace(cfg["output_dir"])[0].records) == 4
    assert len(read_trace(other["output_dir"])[0].records) == 2


def test_omitted_keys_take_the_cpp_defaults_which_the_docs_state(out_dir):
    """Defaults live once, in TraceConfig (cpp/include/xdl_trace/config.h): a config naming only
    output_dir gets exactly the fields of a default-constructed core TraceConfig, and the
    default column of docs/python.md's key table states those values."""
    from xdl_trace import _core
    from xdl_trace.write.hook import build_config

    built, on_error = build_config({"output_dir": out_dir})
    default = _core.TraceConfig()
    fields = [
        "max_file_m_size",
        "output_file_name",
        "max_pending_mb",
        "overflow",
        "fsync",
        "meta_interval_s",
        "device_tracers",
        "device_collect_interval_s",
        "device_plugin_config",
    ]
    assert {f: getattr(built, f) for f in fields} == {f: getattr(default, f) for f in fields}
    assert on_error == "warn"

    with open(os.path.join(REPO, "docs", "python.md")) as f:
        rows = dict(
            line.split("|")[1:3] for line in f if line.startswith("| `") and line.count("|") >= 4
        )
    documented = {k.strip().strip("`"): v.strip() for k, v in rows.items()}
    for key in (
        "max_file_m_size",
        "max_pending_mb",
        "meta_interval_s",
        "device_collect_interval_s",
    ):
        assert float(documented[key]) == getattr(default, key), key
    assert documented["output_file_name"] == f'`"{default.output_file_name}"`'
    assert documented["fsync"] == f"`{default.fsync}`"
    assert documented["overflow"] == f'`"{default.overflow.name.lower()}"`'
