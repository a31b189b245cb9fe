"""XDL's overhead experiment: a 7-layer fully connected model trained with numpy (and torch),
tracing every trainable variable at every step; traced vs untraced steps/s, interleaved.

    /usr/bin/python3 bench/overhead.py [--out-dir DIR ...] [--frameworks numpy,torch]

One run alternates blocks of untraced steps, traced steps and "write floor" steps (order
reversed every other round, so drift cancels). The write floor is a thread that only write()s
the step's bytes to the same directory: the least any tracer that stores them there can cost,
measured side by side (--no-floor skips it). Between blocks the hook (and the floor thread) is
drained outside the timing, so every block starts with an empty queue;
"ratio" is what training sees while the IO thread writes concurrently (as in steady state),
and "charging each block's flush" adds the time the flush waited (fdatasync and Meta
replacement included), a conservative bound. "CPU-time ratio" compares the process CPU time
(all threads, IO thread and flush included) per untraced and per traced step: less sensitive
to other load on a shared machine than steps/s. Default targets:
/dev/shm (tmpfs) then a directory on disk; trace files are removed after each run.
Prints figures; nothing here passes or fails. Target on tmpfs: traced/untraced >= 0.97.
"""

import argparse
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import xdl_trace as xdl  # noqa: E402

LAYERS = 7


class NumpyMLP:
    """7 dense layers (ReLU between), MSE loss, SGD updating the arrays in place."""

    def __init__(self, width, batch, seed=0):
        rng = np.random.default_rng(seed)
        self.params = {}
        for i in range(LAYERS):
            out = 1 if i == LAYERS - 1 else width
            self.params[f"dense{i}/kernel"] = (
                rng.normal(size=(width, out)) * np.sqrt(2.0 / width)
            ).astype(np.float32)
            self.params[f"dense{i}/bias"] = np.zeros(out, np.float32)
        self.x = rng.normal(size=(batch, width)).astype(np.float32)
        self.y = rng.normal(size=(batch, 1)).astype(np.float32)
        self.lr = np.float32(1e-3)

    def variables(self):
        return self.params

    def step(self):
        p = self.params
        acts = [self.x]
        h = self.x
        for i in range(LAYERS):
            h = h @ p[f"dense{i}/kernel"] + p[f"dense{i}/bias"]
            if i < LAYERS - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        d = 2 * (h - self.y) / len(self.x)
        for i in reversed(range(LAYERS)):
            if i < LAYERS - 1:
                d = d * (acts[i + 1] > 0)
            grad_k = acts[i].T @ d
            grad_b = d.sum(0)
            if i > 0:
                d = d @ p[f"dense{i}/kernel"].T
            p[f"dense{i}/kernel"] -= self.lr * grad_k
            p[f"dense{i}/bias"] -= self.lr * grad_b


class TorchMLP:
    def __init__(self, width, batch, seed=0):
        import torch

        self.torch = torch
        torch.manual_seed(seed)
        layers = []
        for i in range(LAYERS):
            layers.append(torch.nn.Linear(width, 1 if i == LAYERS - 1 else width))
            if i < LAYERS - 1:
                layers.append(torch.nn.ReLU())
        self.model = torch.nn.Sequential(*layers)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.x = torch.randn(batch, width)
        self.y = torch.randn(batch, 1)

    def variables(self):
        return self.model

    def step(self):
        self.opt.zero_grad()
        loss = self.torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()


class WriteFloor:
    """What any tracer must at least cost here: a thread that write()s the step's byte count into
    a file in the same directory, from one buffer filled once (no capture copy, no encoding, no
    checksum, no Meta). Its ratio, measured in the same run, is the ceiling for a tracer that
    puts every traced byte into that file system."""

    def __init__(self, out_dir, nbytes):
        os.makedirs(out_dir, exist_ok=True)
        self._fd = os.open(os.path.join(out_dir, "write_floor.bin"), os.O_WRONLY | os.O_CREAT)
        self._buf = memoryview(np.ones(nbytes, np.uint8))  # touched once: no faults when timed
        self._queue = queue.Queue()
        self.cpu_s = 0.0  # CPU time of the writes (their thread only), and how many.
        self.writes = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            start = time.thread_time()
            done = 0
            while done < len(self._buf):  # os.write releases the GIL during the syscall.
                done += os.write(self._fd, self._buf[done:])
            self.cpu_s += time.thread_time() - start
            self.writes += 1

    def step(self, gstep):
        self._queue.put(gstep)

    def flush(self):
        drained = threading.Event()
        self._queue.put(drained)
        drained.wait()

    def close(self):
        self._queue.put(None)
        self._thread.join()
        os.close(self._fd)


def io_thread_cpu_s():
    """CPU seconds used so far by the tracer's IO threads ("xdl_trace_io"), from Linux's
    per-thread schedstat (nanoseconds); None where /proc does not have it."""
    total, found = 0.0, False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "xdl_trace_io":
                    continue
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0]) / 1e9
            found = True
        except (OSError, ValueError, IndexError):
            continue
    return total if found else None


