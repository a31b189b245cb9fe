"""TraceHook: starts a tracer over the registry, traces the steps its filter selects, flushes and
closes at the end. Speaks the SessionRunHook protocol, and is a context manager for plain loops.
"""

import atexit
import difflib
import numbers
import operator
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
import weakref

from . import _convert, _device, _run, _torch, api, filters as _filters
from .. import _core, errors
from ._run import RANK_ENV_VARS, detect_rank

__all__ = ["TraceHook", "CONFIG_KEYS", "detect_rank"]

# The core's config keys (its table, cpp/src/core/config.cc): {name: (type, enum value names)}.
_CORE_KEYS = {name: (kind, choices) for name, kind, choices in _core.config_keys()}
# Config keys (issue 3), in documentation order: the core's, and on_error (this module's own).
_AT = list(_CORE_KEYS).index("write_mode") + 1
CONFIG_KEYS = (*list(_CORE_KEYS)[:_AT], "on_error", *list(_CORE_KEYS)[_AT:])


def _bad(key, value, expected):
    return errors.InvalidArgumentError(
        f"xdl_trace: config '{key}': {value!r} is invalid; expected {expected}"
    )


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# How a value of each core field type is checked and converted (the ranges are checked once,
# by the core's TraceConfig.validate(), naming the key): type -> (accepts, expected, convert).
_FIELD_TYPES = {
    "number": (_is_number, "a number", float),
    "int": (
        lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
        "an integer",
        int,
    ),
    "bool": (lambda v: isinstance(v, bool), "True or False", bool),
    "string": (lambda v: isinstance(v, str), "a string", str),
    "strings": (
        lambda v: isinstance(v, (list, tuple)) and all(isinstance(s, str) for s in v),
        "a list of strings",
        list,
    ),
}


def _set_field(cfg, key, value):
    """cfg.<key> = value, checked against the key's type (a ValueError naming the key)."""
    kind, choices = _CORE_KEYS[key]
    if kind == "choice":
        if value not in choices:
            raise _bad(key, value, " or ".join(repr(c) for c in choices))
        value = type(getattr(cfg, key))(choices.index(value))
    else:
        accepts, expected, convert = _FIELD_TYPES[kind]
        if not accepts(value):
            raise _bad(key, value, expected)
        value = convert(value)
    setattr(cfg, key, value)


def _plugin_config(value):
    # A dict {key: value} or the plugins' own "key=value;..." string.
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str) or not k or any(c in k for c in "=;"):
                raise _bad("device_plugin_config", value, "option names without '=' or ';'")
            if ";" in str(v):
                raise _bad("device_plugin_config", value, "option values without ';'")
        return ";".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in value.items())
    if not isinstance(value, str):
        raise _bad("device_plugin_config", value, "a dict or a 'key=value;...' string")
    return value


def _output_dir(value):
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise _bad("output_dir", value, "a non-empty path or file:// URL")
    if "://" in value:
        scheme = value.split("://", 1)[0].lower()
        if scheme != "file":
            raise errors.NotSupportedError(
                f"xdl_trace: config 'output_dir': {value!r}: the {scheme}:// scheme is not "
                "supported (use a local path or file://; mount remote storage locally)"
            )
        value = value[len("file://") :]
        if not value:
            raise _bad("output_dir", "file://", "a file:// URL with a path")
    return value


def write_mode_reason(requested):
    """Why a tracer configured with write mode `requested` writes in the mode its stats()
    report (the core resolves "auto"; docs/writer.md, "Write modes")."""
    if requested != "auto":
        return "set in config"
    return (
        "auto: the IO thread writes while training goes on (ahead of write-through on this "
        "project's benchmark machine with and without a spare core; docs/writer.md 'Write modes')"
    )


# What other tracing libraries call what a TraceHook takes (issue 34): {guessed name: hint}.
_GUESSED_ARGUMENTS = {
    "log_dir": "output_dir=",
    "logdir": "output_dir=",
    "save_dir": "output_dir=",
    "dir": "output_dir=",
    "name": "metadata={'name': ...}",
    "run_name": "metadata={'name': ...}",
    "project": "metadata={'project': ...}",
    "tags": "metadata={'tags': [...]}",
    "flush_secs": "meta_interval_s=",
    "flush_interval": "meta_interval_s=",
    "max_queue": "max_pending_mb=",
}
# TraceHook's own keyword arguments, beside the config keys.
HOOK_KEYWORDS = ("config", "is_training", "gstep", "filter", "scope", "metadata", "replicated")


