"""The H100 "conv" run's CUPTI trace (tests/data/h100_conv), as a real GPU wrote it: the reader and
the timeline still place every kernel in its step, with the names users read in Kineto."""

import collections
import os
import shutil

import pytest

import xdl_trace as xdl
from xdl_trace.read import timeline
from xdl_trace.read.device_events import HostSpan, parse_extra

_DATA = os.path.join(os.path.dirname(__file__), "..", "data", "h100_conv")
_KERNEL = 1  # DEVICE_EVENT_KERNEL
# What the file holds (tests/data/h100_conv/README.md): 213 kernels a step (the previous
# iteration's optimizer and this one's forward and backward); the first step has no optimizer
# before it, the step still open at close (id 13) runs the last one; 12 cuBLAS kernels carry no
# step.
_PER_STEP = {**{step: 213 for step in range(2, 13)}, 1: 210, 13: 3, 0: 12}


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "h100_conv"
    shutil.copytree(os.path.join(_DATA, "cupti_trace"), path)
    return str(path)


def _kineto_names():
    names = collections.Counter()
    with open(os.path.join(_DATA, "kineto_kernel_names.tsv")) as f:
        for line in f:
            count, name = line.rstrip("\n").split("\t", 1)
            names[name] += int(count)
    return names


def test_the_reader_finds_every_kernel_in_its_step(run_dir):
    steps, kernels, records = {}, [], 0
    for record in xdl.open_trace(run_dir).records(keys=[]):
        records += 1
        spans, traces = parse_extra(record.extra)
        for span in spans:
            if span.kind == HostSpan.STEP:
                steps[span.correlation_id] = span
        for trace in traces:
            assert trace.dropped_events == 0 and trace.status == ""
            for device in trace.device:
                for line in device.line:
                    kernels += [e for e in line.event if e.kind == _KERNEL]
    assert records == 13  # 12 steps and the device-only record written at close.
    assert sorted(span.gstep for span in steps.values()) == list(range(12))
    assert len(kernels) == 2568  # Kineto's count for the same 12 steps.
    assert collections.Counter(k.external_id for k in kernels) == _PER_STEP
    for k in kernels:
        span = steps.get(k.external_id)
        if span is not None:
            assert k.start_ns >= span.start_ns  # Run after the step that launched them.


def test_the_timeline_draws_every_kernel_from_its_step(run_dir):
    events = timeline.build_timeline(run_dir)["traceEvents"]
    kernels = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(kernels) == 2568
    per_gstep = collections.Counter(k["args"].get("gstep") for k in kernels)
    # Steps 1..12 are gsteps 0..11; the step open at close has no span (no gstep), nor do the
    # 12 kernels without a step.
    assert per_gstep == {
        **{gstep: _PER_STEP[gstep + 1] for gstep in range(12)},
        None: _PER_STEP[13] + _PER_STEP[0],
    }
    # One arrow from its step to each kernel, copy and memset launched in a traced step.
    work = [
        e
        for e in events
        if e["ph"] == "X" and e["cat"] in ("kernel", "memcpy", "memset") and "gstep" in e["args"]
    ]
    step_flows = [e for e in events if e["ph"] == "f" and e["cat"] == "step"]
    assert len(step_flows) == len(work) > 2568 - _PER_STEP[13] - _PER_STEP[0]


def test_the_timeline_shows_kernel_names_as_kineto_does(run_dir):
    events = timeline.build_timeline(run_dir)["traceEvents"]
    names = collections.Counter(
        e["name"] for e in events if e["ph"] == "X" and e["cat"] == "kernel"
    )
    assert names == _kineto_names()
