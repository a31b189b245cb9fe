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
of the step. docs/device-path.md has the whole path.

A backend says which tensors are a device's and how to enqueue work, stage and fence:
``CudaBackend`` for torch CUDA tensors; tests register a fake device (``register_backend``).
"""

import os
import sys
import threading
import time
import weakref

from .. import _core, _names
from . import _device_graphs, _device_summary

_STATS_BYTES = 8 * len(_core.STATS_FIELDS)


def _torch():
    import torch  # Only reached with torch tensors in hand.

    return torch


class CudaBackend:
    """torch CUDA tensors: work is enqueued on each device's current stream, staging memory is
    pinned, the fence is one CUDA event per device (created with blocking sync, so the IO
    thread sleeps rather than spins while it waits), summary passes are captured as CUDA graphs
    (_device_graphs.py)."""

    def __init__(self):
        self._capture_streams = {}  # device -> the side stream graphs are captured on

    def owns(self, tensor):
        return tensor.is_cuda

    def run(self, device, work):
        with _torch().cuda.device(device):
            work()

    def staging(self, nbytes):
        torch = _torch()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def stream_key(self, device):
        return _torch().cuda.current_stream(device).cuda_stream

    def capture(self, device, fn):
        """(graph, output): fn's kernels captured as a CUDA graph on a side stream, in the
        thread-local mode (other threads' CUDA calls, the IO thread's event waits among them,
        stay legal meanwhile). ``graph.replay()`` runs them on the current stream."""
        torch = _torch()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(device):
            stream = self._capture_streams.get(device)
            if stream is None:
                stream = self._capture_streams[device] = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                try:
                    graph.capture_begin(capture_error_mode="thread_local")
                except TypeError:  # torch < 2.1: only the global mode, which the IO thread breaks.
                    raise RuntimeError(
                        f"torch {torch.__version__} has no thread-local capture"
                    ) from None
                try:
                    out = fn()
                finally:
                    graph.capture_end()
        return graph, out

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
    piece of work ``run`` enqueued so far); optionally ``capture(device, fn)`` -> (graph,
    output) and ``stream_key(device)`` for summary graphs (_device_graphs.py)."""
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
    """One staging buffer, with its lease (busy while records refer to it) and events.
    `taken`: handed out by acquire() and not yet armed (guarded by the pool's lock)."""

    __slots__ = ("buffer", "lease", "events", "nbytes", "backend", "taken")

    def __init__(self, backend, nbytes):
        self.buffer = backend.staging(nbytes)
        self.lease = _core.StagingLease()
        self.events = {}
        self.nbytes = nbytes
        self.backend = backend
        self.taken = False

    @property
    def free(self):
        return not self.taken and not self.lease.busy


# Slots still busy when their pool closed (a fence that timed out: its copy may land yet), kept
# for the life of the process so that no late copy writes into freed memory.
_stranded = []
_stranded_lock = threading.Lock()


