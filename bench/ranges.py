"""The host cost of named ranges (xdl.watch's module marks, xdl.host_range), per range.

    /usr/bin/python3 bench/ranges.py [--layers 64] [--steps 200] [--repeat 5]

Prints, with a tracer open (ranges kept) and each figure the median of --repeat runs:

- note_range: one ``_core.note_range`` call (the binding, a clock read, one uncontended lock and
  a push into the process's range log), ns per range;
- host_range: the ``xdl.host_range`` context manager around nothing, ns per range;
- watch marks: a torch ``nn.Sequential`` of --layers tiny ``Linear(8, 8)`` + ``Tanh`` pairs on
  the CPU, forward + backward per step, marked by ``xdl.watch`` against unmarked: the extra
  time per step, over the ranges each step writes (a forward per module, a backward per leaf),
  ns per range, and the extra as a share of that (tiny, so launch-bound) model's step; beside
  it the same hooks doing nothing (torch's own hook machinery, the floor of any module mark).

A GPU workload's kernels outlast their launches, so the marks cost its step only where the host
is the bottleneck; the last figure is an upper bound for a model whose layers run ~10 µs each.

- report's table: ``host_ranges.table`` (the report's "host time by range", recomputed at each
  update of ``serve``) over --table-ranges ranges of one thread, nested as a module's forward
  holding 9 children: seconds per million ranges.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import xdl_trace as xdl  # noqa: E402
from xdl_trace import _core  # noqa: E402


def _hook(directory, scope):
    xdl.trace_variable("v", np.zeros(1, np.float32), scope=scope)
    return xdl.TraceHook({"output_dir": directory, "fsync": False}, scope=scope)


def per_call(n, directory, scope):
    """(ns per note_range call, ns per host_range block), each timed in chunks that a record
    takes whole (below the per-record bound of 65536 ranges)."""
    rid = _core.range_id("bench", "bench")
    chunk = 50_000
    calls = ranges = 0
    with _hook(os.path.join(directory, scope), scope) as hook:
        for _ in range(max(n // chunk, 1)):
            start = time.perf_counter_ns()
            for _ in range(chunk):
                _core.note_range(rid, 0)
            calls += time.perf_counter_ns() - start
            hook.step()
            start = time.perf_counter_ns()
            for _ in range(chunk):
                with xdl.host_range("bench", "bench"):
                    pass
            ranges += time.perf_counter_ns() - start
            hook.step()
    done = max(n // chunk, 1) * chunk
    return calls / done, ranges / done


def model_step(torch, layers):
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(8, 8), torch.nn.Tanh()]
    return torch.nn.Sequential(*blocks)


def step_time(torch, model, x, steps, hook):
    start = time.perf_counter_ns()
    for _ in range(steps):
        model(x).sum().backward()
        hook.step()
    return (time.perf_counter_ns() - start) / steps


def marks(args, directory, run):
    import torch

    torch.manual_seed(0)
    x = torch.randn(4, 8)
    plain, marked = model_step(torch, args.layers), model_step(torch, args.layers)
    xdl.watch(plain, scope=f"plain{run}", marks=False)
    xdl.watch(marked, scope=f"marked{run}")
    with _hook(os.path.join(directory, f"plain{run}"), f"plain{run}") as hook:
        step_time(torch, plain, x, 10, hook)  # Warm up.
        unmarked = step_time(torch, plain, x, args.steps, hook)
    with _hook(os.path.join(directory, f"marked{run}"), f"marked{run}") as hook:
        step_time(torch, marked, x, 10, hook)
        with_marks = step_time(torch, marked, x, args.steps, hook)
    # torch's own hook machinery: the same hooks doing nothing (a forward pre-hook and hook per
    # module, a tensor hook per leaf output), no tracer.
    empty = model_step(torch, args.layers)
    xdl.watch(empty, scope=f"empty{run}", marks=False)  # Traced as the other two are.

    def tensor_hook(_module, _inputs, output):
        if output.grad_fn is not None:
            output.register_hook(lambda grad: None)

    for module in empty.modules():
        module.register_forward_pre_hook(lambda *a: None)
        module.register_forward_hook(
            tensor_hook if not list(module.children()) else lambda *a: None
        )
    with _hook(os.path.join(directory, f"empty{run}"), f"empty{run}") as hook:
        step_time(torch, empty, x, 10, hook)
        hooks_only = step_time(torch, empty, x, args.steps, hook)
    modules = len(list(marked.modules()))
    leaves = 2 * args.layers
    return unmarked, with_marks, modules + leaves, hooks_only


def table_time(n):
    """Seconds per million ranges of ``host_ranges.table`` over `n` ranges of one thread: blocks
    of one parent holding 9 children, a block a step."""
    from xdl_trace.read import host_ranges

    blocks = n // 10
    base = np.arange(blocks, dtype=np.int64) * 1000
    starts = np.concatenate([base] + [base + 10 + k * 90 for k in range(9)])
    ends = np.concatenate([base + 950] + [base + 10 + k * 90 + 80 for k in range(9)])
    names = ["", "forward", "model"] + [str(k) for k in range(9)]
    name = np.concatenate([np.full(blocks, 2)] + [np.full(blocks, 3 + k) for k in range(9)])
    columns = {
        "names": names,
        "ranges": {
            "name": name.astype(np.int32),
            "category": np.ones(len(starts), np.int32),
            "rank": np.zeros(len(starts), np.int64),
            "thread": np.ones(len(starts), np.int64),
            "start_ns": starts,
            "end_ns": ends,
        },
    }
    steps = {0: (np.arange(blocks + 1), np.arange(blocks + 1, dtype=np.int64) * 1000 - 1)}
    began = time.perf_counter()
    rows = host_ranges.table(columns, steps)
    assert sum(r["calls"] for r in rows) == len(starts)
    return (time.perf_counter() - began) / (len(starts) / 1e6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--table-ranges", type=int, default=1_000_000)
    args = parser.parse_args()
    seconds = statistics.median(table_time(args.table_ranges) for _ in range(args.repeat))
    print(f"report's host time by range: {seconds:.2f} s per million ranges")
    with tempfile.TemporaryDirectory() as directory:
        calls = [per_call(args.calls, directory, f"calls{i}") for i in range(args.repeat)]
        print(f"note_range: {statistics.median(c for c, _ in calls):.0f} ns per range")
        print(f"host_range: {statistics.median(r for _, r in calls):.0f} ns per range")
        try:
            import torch  # noqa: F401
        except ImportError:
            print("watch marks: skipped (no torch)")
            return
        runs = [marks(args, directory, i) for i in range(args.repeat)]
        unmarked = statistics.median(r[0] for r in runs)
        marked = statistics.median(r[1] for r in runs)
        hooks_only = statistics.median(r[3] for r in runs)
        ranges = runs[0][2]
        print(
            f"watch marks: {args.layers} x (Linear(8, 8), Tanh), {ranges} ranges a step: "
            f"step {unmarked / 1e3:.0f} µs unmarked, {marked / 1e3:.0f} µs marked: "
            f"+{(marked - unmarked) / ranges:.0f} ns per range "
            f"(+{100 * (marked - unmarked) / unmarked:.1f}% of this tiny model's step); "
            f"torch's hooks doing nothing: +{(hooks_only - unmarked) / ranges:.0f} ns per range"
        )


if __name__ == "__main__":
    main()
