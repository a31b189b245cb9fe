"""The report's GPU section and the timeline on a real H100 trace (tests/data/h100_conv), checked
against torch.profiler's (Kineto) trace of the same loop and against brute-force recomputation."""

import gzip
import json
import os
import re

import numpy as np
import pytest

from headless_chromium import Chromium
from xdl_trace import _core, analysis, device_events, gpu_steps, report, timeline

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "h100_conv")
H100 = os.path.join(DATA, "cupti_trace")
KINETO = os.path.join(DATA, "kineto_reduced.json.gz")


@pytest.fixture(scope="module")
def scan():
    return analysis.scan_run(H100)


@pytest.fixture(scope="module")
def kineto():
    """Kineto's kernels per step: a kernel belongs to the `STEP n` annotation holding the start
    of its launch call (matched by correlation id), as HTA assigns them."""
    with gzip.open(KINETO, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"], int(e["name"].split()[1]))
        for e in events
        if e["cat"] == "user_annotation"
    )
    calls = {
        e["correlation"]: e["ts"] for e in events if e["cat"] in ("cuda_runtime", "cuda_driver")
    }
    per_step = {n: [0, 0.0] for _, _, n in steps}
    names = set()
    for e in events:
        if e["cat"] != "kernel":
            continue
        names.add(e["name"])
        t = calls[e["correlation"]]
        (n,) = [n for a, b, n in steps if a <= t < b]
        per_step[n][0] += 1
        per_step[n][1] += e["dur"] * 1e3  # us -> ns
    kernels = [e for e in events if e["cat"] == "kernel"]
    return {
        "per_step": per_step,
        "names": names,
        "kernels": len(kernels),
        "kernel_ns": sum(e["dur"] for e in kernels) * 1e3,
    }


def _rows(scan):
    ((gsteps, rows),) = scan.gpu["steps"].values()
    return gsteps, {f: rows[:, i] for i, f in enumerate(gpu_steps.STEP_FIELDS)}


def test_kernels_and_kernel_time_per_step_match_kineto(scan, kineto):
    gsteps, rows = _rows(scan)
    assert list(gsteps) == list(range(1, 12))  # A rank's first step has no window.
    counts = [c for c, _ in kineto["per_step"].values()]
    times = [t for _, t in kineto["per_step"].values()]
    assert np.median(rows["kernels"]) == pytest.approx(np.median(counts), rel=0.01)
    assert np.median(rows["kernel_time"]) == pytest.approx(np.median(times), rel=0.01)
    assert np.mean(rows["kernel_time"]) == pytest.approx(np.mean(times), rel=0.01)
    # Over the whole trace: every kernel, and the same kernel time.
    assert scan.gpu["launch"]["kernels"] == kineto["kernels"] == 2568
    total = sum(k["total_ns"] for k in gpu_steps.kernel_table(scan.device_events.columns(), 1.0))
    assert total == pytest.approx(kineto["kernel_ns"], rel=0.01)


def _brute_union(intervals, lo, hi):
    """The measure of the union of `intervals` inside [lo, hi), by sorting and sweeping."""
    total, reach = 0, lo
    for s, e in sorted(intervals):
        s, e = max(s, reach), min(e, hi)
        if e > s:
            total += e - s
            reach = e
    return total


