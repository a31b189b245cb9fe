"""TraceHook under hostile use (issue 9): forked children, steps from several threads at once,
a gradient missing at every step."""

import multiprocessing
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import errors

from conftest import REPO


def _verified(out_dir):
    trace = xdl.open_trace(str(out_dir))
    reports = trace.verify()
    assert reports and all(r["ok"] for r in reports), reports
    return trace


# -- fork ------------------------------------------------------------------------------------

FORK_SCRIPT = """
import os, sys, time, warnings
sys.path.insert(0, {repo!r})
import numpy as np, xdl_trace as xdl
xdl.trace_tensor("x", np.arange(4.0))
hook = xdl.TraceHook({{"output_dir": {out!r}, "fsync": False}})
hook.step(gstep=1)
pid = os.fork()
if pid == 0:
    if {child_steps!r}:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            traced = hook.step(gstep=99)
        messages = [str(w.message) for w in seen]
        ok = traced is False and any("forked child" in m for m in messages)
        ok = ok and hook.stats()["step_errors"] == 1
        sys.exit(0 if ok else 3)
    sys.exit(0)  # A normal exit: atexit runs in the child.
for _ in range(2000):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.01)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    sys.exit("the forked child hung at exit")
if os.waitstatus_to_exitcode(status) != 0:
    sys.exit(f"the forked child failed: {{os.waitstatus_to_exitcode(status)}}")
hook.step(gstep=2)
hook.end()
"""


@pytest.mark.parametrize("child_steps", [False, True], ids=["child_exits", "child_steps"])
def test_os_fork_child_exits_normally_and_the_parent_goes_on(tmp_path, child_steps):
    out = tmp_path / "fork"
    script = FORK_SCRIPT.format(repo=REPO, out=str(out), child_steps=child_steps)
    run = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    trace = _verified(out)
    assert [r.gstep for r in trace.records()] == [1, 2]


def _child_steps(hook, queue):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        traced = hook.step(gstep=50)
    queue.put((traced, [str(w.message) for w in seen]))


def _child_raises(hook, queue):
    try:
        hook.step(gstep=60)
        queue.put("no error")
    except errors.FailedPreconditionError as e:
        queue.put(str(e))


def test_multiprocessing_fork_children_leave_the_parent_trace_intact(cfg):
    xdl.trace_tensor("x", np.arange(3.0))
    ctx = multiprocessing.get_context("fork")
    hook = xdl.TraceHook(dict(cfg, on_error="warn"))
    raising = xdl.TraceHook(dict(cfg, output_file_name="raising", on_error="raise"))
    hook.step(gstep=1)
    raising.step(gstep=1)
    queue = ctx.Queue()
    children = [
        ctx.Process(target=lambda: None),
        ctx.Process(target=_child_steps, args=(hook, queue)),
        ctx.Process(target=_child_raises, args=(raising, queue)),
    ]
    results = []
    for child in children:
        child.start()
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            pytest.fail(f"forked child {child.name} hung")
        assert child.exitcode == 0
    results = [queue.get(timeout=10) for _ in range(2)]
    traced, messages = next(r for r in results if isinstance(r, tuple))
    assert traced is False
    assert any("forked child" in m and "belongs to process" in m for m in messages), messages
    raised = next(r for r in results if isinstance(r, str))
    assert "forked child" in raised
    hook.step(gstep=2)
    hook.end()
    raising.end()
    trace = _verified(cfg["output_dir"])
    assert [r.gstep for r in trace.records()] == [1, 2]


# -- threads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("on_error", ["warn", "raise"])
def test_steps_from_many_threads_never_write_a_corrupt_record(cfg, on_error):
    for i in range(8):
        xdl.trace_tensor(f"w{i}", np.full((16, 16), float(i)))
        xdl.trace_callback(f"c{i}", lambda i=i: np.arange(i + 1.0))
    hook = xdl.TraceHook(dict(cfg, on_error=on_error))
    hook.begin()
    refused = []

    def hammer():
        for _ in range(200):
            try:
                hook.step()
            except errors.FailedPreconditionError as e:
                refused.append(str(e))

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        hook.end()
    stats = hook.stats()
    if on_error == "raise":
        assert stats["step_errors"] == 0
        failed = len(refused)
        assert all("another thread" in m for m in refused)
    else:
        assert not refused
        failed = stats["step_errors"]
        if failed:
            assert "another thread" in stats["last_step_error"]
    trace = _verified(cfg["output_dir"])
    records = list(trace.records())
    assert len(records) == stats["steps_traced"] == 800 - failed
    for record in records:
        assert len(record.columns) == len(trace.keys) == 16


# -- missing gradients -----------------------------------------------------------------------


def test_a_gradient_missing_at_every_step_costs_its_column_warns_once_and_is_counted(cfg):
    # Under on_error="warn" a gradient not sent is an empty column, as a failing callback is:
    # the step's other keys are written (it failed the whole step before).
    xdl.trace_variable("w", np.ones(3))
    xdl.trace_gradient("w")
    xdl.trace_variable("b", np.ones(2))
    xdl.trace_gradient("b")
    hook = xdl.TraceHook(dict(cfg, on_error="warn"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(10):
            xdl.send_gradient("b", np.full(2, step, np.float64))
            assert hook.step() is True
        hook.end()
    step_warnings = [w for w in seen if "tracing failed" in str(w.message)]
    assert len(step_warnings) == 1, [str(w.message) for w in seen]
    message = str(step_warnings[0].message)
    assert "'gradient/w'" in message and "xdl_trace.send_gradient('w', value)" in message
    assert "its column is empty" in message
    stats = hook.stats()
    assert stats["missing_gradients"] == 10
    assert stats["column_errors"] == 10
    assert stats["step_errors"] == 0
    records = list(xdl.open_trace(cfg["output_dir"]).records())
    assert [r.gstep for r in records] == list(range(10))
    for step, record in enumerate(records):
        assert record["gradient/w"].size == 0
        assert record["gradient/b"].tolist() == [step, step]
        assert record["w"].tolist() == [1, 1, 1]


def test_a_gradient_missing_under_raise_fails_the_step(cfg):
    xdl.trace_gradient("w")
    xdl.trace_variable("b", np.ones(2))
    with xdl.TraceHook(dict(cfg, on_error="raise")) as hook:
        with pytest.raises(xdl.errors.FailedPreconditionError) as error:
            hook.step()
        assert error.value.key == "gradient/w"
        xdl.send_gradient("w", np.zeros(1))
        assert hook.step() is True
    assert [r.gstep for r in xdl.open_trace(cfg["output_dir"]).records()] == [1]
