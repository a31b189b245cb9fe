"""The device summary pass's work per element, measured on this machine's CPU as a proxy.

    /usr/bin/python3 bench/device_summary.py [--root OTHER_CHECKOUT] [--repeat 7]

On a GPU the pass (xdl_trace/_device_summary.py) is bound by memory traffic; on a CPU its
elementwise kernels are too, so CPU time tracks the bytes each element costs (not the GPU's
time: a GPU moves them ~30x faster). Inputs: the "conv" workload's 60 float32 tensors (its 30
parameters and as many gradients: 7.15 M elements, bench/gpu.py). Prints, for stats and a
30-bin histogram: the median time of one pass, and the peak temporaries in bytes per element
(maximum RSS of a child process over 16 Mi elements, above its inputs). --root measures
another checkout's pass (its xdl_trace package, built) in the same way, for a before/after.
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
from xdl_trace import _device_summary as ds
torch.set_num_threads(1)
ts = [torch.randn(1 << 22) for _ in range(4)]
ds._counts_tensor(ts[0].device, tuple(t.numel() for t in ts))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ds.stats_rows(ts) if sys.argv[2] == "stats" else ds.histogram_rows(ts, 30)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((peak - base) * 1024 / (4 << 22))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    # First, while this process is small: a child's maximum RSS starts from its parent's at fork.
    peaks = {
        name: float(
            subprocess.run(
                [sys.executable, "-c", PEAK, root, name], capture_output=True, text=True, check=True
            ).stdout
        )
        for name in ("stats", "histogram")
    }
    sys.path.insert(0, root)
    import torch

    from xdl_trace import _device_summary as ds

    torch.manual_seed(0)
    tensors = [torch.randn(shape) for shape in CONV_SHAPES] * 2
    elements = sum(t.numel() for t in tensors)
    print(f"{root}: {len(tensors)} float32 tensors, {elements / 1e6:.2f} M elements")
    passes = {
        "stats": lambda: ds.stats_rows(tensors),
        "histogram": lambda: ds.histogram_rows(tensors, 30),
    }
    for name, run in passes.items():
        run()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        print(
            f"  {name:9s} {statistics.median(times) * 1e3:7.1f} ms a pass"
            f" ({statistics.median(times) / elements * 1e9:5.1f} ns an element),"
            f" peak temporaries {peaks[name]:5.1f} bytes an element"
        )


if __name__ == "__main__":
    main()
