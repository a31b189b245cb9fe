"""Kernels attributed to the layer and phase that launched them: xdl.watch's host ranges (a real
torch model on the CPU, backward on another thread), the join by launch call through the real
CUPTI plugin over the synthetic GPU, constructed traces for the innermost-range rule, and the
timeline's range and API tracks on the OS thread id."""

import json
import os
import re
import threading
import time

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import _core
from xdl_trace.read import analysis, gpu_steps, report, timeline
from xdl_trace._proto import device_trace_pb2 as pb

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYNTHETIC = os.path.join(
    os.environ.get("XDL_TRACE_BUILD", os.path.join(REPO, "build")),
    "test_plugins",
    "libxdl_trace_cupti_synthetic.so",
)


def _ranges(path):
    columns = analysis.scan_run(str(path)).device_events.columns()
    r, names = columns["ranges"], columns["names"]
    return [
        (names[c], names[n], int(t), int(s), int(e))
        for c, n, t, s, e in zip(r["category"], r["name"], r["thread"], r["start_ns"], r["end_ns"])
    ]


def test_watch_marks_every_module_forward_leaf_backward_and_the_optimizer(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    ).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xdl.watch(model, optimizer=opt, scope="marks", marks=True)
    main = threading.get_native_id()
    autograd = []

    def backward(loss):  # Backward on a thread of its own, as autograd's device thread on a GPU.
        autograd.append(threading.get_native_id())
        loss.backward()

    with xdl.TraceHook({"output_dir": str(tmp_path), "fsync": False}, scope="marks") as hook:
        for _ in range(3):
            loss = model(torch.randn(4, 8, dtype=torch.float64)).sum()
            worker = threading.Thread(target=backward, args=(loss,))
            worker.start()
            worker.join()
            opt.step()
            opt.zero_grad()
            hook.step()
    ranges = _ranges(tmp_path)
    forward = [r for r in ranges if r[0] == "forward"]
    backward_ = [r for r in ranges if r[0] == "backward"]
    assert [r[1] for r in forward] == ["0", "1", "2", "Sequential"] * 3
    assert {r[2] for r in forward} == {main}
    outer = [r for r in forward if r[1] == "Sequential"]
    for name, start, end in ((r[1], r[3], r[4]) for r in forward if r[1] != "Sequential"):
        assert any(o[3] <= start and end <= o[4] for o in outer), name  # Nested in the model.
    # Each leaf's backward, last layer first, on the thread that ran backward; one after another.
    assert [r[1] for r in backward_] == ["2", "1", "0"] * 3
    assert [r[2] for r in backward_] == [tid for tid in autograd for _ in range(3)]
    assert main not in autograd
    for a, b in zip(backward_, backward_[1:]):
        assert a[4] <= b[3]
    assert [r[1] for r in ranges if r[0] == "optimizer"] == ["SGD"] * 3
    # Marks are idempotent: a second watch adds no second range per module.
    xdl.watch(model, optimizer=opt, scope="marks2", marks=True)
    with xdl.TraceHook({"output_dir": str(tmp_path / "b"), "fsync": False}, scope="marks2") as h:
        model(torch.randn(4, 8, dtype=torch.float64)).sum().backward()
        h.step()
    assert [r[1] for r in _ranges(tmp_path / "b") if r[0] == "forward"] == [
        "0",
        "1",
        "2",
        "Sequential",
    ]
    # unmark takes them back: no hook left, the optimizer's own step again.
    from xdl_trace.write import ranges as ranges_module

    ranges_module.unmark(model)
    ranges_module.unmark(opt)
    assert "step" not in vars(opt)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    with xdl.TraceHook({"output_dir": str(tmp_path / "c"), "fsync": False}, scope="marks2") as h:
        model(torch.randn(4, 8, dtype=torch.float64)).sum().backward()
        opt.step()
        h.step()
    assert _ranges(tmp_path / "c") == []


def test_watch_of_a_cpu_model_marks_nothing_unless_asked(tmp_path):
    # A CPU model launches no kernels to attribute; its marks would only cost hooks.
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    xdl.watch(model, scope="cpu")
    assert not model._forward_pre_hooks and not model[0]._forward_pre_hooks
    with xdl.TraceHook({"output_dir": str(tmp_path), "fsync": False}, scope="cpu") as hook:
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            hook.step()
    assert _ranges(tmp_path) == []


