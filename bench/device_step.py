"""What `hook.step()` of xdl.watch on a device costs the training thread when the device is free.

    /usr/bin/python3 bench/device_step.py [--params 30] [--steps 2000] [--rounds 3]

A GPU adds each launch's cost to these figures; this measures the rest, the part xdl_trace's own
code decides: reading the watched tensors, the core's step, the staging pool, the summary pass's
graph lookup and the gather. The device is tests/python/fake_device.py's, run inline: work runs at
once on the training thread on tiny CPU tensors (so it costs next to nothing), fences complete at
once and a graph's replay is free. Conditions alternate in one process, `--rounds` times:

  graphs   the summary pass replayed from a graph (what a CUDA run does from its second step)
  eager    XDL_TRACE_DEVICE_GRAPHS=0: the pass op by op (~45 torch calls on tiny tensors)

It prints hook.step()'s median, p90 and p99 in microseconds for each, and where the graphs
condition's time goes (the step batch's parts, timed around their calls).
"""

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
)

import xdl_trace as xdl  # noqa: E402
from fake_device import FakeDevice  # noqa: E402
from xdl_trace import _core
from xdl_trace.write import _device, _device_graphs  # noqa: E402


class InlineDevice(FakeDevice):
    """The fake device with its work done at once on the caller and free graph replays."""

    def run(self, device, work):
        work()

    def fence(self, slot, devices):
        fence = _core.ManualFenceForTesting()
        fence.complete()
        return fence

    def capture(self, device, fn):
        graph, out = super().capture(device, fn)
        graph.replay = lambda: None
        return graph, out


def timed_steps(model, steps, graphs):
    os.environ["XDL_TRACE_DEVICE_GRAPHS"] = "1" if graphs else "0"
    xdl.clear()
    xdl.watch(model)
    times = []
    with xdl.TraceHook({"output_dir": tempfile.mkdtemp(), "fsync": False}) as hook:
        for _ in range(steps):
            t0 = time.perf_counter()
            hook.step()
            times.append(time.perf_counter() - t0)
    return times[10:]


def parts_of_a_step(model, steps):
    """Median microseconds a step in each part of the step batch (graphs on)."""
    spent = collections.defaultdict(list)
    wrapped = [
        (_device.GroupCapture, "prepare", "GroupCapture.prepare (all groups)"),
        (_device.StepBatch, "launch", "StepBatch.launch"),
        (_device.StagingPool, "acquire", "  StagingPool.acquire"),
        (_device, "_enqueue", "  _enqueue"),
        (_device_graphs.SummaryGraphs, "rows", "    SummaryGraphs.rows"),
    ]
    originals = [(obj, name, getattr(obj, name)) for obj, name, _ in wrapped]

    def timer(fn, label):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label].append(time.perf_counter() - t0)

        return call

    for (obj, name, label), (_, _, fn) in zip(wrapped, originals):
        setattr(obj, name, timer(fn, label))
    try:
        total = timed_steps(model, steps, graphs=True)
    finally:
        for obj, name, fn in originals:
            setattr(obj, name, fn)
    out = {"hook.step()": statistics.median(total) * 1e6}
    for label in (label for _, _, label in wrapped):
        times = spent[label]
        per_step = len(times) // steps
        out[label] = statistics.median(times[10 * per_step :]) * 1e6 * per_step
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=int, default=30, help="parameters (and gradients)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(args.params // 2)])
    model(torch.randn(2, 8)).sum().backward()
    _device.register_backend(InlineDevice())
    times = {"graphs": [], "eager": []}
    for _ in range(args.rounds):
        for name in times:
            times[name] += timed_steps(model, args.steps, graphs=name == "graphs")
    print(f"hook.step() of xdl.watch, {args.params} parameters + gradients, device work free:")
    for name, t in times.items():
        us = sorted(x * 1e6 for x in t)
        print(
            f"  {name:7s} median {statistics.median(us):6.1f} us  p90 {us[int(0.9 * len(us))]:6.1f}"
            f"  p99 {us[int(0.99 * len(us))]:6.1f}"
        )
    print("where the graphs condition's step goes (median us a step):")
    for label, us in parts_of_a_step(model, args.steps).items():
        print(f"  {label:36s} {us:6.1f}")


if __name__ == "__main__":
    main()