def run(framework, out_dir, args):
    model = (NumpyMLP if framework == "numpy" else TorchMLP)(args.width, args.batch)
    xdl.clear()
    xdl.trace_collection(model.variables())
    nbytes = (
        sum(v.nbytes for v in model.variables().values())
        if framework == "numpy"
        else sum(p.numel() * p.element_size() for p in model.variables().parameters())
    )
    shutil.rmtree(out_dir, ignore_errors=True)
    hook = xdl.TraceHook({"output_dir": out_dir, "on_error": "raise"})
    floor = None if args.no_floor else WriteFloor(out_dir, nbytes)
    hook_step_s = [0.0]  # Wall time inside hook.step() in the timed traced blocks.

    def traced_step(gstep):
        start = time.perf_counter()
        hook.step(gstep)
        hook_step_s[0] += time.perf_counter() - start

    # Each condition: what runs after model.step(), and how to drain it between blocks.
    conditions = {"untraced": (None, None), "traced": (traced_step, hook.flush)}
    if floor:
        conditions["write floor"] = (floor.step, floor.flush)
    warmed = [hook, floor] if floor else [hook]
    times = {kind: [] for kind in conditions}
    flush_times = []  # The traced blocks' drain waits.
    cpu = {kind: 0.0 for kind in conditions}  # Process CPU time, drain included.
    gstep = 0
    try:
        with hook:
            for _ in range(args.warmup):
                model.step()
                for writer in warmed:
                    writer.step(gstep)
                gstep += 1
            for writer in warmed:
                writer.flush()
            io_cpu_start, floor_cpu_start = io_thread_cpu_s(), floor.cpu_s if floor else 0.0
            for r in range(args.rounds):
                order = list(conditions) if r % 2 == 0 else list(reversed(conditions))
                for kind in order:
                    after_step, drain = conditions[kind]
                    cpu_start = time.process_time()
                    start = time.perf_counter()
                    for _ in range(args.block):
                        model.step()
                        if after_step:
                            after_step(gstep)
                        gstep += 1
                    end = time.perf_counter()
                    if drain:
                        drain()  # Empty before the next block (fdatasync + Meta on disk).
                    times[kind].append(end - start)
                    cpu[kind] += time.process_time() - cpu_start
                    if kind == "traced":
                        flush_times.append(time.perf_counter() - end)
            io_cpu_end = io_thread_cpu_s()
        stats = hook.stats()
    finally:
        if floor:
            floor.close()
        shutil.rmtree(out_dir, ignore_errors=True)
    steps = args.block * args.rounds
    io_cpu = None if io_cpu_start is None or io_cpu_end is None else io_cpu_end - io_cpu_start
    rate = {kind: steps / sum(t) for kind, t in times.items()}
    charged = steps / (sum(times["traced"]) + sum(flush_times))
    per_round = [u / t for u, t in zip(times["untraced"], times["traced"])]
    return {
        "untraced": rate["untraced"],
        "traced": rate["traced"],
        "ratio": rate["traced"] / rate["untraced"],
        "floor_ratio": rate["write floor"] / rate["untraced"] if "write floor" in rate else None,
        "ratio_with_flush": charged / rate["untraced"],
        "cpu_ratio": cpu["untraced"] / cpu["traced"],
        "median_round_ratio": statistics.median(per_round),
        "mb_per_step": nbytes / 1e6,
        "hook_step_ms": hook_step_s[0] / steps * 1e3,
        "io_cpu_ms": None if io_cpu is None else io_cpu / steps * 1e3,
        "floor_cpu_ms": (floor.cpu_s - floor_cpu_start) / steps * 1e3 if floor else None,
        "records": stats["records_written"],
        "dropped": stats["records_dropped"],
    }


def default_disk_dir():
    # /var/tmp is disk-backed on Debian (unlike /dev/shm, and unlike /tmp on some systems).
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else tempfile.gettempdir()
    return os.path.join(base, f"xdl_trace_bench_{os.getpid()}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        action="append",
        help="trace directory (repeatable); default: /dev/shm then /var/tmp (disk)",
    )
    parser.add_argument("--frameworks", default="numpy,torch")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=20, help="rounds of one block per condition")
    parser.add_argument("--block", type=int, default=5, help="steps per block")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-floor", action="store_true", help="skip the raw write() floor blocks")
    args = parser.parse_args(argv)
    targets = args.out_dir
    if not targets:
        targets = []
        if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
            targets.append(os.path.join("/dev/shm", f"xdl_trace_bench_{os.getpid()}"))
        targets.append(default_disk_dir())
    frameworks = [f for f in args.frameworks.split(",") if f]
    if "torch" in frameworks:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("torch not installed: skipping the torch model")
            frameworks.remove("torch")
    print(
        f"7-layer MLP, width {args.width}, batch {args.batch}; {args.rounds} rounds of "
        f"{args.block} steps per condition; all variables traced every step"
    )
    blas = os.environ.get("OPENBLAS_NUM_THREADS", f"all {os.cpu_count()} cores")
    torch_threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else "-"
    print(
        f"compute threads: OpenBLAS {blas}, torch {torch_threads}; the IO thread competes with them"
    )
    for framework in frameworks:
        for target in targets:
            r = run(framework, target, args)
            print(
                f"{framework:5s} {target:40s} untraced {r['untraced']:7.2f} steps/s  "
                f"traced {r['traced']:7.2f} steps/s  ratio {r['ratio']:.3f} "
                f"(median per round {r['median_round_ratio']:.3f}; "
                f"charging each block's flush {r['ratio_with_flush']:.3f}; "
                f"CPU-time ratio {r['cpu_ratio']:.3f}; "
                f"{r['mb_per_step']:.2f} MB/step, {r['records']} records, "
                f"{r['dropped']} dropped)",
                flush=True,
            )
            io = "-" if r["io_cpu_ms"] is None else f"{r['io_cpu_ms']:.2f} ms"
            print(
                f"{'':46s} per traced step: hook.step() {r['hook_step_ms']:.2f} ms on the "
                f"training thread, IO thread CPU {io}",
                flush=True,
            )
            if r["floor_ratio"] is not None:
                print(
                    f"{'':46s} write floor (a thread only write()s {r['mb_per_step']:.2f} MB per "
                    f"step to the same directory): ratio {r['floor_ratio']:.3f}, "
                    f"its write() CPU {r['floor_cpu_ms']:.2f} ms per step",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