def test_busy_and_breakdown_by_brute_force(scan):
    """Busy, compute, memcpy, memset and idle against a plain sweep over the raw events."""
    c = scan.device_events.columns()
    gsteps, rows = _rows(scan)
    spans = {}
    for record in analysis.open_trace(H100).records(keys=[]):
        for span in device_events.parse_extra(record.extra)[0]:
            if span.kind == device_events.HostSpan.STEP:
                spans[span.gstep] = span.end_ns
    ops = {k: [] for k in (gpu_steps.KERNEL, gpu_steps.MEMCPY, gpu_steps.MEMSET)}
    for kind, s, e in zip(c["kind"].tolist(), c["start_ns"].tolist(), c["end_ns"].tolist()):
        if kind in ops:
            ops[kind].append((s, e))
    for i, g in enumerate(gsteps.tolist()):
        lo, hi = spans[g - 1], spans[g]
        k = _brute_union(ops[gpu_steps.KERNEL], lo, hi)
        km = _brute_union(ops[gpu_steps.KERNEL] + ops[gpu_steps.MEMCPY], lo, hi)
        every = sum(ops.values(), [])
        busy = _brute_union(every, lo, hi)
        assert rows["window"][i] == hi - lo
        assert rows["busy"][i] == pytest.approx(busy, abs=2)
        assert rows["compute"][i] == pytest.approx(k, abs=2)
        assert rows["memcpy"][i] == pytest.approx(km - k, abs=2)
        assert rows["memset"][i] == pytest.approx(busy - km, abs=2)
        assert rows["idle"][i] == pytest.approx(hi - lo - busy, abs=2)
        causes = rows["idle_blocking"][i] + rows["idle_no_launch"][i] + rows["idle_other"][i]
        assert causes == pytest.approx(rows["idle"][i], abs=2)
        assert min(rows["idle_blocking"][i], rows["idle_no_launch"][i], rows["idle_other"][i]) >= 0
    busy_share = rows["busy"].sum() / rows["window"].sum()
    assert 0.9 < busy_share < 1.0  # The conv net keeps the H100 busy (95.6% in docs/report.md).


def test_idle_attribution_on_a_constructed_timeline():
    """One step of 100 ns: a kernel [10, 30) launched at 5, a kernel [60, 70) launched at 50,
    the host in a blocking call [75, 90): idle 0..10 (host launched at 5: 5 not launching,
    5 other), 30..60 (50 not launching... until 50: 20, then 10 other), 70..100 (15 blocking,
    15 not launching: nothing launched after)."""
    kinds = [4, 1, 4, 1, 4]  # runtime call, kernel, runtime call, kernel, sync call
    columns = {
        "kind": np.array(kinds, np.int32),
        "name": np.array([1, 2, 1, 2, 3], np.int32),
        "rank": np.zeros(5, np.int64),
        "device": np.array([-1, 0, -1, 0, -1], np.int32),
        "line": np.zeros(5, np.int64),
        "start_ns": np.array([5, 10, 50, 60, 75], np.int64) + 1000,
        "end_ns": np.array([8, 30, 52, 70, 90], np.int64) + 1000,
        "correlation_id": np.array([1, 1, 2, 2, 3], np.uint64),
        "external_id": np.zeros(5, np.uint64),
        "names": ["", "cudaLaunchKernel_v7000", "_Z6kernelv", "cudaStreamSynchronize_v3020"],
        "dropped_events": 0,
        "dropped_buffers": 0,
    }
    steps = {0: (np.array([0, 1]), np.array([1000, 1100]))}
    ((gsteps, rows),) = gpu_steps.gpu_steps(columns, steps).values()
    got = dict(zip(gpu_steps.STEP_FIELDS, rows[0].tolist()))
    assert list(gsteps) == [1]
    assert got["busy"] == 30 and got["idle"] == 70 and got["compute"] == 30
    assert got["idle_blocking"] == 15
    assert got["idle_no_launch"] == 5 + 20 + 15
    assert got["idle_other"] == 5 + 10
    assert got["kernels"] == 2 and got["launches"] == 2 and got["kernel_time"] == 30
    (kernel,) = gpu_steps.kernel_table(columns, 100.0)
    assert kernel["name"] == "kernel()" and kernel["mangled"] == "_Z6kernelv"
    assert kernel["share"] == pytest.approx(0.3)


