"""A TensorFlow pluggable-profiler plugin (TF_InitProfiler, TF_SetStatus left undefined) traced from
Python: loaded by path through the normal hook config, its XSpace converted into device events that
the reader and the timeline show."""

import shutil
import subprocess
import time

import numpy as np
import pytest
from collector_wait import wait_collected

import xdl_trace as xdl
from xdl_trace.read import timeline
from xdl_trace._proto import device_trace_pb2

from conftest import compile_test_plugin


def _build(tmp_path_factory, name, *defines):
    """The fake TF plugin built with the system C compiler, linking nothing: TF_SetStatus stays
    undefined, as in a plugin linked against TensorFlow's C API."""
    out = tmp_path_factory.mktemp("tf_plugin")
    path = compile_test_plugin(out, "fake_tf_profiler_plugin.c", name, defines)
    if path is None:
        pytest.skip("SKIPPED: no C compiler to build the fake TensorFlow profiler plugin")
    return path


@pytest.fixture(scope="module")
def tf_plugin(tmp_path_factory):
    path = _build(tmp_path_factory, "fake_tf")
    nm = shutil.which("nm")
    if nm is not None:
        symbols = subprocess.run(
            [nm, "-D", path], check=True, capture_output=True, text=True, timeout=60
        ).stdout
        assert any(line.split() == ["U", "TF_SetStatus"] for line in symbols.splitlines())
    return path


def _run(output_dir, plugin, steps):
    xdl.trace_tensor("w", np.arange(8, dtype=np.float32))
    config = {
        "output_dir": str(output_dir),
        "device_tracers": [plugin],
        "device_collect_interval_s": 0,  # The collector thread collects after every step.
        "fsync": False,
    }
    try:
        with xdl.TraceHook(config) as hook:
            for step in range(steps):
                hook.step(gstep=step)
                # The fake makes 6 events a collect: the one at start, one per step.
                wait_collected(hook, 6 * (step + 2))
                # The fake places a collect's events evenly over the time since the last
                # one, and the plugin joins them to steps by time: a step that lasts no time
                # (the collect already done when the wait starts) would get none.
                time.sleep(0.005)
        return hook.stats()
    finally:
        xdl.clear()


def test_tf_plugin_events_reach_the_records_and_the_timeline(tmp_path, tf_plugin):
    run = tmp_path / "run"
    steps = 3
    stats = _run(run, tf_plugin, steps)
    assert stats["device_tracer_status"] == "fake_tf: ok"
    assert stats["device_events_dropped"] == 0
    # Each collect (start, every step, close) brings 2 kernels, 1 copy and 3 API calls.
    assert stats["device_events"] == 6 * (steps + 2)

    # Read back: the records carry DeviceTraces of the tracer "fake_tf".
    events = []
    for record in xdl.open_trace(str(run)).records(keys=[]):
        for number, _, payload in record.extra or ():
            if number != 5:  # Record.device_trace
                continue
            trace = device_trace_pb2.DeviceTrace.FromString(payload)
            assert trace.tracer == "fake_tf"
            for device in trace.device:
                for line in device.line:
                    for e in line.event:
                        events.append((device.id, line.name, trace.name[e.name_index], e))
    assert len(events) == stats["device_events"]
    kernels = [e for d, _, n, e in events if e.kind == device_trace_pb2.DEVICE_EVENT_KERNEL]
    copies = [e for d, _, n, e in events if e.kind == device_trace_pb2.DEVICE_EVENT_MEMCPY]
    calls = [e for d, _, n, e in events if e.kind == device_trace_pb2.DEVICE_EVENT_RUNTIME_API]
    assert (len(kernels), len(copies), len(calls)) == (2 * (steps + 2), steps + 2, 3 * (steps + 2))
    assert {d for d, _, _, e in events if e in kernels} == {0}  # "/device:GPU:0"
    assert {d for d, _, _, e in events if e in calls} == {-1}  # "/host:CUPTI"

    trace = timeline.build_timeline(str(run))
    shown = trace["traceEvents"]
    tf_kernels = [e for e in shown if e.get("name") == "fake_tf_kernel"]
    assert len(tf_kernels) == len(kernels)
    assert all(e["cat"] == "kernel" and e["args"]["tracer"] == "fake_tf" for e in tf_kernels)
    assert {e["args"]["grid"] for e in tf_kernels} == {"4x2x1"}
    assert {e["args"]["registers_per_thread"] for e in tf_kernels} == {32}
    copy_events = [e for e in shown if e.get("name") == "MemcpyH2D"]
    assert len(copy_events) == len(copies)
    assert all(e["cat"] == "memcpy" and e["args"]["bytes"] == 4096 for e in copy_events)
    # Kernels launched during a step are joined to it (gstep from its host span), and each
    # API call is linked to its kernel by a launch flow.
    joined = [e for e in tf_kernels if "gstep" in e["args"]]
    assert {e["args"]["gstep"] for e in joined} >= set(range(1, steps))
    flows = [e for e in shown if e.get("cat") == "launch"]
    assert len(flows) == 2 * 3 * (steps + 2)


def test_tf_plugin_init_failure_names_the_plugin_and_tensorflow_message(tmp_path, tmp_path_factory):
    plugin = _build(tmp_path_factory, "fake_tf_init_fails", "XDL_FAKE_TF_INIT_FAILS")
    with pytest.raises(xdl.errors.FailedPreconditionError) as raised:
        _run(tmp_path / "run", plugin, 1)
    message = str(raised.value)
    assert plugin in message
    assert "TF_InitProfiler failed: FAILED_PRECONDITION" in message
    assert "fake_tf: no fake device present (init fails)" in message


def test_tf_plugin_malformed_xspace_is_reported_and_host_tracing_goes_on(
    tmp_path, tmp_path_factory
):
    plugin = _build(tmp_path_factory, "fake_tf_malformed", "XDL_FAKE_TF_MALFORMED")
    stats = _run(tmp_path / "run", plugin, 3)
    # Every step traced, plus the device-only record carrying the last collect's lost buffer.
    assert stats["records_written"] == 3 + 1
    assert stats["device_events"] == 0
    (tracer,) = stats["device_tracers"]
    assert tracer["state"] == "error"
    assert plugin in tracer["message"] and "not a serialized XSpace" in tracer["message"]
    assert tracer["buffers_dropped"] == stats["device_buffers_dropped"] > 0


@pytest.mark.parametrize("variant", ["XDL_FAKE_TF_OLDER", "XDL_FAKE_TF_NEWER"])
def test_older_and_newer_tf_plugins_trace_the_same(tmp_path, tmp_path_factory, variant):
    # Older: its params' struct_size ends at destroy_profiler. Newer: larger structs whose
    # trailing fields it writes. Both load and deliver the same events.
    plugin = _build(tmp_path_factory, variant.lower(), variant)
    stats = _run(tmp_path / "run", plugin, 2)
    assert stats["device_tracer_status"] == "fake_tf: ok"
    assert stats["device_events"] == 6 * (2 + 2)
