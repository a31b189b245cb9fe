"""`xdl-trace timeline` on files: Chrome trace event rules, not-traced steps, windows, bounded memory."""

import json
import math
import os
import subprocess
import sys


import trace_file_maker as tm
from conftest import start_python
from xdl_trace import cli
from xdl_trace.read import timeline
from xdl_trace._proto import device_trace_pb2 as dt

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HostSpan = dt.HostSpan


def check_chrome_trace(trace):
    """Asserts the Chrome Trace Event Format rules Perfetto's JSON importer relies on
    (docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU): returns the
    events by phase."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    by_phase = {}
    for e in trace["traceEvents"]:
        assert isinstance(e, dict)
        ph = e["ph"]
        assert ph in ("X", "M", "s", "f"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        by_phase.setdefault(ph, []).append(e)
        if ph == "M":
            assert e["name"] in (
                "process_name",
                "thread_name",
                "process_sort_index",
                "thread_sort_index",
            ), e
            assert isinstance(e["args"], dict) and e["args"], e
            continue
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["ts"], (int, float)) and math.isfinite(e["ts"]), e
        if ph == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert isinstance(e.get("cat", ""), str)
            assert isinstance(e.get("args", {}), dict)
        else:
            assert isinstance(e["id"], int) and isinstance(e["cat"], str), e
    starts = {e["id"] for e in by_phase.get("s", [])}
    finishes = [e["id"] for e in by_phase.get("f", [])]
    assert len(set(finishes)) == len(finishes) and set(finishes) == starts  # One s, one f each.
    assert all(e["bp"] == "e" for e in by_phase.get("f", []))
    return by_phase


def _span(rec, kind, gstep, start, end, **fields):
    span = rec.host_span.add(kind=kind, gstep=gstep, lstep=gstep, start_ns=start, end_ns=end)
    for k, v in fields.items():
        setattr(span, k, v)
    return span


def _filtered_run(directory, rank=0, steps=10, every=3, t0=1_700_000_000 * 10**9):
    """A run as the hook writes it with a filter tracing every `every`-th step: not-traced step
    spans ride in the next traced step's record, next to the previous step's capture/encode,
    queue-wait and IO-write spans."""
    records, pending, step_ns = [], [], 1_000_000
    for g in range(steps):
        begin, end = t0 + g * step_ns, t0 + (g + 1) * step_ns - 1000
        if g % every:
            pending.append((g, begin, end))
            continue
        rec = tm.record(g, [tm.column(tm.np.zeros(1, tm.np.float32))])
        rec.timestamp = end // 1_000_000
        for ng, b, e in pending:
            _span(rec, HostSpan.STEP_NOT_TRACED, ng, b, e, thread_id=7)
        pending = []
        _span(rec, HostSpan.STEP, g, begin, end, thread_id=7)
        if records:
            prev = records[-1].gstep
            pb_, pe = t0 + (prev + 1) * step_ns - 1000, t0 + (prev + 1) * step_ns - 400
            _span(rec, HostSpan.CAPTURE_ENCODE, prev, pb_, pe - 200, thread_id=7)
            _span(rec, HostSpan.QUEUE_WAIT, prev, pe - 200, pe, thread_id=7)
            _span(rec, HostSpan.IO_WRITE, prev, pe + 100, pe + 300, thread_id=8, records=1)
        records.append(rec)
    tm.write_file(os.path.join(directory, f"train.trace.{rank}.0"), ["w"], records)
    return records


def _timeline(tmp_path, run, *options):
    out = tmp_path / "t.json"
    assert cli.main(["timeline", str(run), "-o", str(out), *options]) == 0
    with open(out) as f:
        return json.load(f)


def test_every_step_the_hook_saw_has_its_own_span(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _filtered_run(run, steps=10, every=3)
    trace = _timeline(tmp_path, run)
    events = check_chrome_trace(trace)
    steps = [e for e in events["X"] if e["tid"] == 1]
    assert sorted(e["args"]["gstep"] for e in steps) == list(range(10))
    traced = [e for e in steps if e["cat"] == "host"]
    not_traced = [e for e in steps if e["cat"] == timeline.NOT_TRACED_CATEGORY]
    assert sorted(e["args"]["gstep"] for e in traced) == [0, 3, 6, 9]
    assert all(e["name"].endswith("(not traced)") for e in not_traced) and len(not_traced) == 6
    assert trace["otherData"]["steps"] == 4 and trace["otherData"]["steps_not_traced"] == 6
    # Step spans do not overlap: none covers another step.
    ordered = sorted(steps, key=lambda e: e["ts"])
    assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(ordered, ordered[1:]))
    threads = {e["tid"]: e["args"]["name"] for e in events["M"] if e["name"] == "thread_name"}
    assert threads == {1: "steps", 2: "capture + encode", 3: "queue wait", 5: "IO write"}
    # Capture/encode and queue wait of a traced step lie inside the step that follows it
    # (the tracer's work happens at the end of the step it records), IO after them.
    by = {(e["tid"], e["args"]["gstep"]): e for e in events["X"]}
    for g in (0, 3, 6):
        capture, wait, io = by[(2, g)], by[(3, g)], by[(5, g)]
        assert capture["ts"] + capture["dur"] <= wait["ts"] + 1e-3
        assert wait["ts"] + wait["dur"] <= io["ts"]
        assert by[(1, g)]["ts"] + by[(1, g)]["dur"] <= capture["ts"]


def test_gsteps_and_ranks_window_the_timeline(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _filtered_run(run, rank=0, steps=30, every=3)
    _filtered_run(run, rank=1, steps=30, every=3)
    whole = _timeline(tmp_path, run)
    assert whole["otherData"]["ranks"] == 2
    assert {e["pid"] for e in whole["traceEvents"]} == {1, 1001}

    window = _timeline(tmp_path, run, "--gsteps", "10:19", "--ranks", "1")
    events = check_chrome_trace(window)
    assert {e["pid"] for e in window["traceEvents"]} == {1001}
    steps = [e for e in events["X"] if e["tid"] == 1]
    # Step 10 is not traced: its span rides in step 12's record, read from gstep 10 on.
    assert sorted(e["args"]["gstep"] for e in steps) == list(range(10, 20))
    assert all(10 <= e["args"]["gstep"] <= 19 for e in events["X"])
    assert window["otherData"]["gsteps"] == [10, 19]
    # The IO-write span of step 18 rides in step 21's record, past the window: still shown.
    assert any(e["tid"] == 5 and e["args"]["gstep"] == 18 for e in events["X"])

    # Steps 28 and 29 come after the last traced step (27): no record carries them.
    tail = _timeline(tmp_path, run, "--gsteps", "25:")
    tail_steps = [e for e in tail["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
    assert sorted(e["args"]["gstep"] for e in tail_steps) == [25, 25, 26, 26, 27, 27]


def test_device_events_flows_and_the_size_warning(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    tm.write_stream(str(run / "train.trace.0.0"), ["w"], tm.device_records(4, 3, keys=["w"]))
    monkeypatch.setattr(timeline, "BROWSER_LIMIT_BYTES", 1000)
    trace = _timeline(tmp_path, run)
    events = check_chrome_trace(trace)
    assert trace["otherData"]["device_events"] == 4 * 6
    kernels = [e for e in events["X"] if e["cat"] == "kernel"]
    assert len(kernels) == 12 and all(e["name"] == "synthetic_kernel" for e in kernels)
    assert [e["args"]["gstep"] for e in kernels] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    # Each kernel: a step flow from its host step and a launch flow from its API call.
    assert len(events["s"]) == 24 and trace["otherData"]["flows"] == 24
    err = capsys.readouterr().err
    assert "warning" in err and "--gsteps" in err

    window = _timeline(tmp_path, run, "--gsteps", "1:2")
    kernels = [e for e in window["traceEvents"] if e.get("cat") == "kernel"]
    assert sorted({e["args"]["gstep"] for e in kernels}) == [1, 2]
    check_chrome_trace(window)


_RSS_CHILD = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from xdl_trace.read import reader, timeline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
info = timeline.write_timeline(sys.argv[2], sys.argv[3])
print(info["device_events"], before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_memory_does_not_grow_with_events(tmp_path):
    """300k device events (a JSON of ~110 MB, several hundred MB as Python objects): the
    streaming writer's peak RSS grows by far less than either."""
    run = tmp_path / "run"
    run.mkdir()
    tm.write_stream(str(run / "train.trace.0.0"), ["w"], tm.device_records(300, 500, keys=["w"]))
    out = tmp_path / "big.json"
    done = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, REPO, str(run), str(out)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    events, before_kb, peak_kb = map(int, done.stdout.split())
    assert events == 300_000
    json_bytes = out.stat().st_size
    assert json_bytes > 80 * 2**20
    # As a list of dicts the events alone would take several times the JSON's size; the
    # growth is one record's events and the bounded correlation maps.
    growth = (peak_kb - before_kb) * 1024
    assert growth < json_bytes / 4, (before_kb, peak_kb, json_bytes)
    assert growth < 40 * 2**20, (before_kb, peak_kb)
    with open(out) as f:
        assert len(json.load(f)["traceEvents"]) > 3 * events  # Complete and valid.


