"""`xdl-trace find-nan`, `export` and `report` against the number of keys (figures, no pass/fail):
a trace of N one-element keys x R records, each command timed in a fresh subprocess next to
`verify` (which reads every byte and is linear by construction).

    /usr/bin/python3 bench/keys.py                        # 5,000 .. 100,000 keys x 5 records
    /usr/bin/python3 bench/keys.py --keys 20000,100000 --limit 60
    /usr/bin/python3 bench/keys.py --root ../old-checkout  # another revision, same traces

Issue 24 #2: with a per-key scan of every key (a set rebuilt per key, a list searched per key,
a Header searched per key in C++) the time grew with the square of the keys. A command that
runs past --limit seconds (default 120) is stopped and shown as "> LIMIT".
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # A checkout without an installed package.


def write_trace(directory, keys, records):
    import numpy as np

    import xdl_trace as xdl

    xdl.clear()
    values = [np.zeros(1, np.float32) for _ in range(keys)]
    for i, value in enumerate(values):  # A model's parameters, one key each.
        xdl.trace_tensor(f"model/layer{i // 10}/p{i % 10}", value)
    with xdl.TraceHook({"output_dir": directory, "fsync": False}) as hook:
        for step in range(records):
            for value in values[:: max(keys // 100, 1)]:
                value += 1
            hook.step(gstep=step)
    xdl.clear()


def timed(argv, root, limit):
    """Seconds of `python -m xdl_trace ARGV` run from `root`, or None past `limit`."""
    env = dict(os.environ, PYTHONPATH=root)
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "xdl_trace", *argv],
            capture_output=True,
            text=True,
            timeout=limit,
            env=env,
            cwd=root,  # `-m` puts the working directory first on sys.path.
        )
    except subprocess.TimeoutExpired:
        return None
    if result.returncode not in (0, 1):  # find-nan exits 1 when it finds NaN.
        raise SystemExit(f"{' '.join(argv)} failed:\n{result.stderr[-2000:]}")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="5000,20000,100000", help="key counts (comma-separated)")
    parser.add_argument("--records", type=int, default=5, help="records per trace (default 5)")
    parser.add_argument("--limit", type=float, default=120, help="seconds per command at most")
    parser.add_argument("--root", default=ROOT, help="run the commands from this checkout")
    parser.add_argument("--dir", help="where to write the traces (default: a temp dir)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    base = args.dir or tempfile.mkdtemp(
        prefix="xdl_keys_bench_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    print(f"commands from {root}; {args.records} records per trace; limit {args.limit:g} s")
    print(f"{'keys':>8} {'MB':>6} {'verify':>8} {'find-nan':>9} {'export':>8} {'report':>8}")
    try:
        for keys in (int(k) for k in args.keys.split(",")):
            trace = os.path.join(base, f"k{keys}")
            if not os.path.isdir(trace):
                write_trace(trace, keys, args.records)
            size = sum(os.path.getsize(os.path.join(trace, f)) for f in os.listdir(trace))
            out = tempfile.mkdtemp(dir=base)
            row = [
                timed(["verify", trace], root, args.limit),
                timed(["find-nan", trace], root, args.limit),
                timed(["export", trace, "-o", os.path.join(out, "x.npz")], root, args.limit),
                timed(["report", trace, "-o", os.path.join(out, "r.html")], root, args.limit),
            ]
            shutil.rmtree(out)
            cells = [f"> {args.limit:g}" if s is None else f"{s:.2f}" for s in row]
            print(f"{keys:>8} {size / 1e6:>6.1f} " + " ".join(f"{c:>8}" for c in cells), flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
