"""`xdl-trace timeline` on many device events: wall time and peak RSS (figures, no pass/fail).

    /usr/bin/python3 bench/timeline.py [--dir DIR] [--events 1600000] [--per-step 1000]

Writes a synthetic device-traced run into DIR (default: a temporary directory
under /dev/shm when it exists) with tests/python/trace_file_maker.py: per step
a host STEP span and `--per-step` device events (half launch calls on the
host API line, half kernels on one stream, each kernel with a step flow and a
launch flow). Then runs `python3 -m xdl_trace timeline` on it in a child
process, once for the whole run and once windowed with --gsteps, and prints
for each the wall and CPU time, the child's peak RSS (getrusage), the JSON size and
its event count. docs/benchmarks.md ("Timeline") records the figures.
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import trace_file_maker as tm  # noqa: E402


def run_child(args):
    """(wall s, CPU s, peak RSS MiB, output) of `python3 -m xdl_trace ARGS` in a fresh process."""
    code = (
        "import resource, runpy, sys; sys.argv = ['xdl-trace'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('xdl_trace', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
        "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "sys.exit(code)\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    rss_kb = int(done.stdout.rsplit("peak_rss_kb", 1)[1].split()[0])
    return seconds, cpu, rss_kb / 1024.0, done.stdout + done.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to write the run and the JSON")
    parser.add_argument("--events", type=int, default=1_600_000, help="device events in all")
    parser.add_argument("--per-step", type=int, default=1000, help="device events per step")
    args = parser.parse_args()

    base = args.dir or tempfile.mkdtemp(
        prefix="xdl_timeline_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    run = os.path.join(base, "run")
    os.makedirs(run, exist_ok=True)
    steps = max(1, args.events // args.per_step)
    start = time.perf_counter()
    size = tm.write_stream(
        os.path.join(run, "train.trace.0.0"),
        ["w"],
        tm.device_records(steps, args.per_step // 2, keys=["w"]),
    )
    print(
        f"synthetic run: {steps} steps, {steps * (args.per_step // 2) * 2} device events, "
        f"{size / 2**20:.1f} MiB written in {time.perf_counter() - start:.1f} s"
    )
    try:
        for label, extra in (("whole run", []), ("--gsteps 0:99", ["--gsteps", "0:99"])):
            out = os.path.join(base, "trace.json")
            seconds, cpu, rss, _ = run_child(["timeline", run, "-o", out, *extra])
            print(
                f"timeline {label:>14}: {seconds:6.1f} s wall ({cpu:5.1f} s CPU), "
                f"peak RSS {rss:6.0f} MiB, "
                f"JSON {os.path.getsize(out) / 2**20:7.1f} MiB"
            )
        print(
            "(this process, for scale: peak RSS "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)"
        )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
