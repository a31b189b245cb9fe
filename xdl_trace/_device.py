"""Device (CUDA) tensors traced without stopping the device: one batch of copies per traced step.

At ``hook.step()`` the C++ core calls the entries' providers; a provider that meets a device
tensor adds it to the step's batch (``StepBatch.add``) and hands the core a deferred value (an
offset into the step's staging buffer, ``xdl_trace/deferred.h``) instead of host bytes. Once the
core has queued the record, ``StepBatch.launch`` enqueues, in the device's stream order:

1. the built-in summaries of the batch's tensors, all at once (``_device_summary``);
2. one gather of every value's bytes (summary rows and full values) into one device buffer and
   one asynchronous copy of it into pinned staging memory (``StagingPool``);
3. an event; the core's IO thread waits for it (without the GIL) and writes the record.

Nothing here waits for the device: ``hook.step()`` returns once the work is enqueued, and work
enqueued after it (the optimizer's update) runs after the copy, so the record holds the values
of the step. docs/design.md ("Device tensors") has the whole path.

A backend says which tensors are a device's and how to enqueue work, stage and fence:
``CudaBackend`` for torch CUDA tensors; tests register a fake device (``register_backend``).
"""

import threading

from . import _core

# Wire dtype values by name, from the C++ dtype table.
_WIRE = {name: value for value, name, _, _ in _core.dtype_table()}
_STATS_BYTES = 8 * len(_core.STATS_FIELDS)


def _torch():
    import torch  # Only reached with torch tensors in hand.

    return torch


class CudaBackend:
    """torch CUDA tensors: work is enqueued on each device's current stream, staging memory is
    pinned, the fence is one CUDA event per device (created with blocking sync, so the IO
    thread sleeps rather than spins while it waits)."""

    name = "cuda"

    def owns(self, tensor):
        return tensor.is_cuda

    def run(self, device, work):
        with _torch().cuda.device(device):
            work()

    def staging(self, nbytes):
        torch = _torch()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def fence(self, slot, devices):
        torch = _torch()
        handles = []
        for device in devices:
            event = slot.events.get(device)
            if event is None:
                event = slot.events[device] = torch.cuda.Event(blocking=True)
            event.record(torch.cuda.current_stream(device))
            handles.append(event.cuda_event)
        return _core.CudaEventFence(handles)


_backends = [CudaBackend()]
_backends_lock = threading.Lock()


def register_backend(backend):
    """Adds a device backend, consulted before the others (a fake device in tests, another
    accelerator). It provides ``owns(tensor)``, ``run(device, work)``, ``staging(nbytes)`` (a
    host uint8 torch tensor) and ``fence(slot, devices)`` (a _core fence completing after every
    piece of work ``run`` enqueued so far)."""
    with _backends_lock:
        _backends.insert(0, backend)


def unregister_backend(backend):
    with _backends_lock:
        _backends.remove(backend)


def backend_for(tensor):
    """The backend whose device holds `tensor`, or None for host memory."""
    for backend in _backends:
        if backend.owns(tensor):
            return backend
    return None


class _Slot:
    """One staging buffer, with its lease (busy while records refer to it) and events."""

    __slots__ = ("buffer", "lease", "events", "nbytes", "backend")

    def __init__(self, backend, nbytes):
        self.buffer = backend.staging(nbytes)
        self.lease = _core.StagingLease()
        self.events = {}
        self.nbytes = nbytes
        self.backend = backend


