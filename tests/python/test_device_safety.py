"""Device tensors under threads and faults (issue 36): each hook's own staging pool, bounded waits.

Each test runs on the fake device (fake_device.py), which stands in for a GPU, and under
`pytest -m gpu` on real CUDA (late_cuda.py: the same knobs, spin kernels in the delays' place).
A slow launch (``run`` sleeping, which releases the GIL) widens the window in which another
thread may take the same staging buffer; a fence that never completes plays a hung kernel.
Steps that could hang run in a subprocess with a generous timeout, so a hang fails the test
instead of stalling the suite.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
import torch

import xdl_trace as xdl
from conftest import compile_test_plugin
from fake_device import FakeDevice, installed
from late_cuda import LateCuda
from xdl_trace.write import _device

HERE = os.path.dirname(os.path.abspath(__file__))


class SlowLaunch(FakeDevice):
    """A fake device whose launch (the host side of enqueueing work) takes a while, without
    the GIL: another thread runs meanwhile, as it does while CUDA enqueues kernels."""

    def run(self, device, work):
        time.sleep(0.002)
        super().run(device, work)


class _Fake:
    """The fake device: torch CPU tensors played as device memory."""

    on = staticmethod(lambda t: t)  # A tensor (or module) on the device.
    slow_launch = staticmethod(lambda: installed(SlowLaunch()))
    late = staticmethod(lambda delay_s=0.0: installed(FakeDevice(delay_s)))
    # What a script starts with: `Device` (delay_s=, hang_fences), `on`, `installed`.
    prelude = "from fake_device import FakeDevice as Device, installed\non = lambda t: t\n"


class _Cuda:
    """Real CUDA (late_cuda.py): CUDA tensors and the real CUDA backend, its work made late."""

    on = staticmethod(lambda t: t.cuda())
    slow_launch = staticmethod(lambda: installed(LateCuda(launch_s=0.002)))
    late = staticmethod(lambda delay_s=0.0: installed(LateCuda(delay_s)))
    prelude = (
        "from fake_device import installed\nfrom late_cuda import LateCuda as Device\n"
        "on = lambda t: t.cuda()\n"
    )


@pytest.fixture(
    params=[
        "fake",
        pytest.param(
            "cuda",
            marks=(
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="SKIPPED: no CUDA device"),
            ),
        ),
    ]
)
def device(request):
    """Where the test's device tensors live: the fake device, or (pytest -m gpu) real CUDA."""
    return {"fake": _Fake, "cuda": _Cuda}[request.param]


def _step_in_thread(hook, value, steps, errors):
    def body():
        try:
            for step in range(steps):
                value.fill_(float(step))
                hook.step()
        except BaseException as e:  # Reported by the test.
            errors.append(e)

    return threading.Thread(target=body)


