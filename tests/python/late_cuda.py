"""Real CUDA with the fake device's knobs: device-path tests run unchanged on a GPU (pytest -m gpu).

``LateCuda`` is a _device backend (the real CudaBackend: pinned staging, CUDA events as fences,
summary graphs) whose work starts behind a spin kernel (``torch.cuda._sleep``):
- `delay_s`: each piece of work completes that much later, as FakeDevice(delay_s) does;
- `launch_s`: enqueueing each piece of work takes that much longer on the host, without the
  GIL (a sleep), as test_device_safety's SlowLaunch does: other threads run meanwhile;
- `hang_fences`: work and fences made meanwhile run on a side stream behind a spin of `HANG_S`
  (a hung kernel). The side stream first waits for the current one, so the step's tensors are
  read as they were; steps after it, on the current stream, do not queue behind the spin, as
  FakeDevice's later fences do not.
Register it with fake_device.installed(LateCuda(...)).
"""

import time

import torch

from xdl_trace.write import _device

HANG_S = 6.0  # Past every bound the tests wait out (2.2 s at most); the exit may wait for it.

_cycles_per_s = None


def spin(seconds):
    """Enqueues a kernel that spins about `seconds` on the current stream."""
    global _cycles_per_s
    if _cycles_per_s is None:  # The GPU's clock, measured once.
        cycles = 10_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)  # Warm.
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _cycles_per_s = cycles / (start.elapsed_time(end) / 1000.0)
    if seconds > 0:
        torch.cuda._sleep(int(seconds * _cycles_per_s))


class LateCuda(_device.CudaBackend):
    def __init__(self, delay_s=0.0, launch_s=0.0):
        super().__init__()
        self.delay_s = delay_s
        self.launch_s = launch_s
        self.hang_fences = False
        self._side = None

    def _stream(self):
        if not self.hang_fences:
            return torch.cuda.current_stream()
        if self._side is None:
            self._side = torch.cuda.Stream()
        self._side.wait_stream(torch.cuda.current_stream())
        return self._side

    def run(self, device, work):
        if self.launch_s:
            time.sleep(self.launch_s)
        with torch.cuda.device(device), torch.cuda.stream(self._stream()):
            spin(HANG_S if self.hang_fences else self.delay_s)
            work()

    def fence(self, slot, devices):
        with torch.cuda.stream(self._stream()):
            return super().fence(slot, devices)

    # What fake_device.installed() calls on leaving.
    def synchronize(self):
        torch.cuda.synchronize()

    def close(self):
        pass