def _with_suggestion(key):
    """'kye' (did you mean 'key'?) for a near miss of a config key or a name other libraries
    use, else 'kye'."""
    if key.startswith(("every", "log_every", "trace_every")):
        return f"{key!r} (did you mean filter=xdl.Every(N)?)"
    if key in _GUESSED_ARGUMENTS:
        return f"{key!r} (did you mean {_GUESSED_ARGUMENTS[key]}?)"
    if key in HOOK_KEYWORDS:  # Not a config key: TraceHook's own argument.
        return f"{key!r} (an argument of TraceHook: TraceHook(config, {key}=...))"
    close = difflib.get_close_matches(key, CONFIG_KEYS + HOOK_KEYWORDS, n=1)
    return f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key)


def build_config(config, is_training=True):
    """(core TraceConfig, on_error) from a user config mapping; ValueError names the bad key."""
    if not hasattr(config, "keys") or not hasattr(config, "get"):
        raise TypeError(f"xdl_trace: config must be a dict, got {type(config).__name__}")
    unknown = sorted(str(k) for k in config.keys() if k not in CONFIG_KEYS)
    if unknown:
        raise errors.InvalidArgumentError(
            f"xdl_trace: unknown config key(s) {', '.join(_with_suggestion(k) for k in unknown)}; "
            f"valid keys: {', '.join(CONFIG_KEYS)}; TraceHook's own arguments: "
            f"{', '.join(HOOK_KEYWORDS)}"
        )
    if "output_dir" not in config:
        raise errors.InvalidArgumentError("xdl_trace: config 'output_dir' is required")
    cfg = _core.TraceConfig()  # Its fields start at the defaults, defined once in C++ (config.h).
    cfg.is_training = bool(is_training)
    # Keys whose Python spelling differs from the core's field: converted first.
    given = dict(config)
    given["output_dir"] = _output_dir(config["output_dir"])
    # Detected again at begin(), when torch.distributed may have been initialized since.
    given["rank"] = _run.detect_placement(config.get("rank")).rank
    if isinstance(given.get("device_tracers"), str):
        given["device_tracers"] = [given["device_tracers"]]
    if "device_plugin_config" in given:
        given["device_plugin_config"] = _plugin_config(given["device_plugin_config"])
    on_error = given.pop("on_error", "warn")
    if on_error not in ("warn", "raise"):
        raise _bad("on_error", on_error, "'warn' or 'raise'")
    for key, value in given.items():
        _set_field(cfg, key, value)
    # A gradient not sent costs its own column under "warn", as a failing provider does.
    if on_error == "warn":
        cfg.missing_gradient = _core.MissingGradientPolicy.EMPTY_COLUMN
    cfg.validate()
    return cfg, on_error


def _merge_config(config, options):
    """The config mapping of TraceHook(config, **options): a path as config is its output_dir;
    keyword options join the dict (a key given both ways is an error naming it)."""
    if isinstance(config, (str, os.PathLike)):
        config = {"output_dir": config}
    if not options:
        return {} if config is None else config
    if config is None:
        return dict(options)
    if not hasattr(config, "keys") or not hasattr(config, "get"):
        raise TypeError(f"xdl_trace: config must be a dict, got {type(config).__name__}")
    twice = sorted(str(k) for k in options if k in config)
    if twice:
        raise errors.InvalidArgumentError(
            f"xdl_trace: config {', '.join(repr(k) for k in twice)} is given twice (in the "
            "config dict and as a keyword argument)"
        )
    return {**config, **options}


def _unwritable(output_dir):
    """Why `output_dir`, an existing directory, cannot take a new file (errno's text), else None."""
    if not os.path.isdir(output_dir):
        return None
    try:
        with tempfile.TemporaryFile(dir=output_dir):
            return None
    except OSError as error:
        return error.strerror or str(error)


def _mode_name(mode):
    return _CORE_KEYS["write_mode"][1][int(mode)]


# Hooks begun and not yet ended; flushed and closed at interpreter exit.
_live_hooks = weakref.WeakSet()
_live_lock = threading.Lock()