def test_two_hooks_on_two_threads_each_write_their_own_values(out_dir, read_trace, device):
    steps = 60
    a_val, b_val = device.on(torch.zeros(2000)), device.on(torch.zeros(2000))
    errors = []
    with device.slow_launch():
        # Each hook copies its tensor at step() (a fresh tensor, so a later fill_ never shows).
        xdl.trace_tensor("v", lambda: a_val.clone() + 1000.0, scope="a")
        xdl.trace_tensor("v", lambda: b_val.clone() + 2000.0, scope="b")
        dirs = {s: os.path.join(str(out_dir), s) for s in "ab"}
        hooks = [
            xdl.TraceHook(output_dir=dirs[s], scope=s, fsync=False, on_error="raise") for s in "ab"
        ]
        for hook in hooks:
            hook.begin()
        threads = [
            _step_in_thread(hooks[0], a_val, steps, errors),
            _step_in_thread(hooks[1], b_val, steps, errors),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for hook in hooks:
            hook.end()
    assert not errors, errors
    for scope, base in (("a", 1000.0), ("b", 2000.0)):
        (trace,) = read_trace(dirs[scope])
        assert trace.gsteps() == list(range(steps))
        wrong = [
            step
            for step, cols in enumerate(rec[3] for rec in trace.records)
            if not (cols[f"{scope}/v"] == base + step).all()
        ]
        assert wrong == [], f"hook {scope}: records holding another step's values: {wrong}"


def test_send_gradient_from_another_thread_never_shares_a_step_s_staging_buffer(
    cfg, read_trace, device
):
    w = device.on(torch.zeros(2000))
    stop, first_sent = threading.Event(), threading.Event()
    errors = []

    def autograd_thread():  # Sends a gradient again and again while the hook steps.
        sent = 0
        try:
            while not stop.is_set():
                sent += 1
                xdl.send_gradient("g", device.on(torch.full((2000,), -float(sent))))
                first_sent.set()
        except BaseException as e:
            errors.append(e)
        first_sent.set()

    sender = threading.Thread(target=autograd_thread)
    with device.slow_launch():
        xdl.trace_tensor("w", lambda: w.clone() + 1.0)
        xdl.trace_gradient("g")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # A step before the first send misses its gradient.
            with xdl.TraceHook({**cfg, "on_error": "warn"}) as hook:
                sender.start()
                first_sent.wait()
                for step in range(200):
                    w.fill_(float(step))
                    hook.step()
                stop.set()
                sender.join()
    assert not errors, errors
    (trace,) = read_trace(cfg["output_dir"])
    # A step meeting no new gradient has its column empty (how many is up to the threads'
    # timing); every step is written.
    assert [rec[0] for rec in trace.records] == list(range(200))
    sent = 0
    for gstep, cols in ((rec[0], rec[3]) for rec in trace.records):
        assert (cols["w"] == gstep + 1.0).all(), f"step {gstep}: w holds {cols['w'][:3]}"
        g = cols["gradient/g"]
        if g.size:
            sent += 1
            assert (g == g[0]).all() and g[0] <= -1.0, f"step {gstep}: the gradient holds {g[:3]}"
    assert sent >= 1


def test_a_hook_s_staging_bound_and_policy_are_its_own(out_dir, read_trace, device):
    big = device.on(torch.ones(300_000))  # 1.2 MB a step.
    with device.late(0.03):
        xdl.trace_tensor("big", lambda: big, scope="a")
        xdl.trace_tensor("host", np.zeros(3), scope="b")
        a_dir, b_dir = os.path.join(str(out_dir), "a"), os.path.join(str(out_dir), "b")
        with xdl.TraceHook(output_dir=a_dir, scope="a", overflow="block", fsync=False) as a:
            # Another scope's hook, host keys only, with a small bound that drops.
            with xdl.TraceHook(
                output_dir=b_dir, scope="b", overflow="drop", max_pending_mb=1.5, fsync=False
            ) as b:
                for _ in range(6):
                    a.step()
                    b.step()
            a_stats = a.stats()
    (trace,) = read_trace(a_dir)
    assert trace.gsteps() == list(range(6))
    assert a_stats["staging_dropped"] == 0
    assert b.stats()["staging_high_water_bytes"] == 0  # B staged nothing.


def test_end_gives_the_staging_memory_back(cfg, device):
    big = device.on(torch.ones(300_000))
    with device.late():
        xdl.trace_tensor("big", lambda: big)
        with xdl.TraceHook(cfg) as hook:
            hook.step()
            held = hook.stats()["staging_bytes"]
        after = hook.stats()
    assert held >= 1.2e6
    assert after["staging_bytes"] == 0 and after["staging_high_water_bytes"] == held


def test_a_forked_child_starts_with_no_staging_buffers(tmp_path, device):
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    # The child steps a hook of its own on a fake device (a forked child cannot use CUDA).
    done = _run_script(
        f"""
        import os, sys
        import torch
        import xdl_trace as xdl
        from fake_device import FakeDevice
        from xdl_trace.write import _device

        with installed(Device(delay_s=0.5)):
            xdl.trace_tensor("w", lambda: on(torch.ones(1000)))
            hook = xdl.TraceHook(output_dir={str(tmp_path / "parent")!r}, fsync=False)
            hook.begin()
            hook.step()  # Its buffer busy until the slow device copied it.
            pid = os.fork()
            if pid == 0:
                busy = sum(len(p._slots) for p in _device.live_pools())
                xdl.clear()
                xdl.trace_tensor("w", lambda: torch.ones(1000))
                with installed(FakeDevice()):  # The parent's stream thread is not here.
                    with xdl.TraceHook(output_dir={str(tmp_path / "child")!r}, fsync=False) as h:
                        h.step()
                os._exit(0 if busy == 0 and h.stats()["records_written"] == 1 else 3)
            _, status = os.waitpid(pid, 0)
            hook.end()
            sys.exit(os.waitstatus_to_exitcode(status))
        """,
        prelude=device.prelude,
        timeout_s=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _script(body, prelude=""):
    """`prelude` and `body` (dedented) as one script, with fake_device importable."""
    return f"import sys\nsys.path.insert(0, {HERE!r})\n" + prelude + textwrap.dedent(body)


def _run_script(body, timeout_s=90, prelude=""):
    """Runs `_script(body, prelude)` in a fresh interpreter; a hang fails."""
    script = _script(body, prelude)
    try:
        return subprocess.run(
            [sys.executable, "-c", script], timeout=timeout_s, capture_output=True, text=True
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung (killed after {timeout_s} s): {e.stderr}")


def _hung(device):
    """The start of a script whose device hangs on demand (`device.hang_fences`: a hung kernel):
    key "w" read from the device (scope "dev"), "h" from the host."""
    return device.prelude + textwrap.dedent(
        """
        import json, numpy as np, torch
        import xdl_trace as xdl

        device = Device()
        installed(device).__enter__()  # Never left: its stream holds fences that never end.
        xdl.trace_tensor("w", lambda: on(torch.ones(4)), scope="dev")
        xdl.trace_tensor("h", np.arange(3.0))
        """
    )


def _assert_closed_without_the_stuck_record(read_trace, out, gsteps):
    """The trace in `out` holds `gsteps` (not the record whose copies never completed), its Meta
    closed cleanly, counting the records written and the one dropped."""
    (trace,) = read_trace(out)
    assert trace.gsteps() == gsteps
    assert trace.meta.closed_cleanly and trace.meta.record_count == len(gsteps)
    assert trace.meta.dropped_records == 1


def test_a_fence_that_never_completes_fails_its_record_and_the_later_ones_are_written(
    tmp_path, read_trace, device
):
    out = str(tmp_path / "out")
    done = _run_script(
        f"""
        hook = xdl.TraceHook(output_dir={out!r}, scope=["", "dev"], fsync=False,
                             device_fence_timeout_s=0.5)
        hook.begin()
        device.hang_fences = True
        hook.step()  # Its copies never complete.
        device.hang_fences = False
        for _ in range(3):
            hook.step()
        hook.flush()
        flushed = hook.stats()
        hook.end()
        print(json.dumps({{k: flushed[k] for k in ("deferred_failed", "records_written")}}))
        print(hook.stats()["last_deferred_error"])
        """,
        prelude=_hung(device),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts, error = done.stdout.splitlines()[-2:]
    assert counts == '{"deferred_failed": 1, "records_written": 3}'
    assert "gstep=0" in error and "device_fence_timeout_s" in error
    (trace,) = read_trace(out)
    assert trace.gsteps() == [1, 2, 3]
    meta = open(trace.path + ".meta", "rb").read()
    assert meta  # Refreshed at close, the record count among it (read_trace checks it).


def _interrupt_end(body, signum=signal.SIGINT, returncode=0, prelude=""):
    """Runs `_script(body, prelude)`, which prints "ending" before its hook.end() (or flush())
    waits, and sends it `signum` (SIGINT: Ctrl-C) a second later; (stdout, stderr). The script must end
    with `returncode` within 60 s (else: hung)."""
    script = _script(body, prelude)
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ending\n", child.stderr.read()[-3000:]
        time.sleep(1.0)  # end() is waiting by now.
        child.send_signal(signum)
        stdout, stderr = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(
            f"the signal did not end the wait (killed after 60 s): {child.communicate()[1]}"
        )
    assert child.returncode == returncode, stderr[-3000:]
    return stdout, stderr


def test_ctrl_c_during_end_abandons_the_wait_for_a_fence_that_never_completes(
    tmp_path, read_trace, device
):
    # A hung kernel under a generous bound: end() would wait 300 s for its copies. Ctrl-C ends
    # the wait: the stuck record is dropped and counted, the host records around it written,
    # the Meta final, and the KeyboardInterrupt reaches the script.
    out = str(tmp_path / "out")
    stdout, _ = _interrupt_end(
        f"""
        hook = xdl.TraceHook(output_dir={out!r}, scope=["", "dev"], fsync=False,
                             device_fence_timeout_s=300)
        hook.begin()
        hook.step()
        device.hang_fences = True
        hook.step()  # Its copies never complete.
        device.hang_fences = False
        for _ in range(2):
            hook.step()
        print("ending", flush=True)
        try:
            hook.end()
        except KeyboardInterrupt:
            stats = hook.stats()
            print(json.dumps({{k: stats[k] for k in ("deferred_failed", "records_written")}}))
            print(stats["last_deferred_error"])
        """,
        prelude=_hung(device),
    )
    counts, error = stdout.splitlines()[-2:]
    assert counts == '{"deferred_failed": 1, "records_written": 3}'
    assert "gstep=1" in error and "abandoned" in error, error
    _assert_closed_without_the_stuck_record(read_trace, out, [0, 2, 3])


def test_write_mode_inline_with_a_device_tensor_writes_its_values(tmp_path, read_trace, device):
    out = str(tmp_path / "out")
    done = _run_script(
        f"""
        import torch
        import xdl_trace as xdl

        torch.manual_seed(0)
        model = on(torch.nn.Linear(3, 2))
        model(on(torch.randn(4, 3))).sum().backward()
        with installed(Device(delay_s=0.01)):
            xdl.watch(model, summary=None)
            w = on(torch.zeros(5))
            xdl.trace_tensor("w", lambda: w.clone())
            with xdl.TraceHook(output_dir={out!r}, write_mode="inline", fsync=False) as hook:
                for step in range(3):
                    w.fill_(float(step))
                    hook.step()
        torch.save({{k: v.cpu() for k, v in model.state_dict().items()}},
                   {str(tmp_path / "model.pt")!r})
        """,
        prelude=device.prelude,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    state = torch.load(str(tmp_path / "model.pt"))
    (trace,) = read_trace(out)
    assert trace.gsteps() == [0, 1, 2]
    for step, cols in enumerate(rec[3] for rec in trace.records):
        np.testing.assert_array_equal(cols["w"], np.full(5, float(step), np.float32))
        np.testing.assert_array_equal(cols["weight"], state["weight"].numpy())


def test_a_concurrent_step_is_refused_before_it_touches_the_running_step_s_values(
    cfg, read_trace, device
):
    torch.manual_seed(0)
    model = device.on(torch.nn.Linear(50, 4))
    model(device.on(torch.randn(2, 50))).sum().backward()
    before = model.weight.detach().clone()
    refused = []

    def from_another_thread():
        model.weight.data.fill_(99.0)  # What a second step would read now.
        try:
            refused.append(hook.step())
        except xdl.errors.FailedPreconditionError as e:
            refused.append(e)
        model.weight.data.copy_(before)

    def provider():
        other = threading.Thread(target=from_another_thread)
        other.start()
        other.join()
        return np.zeros(1)

    with device.late(0.01):
        xdl.watch(model, summary=None, gradients=False)
        xdl.trace_tensor("zz_second_step", provider)  # Called inside the first step.
        with xdl.TraceHook(cfg) as hook:
            assert hook.step() is True
        stats = hook.stats()
    assert len(refused) == 1 and isinstance(refused[0], xdl.errors.FailedPreconditionError)
    assert "another thread is inside step()" in str(refused[0])
    assert stats["deferred_failed"] == 0
    (trace,) = read_trace(cfg["output_dir"])
    (cols,) = [rec[3] for rec in trace.records]
    np.testing.assert_array_equal(cols["weight"], before.cpu().numpy())


def test_every_n_selects_the_same_steps_on_a_device_and_on_the_host(out_dir, read_trace, device):
    due = _device.EveryN(3)
    assert [due() for _ in range(7)] == [True, False, False, True, False, False, True]
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    model(torch.randn(4, 3)).sum().backward()
    counts = {}
    for where in ("host", "device"):
        xdl.clear()
        directory = os.path.join(str(out_dir), where)
        if where == "device":
            with device.late():
                keys = xdl.watch(device.on(model), every=3)
                with xdl.TraceHook(output_dir=directory, fsync=False) as hook:
                    for _ in range(7):
                        hook.step()
        else:
            keys = xdl.watch(model, every=3)
            with xdl.TraceHook(output_dir=directory, fsync=False) as hook:
                for _ in range(7):
                    hook.step()
        (trace,) = read_trace(directory)
        counts[where] = [[cols[k][0] for k in keys] for cols in (r[3] for r in trace.records)]
    assert counts["host"] == counts["device"]
    assert [row[0] > 0 for row in counts["host"]] == [True, False, False, True, False, False, True]


def test_a_device_plugin_whose_stop_never_returns_is_abandoned_at_end(
    tmp_path, fake_plugin, read_trace
):
    out = str(tmp_path / "out")
    done = _run_script(
        f"""
        import numpy as np
        import xdl_trace as xdl

        xdl.trace_tensor("w", np.arange(4.0))
        with xdl.TraceHook(
            output_dir={out!r},
            fsync=False,
            device_tracers=[{fake_plugin!r}],
            device_plugin_config="hang_stop=1",
            device_fence_timeout_s=1,
        ) as hook:
            for _ in range(3):
                hook.step()
        print(hook.stats()["device_tracer_status"])
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "did not stop and hand over their last events within 1 s" in done.stderr
    assert "abandoned" in done.stdout.splitlines()[-1]
    (trace,) = read_trace(out)
    assert trace.gsteps() == [0, 1, 2]


@pytest.mark.parametrize("waiting_in", ["end", "flush"])
def test_an_uncaught_ctrl_c_ends_the_process_by_sigint_with_the_trace_closed(
    tmp_path, read_trace, waiting_in, device
):
    # What a user sees: nothing catches the KeyboardInterrupt. The process ends as Python ends
    # on Ctrl-C (killed by SIGINT), after the close finished on its helper thread: no crash at
    # exit, no second close by the exit handler, the trace final. Ctrl-C in a flush() inside the
    # `with` block leaves the flush going on in the background (training may catch it and go
    # on); __exit__'s end() waited behind it until a second Ctrl-C, and now abandons at once.
    out = str(tmp_path / "out")
    _, stderr = _interrupt_end(
        f"""
        with xdl.TraceHook(output_dir={out!r}, scope=["", "dev"], fsync=False,
                           device_fence_timeout_s=300) as hook:
            hook.step()
            device.hang_fences = True
            hook.step()  # Its copies never complete.
            device.hang_fences = False
            hook.step()
            print("ending", flush=True)
            {"hook.flush()" if waiting_in == "flush" else ""}
        """,
        returncode=-signal.SIGINT,
        prelude=_hung(device),
    )
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr[-3000:]
    _assert_closed_without_the_stuck_record(read_trace, out, [0, 2])


def test_sigterm_during_end_abandons_the_wait_and_closes_the_trace_before_exiting(
    tmp_path, read_trace, device
):
    # SIGTERM (Slurm, Kubernetes) while end() waits for a hung kernel's copies: the hook's
    # SIGTERM handler raises SystemExit(143) in end()'s wait. Leaving then, with the close still
    # running on its helper thread, exited the process under the IO thread: the host records
    # behind the stuck one were lost and the Meta never closed. It abandons the waits as
    # Ctrl-C does, and SystemExit goes on once the trace is closed.
    out = str(tmp_path / "out")
    stdout, _ = _interrupt_end(
        f"""
        hook = xdl.TraceHook(output_dir={out!r}, scope=["", "dev"], fsync=False,
                             device_fence_timeout_s=300)
        hook.begin()  # Installs the SIGTERM handler (main thread).
        hook.step()
        device.hang_fences = True
        hook.step()  # Its copies never complete.
        device.hang_fences = False
        for _ in range(2):
            hook.step()
        print("ending", flush=True)
        try:
            hook.end()
        except SystemExit as e:
            stats = hook.stats()
            print(e.code, json.dumps({{k: stats[k] for k in ("deferred_failed",
                                                               "records_written")}}))
        """,
        prelude=_hung(device),
        signum=signal.SIGTERM,
    )
    assert stdout.splitlines()[-1] == '143 {"deferred_failed": 1, "records_written": 3}'
    _assert_closed_without_the_stuck_record(read_trace, out, [0, 2, 3])


def test_a_flush_on_another_thread_never_makes_end_drop_a_record(tmp_path, read_trace, device):
    # end() abandons at once only behind a flush that Ctrl-C left running. A flush() made on
    # another thread is none: it ran to its end there (before this was checked, its never-set
    # event made end() abandon, dropping the record whose copies were still in flight).
    out = str(tmp_path / "out")
    done = _run_script(
        f"""
        import json, threading, torch
        import xdl_trace as xdl

        device = Device(delay_s=0.3)  # Each copy completes 0.3 s after its step.
        installed(device).__enter__()
        xdl.trace_tensor("w", lambda: on(torch.ones(4)), scope="dev")
        hook = xdl.TraceHook(output_dir={out!r}, scope=["dev"], fsync=False)
        hook.begin()
        hook.step()
        flusher = threading.Thread(target=hook.flush)
        flusher.start()
        flusher.join()
        hook.step()  # In flight when end() starts.
        hook.end()
        stats = hook.stats()
        print(json.dumps({{k: stats[k] for k in ("deferred_failed", "records_written")}}))
        """,
        prelude=device.prelude,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == '{"deferred_failed": 0, "records_written": 2}'
    (trace,) = read_trace(out)
    assert trace.gsteps() == [0, 1]


def test_sigterm_s_flush_waits_its_bound_for_a_hung_kernel_then_the_trace_closes(
    tmp_path, read_trace, device
):
    # SIGTERM while training runs and a kernel hangs: the handler's flush waited
    # device_fence_timeout_s (here 300 s, 60 s by default) before the close could start, past
    # the 30 s a launcher grants before SIGKILL. It waits SIGTERM_FLUSH_S (here 1 s), then
    # abandons the waits: the stuck record dropped and counted, the rest written, the Meta final.
    out = str(tmp_path / "out")
    started = time.monotonic()
    _, stderr = _interrupt_end(
        f"""
        import time
        import xdl_trace.write.hook as hook_module
        hook_module.SIGTERM_FLUSH_S = 1.0
        hook = xdl.TraceHook(output_dir={out!r}, scope=["", "dev"], fsync=False,
                             device_fence_timeout_s=300)
        hook.begin()  # Installs the SIGTERM handler (main thread).
        hook.step()
        device.hang_fences = True
        hook.step()  # Its copies never complete.
        device.hang_fences = False
        hook.step()
        print("ending", flush=True)
        time.sleep(120)  # Training, when SIGTERM comes.
        """,
        prelude=_hung(device),
        signum=signal.SIGTERM,
        returncode=143,
    )
    assert time.monotonic() - started < 30, "not within a launcher's grace period"
    assert "closing the trace(s) and exiting with status 143" in stderr, stderr[-3000:]
    _assert_closed_without_the_stuck_record(read_trace, out, [0, 2])


def test_ctrl_c_during_end_abandons_a_device_plugin_whose_stop_never_returns(
    tmp_path, fake_plugin, read_trace
):
    out = str(tmp_path / "out")
    stdout, _ = _interrupt_end(
        f"""
        import numpy as np
        import xdl_trace as xdl

        xdl.trace_tensor("w", np.arange(4.0))
        hook = xdl.TraceHook(output_dir={out!r}, fsync=False, device_tracers=[{fake_plugin!r}],
                             device_plugin_config="hang_stop=1", device_fence_timeout_s=300)
        hook.begin()
        for _ in range(3):
            hook.step()
        print("ending", flush=True)
        try:
            hook.end()
        except KeyboardInterrupt:
            print(hook.stats()["device_tracer_status"])
        """
    )
    assert "abandoned: the wait was interrupted (Ctrl-C or SIGTERM)" in stdout.splitlines()[-1]
    (trace,) = read_trace(out)
    assert trace.gsteps() == [0, 1, 2]
    assert trace.meta.closed_cleanly


def test_a_hung_collect_of_an_abi_1_0_plugin_holds_training_once_and_never_again(
    tmp_path, read_trace
):
    # An ABI 1.0 plugin's step hooks and collect are serialized by the core: a collect that
    # never returns (on the collector thread) held every later step forever before the bound.
    plugin = compile_test_plugin(
        tmp_path, "fake_device_plugin.c", "xdl_trace_fake_abi10", ["XDL_FAKE_ABI_1_0"]
    )
    if plugin is None:
        pytest.skip("SKIPPED: no C compiler to build the fake device plugin")
    out = str(tmp_path / "out")
    done = _run_script(
        f"""
        import time
        import numpy as np
        import xdl_trace as xdl

        xdl.trace_tensor("w", np.arange(4.0))
        slowest = 0.0
        with xdl.TraceHook(
            output_dir={out!r},
            fsync=False,
            device_tracers=[{plugin!r}],
            device_plugin_config="hang_collect=2",
            device_collect_interval_s=0,
            device_fence_timeout_s=1,
        ) as hook:
            for _ in range(20):
                begin = time.monotonic()
                hook.step()
                slowest = max(slowest, time.monotonic() - begin)
                time.sleep(0.01)
        print(hook.stats()["device_tracer_status"])
        print(f"slowest step {{slowest:.2f}} s")
        """,
        timeout_s=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    status, slowest = done.stdout.splitlines()[-2:]
    assert "skipped: a collect of this ABI 1.0 plugin" in status, status
    assert "did not return within 1 s" in status, status
    # One step waited out the bound; none waits more than about it.
    assert 0.9 < float(slowest.split()[2]) < 10, slowest
    (trace,) = read_trace(out)
    assert trace.gsteps() == list(range(20))
