"""xdl_trace: trace tensors, variables and gradients of a training run into XDL Trace files.

    import xdl_trace as xdl
    xdl.trace_variable("w", w)
    with xdl.TraceHook({"output_dir": "out"}) as hook:
        for step in range(100):
            train_step()
            hook.step()

The C++ core (xdl_trace._core) captures registered memory and writes on its own IO thread.
"""

from . import api, errors, filters
from ._core import DType
from .api import (
    clear,
    keys,
    send_gradient,
    trace_callback,
    trace_collection,
    trace_gradient,
    trace_once,
    trace_tensor,
    trace_variable,
)
from .filters import Every, Range, Sample, Steps
from .hook import CONFIG_KEYS, TraceHook, detect_rank
from .reader import open_trace
from .trace_runs import Run, runs
from .session import TrainSession

__version__ = "0.1.0"

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
    "runs",
    "Run",
]
