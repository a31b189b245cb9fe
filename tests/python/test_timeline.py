"""Device tracing from Python and the Chrome/Perfetto timeline: the fake C plugin (compiled here) end to end."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import cli
from xdl_trace.read import timeline
from collector_wait import wait_collected

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(output_dir, rank, plugin, steps, **options):
    weights = np.arange(8, dtype=np.float32)
    xdl.trace_tensor("w", weights)
    config = {
        "output_dir": str(output_dir),
        "rank": rank,
        "device_tracers": [plugin],
        "device_collect_interval_s": 0,  # The collector thread collects after every step.
        "fsync": False,
        **options,
    }
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            hook.step(gstep=100 + step)
            wait_collected(hook, 6 * (step + 1))  # The fake's 6 events of this step.
    stats = hook.stats()
    xdl.clear()
    return stats


def test_device_events_reach_records_and_the_timeline(tmp_path, fake_plugin, pb):
    run = tmp_path / "run"
    stats0 = _run(run, 0, fake_plugin, 4)
    stats1 = _run(run, 1, fake_plugin, 3)
    assert stats0["device_tracer_status"] == "fake: ok"
    assert stats0["device_events"] == 5 * 6  # 4 steps + the one open at close.
    assert stats1["device_events"] == 4 * 6
    assert stats0["device_events_dropped"] == 0

    # protobuf's own parser (the protoc-generated classes) sees fields 5 and 6.
    data = sorted(
        p for p in os.listdir(run) if p.startswith("train.trace.0.") and not p.endswith(".meta")
    )
    blob = (run / data[0]).read_bytes()
    offset, records = 0, []
    while offset < len(blob):
        n = int.from_bytes(blob[offset : offset + 4], "little")
        records.append(blob[offset + 4 : offset + 4 + n])
        offset += 4 + n
    parsed = [pb.Record.FromString(r) for r in records[1:]]
    assert len(parsed) == 5  # Four steps and the device-only tail record.
    assert [r.gstep for r in parsed] == [100, 101, 102, 103, 103]
    # A step's events are collected by the collector thread while (or after)
    # the step's record is made: they ride in that record or the next one, the
    # last step's in the tail record.
    assert all(t.tracer == "fake" for r in parsed for t in r.device_trace)
    per_record = [
        sum(len(l.event) for t in r.device_trace for d in t.device for l in d.line) for r in parsed
    ]
    assert sum(per_record) == 5 * 6
    assert per_record[-1] >= 6
    assert parsed[0].host_span[0].kind == pb.device__trace__pb2.HostSpan.STEP

    out = tmp_path / "trace.json"
    assert cli.main(["timeline", str(run), "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    assert trace["otherData"]["ranks"] == 2
    assert trace["otherData"]["steps"] == 7
    assert trace["otherData"]["device_events"] == 9 * 6

    names = {
        (e["pid"], e["args"]["name"])
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    process_names = sorted(n for _, n in names)
    assert process_names == [
        "rank 0 fake device 0 (fake)",
        "rank 0 host",
        "rank 1 fake device 0 (fake)",
        "rank 1 host",
    ]
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {
        "steps",
        "capture + encode",
        "queue wait",
        "stream 7",
        "stream 8",
        "fake: fake API",
    } <= threads

    steps = [
        e for e in events if e["ph"] == "X" and e["cat"] == "host" and e["name"].startswith("step ")
    ]
    assert sorted(e["args"]["gstep"] for e in steps) == [100, 100, 101, 101, 102, 102, 103]
    kernels = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(kernels) == 9 * 2
    assert all(e["name"] == "fake_kernel" and e["dur"] >= 0 for e in kernels)
    # Kernels launched during a traced step name it.
    assert {e["args"]["gstep"] for e in kernels if "gstep" in e["args"]} == {100, 101, 102, 103}
    copies = [e for e in events if e["ph"] == "X" and e["cat"] == "memcpy"]
    assert all(e["args"]["bytes"] == 4096 for e in copies)

    # Flows: every start has one finish with the same id, ending on a device event.
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and starts.keys() == finishes.keys()
    device_slices = {(e["pid"], e["tid"], e["ts"]) for e in kernels + copies}
    assert all((f["pid"], f["tid"], f["ts"]) in device_slices for f in finishes.values())
    step_flows = [s for s in starts.values() if s["cat"] == "step"]
    launch_flows = [s for s in starts.values() if s["cat"] == "launch"]
    assert len(step_flows) == 7 * 3  # Device work of traced steps (2 kernels + 1 copy each).
    assert len(launch_flows) == 9 * 3  # Every kernel/copy has its launch call.
    # Host and device share one time axis: step flows start inside their step.
    by_host = {(s["pid"], s["ts"]) for s in steps}
    assert all((s["pid"], s["ts"]) in by_host for s in step_flows)


def test_device_options_come_from_the_config_and_the_environment_wins(
    tmp_path, fake_plugin, monkeypatch
):
    off = _run(tmp_path / "a", 0, fake_plugin, 2, device_plugin_config={"unavailable": True})
    assert off["device_tracer_status"].startswith("fake: unavailable")
    assert off["device_events"] == 0
    base = _run(tmp_path / "b", 0, fake_plugin, 2)
    more = _run(tmp_path / "c", 0, fake_plugin, 2, device_plugin_config="events_per_step=4")
    assert more["device_events"] > base["device_events"] > 0

    monkeypatch.setenv("XDL_TRACE_PLUGIN_CONFIG", "events_per_step=4")
    env = _run(tmp_path / "d", 0, fake_plugin, 2, device_plugin_config={"unavailable": True})
    assert env["device_tracer_status"] == "fake: ok"
    assert env["device_events"] == more["device_events"]

    # With the default interval (1 s) a short run is collected once, at close, so the device
    # events need the extra record written after the last step.
    monkeypatch.delenv("XDL_TRACE_PLUGIN_CONFIG")
    xdl.trace_tensor("w", np.ones(2, np.float32))
    config = {"output_dir": str(tmp_path / "e"), "device_tracers": [fake_plugin], "fsync": False}
    with xdl.TraceHook(config) as hook:
        for _ in range(3):
            hook.step()
    trace = xdl.open_trace(str(tmp_path / "e"))
    assert len(list(trace)) == 3  # The device-only record carries no columns: skipped...
    assert len(list(trace.records(keys=[]))) == 4  # ...unless no key is selected.
    # The fake makes the same events for each step (3 here, counting the one open at close).
    per_step = base["device_events"] // 3
    assert hook.stats()["device_events"] == 4 * per_step


def test_a_tracer_that_fails_to_start_is_reported_and_training_goes_on(
    tmp_path, fake_plugin, capfd
):
    stats = _run(tmp_path, 0, fake_plugin, 3, device_plugin_config={"fail_start": True})
    assert stats["device_tracer_status"].startswith("fake: error: start failed")
    assert "fail_start=1" in stats["device_tracer_status"]
    assert stats["records_written"] == 3 and stats["device_events"] == 0
    assert "fake: error: start failed" in capfd.readouterr().err  # Logged once at start.
    assert [r.gstep for r in xdl.open_trace(str(tmp_path))] == [100, 101, 102]


def test_bad_device_options_name_the_key_or_variable(tmp_path, fake_plugin, monkeypatch):
    config = {"output_dir": str(tmp_path), "device_tracers": [fake_plugin]}
    with pytest.raises(ValueError, match="device_collect_interval_s"):
        xdl.TraceHook({**config, "device_collect_interval_s": -1}).begin()
    with pytest.raises(ValueError, match="device_plugin_config"):
        xdl.TraceHook({**config, "device_plugin_config": 5}).begin()
    with pytest.raises(ValueError, match="device_plugin_config"):
        xdl.TraceHook({**config, "device_plugin_config": {"a": "x;y"}}).begin()
    monkeypatch.setenv("XDL_TRACE_DEVICE_COLLECT_INTERVAL_S", "soon")
    with pytest.raises(ValueError, match="XDL_TRACE_DEVICE_COLLECT_INTERVAL_S='soon'"):
        xdl.TraceHook(config).begin()


def test_cupti_runs_cleanly_and_reports_its_status(tmp_path):
    xdl.trace_tensor("w", np.ones(4, dtype=np.float32))
    with xdl.TraceHook(
        {"output_dir": str(tmp_path), "device_tracers": ["cupti"], "fsync": False}
    ) as hook:
        for _ in range(3):
            hook.step()
    stats = hook.stats()
    assert stats["records_written"] >= 3
    assert stats["device_tracer_status"].startswith("cupti: ")
    if "unavailable" in stats["device_tracer_status"]:
        print(
            "SKIPPED GPU part:", stats["device_tracer_status"]
        )  # No GPU here: reported, not silent.
    out = tmp_path / "t.json"
    assert cli.main(["timeline", str(tmp_path), "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    assert trace["otherData"]["steps"] == 3


def test_a_bad_plugin_is_refused_with_its_name(tmp_path):
    missing = str(tmp_path / "libnothere.so")
    with pytest.raises(Exception) as info:
        with xdl.TraceHook({"output_dir": str(tmp_path), "device_tracers": [missing]}) as hook:
            hook.step()
    assert "libnothere.so" in str(info.value)


def test_the_device_only_tail_has_no_fake_columns(tmp_path, fake_plugin):
    # Device events collected after the last step ride in a closing record without columns:
    # code that stacks a key over every record sees only real values, the timeline every event.
    run = tmp_path / "tail"
    stats = _run(run, 0, fake_plugin, 3)
    assert stats["device_events"] == 4 * 6  # 3 steps + the one open at close.
    trace = xdl.open_trace(str(run))
    assert all(r["ok"] for r in trace.verify())
    records = list(trace.records())
    assert [r.gstep for r in records] == [100, 101, 102]
    stacked = np.stack([r.columns["w"] for r in records])
    assert stacked.shape == (3, 8) and (stacked == np.arange(8, dtype=np.float32)).all()
    assert trace.stack("w").shape == (3, 8)
    # A read that selects no key also gets the device-only record.
    assert [r.gstep for r in trace.records(keys=[])] == [100, 101, 102, 102]
    out = tmp_path / "tail.json"
    assert cli.main(["timeline", str(run), "-o", str(out)]) == 0
    timeline = json.loads(out.read_text())
    assert timeline["otherData"]["device_events"] == stats["device_events"]
    # The stand-alone reader script skips it too, and calls nothing corrupt.
    script = os.path.join(REPO, "xdl_trace", "tools", "read_trace.py")
    dump = subprocess.run(
        [sys.executable, script, str(run)], capture_output=True, text=True, timeout=60
    )
    assert dump.returncode == 0, dump.stderr
    assert dump.stdout.count("gstep:") == 3
