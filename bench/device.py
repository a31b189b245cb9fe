"""Device tracing at a GPU's event rate: what it costs the training thread, and the collector.

    /usr/bin/python3 bench/device.py [--seconds 4] [--rates 100000,1000000]
                                     [--intervals 0.2,1] [--step-hz 1000] [--out-dir /dev/shm]
                                     [--plugin [LABEL=]PATH[@TREE][,...]]
                                     [--plugin-config 'other_threads=0;synthetic_other_threads=500']

The CUPTI plugin runs as on a GPU except for the GPU: libxdl_trace_cupti_synthetic.so (built
with the tests, tests/plugins/cupti/synthetic_gpu.h) is the real plugin (buffer pool, the real
libcupti record walk, ActivityParser, the join, the DeviceTrace writer) over a "device" thread
that fills CUPTI activity buffers as an H100 does, in the mix of the H100 "conv" run
(../shared/gpu/h100-conv-2026-11-26/cupti_trace): per API call an EXTERNAL_CORRELATION record
for the step, a RUNTIME record, and a kernel (its 46 mangled names, 15 to 1636 characters, by
frequency), a memset or a copy on one of 4 streams; some calls launch nothing. Everything after
the buffers (parse, join, encode, the C ABI, the core's split and caps, the records) is the
product's code.

Each configuration (events/s x collect interval, plus one without a device tracer) runs in a
fresh process: hook.step() at --step-hz with one traced float, the rest of each period slept.
Printed per configuration: hook.step() wall time on the training thread (median, p99, max,
calls over 1 ms), collector CPU per event (CPU of the device-tracing threads, plus hook.step()
time above the no-tracer median, plus close(), over the events recorded), events recorded and
dropped, and peak RSS. Prints figures; nothing here passes or fails.

Several plugins (``--plugin before=/tmp/old/build/test_plugins/libxdl_trace_cupti_synthetic.so@/tmp/old,
after=build/test_plugins/libxdl_trace_cupti_synthetic.so``): each configuration runs each of them
in turn, so before and after see the same machine load (on a shared machine, compare rows of one
invocation, never across invocations). ``@TREE`` runs that entry's child from another source
tree (its bench/device.py and its built xdl_trace package: an older revision, core included).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# Threads that are not collecting: the synthetic device and the IO thread.
_NOT_COLLECTOR = ("xdl_synth_gpu", "xdl_trace_io")


def find_plugin():
    for build in ("build", "build-tsan", "build-asan"):
        path = os.path.join(REPO, build, "test_plugins", "libxdl_trace_cupti_synthetic.so")
        if os.path.exists(path):
            return path
    raise SystemExit("libxdl_trace_cupti_synthetic.so not found: build the tests (make build)")


def thread_cpu():
    """{tid: (name, cpu seconds)} of this process's threads (schedstat: ns on the CPU)."""
    out = {}
    task = "/proc/self/task"
    for tid in os.listdir(task):
        try:
            with open(os.path.join(task, tid, "comm")) as f:
                name = f.read().strip()
            with open(os.path.join(task, tid, "schedstat")) as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        out[int(tid)] = (name, ns / 1e9)
    return out


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(args):
    import numpy as np

    import xdl_trace as xdl

    v = np.zeros(1, np.float32)
    xdl.trace_variable("v", v)
    config = {"output_dir": args.child_dir, "fsync": False}
    if args.rate > 0:
        config.update(
            device_tracers=[args.plugin],
            device_collect_interval_s=args.interval,
            device_plugin_config=f"synthetic_rate={args.rate}"
            + (f";{args.plugin_config}" if args.plugin_config else ""),
        )
    steps = int(args.seconds * args.step_hz)
    period = 1.0 / args.step_hz
    times = []
    main_tid = os.getpid()
    hook = xdl.TraceHook(config)
    hook.__enter__()
    t_begin = time.perf_counter()
    for step in range(steps):
        v[0] = step
        t0 = time.perf_counter()
        hook.step(gstep=step)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        rest = period - (t1 - t0)
        if rest > 0:
            time.sleep(rest)
    run_s = time.perf_counter() - t_begin
    threads = thread_cpu()
    t0 = time.perf_counter()
    hook.__exit__(None, None, None)
    close_s = time.perf_counter() - t0
    stats = hook.stats()
    collector_cpu = sum(
        cpu
        for tid, (name, cpu) in threads.items()
        if tid != main_tid and name.startswith("xdl_") and not name.startswith(_NOT_COLLECTOR)
    )
    print(
        json.dumps(
            {
                "times": times,
                "run_s": run_s,
                "close_s": close_s,
                "collector_thread_cpu_s": collector_cpu,
                "thread_names": sorted({n for t, (n, _) in threads.items() if t != main_tid}),
                "events": stats.get("device_events", 0),
                "dropped": stats.get("device_events_dropped", 0),
                "buffers_dropped": stats.get("device_buffers_dropped", 0),
                "status": stats.get("device_tracer_status", ""),
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    )


def run_child(args, rate, interval, work, plugin="", tree=None):
    out_dir = tempfile.mkdtemp(prefix="run_", dir=work)
    script = os.path.join(tree, "bench", "device.py") if tree else os.path.abspath(__file__)
    cmd = [sys.executable, script, "--child", "--child-dir", out_dir]
    cmd += ["--rate", str(rate), "--interval", str(interval), "--plugin", plugin]
    cmd += ["--seconds", str(args.seconds), "--step-hz", str(args.step_hz)]
    cmd += ["--plugin-config", args.plugin_config]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per configuration")
    parser.add_argument("--rates", default="100000,1000000", help="device events per second")
    parser.add_argument("--intervals", default="0.2,1", help="device_collect_interval_s values")
    parser.add_argument("--step-hz", type=int, default=1000)
    parser.add_argument("--out-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    parser.add_argument("--plugin", default=None)
    parser.add_argument(
        "--plugin-config",
        default="",
        help="appended to device_plugin_config, e.g. 'other_threads=0;synthetic_other_threads=500'"
        " (500 per mille of calls from a second thread, without external correlation)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-dir", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    plugins = []  # (label, path, tree)
    entries = (args.plugin or find_plugin()).split(",")
    for i, entry in enumerate(entries):
        label, _, path = entry.rpartition("=")
        path, _, tree = path.partition("@")
        plugins.append((label or (f"plugin {i + 1}" if len(entries) > 1 else ""), path, tree))
    work = tempfile.mkdtemp(prefix="xdl_device_bench_", dir=args.out_dir)
    try:
        base = run_child(args, 0, 1.0, work)
        base_median = statistics.median(base["times"])
        rows = [("none", "-", "", base)]
        for rate in [int(r) for r in args.rates.split(",")]:
            for interval in [float(i) for i in args.intervals.split(",")]:
                for label, path, tree in plugins:
                    result = run_child(args, rate, interval, work, path, tree or None)
                    rows.append((f"{rate:,}", f"{interval:g}", label, result))
        base_after = run_child(args, 0, 1.0, work)  # The machine's drift over the run.
        rows.append(("none (again)", "-", "", base_after))
        print(f"{args.seconds:g} s per configuration, hook.step() at {args.step_hz} Hz")
        for label, path, tree in plugins:
            print(f"  plugin {label or ''}: {path}" + (f" (tree {tree})" if tree else ""))
        print(
            "| events/s | collect every (s) | plugin | hook.step() median | p99 | max |"
            " calls > 1 ms | events recorded (achieved/s) | dropped (events, buffers) |"
            " collector CPU per event | peak RSS |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for rate, interval, label, r in rows:
            t = sorted(r["times"])
            over = [x for x in t if x > 1e-3]
            on_training = max(0.0, sum(t) - base_median * len(t))
            cpu = r["collector_thread_cpu_s"] + on_training + r["close_s"]
            per_event = f"{cpu / r['events'] * 1e6:.2f} us" if r["events"] else "-"
            print(
                f"| {rate} | {interval} | {label} | {statistics.median(t) * 1e6:.1f} us"
                f" | {t[int(0.99 * len(t))] * 1e6:.1f} us | {t[-1] * 1e3:.2f} ms"
                f" | {len(over)} ({sum(over) * 1e3:.0f} ms)"
                f" | {r['events']:,} ({r['events'] / r['run_s']:,.0f})"
                f" | {r['dropped']:,}, {r['buffers_dropped']:,} | {per_event}"
                f" | {r['peak_rss_mb']:.0f} MB |"
            )
        for rate, interval, label, r in rows[1:-1]:
            print(
                f"  {rate} ev/s every {interval} s {label}: collector threads"
                f" {r['collector_thread_cpu_s']:.2f} s CPU, close() {r['close_s'] * 1e3:.0f} ms,"
                f" threads {r['thread_names']}, status {r['status']!r}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
