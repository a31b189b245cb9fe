"""A fake device for tests without a GPU: torch CPU tensors played as device memory, with a stream.

Work handed to the device (summaries, copies, the training code's own updates through
``enqueue``) runs later, in order, on a thread of its own, `delay_s` after it was enqueued, as a
CUDA stream runs kernels after the host moved on. Its fence is a _core.ManualFenceForTesting
completed by the stream after the work before it, or failed when that work raised. Its graphs behave as
CUDA graphs do (_device_graphs.py): a captured pass keeps reading the tensors it was captured
over and writes into one output at every replay. Registered as a _device backend, it owns every
torch CPU tensor, so tests compare against numpy copies of the same values (which take the host
path).
"""

import queue
import threading
import time

import torch

from xdl_trace import _core
from xdl_trace.write import _device


class FakeDevice:
    def __init__(self, delay_s=0.0):
        self.delay_s = delay_s
        self._ops = queue.Queue()
        self._error = None
        self._pending = 0
        self._lock = threading.Lock()
        self.fail_next_work = False
        self.fail_capture = False
        self.hang_fences = False  # Fences made meanwhile never complete (a hung kernel).
        self.captures = 0
        self.fences_completed = 0
        self._thread = threading.Thread(target=self._stream, daemon=True)
        self._thread.start()

    # -- the stream ------------------------------------------------------------------------------

    def enqueue(self, fn):
        with self._lock:
            self._pending += 1
        self._ops.put(fn)

    @property
    def pending(self):
        with self._lock:
            return self._pending

    def synchronize(self, timeout_s=10):
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.001)
        assert self.pending == 0, "the fake device did not drain"

    def _stream(self):
        while True:
            fn = self._ops.get()
            if fn is None:
                return
            if self.delay_s:
                time.sleep(self.delay_s)
            try:
                fn()
            except Exception as e:  # A failed kernel: the next fence reports it.
                self._error = f"{type(e).__name__}: {e}"
            with self._lock:
                self._pending -= 1

    def close(self):
        self._ops.put(None)
        self._thread.join()

    # -- the _device backend ---------------------------------------------------------------------

    def owns(self, tensor):
        return tensor.device.type == "cpu"

    def run(self, device, work):
        if self.fail_next_work:
            self.fail_next_work = False

            def work():
                raise RuntimeError("fake device fault")

        self.enqueue(work)

    def staging(self, nbytes):
        return torch.empty(nbytes, dtype=torch.uint8)

    def fence(self, slot, devices):
        fence = _core.ManualFenceForTesting()
        if self.hang_fences:
            return fence

        def signal():
            error, self._error = self._error, None
            if error is None:
                fence.complete()
                self.fences_completed += 1
            else:
                fence.fail(error)

        self.enqueue(signal)
        return fence

    def stream_key(self, device):
        return 0

    def capture(self, device, fn):
        if self.fail_capture:
            raise RuntimeError("fake capture fault")
        self.captures += 1
        graph = _Graph(fn)
        return graph, graph.out


class _Graph:
    """A captured pass: `fn` over the tensors it was captured with, into one output."""

    def __init__(self, fn):
        self.fn = fn
        self.out = fn()

    def replay(self):
        self.out.copy_(self.fn())


class installed:
    """``with installed(FakeDevice()) as device:`` registers it as a _device backend."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        _device.register_backend(self.device)
        return self.device

    def __exit__(self, *exc):
        _device.unregister_backend(self.device)
        self.device.synchronize()
        self.device.close()
        return False
