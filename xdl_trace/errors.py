"""Exception types raised by xdl_trace; the C++ binding maps absl::Status codes onto them.

Every project exception derives from :class:`TraceError` and also from the
built-in type a Python user would expect (``ValueError`` for bad arguments,
``OSError`` for file-system failures, ...), so ``except ValueError`` keeps
working. The mapping from status codes lives in one place: bindings/status.cc.
caller_stacklevel() makes our warnings point at the user's line.
"""

import contextlib
import os
import sys

__all__ = [
    "TraceError",
    "InvalidArgumentError",
    "RunChoiceError",
    "NotSupportedError",
    "NotFoundError",
    "FailedPreconditionError",
    "TraceIOError",
    "InternalError",
    "CallbackError",
    "printable",
]

# A key, path or message from a trace or a user is shown on one line as it is, never as terminal
# escape sequences, forged lines or reordered text (issue 24; issue 37 #5 for the writer's
# warnings): C0 and C1 controls, DEL and the bidirectional marks are escaped.
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}
_ESCAPES.update(
    {c: f"\\u{c:04x}" for c in [0x200E, 0x200F, *range(0x2028, 0x202F), *range(0x2066, 0x206A)]}
)


def caller_stacklevel():
    """The warnings.warn stacklevel of the first frame outside this package (and contextlib),
    so a warning points at the user's line whichever function of ours warns (inside
    hook.step(), a provider the core called: still the line that called hook.step())."""
    package = os.path.dirname(os.path.abspath(__file__))  # The package root: both wings.
    skipped = (package, contextlib.__file__)
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame, level = frame.f_back, level + 1
    return level


def printable(text):
    """`text` (a key, path or message) with control characters escaped as \\xNN / \\uNNNN."""
    return str(text).translate(_ESCAPES)


class TraceError(Exception):
    """Base class of every error raised by xdl_trace."""


class InvalidArgumentError(TraceError, ValueError):
    """A bad argument or configuration value (status INVALID_ARGUMENT, OUT_OF_RANGE, ALREADY_EXISTS)."""


class RunChoiceError(InvalidArgumentError):
    """A directory holds several runs and the `run` asked for picks none (or no run was named).

    ``path``, ``run`` (what was asked: None, an id or a prefix) and ``runs`` (trace_runs.Run,
    oldest first) let a caller say it in its own terms (the CLI: ``--run latest``)."""

    def __init__(self, message, path, run, runs):
        super().__init__(message)
        self.path = path
        self.run = run
        self.runs = runs


class NotSupportedError(InvalidArgumentError):
    """A feature this build does not support, e.g. an ``hdfs://`` output_dir (status UNIMPLEMENTED)."""


class NotFoundError(TraceError, LookupError):
    """Something named was not found (status NOT_FOUND)."""


class FailedPreconditionError(TraceError, RuntimeError):
    """The call came at the wrong time, e.g. a traced gradient was not sent (FAILED_PRECONDITION)."""


class TraceIOError(TraceError, OSError):
    """Writing trace files failed: permissions, disk full, file too large, removed directory, a
    symbolic link planted where the writer creates a file. Every file-system failure of the
    writer, whatever status code its errno maps to (the core marks them), and PERMISSION_DENIED,
    RESOURCE_EXHAUSTED, DATA_LOSS, UNAVAILABLE. The message names the file and keeps errno's
    text."""


class InternalError(TraceError, RuntimeError):
    """Any other status code (INTERNAL, UNKNOWN, ABORTED, ...)."""


class CallbackError(TraceError, TypeError):
    """A user callback or summary raised, or returned something that is not an array.

    A TypeError, so ``except TypeError`` catches it; a raised exception is chained as
    ``__cause__``. The message names the key.
    """
