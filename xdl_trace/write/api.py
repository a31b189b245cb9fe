"""What to trace: the XDL trace API over the process-wide registry.

Entries live per scope (default ``""``); a non-empty scope prefixes the key as
``scope/key``. A hook traces the scopes it is given. Values registered here
are read at every traced step: numpy arrays and CPU torch tensors in place
(their memory is registered once, no per-step Python work), everything else
through a provider called at each traced step.
"""

import contextlib
import numbers
import threading
import warnings
import weakref

import numpy as np

from . import _convert, _device, _torch
from .. import _core, _names, errors

__all__ = [
    "trace_tensor",
    "trace_variable",
    "trace_gradient",
    "trace_collection",
    "trace_callback",
    "trace_once",
    "trace_value",
    "log",
    "send_gradient",
    "clear",
    "keys",
]

_registry = _core.Registry()
_lock = threading.RLock()  # Reentrant: trace_variable registers while holding it.
# Variables by (scope, name), so trace_gradient(name) finds what it differentiates.
_variables = {}
# Gradient names waiting for send_gradient, by the (scope, key) of their trace_gradient entry.
_sent_gradients = {}
# Sent gradient names some entry summarizes (a device gradient is then read on the host).
_summarized_gradients = set()
# Names whose gradient is read from a torch tensor's .grad (trace_gradient, watch): what
# send_gradient tells a user who sends one anyway.
_grad_read_names = set()
# Keys registered with trace_value ({full key: scope}), and the values handed for the coming step
# (xdl.log / hook.step(values=...)): {full key: value}, taken by that key's provider.
_value_keys = {}
_step_values = {}
# hook.step() calls ended per scope ({scope: n}), by the hooks tracing it; written and read on
# the training thread (a scope's one stepping hook, the forward hooks of its model), one dict
# operation each under the GIL. watch stamps an activation with its scope's count when the
# module runs: at a traced step an older stamp is an output of an earlier step.
_steps_ended = {}
# Torch tensors read in place ({(scope, key): (tensor, where it lay)}): a model moved or cast
# after it was registered (model.to(), .cuda(), .double()) leaves the registration on its old
# memory, which hook.begin() refuses (stale_in_place) rather than trace silently.
_in_place = {}
# Running hooks -> (the scopes they trace, their output_dir, whether they warned already), so
# that a registration they will not see is warned about (hook_began / hook_ended).
_running_hooks = weakref.WeakKeyDictionary()


def registry():
    """The process-wide _core.Registry every hook reads from."""
    return _registry


def scope_name(scope):
    """A scope argument as the registry spells it ("" for None; "eval/", as TensorFlow's name
    scopes end, is "eval": its keys are "eval/acc", not "eval//acc"); TypeError for a
    non-string."""
    if scope is None:
        return ""
    if not isinstance(scope, str):
        raise TypeError(f"xdl_trace: scope must be a string or None, got {type(scope).__name__}")
    return scope.strip("/")


def full_key(scope, key):
    """The key a reader sees: ``scope/key``, or ``key`` without a scope."""
    return f"{scope}/{key}" if scope else key


def _check_key(key):
    if not isinstance(key, str):
        raise TypeError(f"xdl_trace: key must be a string, got {type(key).__name__}")
    return key


def summary_spec(scope, key, summary):
    """(summary object for the binding, histogram bins)."""
    if summary is None or isinstance(summary, str):
        return summary, _core.DEFAULT_HISTOGRAM_BINS
    if callable(summary):
        return _convert.wrap_summary(full_key(scope, key), summary), _core.DEFAULT_HISTOGRAM_BINS
    raise TypeError(
        f"xdl_trace: key '{full_key(scope, key)}': summary must be None, 'stats', "
        f"'histogram', 'digest' or a callable, got {type(summary).__name__}"
    )


def hook_began(hook, scopes, output_dir):
    """Notes a running hook, so a registration in one of its `scopes` warns (once per hook)
    that the hook traces the keys it began with."""
    with _lock:
        _running_hooks[hook] = [list(scopes), output_dir, False]


def hook_ended(hook):
    with _lock:
        _running_hooks.pop(hook, None)


