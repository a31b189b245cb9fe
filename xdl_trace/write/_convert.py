"""Turns user values (numpy arrays, torch tensors, numbers, array-likes, callables) into what the
binding registers: a stable array read in place, or a provider called at each traced step.

Wire dtypes come from the one dtype table, defined in C++ (cpp/src/core/dtype.cc) and exported as
_core.dtype_table(): bool, int8..int64, uint8..uint64, float16, float32, float64, and bfloat16 (torch).
object, complex, string, datetime and structured arrays are rejected with a TypeError naming
the key. Non-contiguous, misaligned or byte-swapped arrays are accepted but copied to a
contiguous native array at each traced step.
"""

import numbers
import threading

import numpy as np

from .. import _core, errors
from . import _torch

# [(wire value, name, itemsize, numpy dtype name)] in wire order: the C++ dtype table.
DTYPE_TABLE = tuple(_core.dtype_table())
# numpy (kind, itemsize) pairs a column accepts, whatever the byte order; the binding maps each
# to its wire dtype the same way (bindings/py_tensor.cc).
_SUPPORTED = frozenset((np.dtype(numpy).kind, size) for _, _, size, numpy in DTYPE_TABLE)
# Dtypes numpy spells as the wire does ("byte" and "bfloat16" have no numpy type of their own).
_SUPPORTED_NAMES = ", ".join(
    name for _, name, _, numpy in DTYPE_TABLE if np.dtype(numpy).name == name
)


def check_dtype(key, dtype):
    if (dtype.kind, dtype.itemsize) not in _SUPPORTED or dtype.fields is not None:
        raise TypeError(
            f"xdl_trace: key '{key}': unsupported dtype {dtype} "
            f"(supported: {_SUPPORTED_NAMES}; bfloat16 from torch)"
        )


def _in_place_ok(array):
    flags = array.flags
    return flags.c_contiguous and flags.aligned and array.dtype.isnative


def _contiguous(array):
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return np.ascontiguousarray(array)


def to_result(key, obj, what="callback", summary=None, bins=_core.DEFAULT_HISTOGRAM_BINS):
    """Converts what a callback/summary returned into an ndarray or (ndarray, dtype code), or
    for a device tensor inside hook.step() a deferred value (_torch.capture, with the entry's
    `summary`)."""
    if isinstance(obj, np.ndarray):
        check_dtype(key, obj.dtype)
        return obj if _in_place_ok(obj) else _contiguous(obj)
    if _torch.is_tensor(obj):
        return _torch.capture(key, obj, summary, bins)
    if isinstance(obj, (np.generic, numbers.Number)) and not isinstance(obj, (str, bytes)):
        array = np.asarray(obj)
        check_dtype(key, array.dtype)
        return array
    if hasattr(obj, "__array__") or hasattr(obj, "__array_interface__"):
        array = np.asarray(obj)
        check_dtype(key, array.dtype)
        return _contiguous(array)
    if isinstance(obj, (list, tuple)):
        try:
            array = np.asarray(obj)
        except ValueError as e:  # ragged
            raise errors.CallbackError(
                f"xdl_trace: {what} for key '{key}' returned a ragged {type(obj).__name__}: {e}"
            ) from e
        check_dtype(key, array.dtype)
        return array
    raise errors.CallbackError(
        f"xdl_trace: {what} for key '{key}' returned {type(obj).__name__}; "
        "expected an array (numpy array, torch tensor or number)"
    )


# The column errors of the step in progress on this thread: a list while a hook under
# on_error="warn" steps (begin_column_errors), else None (a failing provider fails the step).
_column_errors = threading.local()

# What an entry whose provider failed writes under on_error="warn": an empty float32 column, as
# a trace_once entry after its first record (cpp/src/tracer/tracer.cc, EmptyFloatColumn).
EMPTY_COLUMN = np.zeros(0, np.float32)


def begin_column_errors():
    """From now until end_column_errors(), on this thread, a provider that fails (raises or
    returns a non-array) writes an empty column and its error is collected instead of raised."""
    _column_errors.errors = []


