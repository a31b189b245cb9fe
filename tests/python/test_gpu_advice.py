"""The GPU section's advice lines, communication and straggler ranks on constructed device
traces: each line appears when, and only when, the figure it quotes passes its threshold."""

import numpy as np
import pytest

from xdl_trace.read import gpu_advice, gpu_steps, report

US = 1000
NAMES = [
    "",
    "cudaLaunchKernel_v7000",
    "_Z6kernelv",
    "cudaMemcpyAsync_v3020",
    "Memcpy DtoH",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>()",
    "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false>()",
]
LAUNCH, KERNEL_NAME, COPY_CALL, COPY, NCCL, TO_NHWC, TO_NCHW = 1, 2, 3, 4, 5, 6, 7


class Trace:
    """Device events of several ranks, in event order, as ``_core.DeviceEventTable``'s
    columns; times in µs."""

    def __init__(self):
        self.rows, self.corr = [], 0

    def launch(self, rank, called, start, end, name=KERNEL_NAME):
        """A kernel [start, end) launched by a 2 µs call at `called`."""
        self.corr += 1
        self.rows.append((4, LAUNCH, called, called + 2, self.corr, rank, 1))
        self.rows.append((1, name, start, end, self.corr, rank, 7))

    def blocking_copy(self, rank, called, start, end):
        """A device-to-host copy [start, end) whose call returned only after it (end + 3)."""
        self.corr += 1
        self.rows.append((4, COPY_CALL, called, end + 3, self.corr, rank, 1))
        self.rows.append((2, COPY, start, end, self.corr, rank, 7))

    def columns(self):
        kind, name, start, end, corr, rank, line = (np.array(c) for c in zip(*self.rows))
        return {
            "kind": kind.astype(np.int32),
            "name": name.astype(np.int32),
            "rank": rank.astype(np.int64),
            "device": np.where(kind == 4, -1, 0).astype(np.int32),
            "line": line.astype(np.int64),
            "start_ns": (start * US).astype(np.int64),
            "end_ns": (end * US).astype(np.int64),
            "correlation_id": corr.astype(np.uint64),
            "external_id": np.zeros(len(kind), np.uint64),
            "names": NAMES,
            "dropped_events": 0,
            "dropped_buffers": 0,
        }


def _section(trace, ends_us):
    """The report's GPU section of `trace` with step ends {rank: [µs]} (gsteps 0, 1, ...)."""
    steps = {r: (np.arange(len(e)), np.array(e, np.int64) * US) for r, e in ends_us.items()}
    return report.gpu_section("constructed", gpu_steps.summarize(trace.columns(), steps))


def _lines(section, words):
    return [a for a in section["advice"] if words in a]


def test_a_sync_each_step_then_a_late_launch_says_so():
    """Each 1000 µs step: a kernel [0, 800) launched at 0, its loss copied to the host [800,
    805) by a blocking call, then the host works until 900 before launching the next step:
    200 µs a step the GPU waits after a sync (20%)."""
    trace = Trace()
    for step in range(5):
        t = step * 1000
        trace.launch(0, t, t + 5, t + 800)
        trace.blocking_copy(0, t + 3, t + 800, t + 805)
    section = _section(trace, {0: [0, 900, 1900, 2900, 3900]})
    p = section["per_step"]
    # Windows (0, 900], (900, 1900], ...: each holds one gap of 200 µs (805..1005), split
    # 95 + 105 between windows; the first has 95 + the 5 µs before the first kernel.
    assert p["idle_blocking"] == p["idle_host_wait"] == (100 + 3 * 200) / 4 * US
    (line,) = _lines(section, "after a blocking CUDA call")
    assert "cudaMemcpyAsync: 1 a step" in line and "filter=xdl.Every(10)" in line
    assert f"{p['idle_blocking'] / 1e6:.2f} ms a step" in line
    assert not _lines(section, "run under 10 µs")


def test_no_advice_on_a_gpu_kept_busy():
    """Kernels of 1 ms back to back, launched well ahead: busy 100%, no wait line; the only
    line says the time is in the kernels."""
    trace = Trace()
    for i in range(8):
        trace.launch(0, i, 10 + i * 1000, 10 + (i + 1) * 1000)
    section = _section(trace, {0: [10, 2010, 4010, 6010, 8010]})
    assert section["per_step"]["idle_host_wait"] == 0
    (line,) = section["advice"]
    assert "busy 100.0%" in line and "kernel()" in line