def _staging_pool_for(name):
    """The staging pool of a running hook that traces sent gradient `name` (the first begun),
    or None (no such hook stages device tensors: the gradient is read on the host now)."""
    with _lock:
        scopes = {scope for (scope, _), sent in _sent_gradients.items() if sent == name}
        hooks = [hook for hook, state in _running_hooks.items() if scopes & set(state[0])]
    for hook in hooks:
        pool = hook._staging
        if pool is not None:
            return pool
    return None


def _warn_if_running(scope, key):
    with _lock:
        missed = [s for s in _running_hooks.values() if scope in s[0] and not s[2]]
        for state in missed:
            state[2] = True
    for _, output_dir, _ in missed:
        warnings.warn(
            errors.printable(
                f"xdl_trace: key '{full_key(scope, key)}' was registered after "
                f"TraceHook.begin(): the running hook (output_dir '{output_dir}') traces the "
                "keys it began with, so this key goes to the next hook begun; register before "
                "`with TraceHook(...)` (or begin())"
            ),
            RuntimeWarning,
            stacklevel=errors.caller_stacklevel(),
        )


@contextlib.contextmanager
def registering(scope, key):
    """Wraps one registration of `key` in `scope` (a scope_name): a key registered twice (a
    notebook cell run again) is refused with the hint to clear first, and a registration that
    a running hook will not see is warned about."""
    try:
        yield
    except errors.InvalidArgumentError as error:
        if full_key(scope, key) not in _registry.keys([scope]):
            raise
        clear_call = f"xdl.clear({scope!r})" if scope else "xdl.clear()"
        raise errors.InvalidArgumentError(
            f"{error} (running a notebook cell again? call {clear_call} before registering "
            "again)"
        ) from None
    _warn_if_running(scope, key)


def note_gradient_read(name):
    """Notes that the gradient of variable `name` is read from its torch tensor's .grad."""
    with _lock:
        _grad_read_names.add(name)


def _warn_if_by_reference_misses(key_name, value):
    """Warns where registering `value` by reference cannot be what the user meant: a torch
    tensor computed in the step (it has a grad_fn: a loss, an activation) or a 0-d value is
    rebound each step, so the trace would read the first one at every step."""
    if _torch.is_tensor(value) and getattr(value, "grad_fn", None) is not None:
        what = "a torch tensor computed by the step (it has a grad_fn)"
    elif isinstance(value, (np.ndarray, np.generic, numbers.Number)) and np.ndim(value) == 0:
        what = f"a 0-d value ({type(value).__name__})"
    elif _torch.is_tensor(value) and value.dim() == 0 and not value.requires_grad:
        what = "a 0-d torch tensor"  # A 0-d parameter is updated in place: not warned.
    else:
        return
    warnings.warn(
        errors.printable(
            f"xdl_trace: key '{key_name}': {what} is read in place at every traced step, so a "
            "name rebound each step (loss = ...) would be traced as this first value at every "
            f"step; hand it at the step instead: xdl.trace_value({key_name!r}) before the hook, "
            f"then hook.step(values={{{key_name!r}: value}}) (or pass a callable: lambda: value)"
        ),
        RuntimeWarning,
        stacklevel=errors.caller_stacklevel(),
    )


def _register(kind, name, value, scope, summary=None, rebound=True):
    """rebound: whether `value` may be a name the step rebinds (warned where by reference
    cannot be meant); False for a module's buffer, which the model updates in place."""
    scope = scope_name(scope)
    key = _check_key(name)
    key_name = full_key(scope, key)
    if rebound and kind in (_core.EntryKind.TENSOR, _core.EntryKind.VARIABLE):
        _warn_if_by_reference_misses(key_name, value)
    requested = summary
    summary, bins = summary_spec(scope, key, summary)
    how = _convert.classify(key_name, value, requested, bins)
    with registering(scope, key):
        if how[0] == "array":
            _registry.register_array(scope, key, kind, how[1], how[2], summary, bins)
        else:
            _registry.register_provider(scope, key, kind, how[1], summary, bins)
    if how[0] == "array" and _torch.is_tensor(value):
        with _lock:
            _in_place[(scope, key)] = (value, _torch.placement(value))