def end_column_errors():
    """The errors collected since begin_column_errors(), in column order; collection stops."""
    collected = getattr(_column_errors, "errors", None) or []
    _column_errors.errors = None
    return collected


def _empty_column_or_raise(error):
    collected = getattr(_column_errors, "errors", None)
    if collected is None:
        raise error
    collected.append(error)
    return EMPTY_COLUMN


def wrap_callable(key, fn, what="callback", summary=None, bins=_core.DEFAULT_HISTOGRAM_BINS):
    """A provider: calls fn() and converts (to_result); failures become CallbackError (a
    TypeError). While a hook collects column errors (on_error="warn"), a provider without a
    summary that fails writes an empty column instead and its error is collected: the step's
    other keys are kept."""

    def provider():
        try:
            value = fn()
        except Exception as e:
            error = errors.CallbackError(
                f"xdl_trace: {what} for key '{key}' raised {type(e).__name__}: {e}"
            )
            error.__cause__ = e
            error.key = key
            if summary is not None:
                raise error
            return _empty_column_or_raise(error)
        if summary is not None:
            return to_result(key, value, what, summary, bins)
        try:
            return to_result(key, value, what, summary, bins)
        except (errors.CallbackError, TypeError) as error:
            error.key = key
            return _empty_column_or_raise(error)

    return provider


def wrap_summary(key, fn):
    def summary(array):
        try:
            value = fn(array)
        except Exception as e:
            raise errors.CallbackError(
                f"xdl_trace: summary for key '{key}' raised {type(e).__name__}: {e}"
            ) from e
        result = to_result(key, value, "summary")
        if isinstance(result, tuple):  # bfloat16 bits: widen to float32.
            result = (result[0].astype(np.uint32) << 16).view(np.float32)
        return result

    summary.__xdl_name__ = callable_name(fn)  # Recorded in the Header's column descriptor.
    return summary


def callable_name(fn):
    """``module.qualname`` of a function (``numpy.mean``, ``__main__.<lambda>``); the type's
    for a callable object without one."""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(qualname, str):
        qualname = type(fn).__qualname__
        module = type(fn).__module__
    else:
        module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if isinstance(module, str) and module else qualname


def classify(key, value, summary=None, bins=_core.DEFAULT_HISTOGRAM_BINS):
    """('array', ndarray, dtype code) for memory read in place at each traced step, or
    ('provider', fn) for a value read (and converted) at each traced step. `summary` (the
    entry's: None, a built-in name or a callable) decides how device tensors are read."""
    if isinstance(value, np.ndarray):
        check_dtype(key, value.dtype)
        if _in_place_ok(value):
            return ("array", value, -1)
        return ("provider", lambda: _contiguous(value))
    if _torch.is_tensor(value):
        view = _torch.stable_view(key, value)
        if view is not None:
            return ("array", view[0], view[1])
        return ("provider", lambda: _torch.capture(key, value, summary, bins))
    if isinstance(value, (str, bytes)):
        raise TypeError(
            f"xdl_trace: key '{key}': unsupported value of type {type(value).__name__} "
            "(expected a numpy array, torch tensor, number, array-like or zero-argument "
            "callable; text goes in TraceHook(metadata={...}))"
        )
    if isinstance(value, (np.generic, numbers.Number)):
        array = np.asarray(value)  # Immutable: its bytes never change.
        check_dtype(key, array.dtype)
        return ("array", array, -1)
    if callable(value):
        return ("provider", wrap_callable(key, value, summary=summary, bins=bins))
    if (
        isinstance(value, (list, tuple))
        or hasattr(value, "__array__")
        or hasattr(value, "__array_interface__")
    ):
        array = np.asarray(value)
        check_dtype(key, array.dtype)
        return ("provider", lambda: _contiguous(np.asarray(value)))
    raise TypeError(
        f"xdl_trace: key '{key}': unsupported value of type {type(value).__name__} "
        "(expected a numpy array, torch tensor, array-like or zero-argument callable)"
    )
