"""What tracing costs a GPU training loop, side by side with its floors and peers, in one process.

    /usr/bin/python3 bench/gpu.py [--workload conv|mlp|all] [--steps 40] [--rounds 3]
                                  [--device cuda|cpu] [--json OUT.json]

Workloads: "conv" (7 conv 3x3 layers of width 256 with BatchNorm, a linear head, SGD with
momentum, batch 128x3x64x64: ~26 ms a step on an H100) and "mlp" (4 x Linear(1024), batch 64:
launch-bound, ~1 ms a step). Conditions run in blocks of --steps steps (after 3 warm-up
steps), interleaved over --rounds rounds, each block timed between two device synchronizes;
ratio = median untraced time / median condition time (1.0 = free):

  untraced        the loop alone
  xdl_watch       xdl.watch(model): stats and digests of every parameter and gradient, every
                  step (the summary pass replayed as a CUDA graph, _device_graphs.py)
  xdl_watch_nodigest  the same without the digests (digest=False): their cost, beside it
  xdl_watch_eager the same with XDL_TRACE_DEVICE_GRAPHS=0 (the pass launched op by op)
  xdl_watch_marks xdl_watch with its module and optimizer marks (host ranges: each kernel's
                  layer and phase; the other xdl_watch conditions leave them out)
  xdl_watch10     the same under filter=xdl.Every(10)
  xdl_full10      every parameter and gradient in full (trace_collection + trace_gradient),
                  under Every(10)
  xdl_loss        the CUDA loss tensor traced every step (trace_callback)
  xdl_host_float  a host float traced every step (what hook.step() itself costs)
  floor_item      loss.item() every step (the least a host-side loss log costs)
  floor_gpu_stats stats of every parameter and gradient computed on the GPU (torch._foreach_norm,
                  amin, amax, mean), copied to pinned memory with non_blocking=True, every step
  tb_hist10       torch.utils.tensorboard add_histogram of every parameter and gradient, every
                  10th step (only where tensorboard is installed)
  untraced_channels_last  ("conv") the loop alone with the model and input in channels_last:
                  what the report's layout advice says it spares (a ratio above 1 is faster)

It also prints hook.step()'s time on the training thread under xdl_watch and xdl_watch_eager
(median, p99, max) and the summary graph counters of hook.stats(); and what the digests and the
marks add, as a share of the untraced step: (median condition time - median time without them)
/ median untraced time (issue 31's digest cost on a GPU; issue 33's goal for the marks: <= 1%).
--device cpu runs the same code on the CPU (a smoke test of the script: CPU tensors take the
host path, so the figures say nothing about GPUs).
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import torch
import torch.nn as nn

import xdl_trace as xdl
from xdl_trace.write import ranges


def conv_model(width=256):
    layers = [nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
    for i in range(6):
        stride = 2 if i % 2 == 1 else 1
        layers += [nn.Conv2d(width, width, 3, padding=1, stride=stride), nn.BatchNorm2d(width)]
        layers += [nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 100)]
    return nn.Sequential(*layers)


def mlp_model(width=1024):
    layers = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers[:-1], nn.Linear(width, 100))


WORKLOADS = {
    # name: (model, input shape, full-size default, small default for --device cpu)
    "conv": (conv_model, lambda cpu: (8, 3, 16, 16) if cpu else (128, 3, 64, 64)),
    "mlp": (mlp_model, lambda cpu: (8, 1024) if cpu else (64, 1024)),
}


class Loop:
    """One workload's training step and the timing of blocks of steps."""

    WARM = 3

    def __init__(self, workload, device, memory_format=torch.contiguous_format):
        make, shape = WORKLOADS[workload]
        torch.manual_seed(0)
        cpu = device == "cpu"
        model = make(16) if cpu and workload == "conv" else make()
        self.model = model.to(device, memory_format=memory_format)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(*shape(cpu), device=device)
        if self.x.dim() == 4:
            self.x = self.x.contiguous(memory_format=memory_format)
        self.y = torch.randint(0, 100, (shape(cpu)[0],), device=device)
        self.workload, self.device = workload, device
        self.loss_fn = nn.CrossEntropyLoss()
        self.loss = None
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.params = list(self.model.named_parameters())

    def forward_backward(self):
        self.opt.zero_grad(set_to_none=False)
        self.loss = self.loss_fn(self.model(self.x), self.y)
        self.loss.backward()

    def timed(self, n, one):
        for i in range(self.WARM):
            one(i)
        self.sync()
        t0 = time.perf_counter()
        for i in range(self.WARM, self.WARM + n):
            one(i)
        self.sync()
        return time.perf_counter() - t0