def test_kernel_names_demangled_and_host_api_apart(scan, kineto):
    kernels, api = scan.gpu["kernels"], scan.gpu["api"]
    assert not any(k["name"].startswith("_Z") and k["name"] not in kineto["names"] for k in kernels)
    assert sum(k["mangled"].startswith("_Z") and k["name"] != k["mangled"] for k in kernels) >= 8
    # Names as Kineto shows them (CUPTI's own name for one kernel is shorter than Kineto's).
    assert sum(k["name"] in kineto["names"] for k in kernels) >= len(kernels) - 1
    assert not any(k["name"].startswith("cuda") for k in kernels)
    by_name = {a["name"]: a for a in api}
    copy = by_name["cudaMemcpyAsync"]  # The loss to the host: a blocking copy, host time only.
    assert copy["calls"] == 12 and copy["blocking"] == 12
    assert by_name["cudaStreamSynchronize"]["blocking"] == 12
    assert by_name["cudaLaunchKernel"]["blocking"] == 0
    assert by_name["cudaLaunchKernel"]["calls"] == 2184
    # The kernel table's shares are of the steps' time: the top kernel, not the host copy.
    assert kernels[0]["share"] < 0.5 and copy["share"] > 0.5
    # An already demangled name passes through unchanged.
    assert _core.demangle([kernels[0]["name"], "cudaLaunchKernel"]) == [
        kernels[0]["name"],
        "cudaLaunchKernel",
    ]


def test_launch_stats(scan):
    launch = scan.gpu["launch"]
    c = scan.device_events.columns()
    kernels = c["kind"] == gpu_steps.KERNEL
    durations = (c["end_ns"] - c["start_ns"])[kernels]
    assert launch["short_kernels"] == int((durations < 10_000).sum())
    assert launch["short_share"] == pytest.approx(launch["short_kernels"] / 2568)
    assert launch["launches_per_step"] == 213
    assert 0 < launch["delay_median_ns"] <= launch["delay_p99_ns"]


def test_timeline_names_kernels_demangled(tmp_path, kineto):
    out = str(tmp_path / "timeline.json")
    timeline.write_timeline(H100, out)
    with open(out) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 2568
    # One cutlass kernel's name does not demangle (c++filt fails on it too): Kineto shows it
    # mangled as well.
    still = {e["name"] for e in kernels if e["name"].startswith("_Z")}
    assert len(still) == 1 and still <= kineto["names"]
    mangled = [e for e in kernels if "mangled_name" in e["args"]]
    assert mangled and all(e["args"]["mangled_name"].startswith("_Z") for e in mangled)
    assert _core.demangle([mangled[0]["args"]["mangled_name"]]) == [mangled[0]["name"]]
    streams = {
        e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == kernels[0]["pid"]
    }
    assert streams == {"stream 7"}


def test_gpu_section_renders_in_headless_chromium(tmp_path):
    browser = Chromium(tmp_path)
    matplotlib = pytest.importorskip("matplotlib.image", reason="python3-matplotlib is needed")
    out = str(tmp_path / "report.html")
    result = report.write_report(H100, out)
    page = open(out, encoding="utf-8").read()
    assert "GPU busy" in page and "Host CUDA API calls" in page
    assert "cudnn::bn_bw_1C11_kernel_new" in page and "_ZN5cudnn21bn_bw" in page  # title=
    dom = browser.dom(out, window="1400,2400")
    assert not re.search(r"<title>ERROR", dom)
    assert f'data-charts="{result["charts"]}"' in dom
    gpu_box = dom[dom.index('id="gpu-charts"') :]
    gpu_box = gpu_box[: gpu_box.index('class="gpu-run"')]
    assert gpu_box.count('class="uplot') == 3  # Busy, time by kind, idle by cause.
    shot = str(tmp_path / "shot.png")
    assert not browser.screenshot(out, shot, window="1400,2400")
    image = (matplotlib.imread(shot)[..., :3] * 255).round().astype(int)

    # The stacked bands are drawn: compute (#2ca02c at alpha 0.55 over white) covers a large
    # area, and the idle causes (blocking #d62728, other #9467bd) are visible.
    def pixels(color, alpha=0.55):
        blended = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)]) * alpha + 255 * (
            1 - alpha
        )
        return int((np.abs(image - blended).max(axis=-1) <= 6).sum())

    assert pixels("#2ca02c") > 20_000
    assert pixels("#d62728") > 1_000 and pixels("#9467bd") > 1_000


