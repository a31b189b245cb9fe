"""XDL's overhead experiment: a 7-layer fully connected model trained with numpy (and torch),
tracing every trainable variable at every step, side by side with the floors and with what users
write instead; all conditions interleaved in one run.

    /usr/bin/python3 bench/overhead.py [--out-dir DIR ...] [--frameworks numpy,torch]

Conditions (blocks of steps, the order reversed every other round so drift cancels):
  untraced          the training step alone.
  xdl_trace         a TraceHook (default config: write_mode "auto") tracing every variable.
  sync floor        np.copyto of every variable into one buffer + os.write of it, on the training
                    thread: the least a synchronous tracer storing these bytes can cost. Like the
                    tracer, every writer keeps what it wrote until the run ends (truncating or
                    deleting would hand recently freed, cache-warm pages to whichever block
                    comes next: 2.4 instead of 3.1-3.7 ms per 6.31 MB into tmpfs here).
  copy only         np.copyto of every variable (no write): what capturing the values costs.
  async floor       a thread that only write()s the step's bytes from a buffer filled once (no
                    copy, no encoding, no checksum): the least an IO thread can cost.
  np.savez, torch.save, h5py append
                    what users write per step instead (h5py where installed).
Between blocks every writer is drained outside the timing, so each block starts empty; "ratio" is
steps/s against untraced. "CPU-time ratio" compares process CPU time per step (all threads):
less sensitive to other load on a shared machine. Targets: /dev/shm (tmpfs), then a directory on
disk; files are removed after each run. Prints figures; nothing here passes or fails. Goals
(issue 14): with compute on every core, xdl_trace >= sync floor; with a core to spare, xdl_trace
>= 0.97 and >= copy only.
"""

import argparse
import contextlib
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
from xdl_trace.write.hook import write_mode_reason  # noqa: E402

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

    def arrays(self):
        """name -> numpy array sharing the variable's memory."""
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

    def arrays(self):
        return {n: p.detach().numpy() for n, p in self.model.named_parameters()}

    def step(self):
        self.opt.zero_grad()
        loss = self.torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()


def write_all(fd, buf):
    done = 0
    while done < len(buf):  # os.write releases the GIL during the syscall.
        done += os.write(fd, buf[done:])


class SyncFloor:
    """np.copyto of every variable into one buffer, then os.write of it, on the training thread.
    With copy=False only the copy (the "copy only" condition)."""

    def __init__(self, out_dir, arrays, write=True):
        self._arrays = list(arrays.values())
        total = sum(a.nbytes for a in self._arrays)
        self._buf = np.ones(total, np.uint8)  # touched once: no page faults when timed
        self._views, offset = [], 0
        for a in self._arrays:
            self._views.append(self._buf[offset : offset + a.nbytes].view(a.dtype).reshape(a.shape))
            offset += a.nbytes
        self._fd = None
        if write:
            self._fd = os.open(os.path.join(out_dir, "sync_floor.bin"), os.O_WRONLY | os.O_CREAT)

    def step(self, gstep):
        for view, a in zip(self._views, self._arrays):
            np.copyto(view, a)
        if self._fd is not None:
            write_all(self._fd, memoryview(self._buf))

    def close(self):
        if self._fd is not None:
            os.close(self._fd)


class AsyncFloor:
    """A thread that only write()s the step's byte count into a file in the same directory, from
    one buffer filled once (no capture copy, no encoding, no checksum, no Meta)."""

    def __init__(self, out_dir, nbytes):
        self._fd = os.open(os.path.join(out_dir, "async_floor.bin"), os.O_WRONLY | os.O_CREAT)
        self._buf = memoryview(np.ones(nbytes, np.uint8))
        self._queue = queue.Queue()
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
            write_all(self._fd, self._buf)

    def step(self, gstep):
        self._queue.put(gstep)

    def drain(self):
        drained = threading.Event()
        self._queue.put(drained)
        drained.wait()

    def close(self):
        self._queue.put(None)
        self._thread.join()
        os.close(self._fd)


class PerStepFiles:
    """A user's per-step save: np.savez or torch.save of every variable into step_<gstep> files."""

    def __init__(self, out_dir, arrays, how):
        self._dir = os.path.join(out_dir, how.replace(".", "_"))
        os.makedirs(self._dir, exist_ok=True)
        self._arrays = arrays
        self._how = how
        if how == "torch.save":
            import torch

            self._torch = torch
            self._tensors = {n: torch.from_numpy(a) for n, a in arrays.items()}

    def step(self, gstep):
        path = os.path.join(self._dir, f"step_{gstep}")
        if self._how == "np.savez":
            np.savez(path, **self._arrays)
        else:
            self._torch.save(self._tensors, path + ".pt")

    def close(self):
        shutil.rmtree(self._dir, ignore_errors=True)


class H5Append:
    """One HDF5 file, one extendable dataset per variable, a row appended per step."""

    def __init__(self, out_dir, arrays):
        import h5py

        self._h5py = h5py
        self._path = os.path.join(out_dir, "peer.h5")
        self._arrays = arrays
        self._file = self._h5py.File(self._path, "w")
        self._sets = {
            n: self._file.create_dataset(
                n.replace("/", "_"),
                shape=(0,) + a.shape,
                maxshape=(None,) + a.shape,
                chunks=(1,) + a.shape,  # one chunk per step, as an append log is tuned
                dtype=a.dtype,
            )
            for n, a in self._arrays.items()
        }

    def step(self, gstep):
        for n, a in self._arrays.items():
            ds = self._sets[n]
            ds.resize(ds.shape[0] + 1, axis=0)
            ds[-1] = a
        self._file.flush()

    def close(self):
        self._file.close()


