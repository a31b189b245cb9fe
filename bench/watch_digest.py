"""What watch(digest=True) costs on the host: hook.step() of xdl.watch(model) on a CPU model with
and without the companion digests (digest/<key>, one more C++ pass over every parameter and
gradient), interleaved in rounds, and the digest's own speed (_core.digest, ns per byte); then
what watch(buffers=True) adds on a convolutional model with BatchNorm (its running statistics).

    /usr/bin/python3 bench/watch_digest.py [--width 512] [--layers 4] [--steps 200] [--rounds 3]

Prints figures (docs/python.md "watch"); nothing here passes or fails.
"""

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch

import xdl_trace as xdl
from xdl_trace import _core


def timed_steps(model, steps, out_dir, **watch_options):
    """hook.step() seconds of each step past the first 10."""
    xdl.clear()
    xdl.watch(model, **watch_options)
    times = []
    with xdl.TraceHook({"output_dir": out_dir, "fsync": False}) as hook:
        for _ in range(steps):
            t0 = time.perf_counter()
            hook.step()
            times.append(time.perf_counter() - t0)
    xdl.clear()
    return times[10:]


def training_step_ms(model, width, batch=64, steps=50):
    """The median ms of one untraced SGD step of `model` on a batch of `batch` rows."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[5:]) * 1e3


def digest_ns_per_byte(n_bytes, repeats=20):
    """The median ns per byte of _core.digest over a float32 array of n_bytes."""
    array = np.random.default_rng(0).standard_normal(n_bytes // 4).astype(np.float32)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _core.digest(array, 4)  # Wire dtype 4: float32.
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e9 / array.nbytes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(args.width, args.width) for _ in range(args.layers)]
    model = torch.nn.Sequential(*layers)
    model(torch.randn(8, args.width)).sum().backward()
    n_bytes = 2 * sum(p.numel() * p.element_size() for p in model.parameters())
    plain, digested = interleaved(model, "digest", args.steps, args.rounds)
    print(
        f"hook.step() of xdl.watch (stats), {args.layers} x Linear({args.width}): "
        f"{n_bytes / 1e6:.1f} MB of parameters + gradients a step"
    )
    print(f"  digest=False  median {plain:7.3f} ms")
    print(f"  digest=True   median {digested:7.3f} ms  (+{digested - plain:.3f} ms)")
    step = training_step_ms(model, args.width)
    print(f"  the untraced training step (batch 64, SGD): {step:.3f} ms")
    for size in (64 << 10, 8 << 20, 256 << 20):
        print(f"  _core.digest over {size >> 10:7d} KiB: {digest_ns_per_byte(size):.3f} ns/byte")
    blocks = [
        torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3), torch.nn.BatchNorm2d(64), torch.nn.ReLU())
        for _ in range(8)
    ]
    cnn = torch.nn.Sequential(*blocks)
    cnn(torch.randn(2, 64, 20, 20)).sum().backward()
    without, with_buffers = interleaved(cnn, "buffers", args.steps, args.rounds)
    print("hook.step() of xdl.watch (stats, digests), 8 x (Conv2d(64, 64, 3), BatchNorm2d(64)):")
    print(f"  buffers=False median {without:7.3f} ms")
    print(f"  buffers=True  median {with_buffers:7.3f} ms  (+{with_buffers - without:.3f} ms)")


def interleaved(model, option, steps, rounds):
    """Median ms of hook.step() with watch(option=False) and (option=True), in alternating
    rounds (so a slow moment of a shared machine falls on both)."""
    times = {False: [], True: []}
    with tempfile.TemporaryDirectory() as root:
        for round_ in range(rounds):
            for value in (False, True) if round_ % 2 == 0 else (True, False):
                out_dir = f"{root}/r{round_}_{value}"
                times[value] += timed_steps(model, steps, out_dir, **{option: value})
    return tuple(statistics.median(times[value]) * 1e3 for value in (False, True))


if __name__ == "__main__":
    main()