def test_no_range_is_kept_while_no_tracer_is_live():
    rid = _core.range_id("idle", "test")
    assert _core.note_range(rid, time.time_ns()) is False


def test_host_range_of_user_code_and_bad_ids(tmp_path):
    xdl.trace_variable("range_v", np.zeros(1, np.float32), scope="user_range")
    with xdl.TraceHook({"output_dir": str(tmp_path), "fsync": False}, scope="user_range") as hook:
        with xdl.host_range("data", "input"):
            time.sleep(0.002)
        assert _core.note_range(1 << 30, time.time_ns()) is False  # An unknown id is not kept.
        hook.step()
    [(category, name, thread, start, end)] = _ranges(tmp_path)
    assert (category, name, thread) == ("input", "data", threading.get_native_id())
    assert end - start >= 2_000_000


def _columns(ops, calls, ranges, names):
    """Constructed columns: ops (kind, name, start, end, correlation), calls (thread, start,
    correlation), ranges (name, category, thread, start, end)."""
    kinds = [k for k, *_ in ops] + [pb.DEVICE_EVENT_RUNTIME_API] * len(calls)
    table = {
        "kind": np.array(kinds, np.int32),
        "name": np.array([n for _, n, *_ in ops] + [0] * len(calls), np.int32),
        "rank": np.zeros(len(kinds), np.int64),
        "device": np.array([0] * len(ops) + [-1] * len(calls), np.int32),
        "line": np.array([7] * len(ops) + [t for t, _, _ in calls], np.int64),
        "start_ns": np.array([s for _, _, s, _, _ in ops] + [s for _, s, _ in calls], np.int64),
        "end_ns": np.array([e for _, _, _, e, _ in ops] + [s + 1 for _, s, _ in calls], np.int64),
        "correlation_id": np.array([c for *_, c in ops] + [c for _, _, c in calls], np.uint64),
        "external_id": np.zeros(len(kinds), np.uint64),
        "bytes": np.zeros(len(kinds), np.int64),
        "names": names,
        "dropped_events": 0,
        "dropped_buffers": 0,
    }
    index = {n: i for i, n in enumerate(names)}
    table["ranges"] = {
        "name": np.array([index[n] for n, *_ in ranges], np.int32),
        "category": np.array([index[c] for _, c, *_ in ranges], np.int32),
        "rank": np.zeros(len(ranges), np.int64),
        "thread": np.array([t for _, _, t, _, _ in ranges], np.int64),
        "start_ns": np.array([s for *_, s, _ in ranges], np.int64),
        "end_ns": np.array([e for *_, e in ranges], np.int64),
        "dropped": 0,
    }
    return table


def test_each_op_goes_to_the_innermost_range_of_its_launch_thread():
    names = ["", "k", "forward", "backward", "model", "conv", "relu", "fc"]
    K = pb.DEVICE_EVENT_KERNEL
    ranges = [
        ("model", "forward", 11, 0, 100),
        ("conv", "forward", 11, 10, 40),
        ("relu", "forward", 11, 50, 60),
        ("fc", "backward", 22, 0, 100),  # Another thread: autograd's.
    ]
    calls = [
        (11, 5, 1),
        (11, 20, 2),
        (11, 45, 3),
        (11, 55, 4),
        (22, 30, 5),
        (11, 200, 6),
        (33, 20, 7),
    ]
    ops = [(K, 1, 1000 + i, 1010 + i * 2, c) for i, (_, _, c) in enumerate(calls)]
    ops.append((K, 1, 2000, 2100, 99))  # No launch call found.
    columns = _columns(ops, calls, ranges, names)
    got = gpu_steps.launching_ranges(columns, np.arange(len(ops)))
    #       model conv model relu fc(22) none  thread 33  no call
    assert got.tolist() == [0, 1, 0, 2, 3, -1, -1, -1]
    rows = {(r["phase"], r["module"]): r for r in gpu_steps.module_table(columns, 1000.0)}
    assert rows[("forward", "model")]["kernels"] == 2
    assert rows[("forward", "conv")]["time_ns"] == 11  # Op 1: 1001 .. 1012.
    assert rows[(None, None)]["kernels"] == 3
    assert sum(r["kernels"] for r in rows.values()) == len(ops)


