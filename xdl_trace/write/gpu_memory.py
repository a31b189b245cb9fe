"""``xdl.trace_gpu_memory()``: torch's CUDA allocator counters traced at each step (allocated,
reserved, the peak since the previous traced step), read from the allocator's own statistics
with no device synchronization; the report draws them in its GPU section on the gstep axis.

    xdl.trace_gpu_memory()            # keys gpu_memory/allocated_mib, reserved_mib, peak_mib
"""

import numpy as np

from . import api

__all__ = ["trace_gpu_memory", "MEMORY_KEYS"]

MEMORY_KEYS = ("gpu_memory/allocated_mib", "gpu_memory/reserved_mib", "gpu_memory/peak_mib")
_MIB = float(1 << 20)


def trace_gpu_memory(device=None, scope=None, reset_peak=True):
    """Registers MEMORY_KEYS (float64 MiB, scalars): ``torch.cuda.memory_allocated``,
    ``memory_reserved`` and ``max_memory_allocated`` of `device` (the current one when None).
    These read the caching allocator's counters on the host: no synchronize, no kernel. With
    reset_peak, the peak is reset after each read (``torch.cuda.reset_peak_memory_stats``), so
    each step shows its own peak; pass False to keep torch's peak for your own use. Returns the
    full keys."""
    import torch

    def counter(read):
        return lambda: np.array(read(device) / _MIB, np.float64)

    def peak():
        value = np.array(torch.cuda.max_memory_allocated(device) / _MIB, np.float64)
        if reset_peak:
            torch.cuda.reset_peak_memory_stats(device)
        return value

    reads = (
        counter(torch.cuda.memory_allocated),
        counter(torch.cuda.memory_reserved),
        peak,
    )
    for key, read in zip(MEMORY_KEYS, reads):
        api.trace_callback(key, read, scope=scope)
    return [api.full_key(api.scope_name(scope), key) for key in MEMORY_KEYS]