def stale_in_place(scopes):
    """What hook.begin() refuses: for each torch tensor of `scopes` registered to be read in
    place whose memory is no longer where it was (moved, cast or reallocated since), a line
    naming its key, where it was and where it is."""
    lines = []
    for key, tensor, address, was in in_place(scopes):
        now = _torch.placement(tensor)
        if now != (*was, address):
            lines.append(
                f"'{key}' was {_torch.describe_placement((*was, address))}, "
                f"is {_torch.describe_placement(now)}"
            )
    return lines


def in_place(scopes):
    """The torch tensors of `scopes` read in place, as [full key, tensor, address, (device,
    dtype, shape)] lists: what a hook checks at each traced step (TraceHook._follow_moves)."""
    with _lock:
        entries = [(k, v) for k, v in _in_place.items() if k[0] in scopes]
    return [[full_key(*k), tensor, was[3], was[:3]] for k, (tensor, was) in entries]


def trace_tensor(name, value, scope=None, summary=None):
    """Traces `value` under key `name` at every traced step.

    value: a numpy array or torch tensor (read in place: update it in place, e.g.
    ``w -= lr * g``, rather than rebinding the name), any other array-like (converted
    at each step), or a zero-argument callable returning an array (called at each step).
    summary: None, "stats", "histogram", "digest" (the tensor digest: float64[2], docs/format.md
    "Tensor digest"), or a callable (numpy array in, array out).
    """
    _register(_core.EntryKind.TENSOR, name, value, scope, summary)


def trace_buffer(name, tensor, scope=None, summary=None):
    """Traces a module's buffer (BatchNorm's running statistics, an EMA's weights) as
    ``trace_tensor`` does: read in place at every traced step. A 0-d buffer is not warned
    about: the model updates it in place, no step rebinds it (watch's buffers)."""
    _register(_core.EntryKind.TENSOR, name, tensor, scope, summary, rebound=False)


def trace_variable(name, var, scope=None, summary=None):
    """Traces a trainable variable: a numpy array, a torch Parameter, or an object with a
    ``.value`` (read at each traced step). Remembered for ``trace_gradient(name)``."""
    value = var
    if not isinstance(var, np.ndarray) and not _torch.is_tensor(var) and hasattr(var, "value"):
        value = lambda: var.value  # noqa: E731  (re-read: .value may be rebound each step)
    with _lock:
        _register(_core.EntryKind.VARIABLE, name, value, scope, summary)
        _variables[(scope_name(scope), name)] = var


def remember_variable(scope, name, var):
    """Remembers a variable registered under `scope` (a scope_name) for trace_gradient(name)."""
    with _lock:
        _variables[(scope, name)] = var


def _find_variable(scope, name):
    if (scope, name) in _variables:
        return _variables[(scope, name)]
    for (_, other), var in _variables.items():
        if other == name:
            return var
    return None


def trace_gradient(name, key=None, scope=None, summary=None):
    """Traces the gradient of the variable registered as `name`, under `key`
    (default ``gradient/<name>``).

    For a torch tensor that requires grad, the gradient is read from ``.grad`` at each
    traced step (after backward). For anything else the training code delivers it each
    step with ``send_gradient(name, value)``.
    """
    scope_s = scope_name(scope)
    key = _check_key(_names.gradient_key(name) if key is None else key)
    key_name = full_key(scope_s, key)
    requested = summary
    summary, bins = summary_spec(scope_s, key, summary)
    with _lock:
        var = _find_variable(scope_s, name)
    if _torch.is_tensor(var) and var.requires_grad:
        with registering(scope_s, key):
            _registry.register_provider(
                scope_s,
                key,
                _core.EntryKind.GRADIENT,
                _torch.grad_provider(key_name, name, var, requested, bins),
                summary,
                bins,
            )
        note_gradient_read(name)
    else:
        with registering(scope_s, key):
            with _lock:
                _registry.register_gradient(scope_s, key, name, summary, bins)
                _sent_gradients[(scope_s, key)] = name
                if requested is not None:
                    _summarized_gradients.add(name)


