"""Reads an 8-rank trace with xdl_trace.dask on 1 and on 2 worker processes; prints the figures.

    /usr/bin/python3 bench/dask_read.py                 # 1 GB trace (default)
    /usr/bin/python3 bench/dask_read.py --mb 4000       # several GB (needs the disk and time)

The trace is written once (8 ranks, float32 columns, 64 MB files) into --dir, then
``to_dataframe(dir).compute()`` (per-step statistics of every column, computed on the workers)
runs on a LocalCluster of 1 and of 2 worker processes, one thread each. Each configuration reads
once untimed (page cache and worker imports warm), then --repeat timed reads; the best is kept.
Figures: seconds, MB/s of trace bytes, and the 2-worker speedup. Not pass/fail.
"""

import argparse
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import xdl_trace as xdl  # noqa: E402


def write_trace(directory, total_mb, ranks):
    """ranks x steps records of two float32 [256, 1024] columns (2 MiB a record) and a loss."""
    shutil.rmtree(directory, ignore_errors=True)
    per_record = 2 * 256 * 1024 * 4
    steps = max(1, int(total_mb * 1e6 / per_record / ranks))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 1024), dtype=np.float32)
    b = rng.standard_normal((256, 1024), dtype=np.float32)
    xdl.trace_tensor("layer0/w", a)
    xdl.trace_tensor("layer1/w", b)
    xdl.trace_callback("loss", lambda: np.float64(a[0, 0]))
    for rank in range(ranks):
        config = {"output_dir": directory, "rank": rank, "fsync": False, "max_file_m_size": 64}
        with xdl.TraceHook(config) as hook:
            for step in range(steps):
                a[0, 0] = step
                hook.step(gstep=step)
    xdl.clear()
    return steps


def time_read(directory, workers, repeat):
    import distributed

    import xdl_trace.dask as xdd

    env = {"PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    cluster = distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        env=env,
    )
    try:
        with distributed.Client(cluster):
            rows = len(xdd.to_dataframe(directory).compute())  # Warm: page cache, imports.
            best = float("inf")
            for _ in range(repeat):
                start = time.perf_counter()
                frame = xdd.to_dataframe(directory).compute()
                best = min(best, time.perf_counter() - start)
                assert len(frame) == rows
    finally:
        cluster.close()
    return best, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/var/tmp/xdl_trace_dask_bench", help="trace directory")
    parser.add_argument("--mb", type=float, default=1024, help="trace size in MB (default 1024)")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="timed reads per configuration")
    parser.add_argument("--keep", action="store_true", help="keep the trace afterwards")
    args = parser.parse_args()

    start = time.perf_counter()
    steps = write_trace(args.dir, args.mb, args.ranks)
    trace = xdl.open_trace(args.dir)
    mb = trace.nbytes / 1e6
    print(
        f"trace: {args.ranks} ranks x {steps} steps, {len(trace.files)} files, {mb:.0f} MB "
        f"(written in {time.perf_counter() - start:.1f} s) at {args.dir}"
    )
    results = {}
    for workers in (1, 2):
        seconds, rows = time_read(args.dir, workers, args.repeat)
        results[workers] = seconds
        print(
            f"to_dataframe().compute(), {workers} worker process(es): {seconds:.2f} s, "
            f"{mb / seconds:.0f} MB/s, {rows} rows"
        )
    print(f"speedup 2 vs 1 workers: {results[1] / results[2]:.2f}x (cores: {os.cpu_count()})")
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