def test_a_run_without_device_tracers_has_a_span_for_every_step(tmp_path):
    """The hook, a filter tracing every 3rd step, no device tracer: 10 step spans (4 traced,
    6 marked not traced), capture/encode, queue wait and IO-write spans nested sensibly."""
    import numpy as np

    import xdl_trace as xdl

    xdl.trace_tensor("w", np.arange(4, dtype=np.float32))
    run = tmp_path / "run"
    with xdl.TraceHook({"output_dir": str(run), "fsync": False}, filter=3) as hook:
        for _ in range(10):
            if hook.step():
                hook.flush()  # Written before the next step: its IO span rides in that record.
    assert hook.stats()["steps_skipped"] == 6
    trace = _timeline(tmp_path, run)
    events = check_chrome_trace(trace)
    steps = sorted((e for e in events["X"] if e["tid"] == 1), key=lambda e: e["ts"])
    assert [e["args"]["gstep"] for e in steps] == list(range(10))
    assert [e["cat"] == "host" for e in steps] == [g % 3 == 0 for g in range(10)]
    assert all(
        e["cat"] == timeline.NOT_TRACED_CATEGORY and e["name"] == f"step {g} (not traced)"
        for g, e in enumerate(steps)
        if g % 3
    )
    # Consecutive, never overlapping: each step starts where the previous one ended (at the
    # previous traced step, once the tracer's own work is done).
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(steps, steps[1:]))
    by = {(e["tid"], e["args"]["gstep"]): e for e in events["X"]}
    threads = {e["tid"]: e["args"]["name"] for e in events["M"] if e["name"] == "thread_name"}
    assert {1: "steps", 2: "capture + encode", 5: "IO write"}.items() <= threads.items()
    for g in (0, 3, 6):  # Traced steps followed by another traced step.
        step, capture, io = by[(1, g)], by[(2, g)], by[(5, g)]
        # The tracer's work follows the step's span and precedes the next step's span...
        assert step["ts"] + step["dur"] <= capture["ts"] + 1e-3
        assert capture["ts"] + capture["dur"] <= by[(1, g + 1)]["ts"] + 1e-3
        # ... and the IO thread writes the record after it was encoded.
        assert io["ts"] >= capture["ts"] + capture["dur"] - 1e-3
        assert io["args"]["os_thread_id"] != step["args"]["os_thread_id"]
    assert trace["otherData"]["steps"] == 4 and trace["otherData"]["steps_not_traced"] == 6