def send_gradient(name, value):
    """Delivers the gradient of variable `name` for the current step (the core's keyed
    rendezvous: the next traced step takes it; a second send replaces the first).

    The array is referenced, not copied: do not modify it in place before the hook's
    step (send a copy if you must).

    Raises errors.NotFoundError (a LookupError, as KeyError is) when no
    ``trace_gradient(name)`` waits for a sent gradient, listing the names that do: a
    misspelt name would otherwise fail later, at the traced step."""
    with _lock:
        expected = sorted(set(_sent_gradients.values()))
        read_from_grad = name in _grad_read_names
    if name not in expected and read_from_grad:
        raise errors.NotFoundError(
            f"xdl_trace: send_gradient({name!r}, ...): {name!r} is a torch tensor: its gradient "
            "is read from .grad at each traced step; send_gradient is not needed"
        )
    if name not in expected:
        waiting = ", ".join(repr(n) for n in expected) if expected else "none"
        raise errors.NotFoundError(
            f"xdl_trace: send_gradient({name!r}, ...): no trace_gradient({name!r}) waits for "
            f"a sent gradient; gradient names registered: {waiting}"
        )
    if _torch.is_tensor(value) and name not in _summarized_gradients:
        backend = _device.backend_for(value)
        pool = _staging_pool_for(name) if backend is not None else None
        if pool is not None:  # Copied asynchronously from now on; nothing waits.
            _torch.check_dtype(_names.gradient_key(name), value)
            _registry.send_gradient(name, _device.stage_now(value, pool))
            return
    result = _convert.to_result(_names.gradient_key(name), value, "send_gradient value")
    if isinstance(result, tuple):
        _registry.send_gradient(name, result[0], result[1])
    else:
        _registry.send_gradient(name, result)


def trace_collection(collection, scope=None):
    """Traces a group of variables: a torch Module (its named parameters; a model wrapped by
    DDP, DataParallel or torch.compile under its own names, as ``watch``), a dict of
    name -> var, or an iterable of objects with ``.name``. Returns the names traced."""
    if _torch.is_module(collection):
        items = _torch.named_parameters(_torch.unwrapped(collection))
    elif isinstance(collection, dict):
        items = list(collection.items())
    else:
        try:
            members = list(collection)
        except TypeError:
            raise TypeError(
                "xdl_trace: trace_collection expects a torch Module, a dict or an iterable, "
                f"got {type(collection).__name__}"
            ) from None
        items = []
        for obj in members:
            if not hasattr(obj, "name"):
                raise TypeError(
                    f"xdl_trace: trace_collection: {type(obj).__name__} object has no .name"
                )
            items.append((obj.name, obj))
    for name, var in items:
        trace_variable(name, var, scope=scope)
    return [name for name, _ in items]


def trace_callback(name, callback, scope=None):
    """Traces what the zero-argument `callback` returns, called at each traced step.
    A callback that raises or returns a non-array fails the step with a TypeError
    (errors.CallbackError) naming the key."""
    if not callable(callback):
        raise TypeError(f"xdl_trace: key '{name}': callback is not callable")
    scope = scope_name(scope)
    key = _check_key(name)
    provider = _convert.wrap_callable(full_key(scope, key), callback)
    with registering(scope, key):
        _registry.register_provider(scope, key, _core.EntryKind.CALLBACK, provider)


_NOT_HANDED = object()


def _value_provider(key):
    def value():
        handed = _step_values.get(key, _NOT_HANDED)
        if handed is _NOT_HANDED:
            raise errors.NotFoundError(
                f"no value was handed for this step (hook.step(values={{{key!r}: ...}}) or "
                f"xdl.log({{{key!r}: ...}}) before hook.step(); None says there is none)"
            )
        # None: no value at this step, said so (an eval metric of every 100th step): an empty
        # column, as a trace_once key's after its first, no error.
        return _convert.EMPTY_COLUMN if handed is None else handed

    return value


