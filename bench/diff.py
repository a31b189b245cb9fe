"""xdl-trace diff's cost against verify of both sides, and the tensor digest's ns per byte (figures,
no pass/fail).

    /usr/bin/python3 bench/diff.py [--dir DIR] [--mb 512] [--small 100000]

Writes, with the real tracer, two identical traces of large tensors (MB each side, float32
tensors of 4 MB) and two of many small records (SMALL records of 8 keys of 16 floats), warms the
page cache, then prints for each pair the seconds of `xdl.diff(a, b)` (both sides streamed in
step, every element compared: identical runs are the worst case, as nothing stops early) and of
`verify` of both sides (crc32c of every frame), with the peak growth of diff's heap (RssAnon:
the mapped files' pages are the page cache's, not the diff's). Then the host
digest (_core.digest) over 256 MB of float32 and of uint8, in ns per byte and per element.
"""

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # A checkout without an installed package.

import xdl_trace as xdl  # noqa: E402
from xdl_trace import _core  # noqa: E402


def write(out, keys, elements, steps):
    xdl.clear()
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(elements).astype(np.float32) for _ in range(keys)]
    for i, v in enumerate(values):
        xdl.trace_tensor(f"k{i}", v)
    config = {"output_dir": out, "fsync": False, "on_error": "raise", "max_file_m_size": 256}
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            values[step % keys][step % elements] += 1
            hook.step()
    xdl.clear()


def warm(path):
    for name in os.listdir(path):
        with open(os.path.join(path, name), "rb") as f:
            while f.read(1 << 24):
                pass


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def anon_mb():
    """This process's anonymous resident memory (heap, not the mapped trace files, whose pages
    are the page cache's), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_anon_growth(fn):
    """(fn(), the peak growth of anon_mb() while it ran, sampled every 2 ms)."""
    before, peak, done = anon_mb(), [0.0], threading.Event()

    def sample():
        while not done.wait(0.002):
            peak[0] = max(peak[0], anon_mb() - before)

    thread = threading.Thread(target=sample)
    thread.start()
    try:
        return fn(), peak[0]
    finally:
        done.set()
        thread.join()


def compare(label, a, b):
    warm(a)
    warm(b)
    (t_diff, result), grown = peak_anon_growth(lambda: timed(lambda: xdl.diff(a, b)))
    assert result.identical
    t_verify, _ = timed(lambda: [xdl.open_trace(p).verify() for p in (a, b)])
    size = sum(os.path.getsize(os.path.join(a, n)) for n in os.listdir(a)) / 1e6
    print(
        f"{label}: {size:.0f} MB a side: diff {t_diff:.2f} s ({2 * size / t_diff:.0f} MB/s of "
        f"both), verify of both {t_verify:.2f} s ({2 * size / t_verify:.0f} MB/s); "
        f"diff / verify {t_diff / t_verify:.2f}; heap (RssAnon) grew {grown:.1f} MB at most "
        "during diff"
    )


def digest_cost():
    for dtype, wire in ((np.float32, 4), (np.uint8, 8)):
        x = np.random.default_rng(0).standard_normal(256 << 20 >> 2).astype(np.float32)
        x = x.view(dtype)
        _core.digest(x[: 1 << 20], wire)
        best = min(timed(lambda: _core.digest(x, wire))[0] for _ in range(5))
        print(
            f"host digest, {np.dtype(dtype).name}: {best * 1e9 / x.nbytes:.3f} ns/byte, "
            f"{best * 1e9 / x.size:.3f} ns/element ({x.nbytes / best / 1e9:.1f} GB/s, one thread)"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    parser.add_argument("--mb", type=int, default=512, help="MB of large tensors a side")
    parser.add_argument("--small", type=int, default=100_000, help="small records a side")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="xdl_bench_diff_", dir=args.dir)
    try:
        large_steps = max(1, args.mb // 4)
        for side in ("a", "b"):
            write(os.path.join(root, f"large_{side}"), 1, 1 << 20, large_steps)
            write(os.path.join(root, f"small_{side}"), 8, 16, args.small)
        compare("large tensors", os.path.join(root, "large_a"), os.path.join(root, "large_b"))
        compare(
            f"{args.small} small records",
            os.path.join(root, "small_a"),
            os.path.join(root, "small_b"),
        )
        digest_cost()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
