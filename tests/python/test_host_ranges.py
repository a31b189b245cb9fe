"""Host time by range (xdl_trace/read/host_ranges.py): each named host range's own and total time
a step, checked on constructed ranges against a brute-force sweep, and on a real CPU training
loop whose data loading is known to take the most time, through the report page."""

import csv
import time

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import cli
from xdl_trace.read import analysis, host_ranges, report, report_html

from conftest import start_python, trained_and_evaluated


def _brute_force_own(starts, ends):
    """Each nanosecond goes to the open range begun last (the outer first of two begun
    together; of two alike, the one recorded later): own time by counting, for small integer
    intervals."""
    own = np.zeros(len(starts))
    for t in range(min(starts), max(ends)):
        open_ = [i for i in range(len(starts)) if starts[i] <= t < ends[i]]
        if open_:
            own[max(open_, key=lambda i: (starts[i], -ends[i], i))] += 1
    return own


@pytest.mark.parametrize(
    "starts, ends",
    [
        ([0, 10, 20, 30], [100, 20, 30, 90]),  # Nested, two of them touching.
        ([0, 5, 12], [10, 15, 20]),  # Overlapping without nesting (backward marks).
        ([0, 0, 5, 50], [40, 20, 10, 60]),  # Two begun together, then a gap.
    ],
    ids=["nested_touching", "overlapping", "same_start"],
)
def test_own_time_goes_to_the_range_begun_last(starts, ends):
    own = host_ranges.self_times(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
    assert own.tolist() == _brute_force_own(starts, ends).tolist()


def _nested_family(rng, lo, hi, depth):
    """Random ranges nested inside [lo, hi): siblings side by side (some touching), each holding
    its own children, a few instants among them."""
    out, t = [], lo
    while depth and t < hi - 2 and rng.random() < 0.8:
        start = int(rng.integers(t, hi - 1))
        end = int(rng.integers(start, hi)) if rng.random() < 0.9 else start
        out.append((start, end))
        out += _nested_family(rng, start, end, depth - 1)
        t = end if rng.random() < 0.5 else end + 1
    return out


@pytest.mark.parametrize("seed", range(20))
def test_own_times_of_random_ranges_match_the_count(seed):
    """Nested families (numpy's path: it must take them) and arbitrary overlapping ranges (the
    sweep's), against counting each nanosecond."""
    rng = np.random.default_rng(seed)
    family = _nested_family(rng, 0, 200, 4) or [(0, 10)]
    starts, ends = (np.asarray(x, np.int64) for x in zip(*family))
    lasting = ends > starts
    if lasting.any():
        assert host_ranges._nested_own(starts[lasting], ends[lasting]) is not None
    assert (
        host_ranges.self_times(starts, ends).tolist()
        == _brute_force_own(starts.tolist(), ends.tolist()).tolist()
    )
    starts = rng.integers(0, 150, 12)
    ends = starts + rng.integers(0, 60, 12)
    assert (
        host_ranges.self_times(starts, ends).tolist()
        == _brute_force_own(starts.tolist(), ends.tolist()).tolist()
    )


def _columns(names, rows):
    """A DeviceEventTable's columns holding only ranges: rows of (name, category, rank, thread,
    start, end) with names and categories as strings."""
    index = {n: i for i, n in enumerate(names)}

    def field(j, dtype):
        return np.asarray([r[j] for r in rows], dtype)

    return {
        "names": list(names),
        "ranges": {
            "name": np.asarray([index[r[0]] for r in rows], np.int32),
            "category": np.asarray([index[r[1]] for r in rows], np.int32),
            "rank": field(2, np.int64),
            "thread": field(3, np.int64),
            "start_ns": field(4, np.int64),
            "end_ns": field(5, np.int64),
            "dropped": 0,
        },
    }


def test_the_table_counts_the_step_windows_only_per_step_and_by_own_time():
    names = ["", "model", "forward", "layer", "data"]
    rows = [
        ("model", "forward", 0, 1, 5, 60),  # Before the first Step() call: setup, left out.
        ("model", "forward", 0, 1, 110, 170),
        ("layer", "forward", 0, 1, 120, 160),
        ("data", "", 0, 1, 170, 200),
        ("model", "forward", 0, 1, 210, 250),
        ("layer", "forward", 0, 1, 215, 245),
        ("data", "", 0, 2, 260, 290),  # Another thread: its own nesting.
    ]
    steps = {0: (np.asarray([0, 1, 2]), np.asarray([100, 200, 300]))}  # Two windows of 100 ns.
    table = {(r["name"], r["category"]): r for r in host_ranges.table(_columns(names, rows), steps)}
    model, layer, data = table["model", "forward"], table["layer", "forward"], table["data", ""]
    assert (model["calls"], model["total_ns"], model["self_ns"]) == (2, 100, 30)
    assert (layer["calls"], layer["self_ns"], data["self_ns"]) == (2, 70, 60)
    assert model["per_step_total_ns"] == 50 and model["share_total"] == pytest.approx(0.5)
    assert [r["name"] for r in host_ranges.table(_columns(names, rows), steps)] == [
        "layer",
        "data",
        "model",
    ]
    assert host_ranges.table(_columns(names, rows), {0: ([0], [100])}) == []  # One Step().


def test_a_cpu_loop_s_slowest_range_is_where_its_time_went(tmp_path, capsys):
    """watch(model, marks=True) and a data-loading range that sleeps 3 ms a step: "data" leads
    the table by its own time, the model's forward total holds its layers', the page shows
    the table under Steps and `xdl-trace ranges` prints it. A run without ranges has none."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xdl.clear()
    xdl.watch(model, optimizer=opt, marks=True, digest=False)
    out = str(tmp_path / "run")
    with xdl.TraceHook(output_dir=out, on_error="raise", fsync=False) as hook:
        for _ in range(12):
            with xdl.host_range("data"):
                x = torch.randn(8, 16)
                time.sleep(0.003)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), torch.zeros(8, 1)).backward()
            hook.step()
            opt.step()
    xdl.clear()
    rows = analysis.scan_run(out).host_ranges
    by = {(r["name"], r["category"]): r for r in rows}
    assert rows[0]["name"] == "data" and rows[0]["per_step_self_ns"] >= 3e6
    assert by["data", ""]["calls"] == 11  # The steps between the first and last Step().
    forward = by["Sequential", "forward"]
    layers = sum(by[m, "forward"]["total_ns"] for m in ("0", "1", "2"))
    assert forward["total_ns"] >= layers and forward["self_ns"] == pytest.approx(
        forward["total_ns"] - layers, rel=1e-9
    )
    assert sum(r["share_self"] for r in rows) <= 1.0
    page = report_html.render_html(report.build_report(out))
    assert "Host time by range" in page and "<td class=mono>data</td>" in page
    # The same table in the terminal, and every row as CSV.
    table = str(tmp_path / "ranges.csv")
    assert cli.main(["ranges", out, "--top", "3", "--csv", table]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[2].endswith("  data") and len(said) == 2 + 3 + 1, said
    with open(table, newline="") as f:
        assert [r["name"] for r in csv.DictReader(f)] == [r["name"] for r in rows]
    plain = str(tmp_path / "plain")
    xdl.trace_tensor("w", np.zeros(2, np.float32))
    with xdl.TraceHook(output_dir=plain, fsync=False) as hook:
        for _ in range(3):
            hook.step()
    xdl.clear()
    assert "Host time by range" not in report_html.render_html(report.build_report(plain))
    assert cli.main(["ranges", plain]) == 1
    assert "has no named host ranges" in capsys.readouterr().err


def test_an_evaluations_ranges_are_counted_apart_in_the_steps_it_ran_in(tmp_path, capsys):
    """A range rides in the record of the hook that steps next: an evaluation's (its batches'
    `xdl.host_range`, 5 ms each) are in the eval hook's records. The training run's table counts
    them in the training step they ran in, phase "eval" (an eval forward's marks: "eval
    forward"), apart from training's; the report and `xdl-trace ranges` alike. Before: missing,
    their time unexplained in a long step. with_evaluation merges the two tables' names."""
    out = str(tmp_path / "run")
    with trained_and_evaluated(out) as (train, evaluate):
        for step in range(20):
            with xdl.host_range("step", "forward"):
                time.sleep(0.001)
            train.step(values={"loss": 1.0})
            if step in (4, 9):
                for _ in range(2):
                    with xdl.host_range("batch"):
                        time.sleep(0.005)
                    evaluate.step(values={"acc": 0.5})
    by = {(r["name"], r["category"]): r for r in report.build_report(out)["host_ranges"][0]["rows"]}
    assert by["batch", "eval"]["calls"] == 4 and by["batch", "eval"]["total_ns"] >= 20e6
    assert by["step", "forward"]["calls"] == 19  # Training's: inside the step windows.
    assert cli.main(["ranges", out]) == 0
    assert any(line.endswith("  eval batch") for line in capsys.readouterr().out.splitlines())
    names = ["", "a"]
    theirs = _columns(["x", "", "forward"], [("x", "forward", 0, 1, 5, 9), ("x", "", 0, 1, 1, 2)])
    merged = host_ranges.with_evaluation(_columns(names, [("a", "", 0, 1, 0, 3)]), theirs)
    got = [
        (merged["names"][n], merged["names"][c])
        for n, c in zip(merged["ranges"]["name"], merged["ranges"]["category"])
    ]
    assert got == [("a", ""), ("x", "eval forward"), ("x", "eval")]


# An eval job of its own: evaluates three checkpoints, a 20 ms range each, beside training.
_EVAL_JOB = """
import sys, time, xdl_trace as xdl
xdl.trace_value("acc", scope="eval")
with xdl.TraceHook({"output_dir": sys.argv[1], "on_error": "raise"}, is_training=False,
                   scope="eval") as hook:
    print("began", flush=True)
    for gstep in (4, 9, 14):
        with xdl.host_range("batch"):
            time.sleep(0.02)
        hook.step(gstep=gstep, values={"acc": 0.5})
"""


def test_an_eval_job_of_its_own_is_not_counted_in_the_training_steps(tmp_path):
    """An eval job in a process of its own runs beside the training: its ranges ran in no
    training step, so the training run's table does not count them there, though their times
    fall inside its step windows (before: "batch", phase "eval", 60 ms in the training steps)."""
    out = str(tmp_path / "run")
    job = start_python(_EVAL_JOB, out)  # Once it began.
    xdl.clear()
    xdl.trace_value("loss")
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as train:
        for _ in range(20):
            with xdl.host_range("step", "forward"):
                time.sleep(0.005)
            train.step(values={"loss": 1.0})
    xdl.clear()
    assert job.wait(timeout=60) == 0
    model = report.build_report(out)
    assert [r["label"] for r in model["runs"]] == ["run", "run · eval"]  # Its evaluation.
    (table,) = model["host_ranges"]
    assert {(r["name"], r["category"]) for r in table["rows"]} == {("step", "forward")}