def conditions(loop, out_root):
    step_times = {}  # condition -> hook.step() times (s) on the training thread
    graph_stats = {}  # condition -> hook.stats()'s summary graph counters, last round

    def traced(register, filt=None, timed_as=None, graphs=True, teardown=None):
        def run(n, tag):
            xdl.clear()
            register()
            cfg = {"output_dir": os.path.join(out_root, tag), "fsync": False}
            os.environ["XDL_TRACE_DEVICE_GRAPHS"] = "1" if graphs else "0"
            with xdl.TraceHook(cfg, filter=filt) as hook:

                def one(i):
                    loop.forward_backward()
                    t0 = time.perf_counter()
                    hook.step()
                    if timed_as and i >= loop.WARM:
                        step_times.setdefault(timed_as, []).append(time.perf_counter() - t0)
                    loop.opt.step()

                dt = loop.timed(n, one)
            if timed_as:
                stats = hook.stats()
                graph_stats[timed_as] = {k: v for k, v in stats.items() if "summary_" in k}
            if teardown is not None:
                teardown()
            return dt

        return run

    def full():
        xdl.trace_collection(loop.model)
        for name, _ in loop.params:
            xdl.trace_gradient(name)

    def untraced(n, tag):
        def one(i):
            loop.forward_backward()
            loop.opt.step()

        return loop.timed(n, one)

    def floor_item(n, tag):
        def one(i):
            loop.forward_backward()
            loop.loss.item()
            loop.opt.step()

        return loop.timed(n, one)

    def floor_gpu_stats(n, tag):
        pinned = {}

        def one(i):
            loop.forward_backward()
            ts = [p.detach() for _, p in loop.params] + [p.grad for _, p in loop.params]
            norms = torch.stack(torch._foreach_norm(ts))
            mins = torch.stack([t.amin() for t in ts])
            maxs = torch.stack([t.amax() for t in ts])
            means = torch.stack([t.mean() for t in ts])
            rows = torch.stack([norms, mins, maxs, means], dim=1)
            if "rows" not in pinned:
                pinned["rows"] = torch.empty(rows.shape, pin_memory=rows.is_cuda)
            pinned["rows"].copy_(rows, non_blocking=True)
            loop.opt.step()

        return loop.timed(n, one)

    def untraced_channels_last(n, tag):
        """The untraced loop of a copy of the model and input in channels_last: what the
        report's layout advice (gpu_advice.py) says it would spare."""
        if "loop" not in channels_last:
            channels_last["loop"] = Loop(loop.workload, loop.device, torch.channels_last)
        other = channels_last["loop"]

        def one(i):
            other.forward_backward()
            other.opt.step()

        return other.timed(n, one)

    channels_last = {}
    out = {
        "untraced": untraced,
        "xdl_watch": traced(lambda: xdl.watch(loop.model, marks=False), timed_as="xdl_watch"),
        "xdl_watch_nodigest": traced(lambda: xdl.watch(loop.model, marks=False, digest=False)),
        "xdl_watch_eager": traced(
            lambda: xdl.watch(loop.model, marks=False), timed_as="xdl_watch_eager", graphs=False
        ),
        "xdl_watch_marks": traced(
            lambda: xdl.watch(loop.model, optimizer=loop.opt),
            teardown=lambda: (ranges.unmark(loop.model), ranges.unmark(loop.opt)),
        ),
        "xdl_watch10": traced(lambda: xdl.watch(loop.model, marks=False), filt=xdl.Every(10)),
        "xdl_full10": traced(full, filt=xdl.Every(10)),
        "xdl_loss": traced(lambda: xdl.trace_callback("loss", lambda: loop.loss.detach())),
        "xdl_host_float": traced(lambda: xdl.trace_callback("t", time.perf_counter)),
        "floor_item": floor_item,
        "floor_gpu_stats": floor_gpu_stats,
    }
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # noqa: BLE001  (not installed: the peer is left out, and said so)
        SummaryWriter = None
    if loop.workload == "conv":
        out["untraced_channels_last"] = untraced_channels_last
    if SummaryWriter is not None:

        def tb_hist10(n, tag):
            writer = SummaryWriter(os.path.join(out_root, tag))

            def one(i):
                loop.forward_backward()
                if i % 10 == 0:
                    for name, p in loop.params:
                        writer.add_histogram(name, p, i)
                        writer.add_histogram("gradient/" + name, p.grad, i)
                loop.opt.step()

            dt = loop.timed(n, one)
            writer.close()
            return dt

        out["tb_hist10"] = tb_hist10
    return out, step_times, graph_stats


def percentiles_us(times_s):
    us = sorted(t * 1e6 for t in times_s)
    return {
        "median_us": statistics.median(us),
        "p99_us": us[min(len(us) - 1, int(0.99 * len(us)))],
        "max_us": us[-1],
    }


def run_workload(workload, args):
    loop = Loop(workload, args.device)
    out_root = tempfile.mkdtemp(prefix=f"xdl_gpu_{workload}_")
    conds, step_times, graph_stats = conditions(loop, out_root)
    times = {name: [] for name in conds}
    for _ in range(3):
        loop.forward_backward()
        loop.opt.step()
    for r in range(args.rounds):
        for name, run in conds.items():
            times[name].append(run(args.steps, f"{name}_{r}"))
        shutil.rmtree(out_root, ignore_errors=True)
    base = statistics.median(times["untraced"])
    ratios = {name: base / statistics.median(t) for name, t in times.items()}
    steps = {name: percentiles_us(t) for name, t in step_times.items()}
    ms = base / args.steps * 1e3
    print(f"\n{workload}: {ms:.2f} ms a step untraced ({args.device}, {args.rounds} rounds)")
    for name, ratio in ratios.items():
        print(f"  {name:18s} {ratio:6.3f}")
    for name, step in steps.items():
        print(
            f"  hook.step() under {name}: median {step['median_us']:.0f} us, "
            f"p99 {step['p99_us']:.0f} us, max {step['max_us']:.0f} us; {graph_stats[name]}"
        )
    median = {name: statistics.median(t) for name, t in times.items()}
    added = {
        "digests": (median["xdl_watch"] - median["xdl_watch_nodigest"]) / base,
        "marks": (median["xdl_watch_marks"] - median["xdl_watch"]) / base,
    }
    for what, share in added.items():
        print(f"  what the {what} add: {100 * share:+.2f}% of the untraced step")
    if "tb_hist10" not in ratios:
        print("  (tensorboard not installed: tb_hist10 left out)")
    return {
        "ms_per_step": ms,
        "ratios": ratios,
        "added": added,
        "hook_step": steps,
        "summary_graphs": graph_stats,
        "times_s": times,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="all", choices=["all", *WORKLOADS])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "xdl_trace": xdl.__version__,
    }
    for workload in WORKLOADS if args.workload == "all" else [args.workload]:
        results[workload] = run_workload(workload, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