def trace_value(name, scope=None):
    """Traces a value handed at each step, as wandb.log takes one: ``hook.step(values={name:
    value})``, or ``xdl.log({name: value})`` before ``hook.step()``. Nothing is held by
    reference, so a name rebound each step (``loss = ...``) needs no closure. A traced step
    that was handed no value writes an empty column for it (an error counted and warned once
    under on_error="warn"); one handed None writes it empty too, as meant (a metric of some
    steps only), with no error."""
    scope = scope_name(scope)
    key = _check_key(name)
    key_name = full_key(scope, key)
    provider = _convert.wrap_callable(key_name, _value_provider(key_name), what="value")
    with registering(scope, key):
        _registry.register_provider(scope, key, _core.EntryKind.CALLBACK, provider)
    with _lock:
        _value_keys[key_name] = scope


def log(values):
    """Hands this step's values of keys registered with trace_value (full keys: ``scope/key``
    under a scope); the next hook.step() traces them. A key not registered with trace_value
    raises errors.NotFoundError naming the ones that are."""
    if not hasattr(values, "items"):
        raise TypeError(
            f"xdl_trace: log(values): expected a dict {{key: value}}, got {type(values).__name__}"
        )
    with _lock:
        unknown = sorted(str(k) for k in values if k not in _value_keys)
        known = sorted(_value_keys)
    if unknown:
        raise errors.NotFoundError(
            f"xdl_trace: log(): {', '.join(repr(k) for k in unknown)} not registered with "
            f"xdl.trace_value(name) (keys are fixed when the hook begins; register them "
            f"before it); trace_value keys: {', '.join(repr(k) for k in known) or 'none'}"
        )
    _step_values.update(values)


def value_keys(keys):
    """Those of `keys` registered with trace_value."""
    with _lock:
        return [k for k in keys if k in _value_keys]


def is_value_key(key):
    return key in _value_keys


def value_names(keys):
    """{name: full key} for those of `keys` registered with trace_value under a scope, by the
    name trace_value was given ("loss" for "train/loss"); a name two scopes share maps to
    neither (only its full keys say which)."""
    with _lock:
        pairs = [(k[len(_value_keys[k]) + 1 :], k) for k in keys if _value_keys.get(k)]
    names = [name for name, _ in pairs]
    return {name: key for name, key in pairs if names.count(name) == 1}


def steps_ended(scope):
    """How many hook.step() calls of `scope` (a scope_name) have ended."""
    return _steps_ended.get(scope, 0)


def end_step(scopes):
    """A hook's step() of `scopes` ended (traced, skipped or failed)."""
    for scope in scopes:
        _steps_ended[scope] = _steps_ended.get(scope, 0) + 1


def take_step_values(keys):
    """Forgets the values handed for `keys` (a hook's step consumed them): a value is traced
    at the step it was handed for, never again at a later one."""
    if _step_values:
        for key in keys:
            _step_values.pop(key, None)


def trace_once(name, value, scope=None):
    """Traces `value` once, at the first traced step; later records carry an empty float32
    column for it (as XDL does)."""
    _register(_core.EntryKind.ONCE, name, value, scope)


def clear(scope=None):
    """Removes every entry of `scope`, or of all scopes when None (so train and eval
    registrations do not mix). Running tracers keep the entries they started with."""
    with _lock:
        if scope is None:
            _registry.clear()
            _variables.clear()
            _sent_gradients.clear()
            _summarized_gradients.clear()
            _device.clear_groups()
            _grad_read_names.clear()
            _value_keys.clear()
            _step_values.clear()
            _in_place.clear()
        else:
            s = scope_name(scope)
            _registry.clear_scope(s)
            _device.clear_groups(s)
            for table in (_variables, _sent_gradients, _in_place):
                for k in [k for k in table if k[0] == s]:
                    del table[k]
            for k in [k for k, key_scope in _value_keys.items() if key_scope == s]:
                del _value_keys[k]
                _step_values.pop(k, None)


def keys(scope=None):
    """Full keys registered in `scope` (a string, a list of scopes, or None for the default)."""
    if scope is None or isinstance(scope, str):
        scopes = [scope_name(scope)]
    else:
        scopes = [scope_name(s) for s in scope]
    return _registry.keys(scopes)