def test_short_kernels_and_kernel_wait():
    """100 kernels of 5 µs, 3 µs apart, all launched at the start: 100% short, kernel wait
    99 x 3 µs."""
    trace = Trace()
    for i in range(100):
        trace.launch(0, i * 0.01, 10 + i * 8, 15 + i * 8)
    section = _section(trace, {0: [0, 400, 810]})
    assert section["per_step"]["idle_kernel_wait"] * 2 == pytest.approx(99 * 3 * US)
    (line,) = _lines(section, "run under 10 µs")
    assert line.startswith("100.0% of kernels run under 10 µs (100 of 100)")
    assert "CUDA graphs or torch.compile" in line


@pytest.mark.parametrize("converting_us", [10, 30])
def test_layout_conversions_past_2_percent_of_the_step(converting_us):
    """Steps of 1000 µs: a convolution (200 µs) between cuDNN's NCHW -> NHWC and NHWC -> NCHW
    transposes of `converting_us` / 2 each: 1% of the step says nothing, 3% says so."""
    trace = Trace()
    for step in range(3):
        t = step * 1000
        half = converting_us // 2
        trace.launch(0, t, t + 10, t + 10 + half, name=TO_NHWC)
        trace.launch(0, t + 1, t + 10 + half, t + 210 + half)
        trace.launch(0, t + 2, t + 210 + half, t + 210 + 2 * half, name=TO_NCHW)
        trace.launch(0, t + 3, t + 300, t + 1000)  # The rest of the step.
    section = _section(trace, {0: [-1, 999, 1999, 2999]})
    lines = _lines(section, "Layout conversions")
    if converting_us == 10:
        assert not lines
        return
    (line,) = lines
    assert line.startswith(
        "Layout conversions between NCHW and NHWC (nchwToNhwcKernel, nhwcToNchwKernel) take "
        "0.03 ms a step (3.0%)"
    ), line
    assert "model.to(memory_format=torch.channels_last)" in line


def test_work_queued_behind_a_dependency_is_other():
    """A kernel launched early but starting 300 µs after the previous one ended: other."""
    trace = Trace()
    trace.launch(0, 0, 10, 500)
    trace.launch(0, 1, 800, 1000)
    section = _section(trace, {0: [0, 1000]})
    assert section["per_step"]["idle_other"] == 300 * US
    assert _lines(section, "queued behind a dependency")


def test_two_ranks_communication_overlap_and_the_straggler():
    """Two ranks, four steps of 1000 µs: each computes, then all-reduces (an NCCL kernel) until
    the slower rank arrives. Rank 0 computes [0, 500) and waits in the all-reduce [500, 900);
    rank 1 (the straggler) computes [0, 800) and all-reduces [800, 900). Rank 0 overlaps 100 µs
    of its all-reduce with a compute kernel on another stream [500, 600)."""
    trace = Trace()
    for step in range(4):
        t = step * 1000
        trace.launch(0, t, t + 0, t + 500)
        trace.launch(0, t + 1, t + 500, t + 900, name=NCCL)
        trace.launch(0, t + 2, t + 500, t + 600)
        trace.launch(1, t, t + 0, t + 800)
        trace.launch(1, t + 1, t + 800, t + 900, name=NCCL)
    ends = [-1, 999, 1999, 2999, 3999]
    section = _section(trace, {0: ends, 1: ends})
    assert gpu_steps.is_communication(NAMES).tolist() == [False] * 5 + [True, False, False]
    r0, r1 = section["ranks"]["0"], section["ranks"]["1"]
    assert r0["comm"] == 400 * US and r0["comm_overlap"] == 100 * US
    assert r1["comm"] == 100 * US and r1["comm_overlap"] == 0
    (straggler,) = section["stragglers"]
    assert straggler["rank"] == 1 and straggler["steps"] == straggler["of"] == 4
    assert straggler["busy"] == 800 * US and straggler["median_busy"] == 700 * US
    (line,) = _lines(section, "slowest")
    assert line.startswith("Rank 1 is the slowest in 4 of 4 steps")
    # Not overlapped: (300 + 100) / 2 µs a step over 1000: 20% >= the 5% threshold.
    (line,) = _lines(section, "not overlapped")
    assert "0.20 ms a step (20.0%)" in line
    assert gpu_advice.COMM_EXPOSED_SHARE == 0.05