class StagingPool:
    """Host staging buffers reused across steps, at most `max_bytes` in all (a step larger than
    that gets a buffer of its own once every other is free). When every buffer is busy:
    ``block`` waits (without the GIL) for the IO thread to write a record and free one; ``drop``
    drops the step's record (counted). Counters: ``stats()``."""

    _ROUND = 1 << 16  # Buffers are sized in 64 KiB units, so a step's size wobble reuses them.

    def __init__(self, max_bytes, block=True):
        self.max_bytes = int(max_bytes)
        self.block = block
        self._slots = []
        self.high_water_bytes = 0
        self.dropped = 0
        self.waits = 0

    def configure(self, max_bytes, block):
        self.max_bytes = int(max_bytes)
        self.block = block

    def acquire(self, nbytes, backend):
        """A free slot of at least `nbytes` from `backend`, or None (drop)."""
        nbytes = -(-max(nbytes, 1) // self._ROUND) * self._ROUND
        while True:
            free = [s for s in self._slots if not s.lease.busy and s.backend is backend]
            fitting = [s for s in free if s.nbytes >= nbytes]
            if fitting:
                return self._use(min(fitting, key=lambda s: s.nbytes))
            allocated = sum(s.nbytes for s in self._slots)
            if allocated + nbytes > self.max_bytes:
                # Idle buffers that are too small (or another backend's) make room first.
                for slot in [s for s in self._slots if not s.lease.busy]:
                    self._slots.remove(slot)
                    allocated -= slot.nbytes
            if allocated + nbytes <= self.max_bytes or allocated == 0:
                slot = _Slot(backend, nbytes)
                self._slots.append(slot)
                return self._use(slot)
            if not self.block:
                self.dropped += 1
                return None
            self.waits += 1
            busy = [s for s in self._slots if s.lease.busy]
            if busy:
                busy[0].lease.wait_free(0.05)

    def _use(self, slot):
        in_use = slot.nbytes + sum(s.nbytes for s in self._slots if s.lease.busy and s is not slot)
        self.high_water_bytes = max(self.high_water_bytes, in_use)
        return slot

    def stats(self):
        return {
            "staging_bytes": sum(s.nbytes for s in self._slots),
            "staging_high_water_bytes": self.high_water_bytes,
            "staging_dropped": self.dropped,
            "staging_waits": self.waits,
        }


# One pool per process: hooks configure it at begin(); send_gradient stages through it too.
_pool = StagingPool(256e6)


def pool():
    return _pool


class _Item:
    __slots__ = ("tensor", "kind", "bins", "offset", "nbytes", "backend", "device")

    def __init__(self, tensor, kind, bins, offset, nbytes, backend):
        self.tensor = tensor
        self.kind = kind  # None (the values), "stats" or "histogram".
        self.bins = bins
        self.offset = offset
        self.nbytes = nbytes
        self.backend = backend
        self.device = tensor.device


def wire_dtype(tensor):
    return _WIRE[str(tensor.dtype).rsplit(".", 1)[-1]]


class StepBatch:
    """The device tensors of one traced step (see the module docstring). Driven by one thread:
    add() while the core calls providers, then launch() or abandon()."""

    def __init__(self, staging_pool):
        self._pool = staging_pool
        self._items = []
        self._size = 0
        self._pending = None

    def add(self, tensor, summary, bins, backend):
        """A _core.DeferredValue for `tensor` (its `summary`: None, "stats" or "histogram")."""
        if self._pending is None:
            self._pending = _core.PendingBytes()
        tensor = tensor.detach()
        if summary == "stats":
            nbytes, dtype, shape = _STATS_BYTES, _WIRE["float64"], [len(_core.STATS_FIELDS)]
        elif summary == "histogram":
            nbytes, dtype, shape = 8 * (2 + 2 * bins), _WIRE["float64"], [2 + 2 * bins]
        else:
            nbytes = tensor.numel() * tensor.element_size()
            dtype, shape = wire_dtype(tensor), list(tensor.shape)
        item = _Item(tensor, summary, bins, self._size, nbytes, backend)
        self._items.append(item)
        self._size += nbytes
        return self._pending.value(item.offset, dtype, shape, is_summary=summary is not None)

    def abandon(self, why):
        if self._pending is not None:
            self._pending.fail(why)
        self._pending = None
        self._items = []

    def launch(self):
        """Enqueues the summaries and copies and arms the core's deferred bytes; returns at
        once. Without staging memory under overflow 'drop' the step's record is dropped."""
        if self._pending is None:
            return
        pending, items = self._pending, self._items
        self._pending, self._items = None, []
        try:
            backend = items[0].backend
            slot = self._pool.acquire(self._size, backend)
            if slot is None:
                pending.fail("no free staging memory (overflow 'drop')", dropped=True)
                return
            devices = []
            for item in items:
                if item.device not in devices:
                    devices.append(item.device)
            for device in devices:
                mine = [item for item in items if item.device == device]
                backend.run(device, lambda mine=mine: _enqueue(mine, slot.buffer))
            pending.arm(slot.buffer.data_ptr(), backend.fence(slot, devices), slot.lease)
        except BaseException as e:
            pending.fail(f"enqueueing the device copies failed: {type(e).__name__}: {e}")
            raise


def _enqueue(items, staging):
    """On the device's stream: summaries of `items`, then their bytes into `staging` (one gather
    and one copy per run of items adjacent in the staging buffer)."""
    from . import _device_summary

    torch = _torch()
    rows = {}
    groups = {}
    for item in items:
        if item.kind is not None:
            groups.setdefault((item.kind, item.bins), []).append(item)
    for (kind, bins), group in groups.items():
        tensors = [item.tensor for item in group]
        result = (
            _device_summary.stats_rows(tensors)
            if kind == "stats"
            else _device_summary.histogram_rows(tensors, bins)
        )
        for index, item in enumerate(group):
            rows[id(item)] = result[index]
    runs = []  # [start, end, parts]: items adjacent in the staging buffer.
    for item in items:
        if item.nbytes == 0:
            continue
        source = rows[id(item)] if item.kind is not None else item.tensor
        part = source.contiguous().reshape(-1).view(torch.uint8)
        if runs and runs[-1][1] == item.offset:
            runs[-1][1] += item.nbytes
            runs[-1][2].append(part)
        else:
            runs.append([item.offset, item.offset + item.nbytes, [part]])
    for start, end, parts in runs:
        gathered = parts[0] if len(parts) == 1 else torch.cat(parts)
        staging[start:end].copy_(gathered, non_blocking=True)


_state = threading.local()


def active_batch():
    """The batch of the traced step in progress on this thread, or None."""
    return getattr(_state, "batch", None)


class step_batch:
    """``with step_batch(pool) as batch:`` around the core's step: providers add to `batch`."""

    def __init__(self, staging_pool):
        self.batch = StepBatch(staging_pool)

    def __enter__(self):
        _state.batch = self.batch
        return self.batch

    def __exit__(self, *exc):
        _state.batch = None
        return False


def stage_now(tensor):
    """A DeferredValue of `tensor`'s values, copied asynchronously from now on (send_gradient
    of a device tensor): a batch of its own, launched at once."""
    batch = StepBatch(_pool)
    value = batch.add(tensor, None, 0, backend_for(tensor))
    batch.launch()
    return value
