"""The device summary pass's work per element: its memory traffic and kernels, and its time on
this machine's CPU.

    /usr/bin/python3 bench/device_summary.py [--root OTHER_CHECKOUT] [--repeat 7] [--device cuda]

On a GPU the pass (xdl_trace/write/_device_summary.py) is bound by memory traffic and by how evenly
its kernels spread over the device. Inputs: the "conv" workload's 60 float32 tensors (its 30
parameters and as many gradients: 7.15 M elements, bench/gpu.py). Prints, for stats, a 30-bin
histogram and the digest (issue 31's exact checksum of the bits) in torch's ops, and with
--device cuda the digest by its fused kernel ("fused": one jiterator kernel, the hook's default
on CUDA, and whether it passed its proof):

- traffic: the pass's ops as torch's dispatcher sees them (views excluded): how many, and the
  bytes they read and write per element of input (each op's tensor inputs and outputs);
- largest segment: the most elements a segmented op (segment_reduce, repeat_interleave) gives
  one thread block or warp on a GPU, which then runs alone while the rest of the device idles;
- the median time of one pass on this CPU (also in ns per byte of input), and its peak
  temporaries in bytes per element (maximum RSS of a child process over 16 Mi elements, above
  its inputs). CPU time is a rough proxy: a CPU runs some kernels (mixed dtypes, bool sums) far
  below its memory bandwidth.
- with --device cuda (a GPU machine, bench/gpu_check.sh): the pass's eager time on the GPU
  (synchronized before and after; in ns per byte of input), the bandwidth that makes of the
  bytes counted, its peak device memory above its inputs in bytes per element, and the time of
  its CUDA graph's replay (captured as the hook captures it, in passes of
  _device_graphs.CHUNK_ELEMENTS).

--root measures another checkout's pass (its xdl_trace package, built) in the same way, for a
before/after.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

CONV_SHAPES = (
    [(256, 3, 3, 3), (256,), (256,), (256,)]
    + [(256, 256, 3, 3), (256,), (256,), (256,)] * 6
    + [(100, 256), (100,)]
)

PEAK = """
import resource, sys, torch
sys.path.insert(0, sys.argv[1])
from xdl_trace.write import _device_summary as ds
torch.set_num_threads(1)
ts = [torch.randn(1 << 22) for _ in range(4)]
ds.static_inputs(ts)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ds.rows(sys.argv[2], 30, ts)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((peak - base) * 1024 / (4 << 22))
"""


# Ops that make views (no memory traffic), by aten name.
VIEWS = {"view", "_unsafe_view", "_reshape_alias", "slice", "select", "unsqueeze", "squeeze"}
VIEWS |= {"expand", "as_strided", "alias", "t", "transpose", "detach", "lift_fresh", "permute"}


def _flatten(value):
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (see above)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    # First, while this process is small: a child's maximum RSS starts from its parent's at fork.
    peaks = {
        name: float(
            subprocess.run(
                [sys.executable, "-c", PEAK, root, name], capture_output=True, text=True, check=True
            ).stdout
        )
        for name in ("stats", "histogram", "digest")
        if args.device == "cpu"
    }
    sys.path.insert(0, root)
    import torch

    from xdl_trace.write import _device, _device_graphs
    from xdl_trace.write import _device_summary as ds

    torch.manual_seed(0)
    tensors = [torch.randn(shape, device=args.device) for shape in CONV_SHAPES] * 2
    elements = sum(t.numel() for t in tensors)
    nbytes = 4 * elements
    print(f"{root}: {len(tensors)} float32 tensors, {elements / 1e6:.2f} M elements")
    cuda = args.device != "cpu"

    def timed(run):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        run()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    from torch.utils._python_dispatch import TorchDispatchMode

    class Traffic(TorchDispatchMode):
        """Counts the ops of a pass, their bytes and the largest segment of a segmented op."""

        def __init__(self):
            super().__init__()
            self.ops, self.bytes, self.segment = 0, 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func).split(".")[1]
            if name in VIEWS:
                return out
            tensors = [a for a in _flatten(args) + _flatten(out) if isinstance(a, torch.Tensor)]
            self.ops += 1
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
            lengths = (kwargs or {}).get("lengths")
            if name == "segment_reduce" and lengths is not None:
                self.segment = max(self.segment, int(lengths.max()))
            if str(func) == "aten.repeat_interleave.Tensor":  # The repeats: one index each.
                self.segment = max(self.segment, int(args[0].max()))
            return out

    # The digest in torch's ops (a --root older than the fused kernel has that pass only).
    torch_ops = {"mix": ds.torch_mix} if hasattr(ds, "torch_mix") else {}
    passes = {
        "stats": lambda chunk=None: ds.stats_rows(tensors, chunk),
        "histogram": lambda chunk=None: ds.histogram_rows(tensors, 30, chunk),
        "digest": lambda chunk=None: ds.digest_rows(tensors, chunk, **torch_ops),
    }
    if cuda:  # The fused kernel (jiterator), proved at its first pass; the hook's default.
        passes["fused"] = lambda chunk=None: ds.digest_rows(tensors, chunk)
    for name, run in passes.items():
        first = timed(run)  # The fused kernel's: its compile (NVRTC) and proof too.
        with Traffic() as traffic:
            run()
        unseen = ""
        if name == "fused":
            print(
                f"  fused digest kernel: {ds.fused_digest_status()}, its first pass (compile, "
                f"proof, pass) {first * 1e3:.0f} ms"
            )
            # A jiterator kernel is launched past the dispatcher: its bytes, counted here.
            traffic.ops += 1
            traffic.bytes += sum((8 + t.element_size()) * t.numel() for t in tensors)
            unseen = " (the kernel's 1 op, bytes in and out, added by hand)"
        print(
            f"  {name:9s} {traffic.ops:3d} ops, {traffic.bytes / elements:5.1f} bytes an element"
            f" read and written, largest segment {traffic.segment:,} elements{unseen}"
        )
        median = statistics.median(timed(run) for _ in range(args.repeat))
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            timed(run)
            peak = (torch.cuda.max_memory_allocated() - base) / elements
            # As the hook runs it from its second step: captured once, replayed (_device_graphs).
            chunk = _device_graphs.CHUNK_ELEMENTS
            ds.static_inputs(tensors, chunk)
            graph, _ = _device.CudaBackend().capture(tensors[0].device, lambda: run(chunk))
            replay = statistics.median(timed(graph.replay) for _ in range(args.repeat))
            print(
                f"  {name:9s} {median * 1e6:7.1f} us a pass on the GPU"
                f" ({median / nbytes * 1e9:6.3f} ns a byte of input),"
                f" {traffic.bytes / median / 1e9:6.0f} GB/s of the bytes counted,"
                f" peak temporaries {peak:5.1f} bytes an element; replayed as a graph"
                f" {replay * 1e6:7.1f} us"
            )
            continue
        print(
            f"  {name:9s} {median * 1e3:7.1f} ms a pass"
            f" ({median / nbytes * 1e9:5.2f} ns a byte of input),"
            f" peak temporaries {peaks[name]:5.1f} bytes an element"
        )


if __name__ == "__main__":
    main()