def _columns(events, names):
    """Device-event columns (as ``_core.DeviceEventTable`` gives them) of `events`, tuples
    (kind, name id, start, end, correlation id[, rank[, line]]) in event order, times in ns
    after 1000; host calls get device -1."""
    rows = [tuple(e) + (0, 7)[len(e) - 5 :] for e in events]
    kind, name, start, end, corr, rank, line = (np.array(c) for c in zip(*rows))
    return {
        "kind": kind.astype(np.int32),
        "name": name.astype(np.int32),
        "rank": rank.astype(np.int64),
        "device": np.where(np.isin(kind, (4, 5, 6)), -1, 0).astype(np.int32),
        "line": line.astype(np.int64),
        "start_ns": start.astype(np.int64) + 1000,
        "end_ns": end.astype(np.int64) + 1000,
        "correlation_id": corr.astype(np.uint64),
        "external_id": np.zeros(len(rows), np.uint64),
        "names": names,
        "dropped_events": 0,
        "dropped_buffers": 0,
    }


def test_a_gap_closed_by_a_kernel_after_a_memset_reads_the_kernels_launch():
    """Issue 33 #1: a memset [10, 20) launched at 2, then a kernel [60, 70) launched at 40, in
    event order. The gap 20..60 is closed by the kernel, launched at 40: the host was not
    launching 20..40. Reading the memset's launch for it (the joined arrays put kernels first)
    called the whole gap "other"."""
    names = ["", "cudaLaunchKernel_v7000", "_Z6kernelv", "cudaMemsetAsync_v3020", "memset"]
    events = [
        (4, 3, 2, 4, 1),  # cudaMemsetAsync
        (3, 4, 10, 20, 1),  # its memset
        (4, 1, 40, 42, 2),  # cudaLaunchKernel
        (1, 2, 60, 70, 2),  # its kernel
    ]
    steps = {0: (np.array([0, 1]), np.array([1000, 1100]))}
    ((_, rows),) = gpu_steps.gpu_steps(_columns(events, names), steps).values()
    got = dict(zip(gpu_steps.STEP_FIELDS, rows[0].tolist()))
    assert got["idle"] == 80
    # 0..10: launched at 2; 20..60: launched at 40; 70..100: nothing launched.
    assert got["idle_no_launch"] == 2 + 20 + 30


def test_shares_count_only_the_work_of_the_step_windows():
    """Issue 33 #2: three steps' ends at 0, 100, 200: two windows, 200 ns. A kernel of 50 ns
    launched in each window and one launched before the first: the kernel's share is 100/200,
    not 150/200 (the numerator covered the whole trace, the denominator only the windows)."""
    names = ["", "cudaLaunchKernel_v7000", "_Z6kernelv"]
    events = []
    for n, t in enumerate((-50, 10, 110)):
        events += [(4, 1, t, t + 2, n + 1), (1, 2, t + 20, t + 70, n + 1)]
    columns = _columns(events, names)
    steps = {0: (np.array([0, 1, 2]), np.array([1000, 1100, 1200]))}
    gpu = gpu_steps.summarize(columns, steps)
    (kernel,) = gpu["kernels"]
    assert kernel["count"] == 3 and kernel["total_ns"] == 150  # The whole trace.
    assert kernel["share"] == pytest.approx(0.5)
    (call,) = gpu["api"]
    assert call["calls"] == 3 and call["share"] == pytest.approx(4 / 200)


def test_h100_kernel_shares_add_to_the_compute_share(scan):
    """One stream: the kernels' shares add to at most the compute time over the windows (they
    added to 105%)."""
    c = scan.device_events.columns()
    t = scan.gpu["totals"]
    every = gpu_steps.summarize(c, _steps_of(scan), top=None)
    total = sum(k["share"] for k in every["kernels"])
    assert total == pytest.approx(t["kernel_time"] / t["window"], rel=1e-9)
    assert total <= 1.0
    copy = {a["name"]: a for a in every["api"]}["cudaMemcpyAsync"]
    assert 0.75 < copy["share"] < 0.85  # 80.4% of the windows (87.9% before).


def _steps_of(scan):
    """{rank: (gsteps, ends)} of the H100 trace's STEP spans, read independently."""
    ends = {}
    for record in analysis.open_trace(H100).records(keys=[]):
        for span in device_events.parse_extra(record.extra)[0]:
            if span.kind == device_events.HostSpan.STEP:
                ends[span.gstep] = span.end_ns
    g = sorted(ends)
    return {0: (np.array(g), np.array([ends[x] for x in g]))}