def test_not_traced_spans_are_bounded_per_record_and_the_rest_counted(tmp_path):
    import numpy as np

    import xdl_trace as xdl

    xdl.trace_tensor("w", np.zeros(2, np.float32))
    run = tmp_path / "run"
    with xdl.TraceHook({"output_dir": str(run), "fsync": False}, filter=[0, 5000]) as hook:
        for _ in range(5001):
            hook.step()
    kept = xdl._core.Tracer.MAX_NOT_TRACED_SPANS
    trace = _timeline(tmp_path, run)
    assert trace["otherData"]["steps"] == 2
    assert trace["otherData"]["steps_not_traced"] == kept
    assert trace["otherData"]["spans_dropped"] == 4999 - kept
    (last,) = [e for e in trace["traceEvents"] if e.get("args", {}).get("spans_dropped")]
    assert last["args"]["gstep"] == kept and last["cat"] == timeline.NOT_TRACED_CATEGORY


def test_device_work_of_not_traced_steps_is_linked_to_their_own_span(tmp_path, fake_plugin):
    """With the fake device plugin and every 2nd step traced, each step's kernels name that
    step (not the next traced one), and step flows start on its own span."""
    import numpy as np

    import xdl_trace as xdl

    plugin = fake_plugin
    xdl.trace_tensor("w", np.zeros(2, np.float32))
    run = tmp_path / "run"
    config = {
        "output_dir": str(run),
        "fsync": False,
        "device_tracers": [plugin],
        "device_collect_interval_s": 0,
    }
    with xdl.TraceHook(config, filter=2) as hook:
        for _ in range(6):
            hook.step()
    trace = _timeline(tmp_path, run)
    events = check_chrome_trace(trace)
    steps = {e["args"]["gstep"]: e for e in events["X"] if e["pid"] == 1 and e["tid"] == 1}
    assert sorted(steps) == list(range(6))
    kernels = [e for e in events["X"] if e["cat"] == "kernel" and "gstep" in e["args"]]
    # The fake emits 2 kernels per step. Step 5 comes after the last traced one: its span and
    # its work ride in the device-only record written at close.
    assert sorted(e["args"]["gstep"] for e in kernels) == sorted(list(range(6)) * 2)
    for kernel in kernels:
        step = steps[kernel["args"]["gstep"]]
        assert kernel["args"]["step_correlation_id"] == step["args"]["correlation_id"] > 0
    flow_starts = {e["ts"] for e in events["s"] if e["cat"] == "step"}
    assert flow_starts == {e["ts"] for e in steps.values()}