def _innermost_by_hand(starts, ends, at):
    """The reference: for each time, of the ranges holding it, the one begun last (of two begun
    together, the shorter)."""
    out = []
    for t in at:
        holding = [i for i in range(len(starts)) if starts[i] <= t <= ends[i]]
        out.append(max(holding, key=lambda i: (starts[i], -ends[i])) if holding else -1)
    return out


@pytest.mark.parametrize("overlapping", [False, True], ids=["nested", "overlapping"])
def test_the_innermost_range_of_many_matches_a_search_by_hand(overlapping):
    """gpu_steps._innermost over 2,000 random ranges of a thread, nested and touching, or one
    overlapping its parent without nesting (a leaf module's backward mark outliving it): each
    time goes to the range begun last of those holding it, as a search by hand says."""
    rng = np.random.default_rng(3)
    starts, ends = [], []

    def nest(lo, hi, depth):  # Children one after another inside [lo, hi], some touching.
        t = lo
        while depth < 4 and hi - t > 8 and len(starts) < 2000:
            a = t + int(rng.integers(0, 3))
            b = a + int(rng.integers(1, max(2, (hi - a) // 3)))
            starts.append(a)
            ends.append(b)
            nest(a, b, depth + 1)
            t = b

    nest(0, 1_000_000, 0)
    assert len(starts) == 2000
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if overlapping:  # A leaf's range that outlives its parent's.
        ends[5] = ends[5] + 10_000
    at = rng.integers(0, 1_000_000, 3000)
    want = _innermost_by_hand(starts.tolist(), ends.tolist(), at.tolist())
    assert gpu_steps._innermost(starts, ends, at).tolist() == want


def _synthetic_run(tmp_path, rate=40_000, plugin_config=""):
    if not os.path.exists(SYNTHETIC):
        pytest.skip(f"SKIPPED: {SYNTHETIC} is not built (make build)")
    v = np.zeros(1, np.float32)
    xdl.trace_variable("modules_v", v, scope="synthetic")
    config = {
        "output_dir": str(tmp_path),
        "fsync": False,
        "device_tracers": [SYNTHETIC],
        "device_collect_interval_s": 0.05,
        "device_plugin_config": f"synthetic_rate={rate};{plugin_config}",
    }
    with xdl.TraceHook(config, scope="synthetic") as hook:
        hook.step()  # The first push: the synthetic GPU's calls are this thread's from here.
        for _ in range(4):
            with xdl.host_range("conv", "forward"):
                time.sleep(0.02)
            with xdl.host_range("conv", "backward"):
                time.sleep(0.01)
            hook.step()
        status = hook.stats()
    return status


def test_kernels_attributed_through_the_cupti_plugin_over_the_synthetic_gpu(tmp_path, capsys):
    _synthetic_run(tmp_path)
    scan = analysis.scan_run(str(tmp_path))
    if scan.gpu is None:
        pytest.skip("SKIPPED: the synthetic GPU gave no events (libcupti does not load here)")
    columns = scan.device_events.columns()
    names, r = columns["names"], columns["ranges"]
    me = threading.get_native_id()
    # API calls carry the OS thread id (CUPTI's SYSTEM thread-id type), as host spans do.
    api = np.flatnonzero(columns["device"] == -1)
    assert me in set(columns["line"][api].tolist())
    # An independent join: each kernel's launch call by correlation id, its range by brute force.
    call_of = {
        int(c): (int(t), int(s))
        for c, t, s in zip(
            columns["correlation_id"][api], columns["line"][api], columns["start_ns"][api]
        )
    }
    expected = {}
    kernels = np.flatnonzero(
        np.isin(
            columns["kind"],
            (pb.DEVICE_EVENT_KERNEL, pb.DEVICE_EVENT_MEMCPY, pb.DEVICE_EVENT_MEMSET),
        )
    )
    counted = scan.gpu["counted"]
    for i in kernels[counted[kernels]].tolist():
        thread, at = call_of.get(int(columns["correlation_id"][i]), (None, None))
        where = (None, None)
        for j in range(len(r["name"])):
            if r["thread"][j] == thread and r["start_ns"][j] <= at <= r["end_ns"][j]:
                where = (names[r["category"][j]], names[r["name"][j]])
        expected[where] = expected.get(where, 0) + 1
    got = {(row["phase"], row["module"]): row["kernels"] for row in scan.gpu["modules"]}
    assert got == expected
    assert got[("forward", "conv")] > 0 and got[("backward", "conv")] > 0
    # xdl-trace gpu prints the table and writes every (module, phase) row as CSV.
    import csv

    from xdl_trace import cli

    assert cli.main(["gpu", str(tmp_path), "--csv", str(tmp_path / "csv")]) == 0
    with open(tmp_path / "csv" / "modules.csv", encoding="utf-8") as f:
        rows = {
            (r["phase"] or None, r["module"] or None): int(r["kernels"]) for r in csv.DictReader(f)
        }
    assert rows == expected


def test_timeline_puts_a_threads_ranges_above_its_api_calls(tmp_path):
    _synthetic_run(tmp_path, rate=5_000)
    out = tmp_path / "t.json"
    timeline.write_timeline(str(tmp_path), str(out))
    events = json.loads(out.read_text())["traceEvents"]
    me = threading.get_native_id()
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    ranges = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("forward", "backward")]
    assert ranges and {e["name"] for e in ranges} == {"conv"}
    pid, tid = ranges[0]["pid"], ranges[0]["tid"]
    assert names[(pid, tid)] == f"ranges (tid {me})"
    with open(f"/proc/self/task/{me}/comm") as f:
        comm = f.read().strip()
    assert names[(pid, tid + 1)].endswith(f"{comm} (tid {me})")  # The API calls, just below.


def test_report_shows_gpu_time_by_module_beside_its_gradient(tmp_path):
    """xdl.watch's marks on a real torch model (each layer sleeps in its forward, so the
    synthetic GPU's launches fall in it), through the CUPTI plugin, into the report's table. How
    many launches each range gets depends on the generator thread's timing: only their
    presence and the table's bookkeeping are checked."""
    torch = pytest.importorskip("torch")
    if not os.path.exists(SYNTHETIC):
        pytest.skip(f"SKIPPED: {SYNTHETIC} is not built (make build)")

    class Slow(torch.nn.Linear):
        def __init__(self, n, seconds):
            super().__init__(n, n)
            self.seconds = seconds

        def forward(self, x):
            time.sleep(self.seconds)
            return super().forward(x)

    torch.manual_seed(0)
    model = torch.nn.Sequential(Slow(4, 0.004), Slow(4, 0.008))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xdl.watch(model, optimizer=opt, scope="report_modules", marks=True)
    config = {
        "output_dir": str(tmp_path),
        "fsync": False,
        "device_tracers": [SYNTHETIC],
        "device_collect_interval_s": 0.05,
        "device_plugin_config": "synthetic_rate=40000",
    }
    with xdl.TraceHook(config, scope="report_modules") as hook:
        for _ in range(5):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            hook.step()
            opt.zero_grad()
    scan = analysis.scan_run(str(tmp_path))
    if scan.gpu is None:
        pytest.skip("SKIPPED: the synthetic GPU gave no events (libcupti does not load here)")
    from xdl_trace.read import report

    rows = {
        r["module"]: r
        for r in report.gpu_section("run", scan.gpu, report.module_norms(scan))["modules"]
    }
    assert rows["1"]["forward"] > 0 and rows["0"]["forward"] > 0
    # Every op in the windows is in one row: the table folds module_table's pairs.
    ops = sum(r["kernels"] for r in scan.gpu["modules"])
    assert (
        sum(r["kernels"] for r in rows.values())
        == ops
        == int(
            scan.gpu["counted"].sum()
            - (
                np.isin(
                    scan.device_events.columns()["kind"],
                    gpu_steps.API_KINDS + (gpu_steps.SYNC_KIND,),
                )
                & scan.gpu["counted"]
            ).sum()
        )
    )
    grad = scan.stats[("report_modules/gradient/1.weight", 0)].view()[1][-1]
    bias = scan.stats[("report_modules/gradient/1.bias", 0)].view()[1][-1]
    l2 = analysis.STATS_FIELDS.index("l2")
    assert rows["1"]["grad_norm"] == pytest.approx((grad[l2] ** 2 + bias[l2] ** 2) ** 0.5)
    assert rows["1"]["ratio"] > 0
    page = tmp_path / "report.html"
    report.write_report([str(tmp_path)], str(page))
    text = page.read_text()
    assert "GPU time by module and phase" in text and "<td class=mono title=''>1</td>" in text


def test_occupancy_of_a_kernel_is_its_launches_weighted_by_time():
    """launch_configs on a constructed table: a kernel launched twice on an H100 (132 SMs, 2048
    threads an SM), 8 blocks of 256 threads fitting an SM for 300 ns, 2 for 100 ns (grid 1000 and
    66 blocks); a kernel on a device without limits has none."""
    names = ["", "k", "other", "1000x1x1", "66x1x1", "256x1x1"]
    columns = {
        "names": names,
        "kind": np.array([gpu_steps.KERNEL] * 3),
        "name": np.array([1, 1, 2], np.int32),
        "rank": np.zeros(3, np.int64),
        "device": np.array([0, 0, 1], np.int32),
        "start_ns": np.array([0, 1000, 2000]),
        "end_ns": np.array([300, 1100, 2100]),
        "launches": {
            "row": np.array([0, 1, 2]),
            "grid": np.array([3, 4, 3], np.int32),
            "block": np.array([5, 5, 5], np.int32),
            "registers": np.array([32, 128, 32]),
            "shared_memory": np.zeros(3, np.int64),
            "active_blocks": np.array([8, 2, 8]),
        },
        "devices": [
            {"rank": 0, "device": 0, "stats": {"sm_count": 132, "max_threads_per_sm": 2048}}
        ],
    }
    configs = gpu_steps.launch_configs(columns)
    k = configs["k"]
    assert k["configs"] == 2 and k["registers"] == 32  # The one with the most time.
    # Theoretical: 8 x 256 / 2048 = 1.0 for 300 ns, 2 x 256 / 2048 = 0.25 for 100 ns.
    assert k["occupancy"] == pytest.approx((1.0 * 300 + 0.25 * 100) / 400)
    # Estimated: min(8, 1000 / 132) x 256 / 2048 and min(2, 66 / 132) x 256 / 2048.
    est = (min(8, 1000 / 132) * 256 / 2048 * 300 + min(2, 66 / 132) * 256 / 2048 * 100) / 400
    assert k["est_occupancy"] == pytest.approx(est)
    assert configs["other"]["occupancy"] is None and configs["other"]["est_occupancy"] is None


@pytest.mark.parametrize("cuda_started_first", [False, True])
def test_occupancy_through_the_cupti_plugin_over_the_synthetic_gpu(
    tmp_path, capsys, cuda_started_first
):
    """The synthetic GPU hands a DEVICE record (an H100's limits) at enable, as CUPTI does when
    CUDA starts after it; where CUDA started first (a model on the GPU before the hook begins)
    no record comes and the plugin reads the same limits from the driver. Either way the run's
    Device carries them, every kernel its calculator blocks per SM, and the report's kernel
    table its occupancy (blocks of 256 threads with 32 to 56 registers: 8 down to 4 blocks an
    SM, 50 to 100%; grids of 128 to 384 blocks over 132 SMs cap the estimate)."""
    _synthetic_run(tmp_path, plugin_config=f"synthetic_cuda_started={int(cuda_started_first)}")
    scan = analysis.scan_run(str(tmp_path))
    if scan.gpu is None:
        pytest.skip("SKIPPED: the synthetic GPU gave no events (libcupti does not load here)")
    columns = scan.device_events.columns()
    (device,) = columns["devices"]
    assert device["stats"]["sm_count"] == 132 and device["stats"]["max_threads_per_sm"] == 2048
    active = columns["launches"]["active_blocks"]
    assert len(active) and set(active.tolist()) <= {4, 5, 6, 8}
    for kernel in scan.gpu["kernels"]:
        assert 0.5 <= kernel["occupancy"] <= 1.0, kernel
        assert 128 / 132 * 256 / 2048 <= kernel["est_occupancy"] <= 384 / 132 * 256 / 2048
    html = str(tmp_path / "report.html")
    report.write_report(str(tmp_path), html)
    assert "est. occupancy</th>" in open(html, encoding="utf-8").read()
    from xdl_trace import cli

    assert cli.main(["gpu", str(tmp_path), "--top", "1"]) == 0
    (heading, first) = [
        line
        for line in capsys.readouterr().out.splitlines()
        if "occupancy" in line or "%  " in line
    ][:2]
    assert heading.startswith("kernels (") and heading.endswith(", occupancy):")
    assert re.search(r" ms +\d+ +\d+\.\d%  ", first), first
