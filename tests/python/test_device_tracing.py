"""Device tracing guarantees seen from Python: drops counted in events, per tracer, in hook.stats()."""

import os

import numpy as np
from collector_wait import wait_collected

import xdl_trace as xdl

# The fake emits 6 events per step (tests/plugins/fake_device_plugin.c).
_EVENTS_PER_STEP = 6


def _run(output_dir, plugin, steps, plugin_config):
    xdl.trace_tensor("w", np.arange(8, dtype=np.float32))
    config = {
        "output_dir": str(output_dir),
        "device_tracers": [plugin],
        "device_collect_interval_s": 0,  # The collector thread collects after every step.
        "device_plugin_config": plugin_config,
        "fsync": False,
    }
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            hook.step(gstep=step)
            # One collect per step, as the caps below count: wait for it.
            wait_collected(hook, _EVENTS_PER_STEP * (step + 1))
    stats = hook.stats()
    xdl.clear()
    return stats


def test_device_drops_are_counted_in_events_and_shown(tmp_path, fake_plugin):
    # The fake holds 4 events between collects; a step makes 6: 2 dropped per step.
    stats = _run(tmp_path / "run", fake_plugin, 3, "max_events=4")
    steps = 3 + 1  # The step still open at close is collected too.
    assert stats["device_events"] == 4 * steps
    assert stats["device_events_dropped"] == 2 * steps
    assert stats["device_buffers_dropped"] == 0
    (tracer,) = stats["device_tracers"]
    assert tracer["state"] == "ok"
    assert tracer["events_dropped"] == 2 * steps
    assert tracer["buffers_dropped"] == 0
    assert stats["device_tracer_status"] == "fake: ok (dropped %d events)" % (2 * steps)
    from xdl_trace.read import timeline

    other = timeline.build_timeline(str(tmp_path / "run"))["otherData"]
    assert other["dropped_events"] == 2 * steps
    assert other["dropped_buffers"] == 0


def test_device_lost_buffers_are_counted_apart(tmp_path, fake_plugin):
    # Each non-empty collect reports 2 buffers lost whole (events unknown).
    stats = _run(tmp_path / "run", fake_plugin, 3, "lost_buffers=2")
    collects = 3 + 1
    assert stats["device_events_dropped"] == 0
    assert stats["device_buffers_dropped"] == 2 * collects
    assert stats["device_tracers"][0]["buffers_dropped"] == 2 * collects
    assert stats["device_tracer_status"] == (
        "fake: ok (dropped 0 events, %d buffers of unknown events)" % (2 * collects)
    )
    from xdl_trace.read import timeline

    other = timeline.build_timeline(str(tmp_path / "run"))["otherData"]
    assert other["dropped_buffers"] == 2 * collects


def test_device_no_drops_means_plain_ok(tmp_path, fake_plugin):
    stats = _run(tmp_path / "run", fake_plugin, 2, "")
    assert stats["device_events_dropped"] == 0
    assert stats["device_tracers"][0]["events_dropped"] == 0
    assert stats["device_tracer_status"] == "fake: ok"


def test_device_nvtx_ranges_and_memory_counters_in_the_timeline(tmp_path, fake_plugin):
    from xdl_trace.read import timeline

    run = tmp_path / "run"
    stats = _run(run, fake_plugin, 3, "nvtx=1;memory=1")
    assert stats["device_events_dropped"] == 0
    steps = 3 + 1
    assert stats["device_events"] == steps * (6 + 1 + 2)
    trace = timeline.build_timeline(str(run))
    events = trace["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "nvtx"]
    assert len(ranges) == steps
    assert all(e["ph"] == "X" and e["name"] == "fake_range" for e in ranges)
    # A range sits on the API thread and spans that step's launches.
    launches = [e for e in events if e.get("name") == "fakeLaunch"]
    for r in ranges:
        assert r["tid"] == launches[0]["tid"]
        inside = [
            e
            for e in launches
            if e["args"]["step_correlation_id"] == r["args"]["step_correlation_id"]
        ]
        assert len(inside) == 3
        for e in inside:
            assert r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 0.002
    memory = [e for e in events if e.get("cat") == "memory"]
    assert len(memory) == 2 * steps
    assert {e["args"]["operation"] for e in memory} == {"alloc", "free"}
    counters = [e for e in events if e["ph"] == "C"]
    assert len(counters) == 2 * steps
    assert all(e["name"] == "memory allocated" for e in counters)
    # In time order: 1 MiB after each alloc, back to 0 after its free.
    values = [e["args"]["bytes"] for e in sorted(counters, key=lambda e: e["ts"])]
    assert values == [1 << 20, 0] * steps
    assert {e["pid"] for e in counters} == {memory[0]["pid"]}


def test_a_collect_announcing_more_than_the_cap_is_refused_naming_the_plugin(tmp_path, fake_plugin):
    # Issue 24 row 8: 2^62 bytes announced, nothing allocated, the training run unharmed.
    xdl.trace_tensor("w", np.arange(8, dtype=np.float32))
    config = {
        "output_dir": str(tmp_path / "run"),
        "device_tracers": [fake_plugin],
        "device_collect_interval_s": 0,
        "device_plugin_config": "announce_bytes=4611686018427387904",
        "fsync": False,
    }
    with xdl.TraceHook(config) as hook:
        for step in range(3):
            hook.step(gstep=step)
    stats = hook.stats()
    (tracer,) = stats["device_tracers"]
    assert tracer["state"] == "error"
    assert fake_plugin in tracer["message"] or "fake" in tracer["message"]
    assert "4611686018427387904 bytes" in tracer["message"]
    assert "cap" in tracer["message"]
    assert tracer["buffers_dropped"] >= 1
    assert stats["records_written"] >= 3


def _thread_scheduling():
    """{tid: (name, policy, nice)} of this process's threads (/proc/self/task/*/stat)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (name, int(fields[38]), int(fields[16]))  # stat fields 41 and 19
    return out


def test_background_threads_never_preempt_the_training_thread(tmp_path, fake_plugin):
    # SCHED_BATCH: woken by hook.step(), they wait for a free core instead of taking the training
    # thread's; the collector also runs 10 nice levels below it. The training thread is untouched.
    xdl.trace_tensor("w", np.arange(8, dtype=np.float32))
    config = {
        "output_dir": str(tmp_path),
        "device_tracers": [fake_plugin],
        "device_collect_interval_s": 0,
        "fsync": False,
    }
    with xdl.TraceHook(config) as hook:
        hook.step(gstep=0)
        wait_collected(hook, _EVENTS_PER_STEP)  # The collector has run,
        hook.flush()  # and so has the IO thread.
        threads = _thread_scheduling()
    xdl.clear()
    _, policy, nice = threads.pop(os.getpid())
    assert (policy, nice) == (os.SCHED_OTHER, os.getpriority(os.PRIO_PROCESS, 0))
    by_name = {name: (p, n) for name, p, n in threads.values()}
    assert by_name["xdl_trace_io"] == (os.SCHED_BATCH, nice)
    assert by_name["xdl_dev_collect"] == (os.SCHED_BATCH, min(19, nice + 10))