def _after_fork_in_child():
    # The live hooks' tracers belong to the parent (their IO threads do not exist here): mark
    # them inert so exit does not close them, and step() reports the situation (the core's
    # FailedPrecondition). The lock may have been held by a parent thread at fork: renew it.
    global _live_lock
    _live_lock = threading.Lock()
    for hook in list(_live_hooks):
        hook._forked = True
    _live_hooks.clear()
    # The child traces nothing yet: its SIGTERM does what it did before the parent's begin().
    global _sigterm_installed
    if _sigterm_installed and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, _previous_sigterm or signal.SIG_DFL)
    _sigterm_installed = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _end_live_hooks():
    with _live_lock:
        hooks = list(_live_hooks)
    for hook in hooks:
        try:
            hook._end(at_exit=True)
        except Exception as e:  # Never raise at exit.
            warnings.warn(
                errors.printable(f"xdl_trace: closing a trace at exit failed: {e}"), RuntimeWarning
            )


# SIGTERM (what Slurm and Kubernetes send before a kill) closes the traces as SIGINT does: the
# handler installed at the first begin() on the main thread flushes the live hooks, then calls
# the handler it replaced, or (the default, which would kill the process unclosed) raises
# SystemExit(143), which unwinds `with TraceHook` blocks and runs the exit handler above.
# The flush waits for device copies and device tracers at most SIGTERM_FLUSH_S, then abandons
# those waits for the rest of the run (as Ctrl-C does), so that flush and close fit in the 30 s
# both launchers grant by default before SIGKILL.
# A handler set to SIG_IGN, or by C code, is left alone. Set on the main thread only.
SIGTERM_FLUSH_S = 10.0
_previous_sigterm = None
_sigterm_installed = False


def _on_sigterm(signum, frame):
    for hook in list(_live_hooks):
        if hook._stepping_thread is None:
            try:
                hook._flush(within=SIGTERM_FLUSH_S)  # On disk whatever follows (a SIGKILL).
            except Exception:
                pass  # Closing (or the exit handler) reports it.
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    sys.stderr.write(
        f"xdl_trace: signal {signum} (SIGTERM): closing the trace(s) and exiting with status "
        f"{128 + signum}\n"
    )
    raise SystemExit(128 + signum)


def _install_sigterm_handler():
    global _previous_sigterm, _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_installed = True
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        return
    _previous_sigterm = None if previous is signal.SIG_DFL else previous
    signal.signal(signal.SIGTERM, _on_sigterm)


# What a signal raises on the main thread: Ctrl-C, and SIGTERM through _on_sigterm. Either one
# during end() abandons the close's waits and waits for the close: leaving while it runs on its
# daemon thread would exit the process under the IO thread (no final Meta, records lost).
_INTERRUPTS = (KeyboardInterrupt, SystemExit)


def _wait_interruptibly(call, abandon=None, within=None, returned=None):
    """Runs `call` (a tracer's close or flush, which waits without the GIL for device copies and
    device tracers, each wait bounded by device_fence_timeout_s) so that Ctrl-C ends the wait: on
    the main thread the call runs on a helper thread waited for in 0.1 s slices, where a
    KeyboardInterrupt (or SIGTERM's SystemExit) can land. Then `abandon` runs (the tracer's
    waits end within 50 ms, the records still waiting for copies dropped and counted) and the
    call is waited for before the interrupt goes on; without `abandon` (a flush: training may go
    on) the call goes on in the background within its bound, and `returned` (a threading.Event)
    is set when it ends. `within` seconds: then `abandon` runs too, interrupted or not.
    Elsewhere (signals reach the main thread only) `call` runs here, `within` unbounded."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    failure = []
    # Set when `call` returned. Not Thread.is_alive(): a KeyboardInterrupt inside Thread.join
    # can mark a running thread stopped (CPython 3.11, bpo-45274's fix).
    returned = returned or threading.Event()

    def run():
        try:
            call()
        except BaseException as e:  # Raised on the caller's thread below.
            failure.append(e)
        finally:
            returned.set()

    threading.Thread(target=run, name="xdl_trace wait", daemon=True).start()
    try:
        deadline = None if within is None else time.monotonic() + within
        while not returned.wait(0.1):
            if deadline is not None and time.monotonic() >= deadline:
                deadline = None
                abandon()
    except _INTERRUPTS:
        if abandon is not None:
            abandon()
            while not returned.is_set():  # Ends within the abandon's poll and the last writes.
                try:
                    returned.wait(0.1)
                except _INTERRUPTS:
                    pass  # Already leaving; the close finishes what it wrote.
        raise
    if failure:
        raise failure[0]


def _gstep_of(gstep, where):
    """`gstep` as the int64 the records carry: an int, a numpy or torch integer, or a float
    that holds one (100.0). Before, 3.7 was read as 3 and "5" as 5, and 2**70 failed in the
    core with the binding's message. On every step: no message is made unless one is raised."""
    value = None
    if not isinstance(gstep, bool):  # True is no step.
        try:
            value = operator.index(gstep)
        except TypeError:
            if isinstance(gstep, numbers.Real) and float(gstep).is_integer():
                value = int(gstep)
    if value is None:
        raise errors.InvalidArgumentError(
            f"xdl_trace: {where}: {gstep!r} is no integer ({type(gstep).__name__})"
        )
    if not -(2**63) <= value < 2**63:
        raise errors.InvalidArgumentError(f"xdl_trace: {where}: {value} is outside int64")
    return value