class StagingPool:
    """One hook's host staging buffers, reused across its steps, at most `max_bytes` in all (a
    step larger than that gets a buffer of its own once every other is free). When every buffer
    is busy: ``block`` waits (without the GIL) for the IO thread to write a record and free one,
    at most `wait_bound_s` (then the step is dropped, as under ``drop``); ``drop`` drops the
    step's record (counted). Counters: ``stats()`` (the high-water mark is of the bytes the pool
    held), since the pool was made.

    Threading: any thread may acquire() (the hook's training thread, send_gradient from an
    autograd thread); taking a free slot and marking it taken is one step under `_lock`, and a
    taken slot stays so until release() (after its lease was held by arm(), or on failure).
    """

    _ROUND = 1 << 16  # Buffers are sized in 64 KiB units, so a step's size wobble reuses them.

    def __init__(self, max_bytes, block=True, wait_bound_s=60.0):
        self.max_bytes = int(max_bytes)
        self.block = block
        self.wait_bound_s = float(wait_bound_s)
        self._lock = threading.Lock()
        self._slots = []  # Guarded by _lock. In the order they were made.
        self._next = 0  # Guarded by _lock. Where the search for a free slot starts.
        self._allocated = 0  # Guarded by _lock. The slots' bytes.
        self.high_water_bytes = 0  # Guarded by _lock (read unlocked by stats()).
        self.dropped = 0  # Guarded by _lock.
        self.waits = 0  # Guarded by _lock.
        _live_pools.add(self)

    def acquire(self, nbytes, backend):
        """A free slot of at least `nbytes` from `backend`, marked taken (give it back with
        release()), or None (drop). A free slot of at most twice the size first, searched from
        the one after the last taken (records are written in order, so in a steady run that
        one is free and the search ends there); then a new slot, while the pool has room; then
        a larger free slot (so a small step does not hold the buffer that a large one, an
        Every(10) step of full values, needs next)."""
        nbytes = -(-max(nbytes, 1) // self._ROUND) * self._ROUND
        deadline = None
        while True:
            with self._lock:
                slot = self._take(nbytes, backend)
                if slot is not None:
                    slot.taken = True
                    return slot
                if not self.block or (deadline is not None and time.monotonic() >= deadline):
                    self.dropped += 1
                    return None
                if deadline is None:
                    self.waits += 1
                    deadline = time.monotonic() + self.wait_bound_s
                busy = [s for s in self._slots if not s.free]
            if busy:
                busy[0].lease.wait_free(0.05)
            else:
                time.sleep(0.001)  # Taken by another thread, armed in a moment.

    def release(self, slot):
        """Gives back a slot acquire() handed out: free once its lease is (at once if unarmed)."""
        with self._lock:
            slot.taken = False

    def _take(self, nbytes, backend):
        close, loose = self._free_slots(nbytes, backend)
        if close is not None:
            return close
        if self._has_room(nbytes):
            return self._new_slot(nbytes, backend)
        if loose is not None:
            return loose
        self._release_idle()  # Those too small (or another backend's) make room first.
        if self._has_room(nbytes):
            return self._new_slot(nbytes, backend)
        return None

    def _free_slots(self, nbytes, backend):
        """(a free slot of `nbytes` to twice that, the first larger free one), None where none;
        the first ends the search, from the slot after the last taken."""
        count = len(self._slots)
        loose = None
        for i in range(count):
            index = (self._next + i) % count
            slot = self._slots[index]
            if slot.nbytes >= nbytes and slot.backend is backend and slot.free:
                if slot.nbytes <= 2 * nbytes:
                    self._next = index + 1
                    return slot, None
                loose = loose or slot
        return None, loose

    def _release_idle(self):
        for idle in [s for s in self._slots if s.free]:
            self._slots.remove(idle)
            self._allocated -= idle.nbytes
        self._next = 0

    def _has_room(self, nbytes):
        """Whether a new slot of `nbytes` fits the bound (an empty pool takes any one step)."""
        return self._allocated + nbytes <= self.max_bytes or self._allocated == 0

    def _new_slot(self, nbytes, backend):
        slot = _Slot(backend, nbytes)
        self._slots.append(slot)
        self._allocated += nbytes
        self.high_water_bytes = max(self.high_water_bytes, self._allocated)
        return slot

    def close(self):
        """The hook ended (every record written or dropped): its buffers go. One still busy
        (its fence timed out) is kept for the process's life: a late copy may yet land in it."""
        with self._lock:
            busy = [s for s in self._slots if not s.free]
            self._slots = []
            self._allocated = 0
            self._next = 0
        if busy:
            with _stranded_lock:
                _stranded.extend(busy)

    def _forget_after_fork(self):
        # In a forked child: the parent's buffers and leases mean nothing here (no IO thread
        # will free them); the lock may have been held by a parent thread at fork.
        self._lock = threading.Lock()
        self._slots = []
        self._allocated = 0
        self._next = 0

    def stats(self):
        with self._lock:
            return {
                "staging_bytes": self._allocated,
                "staging_high_water_bytes": self.high_water_bytes,
                "staging_dropped": self.dropped,
                "staging_waits": self.waits,
            }


# A hook's staging counters when it has no pool (write_mode "inline", or before begin()).
NO_STAGING = {
    "staging_bytes": 0,
    "staging_high_water_bytes": 0,
    "staging_dropped": 0,
    "staging_waits": 0,
}

_live_pools = weakref.WeakSet()  # Every pool not yet collected: emptied in a forked child.


def live_pools():
    return list(_live_pools)


def _after_fork_in_child():
    global _stranded_lock
    _stranded_lock = threading.Lock()
    _stranded.clear()
    for pool in list(_live_pools):
        pool._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def graph_stats():
    """The process's summary-graph counters and its fused digest kernel's state per device
    (``summary_fused_digest``: "on", or why not), for hook.stats()."""
    stats = _device_graphs.graphs().stats()
    stats["summary_fused_digest"] = _device_summary.fused_digest_status()
    return stats


class _Item:
    """Tensors staged together: their summary rows (`kind` "stats" or "histogram") or their
    values (`kind` None), at `offset` in the step's staging buffer."""

    __slots__ = ("tensors", "kind", "bins", "offset", "nbytes", "device")

    def __init__(self, tensors, kind, bins, offset):
        self.tensors = tensors
        self.kind = kind
        self.bins = bins
        self.offset = offset
        self.nbytes = summary_bytes(kind, bins) * len(tensors) if kind else value_bytes(tensors)
        self.device = tensors[0].device


def summary_bytes(kind, bins):
    if kind == "digest":
        return 16  # float64[2] (_device_summary.digest_rows).
    return _STATS_BYTES if kind == "stats" else 8 * (2 + 2 * bins)


def value_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def wire_dtype(tensor):
    return _names.WIRE_DTYPE[str(tensor.dtype).rsplit(".", 1)[-1]]


class StepBatch:
    """The device tensors of one traced step (see the module docstring), all of one backend.
    Driven by one thread: add()/add_group() while the step is captured, then launch() or
    abandon()."""

    def __init__(self, staging_pool):
        self._pool = staging_pool
        self._items = []
        self._size = 0
        self.pending = None  # The step's _core.PendingBytes, made by the first add.
        self.backend = None

    def accepts(self, backend):
        return self.backend is None or backend is self.backend

    def add_group(self, tensors, summary, bins, backend):
        """Stages `tensors` (their `summary`: None, "stats" or "histogram") adjacently; returns
        the offset of the first one's bytes in the step's staging buffer."""
        if self.pending is None:
            self.pending = _core.PendingBytes()
            self.backend = backend
        item = _Item(tensors, summary, bins, self._size)
        self._items.append(item)
        self._size += item.nbytes
        return item.offset

    def add(self, tensor, summary, bins, backend):
        """A _core.DeferredValue for `tensor` (its `summary`: None, "stats" or "histogram")."""
        offset = self.add_group([tensor], summary, bins, backend)
        if summary is None:
            return self.pending.value(offset, wire_dtype(tensor), list(tensor.shape))
        size = summary_bytes(summary, bins) // 8
        return self.pending.value(offset, _names.WIRE_DTYPE["float64"], [size], is_summary=True)

    def abandon(self, why):
        if self.pending is not None:
            self.pending.fail(why)
        self.pending = None
        self._items = []

    def launch(self):
        """Enqueues the summaries and copies and arms the core's deferred bytes; returns at
        once. Without staging memory under overflow 'drop' the step's record is dropped."""
        if self.pending is None:
            return
        pending, items, backend = self.pending, self._items, self.backend
        self.pending, self._items = None, []
        slot = None
        try:
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
                backend.run(device, lambda mine=mine: _enqueue(mine, slot.buffer, backend))
            pending.arm(slot.buffer.data_ptr(), backend.fence(slot, devices), slot.lease)
        except BaseException as e:
            pending.fail(f"enqueueing the device copies failed: {type(e).__name__}: {e}")
            raise
        finally:
            if slot is not None:  # Armed: its lease keeps it busy; else free again.
                self._pool.release(slot)


def _enqueue(items, staging, backend):
    """On the device's stream: the items' summaries (one pass per summary kind), then their
    bytes into `staging`: one copy per run of items adjacent in the buffer, gathered first
    unless they lie adjacent on the device too (the rows of one pass)."""
    torch = _torch()
    with torch.no_grad():
        groups = {}
        for item in items:
            if item.kind is not None:
                groups.setdefault((item.kind, item.bins), []).append(item)
        pieces = {}  # id(item) -> (a device byte tensor, start, end): where its bytes are.
        for (kind, bins), group in groups.items():
            tensors = [t for item in group for t in item.tensors]
            rows = _device_graphs.graphs().rows(kind, bins, tensors, backend)
            flat = rows.reshape(-1).view(torch.uint8)
            start = 0
            for item in group:
                pieces[id(item)] = (flat, start, start + item.nbytes)
                start += item.nbytes
        runs = []  # [start, end, pieces] of items adjacent in the staging buffer.
        for item in items:
            if item.nbytes == 0:
                continue
            piece = pieces.get(id(item))
            if piece is None:
                parts = [t.contiguous().reshape(-1).view(torch.uint8) for t in item.tensors]
                piece = (parts[0] if len(parts) == 1 else torch.cat(parts), 0, item.nbytes)
            if runs and runs[-1][1] == item.offset:
                runs[-1][1] += item.nbytes
                data, start, end = runs[-1][2][-1]
                if data is piece[0] and end == piece[1]:  # Adjacent on the device too: one.
                    runs[-1][2][-1] = (data, start, piece[2])
                else:
                    runs[-1][2].append(piece)
            else:
                runs.append([item.offset, item.offset + item.nbytes, [piece]])
        for start, end, run in runs:
            parts = [data[a:b] for data, a, b in run]
            gathered = parts[0] if len(parts) == 1 else torch.cat(parts)
            staging[start:end].copy_(gathered, non_blocking=True)


class EveryN:
    """``xdl.watch(every=n)``'s selection, the one implementation for a per-entry provider and
    a group: calling it counts a traced step and says whether this one is captured (the first
    and then every n-th; every one when n is None). Driven by the stepping thread."""

    def __init__(self, n):
        self.n = n
        self._calls = 0

    def __call__(self):
        index = self._calls
        self._calls = index + 1
        return self.n is None or index % self.n == 0


class GroupCapture:
    """Entries read together at each traced step (xdl.watch's parameters, its gradients): one
    Python call per step for the whole group instead of one per entry, and on a device one
    staged item. The entries are registered with ``member(i)`` as their provider; the hook
    calls ``prepare`` before the core's step."""

    def __init__(self, scope, keys, reads, summary, bins, every, to_host):
        self.scope = scope
        self._to_host = to_host  # (key, tensor) -> what the core takes, read on the host now.
        self.keys = list(keys)
        self._reads = list(reads)  # read() -> the member's tensor now (raises naming its key).
        self._summary = summary  # None, "stats" or "histogram".
        self._bins = bins
        self._due = EveryN(every)
        self._layouts = {}  # signature -> _core.GroupLayout
        self.core = _core.ValueGroup(len(self.keys))

    def member(self, index):
        return self.core.member(index)

    def prepare(self, batch):
        if not self._due():
            self.core.set_empty()
            return
        tensors = [read() for read in self._reads]
        backend = backend_for(tensors[0]) if batch is not None else None
        if (
            backend is not None
            and batch.accepts(backend)
            and len({t.get_device() for t in tensors}) == 1  # One device (an int each: cheap).
        ):
            base = batch.add_group(tensors, self._summary, self._bins, backend)
            self.core.set_deferred(batch.pending, base, self._layout(tensors))
            return
        self.core.set_values(
            [self._to_host(key, t) for key, t in zip(self.keys, tensors)], self.keys
        )

    def _layout(self, tensors):
        if self._summary is not None:
            signature = len(tensors)
        else:
            signature = tuple((t.dtype, t.shape) for t in tensors)
        layout = self._layouts.get(signature)
        if layout is None:
            members, offset = [], 0
            for t in tensors:
                if self._summary is None:
                    nbytes = t.numel() * t.element_size()
                    members.append((offset, wire_dtype(t), list(t.shape), False))
                else:
                    nbytes = summary_bytes(self._summary, self._bins)
                    members.append((offset, _names.WIRE_DTYPE["float64"], [nbytes // 8], True))
                offset += nbytes
            if len(self._layouts) > 16:
                self._layouts.clear()
            layout = self._layouts[signature] = _core.GroupLayout(members)
        return layout


_groups = []  # GroupCapture objects registered (xdl.watch), in registration order.
_groups_lock = threading.Lock()


def add_group(group):
    with _groups_lock:
        _groups.append(group)


def clear_groups(scope=None):
    with _groups_lock:
        _groups[:] = [g for g in _groups if scope is not None and g.scope != scope]


def groups(scopes, keys):
    """The registered groups of `scopes` whose keys a tracer traces (its snapshot's `keys`)."""
    keys = set(keys)
    with _groups_lock:
        return [g for g in _groups if g.scope in scopes and g.keys and g.keys[0] in keys]


_state = threading.local()


def active_batch():
    """The batch of the traced step in progress on this thread, or None."""
    return getattr(_state, "batch", None)


def run_step(step, args, step_groups, staging_pool):
    """Runs the core's ``step(*args)`` with this step's batch open: the groups are prepared
    into it, then the core's providers add to it; once the core queued the record the batch is
    launched into `staging_pool` (the hook's). With no pool (write_mode "inline": the core
    writes the record inside its step, before any copy could be launched) or without torch in
    the process there is no batch: device tensors are read on the host now. Returns what the
    core's step returns (the errors of the columns it wrote empty)."""
    if staging_pool is None or "torch" not in sys.modules:
        for group in step_groups:
            group.prepare(None)
        return step(*args)
    batch = StepBatch(staging_pool)
    _state.batch = batch
    try:
        for group in step_groups:
            group.prepare(batch)
        empty_columns = step(*args)
    except BaseException:
        batch.abandon("the traced step failed")
        raise
    finally:
        _state.batch = None
    batch.launch()
    return empty_columns


def stage_now(tensor, staging_pool):
    """A DeferredValue of `tensor`'s values, copied asynchronously from now on (send_gradient
    of a device tensor) through `staging_pool` (a hook's): a batch of its own, launched at
    once."""
    batch = StepBatch(staging_pool)
    value = batch.add(tensor, None, 0, backend_for(tensor))
    batch.launch()
    return value
