"""What the Header check costs at open: files whose Meta has header_crc32c vs the same files without it (figures, no pass/fail).

    /usr/bin/python3 bench/header_check.py [--dir DIR] [--files 200] [--rounds 9]

Writes one trace per key count (10 and 1,000 float32 keys, 4 steps) with the real tracer, copies
its data file --files times into two folders, and reseals the copies' Metas in the second folder
without field 18 (header_crc32c), as a Meta written before it: opening such a file skips the
check (TraceFile::CheckHeader). Each round opens every file of both folders, alternating which
goes first, with the page cache warm; the figure is the median over rounds of microseconds per
open (mmap, the Header parsed, the Meta read and its own checksum checked, and in the first
folder the CRC-32C of the Header frame); the fastest round of each is printed beside it.
"""

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # A checkout without an installed package.

import xdl_trace as xdl  # noqa: E402
from xdl_trace import _core  # noqa: E402
from xdl_trace._proto import xdl_trace_pb2 as pb  # noqa: E402
from xdl_trace.tools import read_trace  # noqa: E402  (crc32c)


def write_trace(directory, keys):
    """One data file of `keys` float32[16] keys, 4 steps; its path."""
    xdl.clear()
    for k in range(keys):
        xdl.trace_tensor(f"model/layer{k}/weight", np.full(16, k, np.float32))
    with xdl.TraceHook({"output_dir": directory, "on_error": "raise"}) as hook:
        for step in range(4):
            hook.step(gstep=step)
    xdl.clear()
    (path,) = glob.glob(os.path.join(directory, "train.trace.0.*[0-9]"))
    return path


def without_header_crc(content):
    """A sealed Meta re-sealed without field 18, as a writer before it wrote."""
    meta = pb.Meta.FromString(content)
    meta.ClearField("header_crc32c")
    meta.ClearField("meta_crc32c")
    body = meta.SerializeToString()
    return body + b"\x8d\x01" + read_trace.crc32c(body).to_bytes(4, "little")


def copies(source, directory, count, reseal):
    os.makedirs(directory)
    meta = open(source + ".meta", "rb").read()
    if reseal:
        meta = without_header_crc(meta)
    paths = []
    for i in range(count):
        path = os.path.join(directory, f"train.trace.{i}.1")
        shutil.copyfile(source, path)
        with open(path + ".meta", "wb") as f:
            f.write(meta)
        paths.append(path)
    return paths


def open_all(paths):
    """Microseconds per open of every path (each file mapped, checked, then dropped)."""
    start = time.perf_counter()
    for path in paths:
        _core.TraceFile.open(path)
    return (time.perf_counter() - start) * 1e6 / len(paths)


def bench(base, keys, files, rounds):
    source = write_trace(os.path.join(base, f"source{keys}"), keys)
    header_bytes = 4 + int(np.frombuffer(open(source, "rb").read(4), "<u4")[0])
    checked = copies(source, os.path.join(base, f"checked{keys}"), files, reseal=False)
    unchecked = copies(source, os.path.join(base, f"unchecked{keys}"), files, reseal=True)
    for path, has_field in ((checked[0], True), (unchecked[0], False)):
        assert pb.Meta.FromString(open(path + ".meta", "rb").read()).HasField("header_crc32c") is (
            has_field
        )
        _core.TraceFile.open(path)  # Opens (the check holds).
    times = {"checked": [], "unchecked": []}
    open_all(checked + unchecked)  # Warm the page cache.
    for r in range(rounds):
        order = ("checked", "unchecked") if r % 2 == 0 else ("unchecked", "checked")
        for name in order:
            times[name].append(open_all(checked if name == "checked" else unchecked))
    with_check = statistics.median(times["checked"])
    without = statistics.median(times["unchecked"])
    fastest = min(times["checked"]), min(times["unchecked"])
    print(
        f"| {keys:,} | {header_bytes:,} | {with_check:.1f} | {without:.1f} | "
        f"{with_check - without:+.1f} | {fastest[0]:.1f} / {fastest[1]:.1f} |"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", help="where to write the files (default: a temp dir)")
    parser.add_argument("--files", type=int, default=200, help="files opened per round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    base = args.dir or tempfile.mkdtemp(prefix="xdl_header_bench_", dir=shm)
    print(f"{args.files} files per folder, {args.rounds} rounds, median µs per open")
    print(
        "| keys | Header frame bytes | with the check | without | difference | fastest round: with / without |"
    )
    print("|---|---|---|---|---|---|")
    try:
        for keys in (10, 1000):
            bench(base, keys, args.files, args.rounds)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