def make_conditions(framework, out_dir, model, hooks, hook_step_s):
    """name -> (after_step(gstep) or None, drain() or None, close() or None)."""
    arrays = model.arrays()
    nbytes = sum(a.nbytes for a in arrays.values())

    def traced(name, hook):
        def step(gstep):
            start = time.perf_counter()
            hook.step(gstep)
            hook_step_s[name] += time.perf_counter() - start

        return step

    sync, copy = SyncFloor(out_dir, arrays), SyncFloor(out_dir, arrays, write=False)
    afloor = AsyncFloor(out_dir, nbytes)
    conditions = {"untraced": (None, None, None)}
    for name, hook in hooks.items():
        conditions[name] = (traced(name, hook), hook.flush, None)
    conditions.update(
        {
            "sync floor": (sync.step, None, sync.close),
            "copy only": (copy.step, None, None),
            "async floor": (afloor.step, afloor.drain, afloor.close),
        }
    )
    for how in ("np.savez", "torch.save"):
        if how == "torch.save" and "torch" not in sys.modules:
            continue
        peer = PerStepFiles(out_dir, arrays, how)
        conditions[how] = (peer.step, None, peer.close)
    try:
        h5 = H5Append(out_dir, arrays)
        conditions["h5py append"] = (h5.step, None, h5.close)
    except ImportError:
        pass
    return conditions, nbytes


def run(framework, out_dir, args):
    model = (NumpyMLP if framework == "numpy" else TorchMLP)(args.width, args.batch)
    xdl.clear()
    xdl.trace_collection(model.variables())
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    # One tracer per write mode, each into its own directory, stepped only in its own blocks.
    hooks = {
        f"xdl {mode}": xdl.TraceHook(
            {
                "output_dir": os.path.join(out_dir, mode),
                "on_error": "raise",
                "write_mode": mode,
                **dict(args.trace_config),
            }
        )
        for mode in args.modes.split(",")
    }
    hook_step_s = {name: 0.0 for name in hooks}  # Wall time inside hook.step(), timed blocks.
    conditions, nbytes = make_conditions(framework, out_dir, model, hooks, hook_step_s)
    times = {name: [] for name in conditions}
    cpu = {name: 0.0 for name in conditions}  # Process CPU time, drain included.
    gstep = 0
    try:
        with contextlib.ExitStack() as stack:
            for hook in hooks.values():
                stack.enter_context(hook)
            for name, (after_step, drain, _) in conditions.items():  # warm every writer
                for _ in range(args.warmup):
                    model.step()
                    if after_step:
                        after_step(gstep)
                    gstep += 1
                if drain:
                    drain()
            for name in hook_step_s:
                hook_step_s[name] = 0.0
            for r in range(args.rounds):
                order = list(conditions) if r % 2 == 0 else list(reversed(conditions))
                for name in order:
                    after_step, drain, _ = conditions[name]
                    cpu_start = time.process_time()
                    start = time.perf_counter()
                    for _ in range(args.block):
                        model.step()
                        if after_step:
                            after_step(gstep)
                        gstep += 1
                    times[name].append(time.perf_counter() - start)
                    if drain:
                        drain()
                    cpu[name] += time.process_time() - cpu_start
            stats = {name: hook.stats() for name, hook in hooks.items()}
    finally:
        for _, _, close in conditions.values():
            if close:
                close()
        shutil.rmtree(out_dir, ignore_errors=True)
    steps = args.block * args.rounds
    rate = {name: steps / sum(t) for name, t in times.items()}
    return {
        "mb_per_step": nbytes / 1e6,
        "untraced": rate["untraced"],
        "ratios": {
            name: (
                rate[name] / rate["untraced"],
                statistics.median(u / t for u, t in zip(times["untraced"], times[name])),
                cpu["untraced"] / cpu[name],
            )
            for name in conditions
            if name != "untraced"
        },
        "hook_step_ms": {name: t / steps * 1e3 for name, t in hook_step_s.items()},
        "stats": stats,
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
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per condition")
    parser.add_argument(
        "--modes", default="inline,io_thread", help="write modes traced side by side"
    )
    parser.add_argument(
        "--trace-config",
        action="append",
        default=[],
        type=lambda kv: (kv.split("=", 1)[0], _config_value(kv.split("=", 1)[1])),
        metavar="KEY=VALUE",
        help="extra TraceHook config for every traced condition (repeatable)",
    )
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
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    torch_threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else "-"
    print(
        f"7-layer MLP, width {args.width}, batch {args.batch}; {args.rounds} rounds of "
        f"{args.block} steps per condition; all variables traced every step; "
        f"{len(os.sched_getaffinity(0))} cores, OpenBLAS threads {blas}, torch threads "
        f"{torch_threads}"
    )
    for framework in frameworks:
        for target in targets:
            r = run(framework, target, args)
            print(
                f"\n{framework} -> {target}: {r['mb_per_step']:.2f} MB/step, untraced "
                f"{r['untraced']:.2f} steps/s; the default (write_mode \"auto\"): "
                f"{write_mode_reason('auto')}"
            )
            print(
                f"  {'condition':14s} {'ratio':>6s} {'median/round':>13s} {'CPU-time':>9s}"
                "  hook.step()"
            )
            for name, (ratio, median, cpu) in r["ratios"].items():
                extra = ""
                if name in r["stats"]:
                    s = r["stats"][name]
                    extra = (
                        f"  {r['hook_step_ms'][name]:.2f} ms ({s['records_written']} records, "
                        f"{s['records_dropped']} dropped)"
                    )
                print(f"  {name:14s} {ratio:6.3f} {median:13.3f} {cpu:9.3f}{extra}", flush=True)
    return 0


def _config_value(text):
    """A --trace-config value: int, float, true/false, else the string."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


if __name__ == "__main__":
    sys.exit(main())
