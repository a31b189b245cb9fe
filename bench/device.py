"""Host-path cost of device tracing: the fake C plugin at about 1M device events/s.

    /usr/bin/python3 bench/device.py [--seconds 3] [--rate 1000000] [--step-hz 1000]
                                     [--interval 0.1] [--out-dir /dev/shm]

The fake plugin (tests/plugins/fake_device_plugin.c, compiled here with cc) makes
2*(N+1) events per step, N = events_per_step; N is chosen so that steps at --step-hz give
--rate events/s. Blocks of steps run alternately with device tracing on (collect every
--interval s) and off (same hook, same tensor, no device_tracers), interleaved so drift
cancels. Reported: the per-step host time of each, the difference, and from the records'
DEVICE_COLLECT host spans the time one periodic collect takes (two-call collect, parse,
split, pending) with its events and bytes. The fake's own step_end (generating events)
is in the "on" figure too: it stands in for CUPTI's buffer fill, which also runs on
application threads. Prints figures; nothing here passes or fails.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import xdl_trace as xdl  # noqa: E402
from xdl_trace import timeline  # noqa: E402


def build_fake(out_dir):
    out = os.path.join(out_dir, "libxdl_trace_fake.so")
    source = os.path.join(REPO, "tests", "plugins", "fake_device_plugin.c")
    cmd = ["cc", "-shared", "-fPIC", "-O2", "-I", os.path.join(REPO, "cpp", "include")]
    subprocess.run(cmd + [source, "-o", out], check=True)
    return out


def run_block(out_dir, plugin, steps, events_per_step, interval, step_hz):
    """Seconds per step (host time inside hook.step and the device hooks) and the hook's stats."""
    xdl.trace_tensor("w", np.arange(64, dtype=np.float32))
    config = {"output_dir": out_dir, "fsync": False}
    if plugin:
        config.update(
            device_tracers=[plugin],
            device_collect_interval_s=interval,
            device_plugin_config=f"events_per_step={events_per_step}",
        )
    period = 1.0 / step_hz
    busy = 0.0
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            t0 = time.perf_counter()
            hook.step(gstep=step)
            busy += time.perf_counter() - t0
            # The "training" between steps: sleep out the rest of the period.
            rest = period - (time.perf_counter() - t0)
            if rest > 0:
                time.sleep(rest)
    stats = hook.stats()
    xdl.clear()
    return busy / steps, stats


def collect_spans(path):
    """(duration_us of each DEVICE_COLLECT span) from the run's records."""
    trace = timeline.build_timeline(path)
    return [
        e["dur"]
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("name", "").startswith("device collect")
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per mode, in total")
    parser.add_argument("--rate", type=int, default=1_000_000, help="device events per second")
    parser.add_argument("--step-hz", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=0.1, help="collect interval, s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="xdl_device_bench_", dir=args.out_dir)
    try:
        plugin = build_fake(work)
        events_per_step = max(1, args.rate // args.step_hz // 2 - 1)
        steps = max(1, int(args.seconds * args.step_hz / args.rounds))
        on, off, collects, events, dropped = [], [], [], 0, 0
        for r in range(args.rounds):
            modes = [True, False] if r % 2 == 0 else [False, True]
            for device in modes:
                run = os.path.join(work, f"run{r}{int(device)}")
                per_step, stats = run_block(
                    run,
                    plugin if device else None,
                    steps,
                    events_per_step,
                    args.interval,
                    args.step_hz,
                )
                if device:
                    on.append(per_step)
                    collects += collect_spans(run)
                    events += stats["device_events"]
                    dropped += stats["device_events_dropped"]
                else:
                    off.append(per_step)
                shutil.rmtree(run, ignore_errors=True)
        rate = 2 * (events_per_step + 1) * args.step_hz
        print(
            f"device events/s: {rate:,} ({2 * (events_per_step + 1)} per step at {args.step_hz} Hz)"
        )
        print(
            f"collect interval: {args.interval} s; {args.rounds} rounds of {steps} steps per mode"
        )
        print(f"host time per step, device tracing off: {statistics.median(off) * 1e6:9.1f} us")
        print(f"host time per step, device tracing on:  {statistics.median(on) * 1e6:9.1f} us")
        print(
            f"  difference: {(statistics.median(on) - statistics.median(off)) * 1e6:.1f} us per step"
            f" = {(statistics.median(on) - statistics.median(off)) * args.step_hz * 100:.2f}% of"
            " a 1 kHz step budget"
        )
        if collects:
            collects.sort()
            print(
                f"one periodic collect (DEVICE_COLLECT span): median {statistics.median(collects):.0f} us,"
                f" max {collects[-1]:.0f} us, over {len(collects)} collects"
            )
        print(f"device events recorded: {events:,}; dropped: {dropped:,}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