def test_a_runs_evaluation_is_on_tracks_of_its_own_in_the_timeline(tmp_path):
    """A training hook and its eval hook (stepped three times after every 10th training step,
    an xdl.host_range around each eval batch): the eval steps are on "eval steps" (their gsteps
    the training step they evaluate), each starting where the training step before it ended (an
    eval hook's first step of an evaluation would otherwise span the training since the last
    one), and the ranges its records carry are on their thread's range track. Before: no eval
    step and no eval range in the timeline."""
    import numpy as np

    import xdl_trace as xdl

    xdl.clear()
    xdl.trace_tensor("w", np.arange(4, dtype=np.float32))
    xdl.trace_value("acc", scope="eval")
    run = str(tmp_path / "run")
    config = {"output_dir": run, "fsync": False, "on_error": "raise"}
    with xdl.TraceHook(config) as train, xdl.TraceHook(
        config, is_training=False, scope="eval"
    ) as evaluate:
        for step in range(30):
            train.step()
            if step % 10 == 9:
                for _ in range(3):
                    with xdl.host_range("eval batch"):
                        sum(range(1000))
                    evaluate.step(values={"acc": 0.5})
    xdl.clear()
    trace = _timeline(tmp_path, run)
    events = check_chrome_trace(trace)
    threads = {e["tid"]: e["args"]["name"] for e in events["M"] if e["name"] == "thread_name"}
    assert threads[11] == "eval steps"
    evals = sorted((e for e in events["X"] if e["tid"] == 11), key=lambda e: e["ts"])
    assert [e["name"] for e in evals] == [f"eval step {g}" for g in (9, 19, 29) for _ in range(3)]
    steps = {e["args"]["gstep"]: e for e in events["X"] if e["tid"] == 1}
    for e in evals[::3]:  # The first of each evaluation: after its training step ended.
        trained = steps[e["args"]["gstep"]]
        assert e["ts"] >= trained["ts"] + trained["dur"] - 1e-3
    batches = [e for e in events["X"] if e["name"] == "eval batch"]
    assert len(batches) == 9 and all(threads[e["tid"]].startswith("ranges") for e in batches)
    assert trace["otherData"]["eval_steps"] == 9 and trace["otherData"]["steps"] == 30


# An eval job of its own: it begins, loads a checkpoint (0.4 s), evaluates it as gstep 9.
_EVAL_JOB = """
import sys, time, xdl_trace as xdl
xdl.trace_value("acc", scope="eval")
with xdl.TraceHook({"output_dir": sys.argv[1], "on_error": "raise"}, is_training=False,
                   scope="eval") as hook:
    print("began", flush=True)
    time.sleep(0.4)
    hook.step(gstep=9, values={"acc": 0.5})
"""


def test_an_eval_job_of_its_own_keeps_its_steps_span_in_the_timeline(tmp_path):
    """An eval job in a process of its own, running beside the training: its step spans its own
    work (the 0.4 s it took to load and evaluate), not cut to where a training step ended, as
    the training process's own eval steps are (they would otherwise span the training since
    the last evaluation). Before: cut to under one training step."""
    import time

    import numpy as np

    import xdl_trace as xdl

    run = str(tmp_path / "run")
    job = start_python(_EVAL_JOB, run)  # Once it began.
    xdl.clear()
    xdl.trace_tensor("w", np.arange(4, dtype=np.float32))
    with xdl.TraceHook({"output_dir": run, "fsync": False, "on_error": "raise"}) as train:
        for _ in range(30):
            time.sleep(0.02)
            train.step()
    xdl.clear()
    assert job.wait(timeout=60) == 0
    events = check_chrome_trace(_timeline(tmp_path, run))
    (evaluated,) = [e for e in events["X"] if e["tid"] == 11]
    assert evaluated["name"] == "eval step 9" and evaluated["dur"] >= 0.35e6, evaluated


def test_the_evaluations_of_every_run_read_are_in_its_timeline(tmp_path):
    """`timeline DIR --run all` of a directory of two runs, each with its evaluation: the eval
    steps of both (Trace.evaluation of every run read; before it was None for several runs,
    so their eval steps were left out)."""
    import numpy as np

    import xdl_trace as xdl

    run = str(tmp_path / "runs")
    for steps in (10, 20):
        xdl.clear()
        xdl.trace_tensor("w", np.arange(4, dtype=np.float32))
        xdl.trace_value("acc", scope="eval")
        config = {"output_dir": run, "fsync": False, "on_error": "raise"}
        with xdl.TraceHook(config) as train, xdl.TraceHook(
            config, is_training=False, scope="eval"
        ) as evaluate:
            for step in range(steps):
                train.step()
                if step % 5 == 4:
                    evaluate.step(values={"acc": 0.5})
    xdl.clear()
    trace = _timeline(tmp_path, run, "--run", "all")
    assert trace["otherData"]["steps"] == 30 and trace["otherData"]["eval_steps"] == 6
    check_chrome_trace(trace)
