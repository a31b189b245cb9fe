"""Session protocols: the SessionRunHook methods driven by TrainSession and by hand."""

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace.write.session import SessionRunContext, SessionRunValues


def test_train_session_runs_hooks_and_returns_results(cfg, read_trace):
    w = np.zeros(2)
    xdl.trace_variable("w", w)

    def train_step(lr, scale=1.0):
        w[...] += lr * scale
        return float(w[0])

    sess = xdl.TrainSession(hooks=[xdl.TraceHook(cfg)])
    results = [sess.run(train_step, 0.5, scale=2.0) for _ in range(3)]
    assert results == [1.0, 2.0, 3.0]
    assert sess.global_step == 3
    sess.end()
    sess.end()  # Idempotent.
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 1, 2]
    np.testing.assert_array_equal(trace.column("w")[2], [3.0, 3.0])


def test_session_as_context_manager_and_stop_requests(cfg, read_trace):
    class StopAfter:
        def __init__(self, n):
            self.n = n
            self.calls = []

        def begin(self):
            self.calls.append("begin")

        def after_create_session(self, session, coord):
            self.calls.append("after_create_session")

        def before_run(self, ctx):
            self.calls.append("before_run")

        def after_run(self, ctx, values):
            self.calls.append(("after_run", values.results))
            if ctx.session.global_step + 1 >= self.n:
                ctx.request_stop()

        def end(self, session):
            self.calls.append("end")

    xdl.trace_tensor("x", np.zeros(1))
    stopper = StopAfter(2)
    with xdl.TrainSession(hooks=[stopper, xdl.TraceHook(cfg)]) as sess:
        while not sess.should_stop():
            sess.run(lambda: 42)
    assert stopper.calls == [
        "begin",
        "after_create_session",
        "before_run",
        ("after_run", 42),
        "before_run",
        ("after_run", 42),
        "end",
    ]
    assert len(read_trace(cfg["output_dir"])[0].records) == 2


def test_failed_step_skips_after_run(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    sess = xdl.TrainSession(hooks=[xdl.TraceHook(cfg)])
    sess.run(lambda: None)
    with pytest.raises(ZeroDivisionError):
        sess.run(lambda: 1 / 0)
    sess.run(lambda: None)
    sess.end()
    with pytest.raises(RuntimeError):
        sess.run(lambda: None)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 1]


def test_hook_driven_by_hand_like_a_tf1_monitored_session(cfg, read_trace):
    class FakeSession:
        global_step = 0

    xdl.trace_tensor("x", np.zeros(1))
    hook = xdl.TraceHook(cfg)
    session = FakeSession()
    hook.begin()
    hook.after_create_session(session, None)
    for gstep in (10, 20):
        session.global_step = gstep
        ctx = SessionRunContext(None, session)
        assert hook.before_run(ctx) is None
        hook.after_run(ctx, SessionRunValues(None))
    hook.end(session)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [10, 20]


def test_eval_and_train_hooks_in_sessions_with_clear(cfg, tmp_path, read_trace):
    xdl.trace_tensor("loss", np.ones(1))
    with xdl.TrainSession(hooks=[xdl.TraceHook(cfg)]) as sess:
        sess.run(lambda: None)
    xdl.clear()
    xdl.trace_tensor("acc", np.full(1, 0.9))
    ev = dict(cfg, output_dir=str(tmp_path / "ev"))
    with xdl.TrainSession(hooks=[xdl.TraceHook(ev, is_training=False, gstep=1)]) as sess:
        sess.run(lambda: None)
    assert read_trace(cfg["output_dir"])[0].keys == ["loss"]
    assert read_trace(ev["output_dir"], prefix="test")[0].keys == ["acc"]


def test_request_stop_on_the_session_ends_a_should_stop_loop(cfg, read_trace):
    w = np.zeros(1)
    xdl.trace_variable("w", w)
    with xdl.TrainSession(hooks=[xdl.TraceHook(cfg)]) as sess:
        while not sess.should_stop():
            sess.run(lambda: w.__iadd__(1.0))
            if sess.global_step == 4:
                sess.request_stop()
    assert sess.global_step == 4
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 1, 2, 3]
