"""A minimal session that runs SessionRunHooks around a Python step function (TF1-style)."""

__all__ = ["TrainSession", "SessionRunContext", "SessionRunValues"]


class SessionRunContext:
    """What hooks see in before_run/after_run (as tf.train.SessionRunContext)."""

    def __init__(self, original_args, session):
        self.original_args = original_args
        self.session = session
        self.stop_requested = False

    def request_stop(self):
        self.stop_requested = True


class SessionRunValues:
    """What after_run receives: the step function's result."""

    def __init__(self, results):
        self.results = results


class TrainSession:
    """Runs `hooks` around each step: ``sess.run(fn, *args, **kwargs)`` calls every hook's
    before_run, then fn, then every hook's after_run, and returns fn's result.

    ``global_step`` counts completed runs; hooks stamp it on their records. A run whose fn
    raises skips after_run (as TensorFlow does). ``end()`` ends every hook once.
    """

    def __init__(self, hooks=()):
        self.hooks = list(hooks)
        self.global_step = 0
        self._ended = False
        self._stop = False
        for hook in self.hooks:
            hook.begin()
        for hook in self.hooks:
            hook.after_create_session(self, None)

    def run(self, fn, *args, **kwargs):
        if self._ended:
            raise RuntimeError("xdl_trace: TrainSession.run() after end()")
        context = SessionRunContext((fn, args, kwargs), self)
        for hook in self.hooks:
            hook.before_run(context)
        result = fn(*args, **kwargs)
        values = SessionRunValues(result)
        for hook in self.hooks:
            hook.after_run(context, values)
        self.global_step += 1
        self._stop = self._stop or context.stop_requested
        return result

    def request_stop(self):
        """Asks the loop to stop: ``should_stop()`` is True from now on (hooks ask the same
        through ``run_context.request_stop()``)."""
        self._stop = True

    def should_stop(self):
        return self._stop

    def end(self):
        if self._ended:
            return
        self._ended = True
        first_error = None
        for hook in self.hooks:
            try:
                hook.end(self)
            except Exception as e:  # End every hook, then report the first failure.
                first_error = first_error or e
        if first_error is not None:
            raise first_error

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.end()
        return False
