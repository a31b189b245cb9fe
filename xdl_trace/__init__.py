"""xdl_trace: trace tensors, variables and gradients of a training run into XDL Trace files.

    import xdl_trace as xdl
    xdl.trace_variable("w", w)
    with xdl.TraceHook({"output_dir": "out"}) as hook:
        for step in range(100):
            train_step()
            hook.step()

The C++ core (xdl_trace._core) captures registered memory and writes on its own IO thread.
"""

import sys

from ._version import __version__

try:
    import numpy as _numpy  # noqa: F401  (needed below; imported first for a clear message)
    from . import _core
except ImportError as _error:
    raise ImportError(
        f"xdl_trace {__version__} cannot be imported by {sys.executable}: {_error}. "
        "It needs numpy and its compiled extension xdl_trace._core built for this interpreter. "
        "`make build` builds it for Debian's /usr/bin/python3 (which has numpy): run "
        "`/usr/bin/python3 -m xdl_trace ...`, or install numpy here and run "
        f"`make build PYTHON={sys.executable} BUILD=build-mine`."
    ) from _error

from .write import api, filters
from . import errors
from ._core import DType
from .write.api import (
    clear,
    keys,
    log,
    send_gradient,
    trace_callback,
    trace_collection,
    trace_gradient,
    trace_once,
    trace_tensor,
    trace_value,
    trace_variable,
)
from .write.filters import Every, Range, Sample, Steps
from .write.hook import CONFIG_KEYS, TraceHook, detect_rank
from .read import reader  # xdl.reader: the summary helpers docs/python.md names.
from .read.reader import open_trace
from .read.selection import Selection
from .read.trace_runs import Run, runs
from .read.analysis import find_nan
from .read.compare import diff
from .write.watch import watch
from .write.ranges import host_range
from .write.gpu_memory import trace_gpu_memory
from .write.session import TrainSession

__all__ = [
    "errors",
    "filters",
    "DType",
    *api.__all__,
    "Every",
    "Range",
    "Sample",
    "Steps",
    "TraceHook",
    "CONFIG_KEYS",
    "detect_rank",
    "TrainSession",
    "open_trace",
    "Selection",
    "runs",
    "Run",
    "find_nan",
    "diff",
    "watch",
    "host_range",
    "trace_gpu_memory",
]
