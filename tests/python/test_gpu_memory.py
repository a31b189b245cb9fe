"""``xdl.trace_gpu_memory``: the allocator's counters traced at each step and drawn in the
report's GPU section. Without a GPU, torch.cuda's counter functions are replaced by a model
allocator (the same functions, the same units); a GPU run is tagged ``gpu``."""

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace.read import report
from xdl_trace.write import gpu_memory

torch = pytest.importorskip("torch")
MIB = 1 << 20


class Allocator:
    """torch.cuda's counters over a model allocator: step n allocates n MiB more, with a
    transient peak of 10 MiB above it; reserved rounds up to 20 MiB blocks. It counts calls to
    synchronize, which the traced reads must never make."""

    def __init__(self):
        self.allocated, self.peak, self.syncs = 0, 0, 0

    def step(self, n):
        self.peak = max(self.peak, self.allocated + (n + 10) * MIB)
        self.allocated += n * MIB

    def install(self, monkeypatch):
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(
            cuda, "memory_reserved", lambda device=None: -(-self.allocated // (20 * MIB)) * 20 * MIB
        )
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", self.reset)
        monkeypatch.setattr(cuda, "synchronize", self.sync)

    def reset(self, device=None):
        self.peak = self.allocated

    def sync(self, device=None):
        self.syncs += 1


def test_allocated_reserved_and_the_peak_of_each_step(cfg, monkeypatch, tmp_path):
    allocator = Allocator()
    allocator.install(monkeypatch)
    xdl.clear()
    keys = xdl.trace_gpu_memory()
    assert keys == list(gpu_memory.MEMORY_KEYS)
    with xdl.TraceHook(cfg) as hook:
        for n in range(1, 6):
            allocator.step(n)
            hook.step()
    xdl.clear()
    assert allocator.syncs == 0
    trace = xdl.open_trace(cfg["output_dir"])
    got = {k: [] for k in keys}
    for record in trace.records():
        for k in keys:
            got[k].append(float(np.asarray(record[k])))
    cumulative = np.cumsum(np.arange(1, 6))
    assert got["gpu_memory/allocated_mib"] == cumulative.tolist()
    assert got["gpu_memory/reserved_mib"] == (-(-cumulative // 20) * 20).tolist()
    # Each step's own peak: its allocation + 10 MiB (reset after each read, so not the max
    # since the start).
    assert got["gpu_memory/peak_mib"] == (cumulative + 10).tolist()
    model = report.build_report(cfg["output_dir"])
    (chart,) = [c for c in model["gpu_charts"] if c["title"] == "GPU memory"]
    assert len(chart["series"]) == 3


@pytest.mark.gpu
def test_real_allocator_counters(cfg):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    xdl.clear()
    xdl.trace_gpu_memory()
    kept = []
    with xdl.TraceHook(cfg) as hook:
        for n in range(3):
            kept.append(torch.empty(n + 1 << 20, device="cuda"))
            hook.step()
    xdl.clear()
    values = [
        float(np.asarray(r["gpu_memory/allocated_mib"]))
        for r in xdl.open_trace(cfg["output_dir"]).records()
    ]
    assert values == sorted(values) and values[-1] >= 24
