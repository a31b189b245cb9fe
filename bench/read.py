"""Reader throughput: xdl_trace.open_trace vs an XDL-wiki-style pure-Python protobuf loop (figures, no pass/fail).

    /usr/bin/python3 bench/read.py [--dir DIR] [--mb 256]

Writes two traces into DIR (default: a temporary directory under /dev/shm when
it exists), one of large tensors and one of many small ones, warms the page
cache, then reports MB/s of column data for:
  iterate (zero-copy)   records with zero-copy arrays of every key (each record's
                        checksum checked, the default), and again with
                        open_trace(verify_checksums=False): the check's cost
  iterate + copy        the same, copying each array (touches every byte)
  stack_many            every key stacked over all steps in one pass (copies)
  verify                crc32c and full decode of every file against its Meta
  python protobuf loop  read + Record.ParseFromString + np.frombuffer per column,
                        like the XDL wiki's reader (protobuf's own parser)
"""

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # A checkout without an installed package.

from xdl_trace.read.reader import open_trace  # noqa: E402
from xdl_trace.tools import read_trace as script  # noqa: E402  (message classes, no extension)


def write_trace(directory, keys, shape, steps, max_file_mb=64):
    """Writes a train.trace.0.* trace with the real tracer when available,
    otherwise frames built with protobuf (Header, Records, Meta)."""
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(shape).astype(np.float32) for _ in keys]
    try:
        import xdl_trace as xdl

        xdl.clear()
        for key, value in zip(keys, values):
            xdl.trace_tensor(key, value)
        with xdl.TraceHook({"output_dir": directory, "max_file_m_size": max_file_mb}) as hook:
            for step in range(steps):
                values[0][...] += 1
                hook.step(gstep=step)
        xdl.clear()
        return "tracer"
    except (ImportError, AttributeError):
        header = script.Header(key=keys)
        body = header.SerializeToString()
        data = bytearray(struct.pack("<I", len(body)) + body)
        for step in range(steps):
            r = script.Record(gstep=step, lstep=step, timestamp=int(time.time() * 1000))
            for value in values:
                r.column.add(dtype=4, shape=list(shape), data=value.tobytes())
            body = r.SerializeToString()
            data += struct.pack("<I", len(body)) + body
        with open(os.path.join(directory, "train.trace.0.1"), "wb") as f:
            f.write(data)
        return "protobuf"


def python_loop(paths):
    """The XDL wiki's reader loop: returns column bytes seen."""
    dtypes = [np.dtype(d) for _, d in script.DTYPES]
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<I", f.read(4))
            header = script.Header()
            header.ParseFromString(f.read(n))
            keys = list(header.key)
            while True:
                prefix = f.read(4)
                if len(prefix) < 4:
                    break
                (n,) = struct.unpack("<I", prefix)
                record = script.Record()
                record.ParseFromString(f.read(n))
                columns = {}
                for key, column in zip(keys, record.column):
                    a = np.frombuffer(column.data, dtype=dtypes[column.dtype]).reshape(column.shape)
                    columns[key] = a
                    total += a.nbytes
    return total


def timed(fn, repeat=3):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench(label, directory):
    trace = open_trace(directory)
    unchecked = open_trace(directory, verify_checksums=False)  # The hot-path opt-out.
    paths = [f.path for f in trace.files]
    for p in paths:  # Warm the page cache.
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass

    def iterate(of=trace):
        total = 0
        for r in of:
            for a in r.columns.values():
                total += a.nbytes
        return total

    def stack():
        return sum(v.nbytes for _, v in trace.stack_many().values())

    def iterate_copy(of=trace):
        total = 0
        for r in of:
            for a in r.columns.values():
                total += a.copy().nbytes
        return total

    t_iter, nbytes = timed(iterate)
    t_iter_off, _ = timed(lambda: iterate(unchecked))
    t_copy, _ = timed(iterate_copy)
    t_copy_off, _ = timed(lambda: iterate_copy(unchecked))
    t_stack, _ = timed(stack)
    t_verify, reports = timed(trace.verify)
    t_py, py_bytes = timed(lambda: python_loop(paths))
    assert py_bytes == nbytes and all(r["ok"] for r in reports)
    records = sum(1 for _ in trace)
    mb = nbytes / 1e6
    print(
        f"\n{label}: {records} records, {len(trace.keys)} keys, {mb:.0f} MB of column data, "
        f"{len(paths)} files"
    )
    rows = [
        ("xdl_trace iterate (zero-copy)", mb / t_iter, f"{records / t_iter:.0f} records/s"),
        ("  the same, checksums off", mb / t_iter_off, f"{records / t_iter_off:.0f} records/s"),
        ("xdl_trace iterate + copy", mb / t_copy, ""),
        ("  the same, checksums off", mb / t_copy_off, ""),
        ("xdl_trace stack_many (all keys)", mb / t_stack, ""),
        ("xdl_trace verify (file bytes)", trace.nbytes / 1e6 / t_verify, ""),
        ("python protobuf loop", mb / t_py, f"{records / t_py:.0f} records/s"),
    ]
    for name, rate, extra in rows:
        print(f"  {name:<32} {rate:10.0f} MB/s  {extra}")
    # Like with like: the python loop's protobuf parse copies every column's bytes, so the
    # headline compares it with iterate + copy; zero-copy iteration is a different service.
    print(f"  speed-up over the python loop, both copying every byte: {t_py / t_copy:.1f}x")
    print(
        f"  (zero-copy iterate, no byte copied: {t_py / t_iter:.0f}x; not a like-for-like figure)"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", help="where to write the traces (default: a temp dir)")
    parser.add_argument("--mb", type=int, default=256, help="approximate size of each trace")
    args = parser.parse_args()
    base = args.dir or tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        large = os.path.join(base, "large")
        small = os.path.join(base, "small")
        os.makedirs(large, exist_ok=True)
        os.makedirs(small, exist_ok=True)
        # Large: 8 keys of 256K float32 (1 MB each) per step.
        how = write_trace(
            large, [f"layer{i}/w" for i in range(8)], (512, 512), max(args.mb // 8, 1)
        )
        # Small: 64 keys of 256 float32 (1 KB each) per step, XDL-style scalars and biases.
        write_trace(small, [f"layer{i}/b" for i in range(64)], (256,), max(args.mb * 1000 // 64, 1))
        print(f"traces written by the {how} into {base}")
        bench("large tensors", large)
        bench("small tensors", small)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