class TraceHook:
    """Traces the registered entries of `scope` at the steps `filter` selects.

    config: dict with the keys in CONFIG_KEYS (output_dir required), or the output_dir itself;
        the keys can be given as keyword arguments too: ``TraceHook(output_dir="out", fsync=False)``.
    is_training: False writes ``test.*`` files (eval).
    metadata: a JSON-serializable dict (hparams, git SHA, ...) recorded with the run, beside
        what is recorded automatically (argv, host, pid, start/end time, world size, version).
    gstep: a fixed global step stamped on every record (eval); filters then see the
        local step.
    filter: None (every step), a filters.Filter, an int N (every N), a list/range of
        steps, or a callable(step) -> bool.
    scope: None (the default scope ""), a scope name, or a list of scope names.
    replicated: which keys data parallelism keeps equal on every rank, for the rank comparison
        (``xdl-trace diff RUN --ranks``, the report's "ranks agree/differ"): None or True (the
        rule: parameters, gradients, optimizer settings), False (none: model or pipeline
        parallel shards), or glob patterns (a list or "a,b*"): exactly the keys they match.
        Recorded with the run (its metadata entry "xdl_trace.replicated").

    Plain loop::

        with xdl.TraceHook({"output_dir": "out"}) as hook:
            for step in range(n):
                train_step()
                hook.step()          # or hook.step(gstep=global_step)

    Threading: one training thread drives a hook (step/end); stats() from any thread.
    """

    def __init__(
        self,
        config=None,
        is_training=True,
        gstep=None,
        filter=None,
        scope=None,
        metadata=None,
        replicated=None,
        **options,
    ):
        config = _merge_config(config, options)
        self._config, self._on_error = build_config(config, is_training)
        self._training = bool(is_training)  # Read at every step (the config's is a C++ field).
        self._rank_option = config.get("rank")
        self._metadata_json = _run.metadata_json(metadata, _run.replicated_globs(replicated))
        self._fixed_gstep = None if gstep is None else _gstep_of(gstep, "TraceHook(gstep=)")
        self._filter = _filters.as_filter(filter)
        if scope is None or isinstance(scope, str):
            self._scopes = [api.scope_name(scope)]
        else:
            self._scopes = [api.scope_name(s) for s in scope]
        self._tracer = None
        self._run_id = None
        self._final_stats = None
        self._lstep = 0
        self._stepping_thread = None  # The thread inside step(), while one is.
        self._step_lock = threading.Lock()  # Held by the thread inside a traced step().
        self._staging = None  # This run's _device.StagingPool (None: inline, or not begun).
        # Set when a flush left running by Ctrl-C returned; end() abandons at once while not.
        self._interrupted_flush = None
        self._final_staging = None  # The staging counters of the last run, after end().
        self._steps_skipped = 0
        self._step_errors = 0
        self._column_errors = 0  # Keys written empty because their provider failed.
        self._close_failed = False
        self._io_step_errors = 0  # Step (and close) errors that were write errors.
        self._last_step_error = None
        self._warned = set()  # What was warned about: (error type, entry key or message).
        self._forked = False  # Began in a parent process: the tracer is the parent's.
        self._pending_gstep = None
        self._last_gstep = None  # The gstep of the previous step() (item 8 of issue 34).
        self._gstep_key = None  # _run.gstep_key of this run's directory, from begin().
        self._value_keys = []  # The keys of this tracer registered with xdl.trace_value.
        self._value_names = {}  # Their names without the scope, where one key has the name.
        self._groups = []
        self._in_place = []  # [key, tensor, address, placement]: api.in_place, at begin().
        self._entered = False  # Inside __enter__: the warnings of begin() point at the `with`.

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def keys(self):
        """Column keys of the running tracer (fixed at begin), else what begin() would trace."""
        if self._tracer is not None:
            return list(self._tracer.keys)
        return api.registry().keys(self._scopes)

    @property
    def run_id(self):
        """The id of the running (or last) run; None before the first begin()."""
        return self._run_id

    @property
    def rank(self):
        """The rank the files are written as (fixed at begin)."""
        return self._config.rank

    @property
    def running(self):
        return self._tracer is not None

    @property
    def on_error(self):
        return self._on_error

    def begin(self):
        """Starts the tracer: fixes the header from the registered entries and opens the first
        file. Errors here (unwritable output_dir, ...) always raise."""
        if self._tracer is not None:
            return
        stale = api.stale_in_place(self._scopes)
        if stale:
            raise errors.FailedPreconditionError(
                "xdl_trace: tensors registered to be read in place no longer hold their values "
                f"there: {'; '.join(stale)}. A model moved or cast after xdl.watch() or "
                "trace_variable() (model.to(), .cuda(), .half(), .double()) would be traced "
                "from its old memory: register it after moving it (xdl.clear() first)"
            )
        # Each begin() is a new run: placement as of now, a new run id (docs/python.md "Runs").
        placement = _run.detect_placement(self._rank_option)
        self._config.rank = placement.rank
        self._config.run = _run.run_info(placement, self._metadata_json)
        cfg = self._config
        cfg.run_id = _run.shared_run_id(
            cfg.output_dir, cfg.prefix(), cfg.output_file_name, placement.rank
        )
        try:
            self._tracer = _core.Tracer.start(self._config, api.registry(), self._scopes)
        except errors.TraceIOError as error:
            why = _unwritable(cfg.output_dir)
            if why is None:
                raise
            raise errors.TraceIOError(
                f"xdl_trace: config 'output_dir': '{cfg.output_dir}' is not writable ({why})"
            ) from error
        self._run_id = self._tracer.config.run_id
        self._gstep_key = _run.gstep_key(cfg.output_dir, cfg.output_file_name, placement.rank)
        if self._training:  # Its evaluation takes the gstep it steps (self._last_gstep).
            _run.note_training_hook(self._gstep_key, self)
        self._check_device_tracers()
        # Groups of entries read together (xdl.watch) among what this tracer traces.
        self._groups = _device.groups(self._scopes, self._tracer.keys)
        self._in_place = api.in_place(self._scopes)
        self._value_keys = api.value_keys(self._tracer.keys)
        self._value_names = api.value_names(self._value_keys)
        self._last_gstep = None
        self._forked = False
        self._final_stats = None
        self._final_staging = None
        # Device tensors stage through this hook's own pool, bounded by its own config
        # (docs/device-path.md). Inline writes read them on the host instead: the
        # core writes inside its step, before a copy could be launched.
        if cfg.write_mode != _core.WriteMode.INLINE:
            self._staging = _device.StagingPool(
                cfg.max_pending_mb * 1e6,
                block=cfg.overflow == _core.OverflowPolicy.BLOCK,
                wait_bound_s=cfg.device_fence_timeout_s,
            )
        with _live_lock:
            _live_hooks.add(self)
        _install_sigterm_handler()
        api.hook_began(self, self._scopes, cfg.output_dir)
        if not self._tracer.keys and not cfg.device_tracers:  # Device events alone: fine.
            scopes = ", ".join(repr(s) for s in self._scopes)
            warnings.warn(
                f"xdl_trace: TraceHook.begin(): no keys are registered in scope {scopes}, so "
                "every record of this run is empty; register with xdl.watch(model) or "
                "xdl.trace_*() before the hook begins",
                RuntimeWarning,
                stacklevel=3 if self._entered else 2,
            )

    def _check_device_tracers(self):
        """A device tracer that did not start (no GPU, no driver) is a RuntimeWarning under
        on_error="warn" (training goes on, traced without it) and an error under "raise"."""
        tracers = self._tracer.stats().get("device_tracers") or []
        failed = [t for t in tracers if t.get("state") not in (None, "ok")]
        if not failed:
            return
        said = "device_tracers: "  # The core's prefix, which the message below says already.
        what = "; ".join(
            f"{t['tracer']}: {t['state']}: "
            + (t["message"][len(said) :] if t["message"].startswith(said) else t["message"])
            for t in failed
        )
        message = (
            f"xdl_trace: config 'device_tracers': {what} (the run is traced without "
            f"{'it' if len(failed) == 1 else 'them'}; stats()['device_tracers'] keeps this)"
        )
        if self._on_error == "raise":
            tracer, self._tracer = self._tracer, None
            try:
                tracer.close()
            except Exception:
                pass  # The device tracer's error is the one to report.
            raise errors.FailedPreconditionError(message)
        warnings.warn(
            errors.printable(message), RuntimeWarning, stacklevel=errors.caller_stacklevel()
        )

    def end(self, session=None):
        """Flushes and closes (idempotent). Under on_error='warn' a failure is warned about and
        counted; under 'raise' it raises."""
        self._refuse_inside_step("end")
        self._end(at_exit=False)

    def _refuse_inside_step(self, call):
        # A callback or provider of this hook's own step calling end() or flush() would wait for
        # the step it runs in: refused, as a re-entrant step() is (issue 24).
        if self._stepping_thread == threading.get_ident():
            raise errors.FailedPreconditionError(
                f"TraceHook.{call}() called from inside this hook's own step() (a callback or "
                f"provider it calls): refused, it would wait for itself; call it after the step"
            )

    def _end(self, at_exit):
        tracer = self._tracer
        if tracer is None:
            return
        self._tracer = None
        api.hook_ended(self)
        staging, self._staging = self._staging, None
        if self._forked:
            # A forked child: the parent owns the tracer and its files; nothing to close here.
            self._final_stats = tracer.stats()
            return
        with _live_lock:
            _live_hooks.discard(self)
        interrupted = None
        try:
            if self._interrupted_flush is not None and not self._interrupted_flush.is_set():
                tracer.abandon_waits()  # One Ctrl-C ends the flush and the close behind it.
            _wait_interruptibly(tracer.close, abandon=tracer.abandon_waits)
        except _INTERRUPTS as e:  # The close ended early; it is reported below, then raised.
            interrupted = e
        except Exception as e:
            if self._on_error == "raise" and not at_exit:
                self._final_stats = tracer.stats()
                raise
            self._close_failed = True
            self._count_error(e)
            self._io_step_errors -= isinstance(e, errors.TraceIOError)
        self._final_stats = tracer.stats()
        if staging is not None:  # Every record is written or dropped: its buffers go.
            staging.close()
            self._final_staging = staging.stats()
        if self._on_error == "warn":
            lost = self._losses(self._final_stats)
            if lost:
                warnings.warn(errors.printable(f"xdl_trace: {lost}"), RuntimeWarning, stacklevel=3)
        if interrupted is not None:
            raise interrupted

    def _losses(self, stats):
        """What this run lost, in one sentence for end()'s warning, or "" when nothing."""
        parts = []
        # A failed close, and steps refused after a write failed (their records are among the
        # dropped ones), count in step_errors too: said once, as what they are.
        failed_steps = self._step_errors - self._close_failed - self._io_step_errors
        if failed_steps:
            parts.append(f"{failed_steps} traced step(s) failed and were not written")
        if self._close_failed:
            parts.append("closing the trace failed")
        if self._column_errors:
            parts.append(f"{self._column_errors} column(s) were written empty")
        dropped = stats.get("records_dropped", 0)
        if dropped:
            why = (
                stats.get("last_error")
                or stats.get("last_deferred_error")
                or "the queue was full (overflow='drop')"
            )
            parts.append(f"{dropped} record(s) were dropped, not written ({why})")
        if not parts:
            return ""
        last = f" (last error: {self._last_step_error})" if self._last_step_error else ""
        return "; ".join(parts) + last

    def flush(self):
        """Waits until every record so far is on disk and Meta is current."""
        self._refuse_inside_step("flush")
        self._flush()

    def _flush(self, within=None):
        # `within` seconds (SIGTERM's handler): then the waits for device copies and tracers are
        # abandoned for the rest of the run.
        tracer = self._tracer
        if tracer is None:
            return
        returned = threading.Event()
        abandon = tracer.abandon_waits if within is not None else None
        try:
            _wait_interruptibly(tracer.flush, abandon=abandon, within=within, returned=returned)
        except _INTERRUPTS:
            self._interrupted_flush = returned  # Goes on in the background (no abandon).
            raise

    def __enter__(self):
        self._entered = True
        try:
            self.begin()
        finally:
            self._entered = False
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self._on_error == "raise":
            try:
                self.end()
            except Exception:
                pass  # The training error matters more.
            return False
        self.end()
        return False

    # -- steps -------------------------------------------------------------------------------

    def step(self, gstep=None, values=None):
        """Call after each training step. Traces it if the filter selects it; returns whether
        a record was produced. gstep: this step's global step (default: the hook's fixed
        gstep, else the local step count). values: this step's values of keys registered with
        xdl.trace_value, ``{"loss": loss}`` (as xdl.log(values) before the step); a key of
        this hook's scope may be named as trace_value named it ("loss" for "train/loss")."""
        if gstep is not None and self._fixed_gstep is None:
            gstep = _gstep_of(gstep, "hook.step(gstep=)")  # Before anything changes.
        tracer = self._tracer
        if tracer is None:
            self.begin()
            tracer = self._tracer
        if values is not None:
            self._hand_values(values)
        lstep = self._lstep
        self._lstep = lstep + 1
        fixed = self._fixed_gstep
        if fixed is None and gstep is None and not self._training:
            # An eval hook given no gstep: the step of the training run it evaluates, as a fixed
            # gstep (several eval batches may share it).
            trainer = _run.training_hook(self._gstep_key)
            fixed = None if trainer is None else trainer._last_gstep
        if fixed is not None:
            gstep, selector = fixed, lstep
        else:
            if gstep is None:
                gstep = lstep
            selector = gstep
            self._check_gstep_order(gstep)  # Sets self._last_gstep.
        try:
            if self._filter is not None and not self._filter(selector):
                self._steps_skipped += 1
                tracer.note_step_not_traced(gstep, lstep)  # Its host span (one clock read).
                api.registry().drop_pending_gradients()
                return False
            return self._trace_step(tracer, gstep, lstep)
        finally:
            if self._value_keys:
                api.take_step_values(self._value_keys)
            api.end_step(self._scopes)

    def _trace_step(self, tracer, gstep, lstep):
        # One thread at a time: a second one is refused here, before it prepares the value
        # groups the first one's record refers to.
        try:
            self._claim_step(gstep)
        except errors.FailedPreconditionError as e:
            if self._on_error == "raise":
                raise
            self._count_error(e)
            return False
        # Device tensors met by the providers join `batch`; their copies are enqueued once the
        # core queued the record (docs/device-path.md). Under on_error="warn" a provider that
        # fails, or a gradient not sent, writes an empty column, its error counted here.
        collect = self._on_error == "warn"
        if collect:
            _convert.begin_column_errors()
        try:
            if self._in_place:
                self._follow_moves(tracer, gstep)
            empty = _device.run_step(tracer.step, (gstep, lstep), self._groups, self._staging)
        except Exception as e:
            if self._on_error == "raise":
                raise
            self._count_error(e)
            return False
        finally:
            self._stepping_thread = None
            column_errors = _convert.end_column_errors() if collect else ()
            self._step_lock.release()
        for error in (*column_errors, *empty):
            self._count_error(error, column=True)
        return True

    def _follow_moves(self, tracer, gstep):
        """Tensors read in place whose memory moved since the last traced step (`param.data =
        ...`, a model moved or cast mid-run; before, the old memory was traced as today's
        values): the core reads each where it is now, or, where no view reaches (another dtype,
        shape or device), writes its column empty from this step on, said once for the keys
        moved together (raised under "raise": nothing is written for this step)."""
        lost = []
        for entry in self._in_place:
            key, tensor, address, was = entry
            if tensor.data_ptr() == address:
                continue  # One call a tensor: the check costs ~0.1 us each.
            now = _torch.placement(tensor)
            entry[2] = now[3]
            view = _torch.stable_view(key, tensor) if now[:3] == was else None
            tracer.repoint(key, *(view or (None,)))
            if view is None:
                was_at = _torch.describe_placement((*was, address))
                lost.append(f"'{key}' (was {was_at}, is {_torch.describe_placement(now)})")
        if lost:
            error = errors.FailedPreconditionError(
                f"xdl_trace: at gstep {gstep}, tensors read in place hold their values where no "
                f"in-place read reaches, so their columns are empty from here on: "
                f"{', '.join(lost)}. Register them again where they lie now (xdl.clear(), then "
                "register and begin a new hook)"
            )
            if self._on_error == "raise":
                raise error
            self._count_error(error, column=True)

    def _hand_values(self, values):
        if hasattr(values, "items"):  # Else log() says what is wrong.
            # A key this hook traces, else a name of its scope ("loss" for "eval/loss", even
            # where the default scope has a "loss" of its own), else a full key for another.
            own, names = self._value_keys, self._value_names
            values = {k if k in own else names.get(k, k): v for k, v in values.items()}
        try:
            api.log(values)
        except errors.NotFoundError as error:
            if self._on_error == "raise":
                raise
            # Not a failed step: the others are traced, and a key left without its value
            # is counted as the empty column it writes.
            self._warn_once(error, f"{type(error).__name__}: {error}")
            api.log({k: v for k, v in values.items() if api.is_value_key(k)})

    def _check_gstep_order(self, gstep):
        last = self._last_gstep
        self._last_gstep = gstep
        if last is None or gstep > last or "gstep order" in self._warned:
            return
        self._warned.add("gstep order")
        how = "repeats" if gstep == last else f"goes back (after {last})"
        warnings.warn(
            f"xdl_trace: hook.step(gstep={gstep}): gstep {how}; records of one run are told "
            "apart by gstep. Is hook.step() called twice per training step (once is enough: "
            "after backward), or the gstep passed not the global step? (warned once)",
            RuntimeWarning,
            stacklevel=3,
        )

    def _claim_step(self, gstep):
        """Makes this thread the one inside step(); FailedPreconditionError (nothing touched)
        when a step of this hook is already running, here (a provider calling step()) or on
        another thread."""
        if self._stepping_thread == threading.get_ident():
            raise errors.FailedPreconditionError(
                f"TraceHook.step(gstep={gstep}) called from inside this hook's own step() (a "
                "callback or provider it calls): refused; nothing was written for this step"
            )
        if not self._step_lock.acquire(blocking=False):
            raise errors.FailedPreconditionError(
                f"TraceHook.step(gstep={gstep}): another thread is inside step() of the hook "
                f"writing {self._config.output_dir}; a hook is stepped by one thread at a time. "
                "Nothing was written for this step."
            )
        self._stepping_thread = threading.get_ident()

    def _count_error(self, error, column=False):
        # Warned once per entry key (errors naming one entry carry it as `key`), else once per
        # message: a gradient missing at every step warns once; step_errors counts them all.
        # column: the step was written, with this error's key as an empty column.
        message = f"{type(error).__name__}: {error}"
        if column:
            self._column_errors += 1
            message += " (its column is empty in this record; the other keys were written)"
        else:
            self._step_errors += 1
            self._io_step_errors += isinstance(error, errors.TraceIOError)
        self._warn_once(error, message)
        self._last_step_error = message

    def _warn_once(self, error, message):
        key = getattr(error, "key", None)
        identity = (type(error).__name__, key if key is not None else message)
        if identity not in self._warned:
            self._warned.add(identity)
            warnings.warn(
                errors.printable(
                    f"xdl_trace: tracing failed, training continues (on_error='warn'): {message}"
                ),
                RuntimeWarning,
                stacklevel=errors.caller_stacklevel(),
            )

    # -- SessionRunHook protocol -------------------------------------------------------------

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        session = getattr(run_context, "session", None)
        gstep = getattr(session, "global_step", None)
        self._pending_gstep = gstep if isinstance(gstep, numbers.Integral) else None
        return None

    def after_run(self, run_context, run_values):
        self.step(self._pending_gstep)

    # -- counters ----------------------------------------------------------------------------

    def stats(self):
        """The core's counters (records/bytes written, dropped, files, queue high water, last
        write error, write_mode; deferred_failed and last_deferred_error: records lost to a
        failed device copy) plus the hook's: write_mode_reason (why that mode; None before
        begin), steps_seen, steps_skipped, step_errors, last_step_error, and the process's
        device counters: staging memory (staging_bytes, staging_high_water_bytes,
        staging_waits, staging_dropped; this hook's own pool, counted since its begin()) and summary graphs (summary_graphs held,
        summary_graph_captures, summary_graph_replays, summary_graph_failures,
        summary_passes_eager, summary_graphs_off: why graphs are off, or None) and
        summary_fused_digest ({device: "on" or why the fused digest kernel is off})."""
        if self._tracer is not None:
            out = self._tracer.stats()
        elif self._final_stats is not None:
            out = dict(self._final_stats)
        else:
            out = {}
        reason = write_mode_reason(_mode_name(self._config.write_mode)) if out else None
        staging = self._staging
        out.update(
            staging.stats() if staging is not None else self._final_staging or _device.NO_STAGING
        )
        out.update(_device.graph_stats())
        out.update(
            write_mode_reason=reason,
            steps_seen=self._lstep,
            steps_skipped=self._steps_skipped,
            step_errors=self._step_errors,
            column_errors=self._column_errors,
            last_step_error=self._last_step_error,
        )
        return out
