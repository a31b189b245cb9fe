"""xdl-trace report: the model built from real traces, the self-contained HTML (rendered in
headless Chromium), the PNGs, the streaming accumulators and the command line."""

import ast
import csv
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import xdl_trace as xdl
from headless_chromium import Chromium
from xdl_trace.read import alerts, analysis, gpu_steps, report, report_html
from xdl_trace.errors import TraceError
from xdl_trace.read.selection import Selection

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _xdl_trace(*args, check=False):
    """`python -m xdl_trace ARGS` as a user runs it: the CompletedProcess (text)."""
    command = [sys.executable, "-m", "xdl_trace", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=check)


def _train(out_dir, rank=0, steps=60, seed=0, explode_at=None, nan_at=None, scale=1.0):
    """A small numpy regression traced like the quick start: w (variable) and its gradient, the
    loss (a callback), a frozen tensor, a hidden activation."""
    xdl.clear()
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
    w = np.zeros((4, 1), np.float32)
    frozen = np.full(6, 0.5, np.float32)
    state = {"loss": np.float32(0), "hidden": np.zeros((64, 1), np.float32)}
    xdl.trace_variable("w", w)
    xdl.trace_gradient("w")
    xdl.trace_tensor("frozen", frozen)
    xdl.trace_callback("loss", lambda: state["loss"])
    xdl.trace_tensor("hidden", lambda: state["hidden"])
    losses = []
    config = {"output_dir": out_dir, "rank": rank, "on_error": "raise", "fsync": False}
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            pred = x @ w
            err = pred - y
            state["loss"] = np.float32((err**2).mean() * scale)
            state["hidden"] = pred.copy()
            if nan_at is not None and step == nan_at:
                state["hidden"][3, 0] = np.nan
            grad = (2 * x.T @ err / len(x)).astype(np.float32)
            if explode_at is not None and step == explode_at:
                grad = grad * 1e5
            xdl.send_gradient("w", grad.copy())
            hook.step(gstep=step)
            losses.append(float(state["loss"]))
            w -= 0.05 * grad
    return losses


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("report_runs")
    a, b = str(base / "run_a"), str(base / "run_b")
    losses_a0 = _train(a, rank=0, nan_at=25, explode_at=40)
    losses_a1 = _train(a, rank=1, seed=1)
    losses_b = _train(b, rank=0, steps=40, scale=2.0)
    xdl.clear()
    return {"a": a, "b": b, "losses_a0": losses_a0, "losses_a1": losses_a1, "losses_b": losses_b}


def _html_model(page):
    return report_html.model_from_page(page)


def _card(model, key):
    return next(c for c in model["cards"] if c["key"] == key)


def _series(chart, label):
    s = next(s for s in chart["series"] if s["label"] == label)
    return {x: v for x, v in zip(chart["x"], s["values"]) if v is not None}


def test_model_facts_alerts_and_curves(runs):
    model = report.build_report([runs["a"], runs["b"]])
    run_a, run_b = model["runs"]
    assert run_a["label"] == "run_a" and run_a["ranks"] == [0, 1]
    assert run_a["records"] == 120 and run_a["gsteps"] == [0, 59] and run_a["dropped"] == 0
    assert run_b["records"] == 40 and run_b["gsteps"] == [0, 39]
    assert run_a["bytes"] == sum(f.size for f in xdl.open_trace(runs["a"]).files)

    kinds = {(a["kind"], a["run"], a["key"]): a for a in model["alerts"]}
    nan = kinds[("NaN/Inf", "run_a", "hidden")]
    assert (nan["rank"], nan["gstep"]) == (0, 25) and "1 NaN, 0 Inf" in nan["detail"]
    assert ("never changes", "run_a", "frozen") in kinds
    assert ("never changes", "run_b", "frozen") in kinds
    assert ("never changes", "run_a", "w") not in kinds
    explode = kinds[("exploding gradient", "run_a", "gradient/w")]
    assert (explode["rank"], explode["gstep"]) == (0, 40)
    assert not [a for a in model["alerts"] if a["run"] == "run_b" and a["kind"] != "never changes"]

    # The loss curve: every traced value, by run and rank (no downsampling at 60 records).
    (loss,) = _card(model, "loss")["charts"]
    assert _series(loss, "run_a · rank 0") == pytest.approx(
        dict(enumerate(runs["losses_a0"])), rel=1e-4
    )
    assert _series(loss, "run_a · rank 1") == pytest.approx(
        dict(enumerate(runs["losses_a1"])), rel=1e-4
    )
    assert _series(loss, "run_b") == pytest.approx(dict(enumerate(runs["losses_b"])), rel=1e-4)

    titles = [c["title"] for c in _card(model, "gradient/w")["charts"]]
    assert titles == [
        "mean ± std, min / max",
        "l2 norm",
        "distribution · run_a (rank 0)",
        "distribution · run_b",
        "gradient norm / weight norm",
    ]
    # The gradient / weight norm ratio is ||grad|| / ||w|| of the same record.
    trace = xdl.open_trace(runs["b"])
    gsteps, grads = trace.stack("gradient/w", return_gsteps=True)
    ws = trace.stack("w")
    ratio = _card(model, "gradient/w")["charts"][-1]
    expected = {
        int(g): np.linalg.norm(d) / np.linalg.norm(v)
        for g, d, v in zip(gsteps, grads, ws)
        if np.linalg.norm(v) > 0
    }
    assert _series(ratio, "run_b") == pytest.approx(expected, rel=1e-4)
    # Throughput is left out when every step took under a millisecond (timestamps are in ms).
    assert [c["title"] for c in model["steps"]][:1] == ["step time"]


def test_long_runs_are_downsampled_with_exact_envelopes(tmp_path):
    out = str(tmp_path / "long")
    v = np.zeros(1, np.float32)
    xdl.trace_tensor("v", v)
    values = np.sin(np.arange(5000) / 50.0) + (np.arange(5000) == 3333) * 10
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for step, value in enumerate(values):
            v[0] = value
            hook.step()
    model = report.build_report(out)
    (chart,) = _card(model, "v")["charts"]
    assert 256 <= len(chart["x"]) <= 512
    lo, hi = (np.array([x for x in s["values"]], float) for s in chart["series"][:2][::-1])
    assert np.nanmax(chart["series"][0]["values"]) == pytest.approx(10 + np.sin(3333 / 50.0), 1e-4)
    assert np.nanmin(lo) == pytest.approx(values.min(), abs=1e-4)
    assert len(report.render_html(model)) < 200_000


def test_series_halves_into_exact_bucket_aggregates():
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(1000, 3))
    rows[rng.random(rows.shape) < 0.05] = np.nan
    series = analysis.Series(3, capacity=16)
    for start in range(0, 1000, 37):
        series.add(np.arange(start, min(start + 37, 1000)), rows[start : start + 37])
    assert series.span == 64 and series.used == 16
    gsteps, mean, low, high = series.view()
    for b in range(16):
        chunk = rows[b * 64 : (b + 1) * 64]
        assert gsteps[b] == b * 64
        np.testing.assert_allclose(mean[b], np.nanmean(chunk, axis=0))
        np.testing.assert_allclose(low[b], np.nanmin(chunk, axis=0))
        np.testing.assert_allclose(high[b], np.nanmax(chunk, axis=0))


def test_series_takes_a_strided_view_and_leaves_out_absent_rows():
    """The report hands a key's view of a chunk's stats grid [n, keys, 8] (no copy); rows whose
    count is NaN (no value at that record) are not records of the curve."""
    rng = np.random.default_rng(4)
    grid = rng.normal(size=(300, 3, 8))
    absent = rng.random(300) < 0.2
    grid[absent, 1, analysis.COUNT] = np.nan
    gsteps = np.arange(300) * 2
    series = analysis.Series(8, capacity=8)
    series.add(gsteps, grid[:, 1], skip_field=analysis.COUNT)
    kept = grid[~absent, 1]
    assert series.records == len(kept) == 244 and series.span == 32
    x, mean, low, high = series.view()
    for b in range(series.used):
        rows = kept[b * 32 : (b + 1) * 32]
        assert x[b] == gsteps[~absent][b * 32]
        np.testing.assert_allclose(mean[b, 1:], rows[:, 1:].mean(axis=0))
        np.testing.assert_array_equal(low[b], rows.min(axis=0))
        np.testing.assert_array_equal(high[b], rows.max(axis=0))
    # The buckets are updated in place: an array of another dtype is refused, not copied.
    with pytest.raises(TypeError):
        analysis._core.curve_add(
            series._state,
            series.gstep.astype(np.int32),
            series.sum,
            series.valid,
            series.min,
            series.max,
            gsteps,
            grid[:, 1],
        )


def test_histogram_percentiles_follow_the_data():
    from xdl_trace import _core

    hist = analysis.HistogramSeries(capacity=8)
    rng = np.random.default_rng(5)
    samples = []
    for step in range(20):
        a = rng.lognormal(mean=step / 10, sigma=1.0, size=4000)
        rows, counts = _core.column_stats([a], [5], [True])
        hist.add(np.array([step]), counts, rows[:, 1], rows[:, 2])
        samples.append(a)
    gsteps, q = hist.percentiles([0.0, 0.16, 0.5, 0.84, 1.0])
    assert list(gsteps) == [0, 4, 8, 12, 16]
    for b, g in enumerate(gsteps):
        pooled = np.concatenate(samples[g : g + 4])
        assert q[b, 0] == pooled.min() and q[b, -1] == pooled.max()
        np.testing.assert_allclose(q[b, 1:4], np.percentile(pooled, [16, 50, 84]), rtol=0.1)


def _percentiles_bucket_by_bucket(hist, quantiles):
    """HistogramSeries.percentiles as it was written first, one bucket at a time: the
    reference its whole-array version must match value for value."""
    n = hist.used
    out = np.full((n, len(quantiles)), np.nan)
    edges = analysis.LOG_BUCKET_EDGES
    for b in range(n):
        counts = hist.counts[b]
        total = counts.sum()
        if total <= 0:
            continue
        cumulative = np.cumsum(counts)
        targets = np.asarray(quantiles) * total
        idx = np.searchsorted(cumulative, targets, side="left").clip(0, len(counts) - 1)
        before = cumulative[idx] - counts[idx]
        frac = np.where(counts[idx] > 0, (targets - before) / np.maximum(counts[idx], 1), 0.5)
        values = edges[:-1][idx] + frac.clip(0, 1) * (edges[1:][idx] - edges[:-1][idx])
        out[b] = values.clip(hist.min[b], hist.max[b])
    return out


def test_histogram_percentiles_match_a_bucket_by_bucket_reference():
    # Empty buckets, sparse and dense counts, float32 totals past 2^24 (rounded), buckets
    # without finite values (min inf, max -inf).
    rng = np.random.default_rng(8)
    quantiles = report.DISTRIBUTION_QUANTILES
    for trial in range(60):
        hist = analysis.HistogramSeries(capacity=128)
        hist._state[1] = int(rng.integers(1, 129))  # Buckets in use, filled by hand below.
        width = hist.counts.shape[1]
        for b in range(hist.used):
            kind = trial * 7 + b
            if kind % 5 == 0:
                continue
            lo = int(rng.integers(0, width - 1))
            hi = min(width, lo + int(rng.integers(1, 40)))
            hist.counts[b, lo:hi] = rng.integers(0, 3 if kind % 5 == 1 else 1 << 26, hi - lo)
            hist.min[b], hist.max[b] = (
                (np.inf, -np.inf)
                if kind % 5 == 2
                else (analysis.LOG_BUCKET_EDGES[lo] * 1.01, analysis.LOG_BUCKET_EDGES[hi] * 0.99)
            )
        _, got = hist.percentiles(quantiles)
        want = _percentiles_bucket_by_bucket(hist, quantiles)
        assert got.tobytes() == want.tobytes(), f"trial {trial}"


def test_running_median_matches_numpy():
    rng = np.random.default_rng(9)
    for n in range(1, 40):
        for values in (rng.normal(size=n), rng.integers(0, 3, n).astype(float)):
            assert alerts._sorted_median(sorted(values.tolist())) == float(np.median(values))


def test_html_is_self_contained(runs, tmp_path):
    out = str(tmp_path / "r.html")
    result = report.write_report([runs["a"], runs["b"]], out)
    page = open(out, encoding="utf-8").read()
    assert result["bytes"] == len(page.encode())
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page)
    assert "@import" not in page
    model = _html_model(page)
    assert model["runs"][0]["label"] == "run_a"
    charts = sum(len(c["charts"]) for c in model["cards"]) + len(model["difference_charts"])
    assert result["charts"] == len(model["steps"]) + charts
    # The RUNS table says how many ranks and which: run_a has ranks 0 and 1, run_b rank 0 only
    # (a bare "0" would read as no rank at all).
    cells = re.findall(
        r"<td>([^<]*)</td>", page.split("<table class='facts runs'>")[1].split("</table>")[0]
    )
    assert "2 (0, 1)" in cells and "1 (0)" in cells
    assert report_html._ranks_text([0, 1, 2, 3, 4, 5, 6, 7]) == "8 (0–7)"
    assert report_html._ranks_text([0, 2, 5]) == "3 (0, 2, 5)"
    # Every chart names its axes: the step time in ms, the others by quantity.
    charts = model["steps"] + [c for card in model["cards"] for c in card["charts"]]
    assert all(c["ylabel"] and c["xlabel"] == "gstep" for c in charts)
    assert model["steps"][0]["ylabel"] == "ms / step"
    assert "label: spec.ylabel" in page and "label: spec.xlabel" in page
    script = os.path.join(os.path.dirname(report.__file__), "report_assets", "report.js")
    with open(script, encoding="utf-8") as f:
        assert "label: spec.ylabel" in f.read()  # The page inlines the script's file.


def test_markup_styles_and_script_live_in_the_assets():
    """The page's HTML, CSS and JavaScript are files of report_assets/ (report.html, report.css,
    report.js), never string literals of the report's Python."""
    from xdl_trace.read import report_charts, report_png

    tag = re.compile(
        r"<(/?)(html|head|body|main|header|footer|div|span|table|thead|tbody|tr|td|th|p|a|b|i|"
        r"h[1-6]|script|style|title|meta|input)\b"
    )
    code = re.compile(r"\bfunction\s*\(|[a-z.#*]+\s*\{[a-z-]+:")
    for module in (report, report_html, report_charts, report_png, alerts):
        with open(module.__file__, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                assert not tag.search(text) and not code.search(text), (module.__name__, text)


def test_pngs_one_per_chart(runs, tmp_path):
    matplotlib = pytest.importorskip(
        "matplotlib.image", reason="python3-matplotlib is not installed (scripts/setup.sh)"
    )

    model = report.build_report([runs["a"], runs["b"]], keys="loss,gradient/*")
    paths = report.render_pngs(model, str(tmp_path / "png"))
    # step time (1: no throughput chart), loss (1), gradient/w (4: no norm ratio, w is not
    # selected), then where the ranks of run_a and run_b against run_a differ (2).
    assert len(paths) == 1 + 1 + 4 + 2
    assert os.path.basename(paths[-1]).startswith("007_divergence")
    assert os.path.basename(paths[1]) == "001_loss_value.png"  # Scalars first.
    for path in paths:
        image = matplotlib.imread(path)
        assert image.shape[0] > 200 and image.shape[1] > 600
        assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 20, path


_HOVER_PROBE = """<script>
window.addEventListener('load', function () {
  var over = document.querySelector('#card-0 .u-over');
  var r = over.getBoundingClientRect();
  var at = {clientX: r.left + r.width / 2, clientY: r.top + 20, bubbles: true};
  over.dispatchEvent(new MouseEvent('mouseenter', at));
  over.dispatchEvent(new MouseEvent('mousemove', at));
  var tip = document.querySelector('#card-0 .tip');
  document.title = 'TIP:' + (tip ? tip.style.display + '|' + tip.textContent : 'none');
});
</script>"""


def test_renders_in_headless_chromium_without_errors(runs, tmp_path):
    browser = Chromium(tmp_path)
    matplotlib = pytest.importorskip(
        "matplotlib.image", reason="python3-matplotlib is not installed (scripts/setup.sh)"
    )

    out = str(tmp_path / "report.html")
    result = report.write_report([runs["a"], runs["b"]], out)
    shot = str(tmp_path / "shot.png")
    console = browser.screenshot(out, shot)
    assert not console, console
    dom = browser.dom(out)
    title = re.search(r"<title>(.*?)</title>", dom).group(1)
    assert not title.startswith("ERROR"), title
    assert f'data-charts="{result["charts"]}"' in dom
    assert dom.count('class="uplot') == result["charts"]
    # Hovering a chart shows the gstep and the values there (a mouse move dispatched in-page).
    probe = str(tmp_path / "probe.html")
    with open(out, encoding="utf-8") as f, open(probe, "w", encoding="utf-8") as g:
        g.write(f.read().replace("</body>", _HOVER_PROBE + "</body>"))
    title = re.search(r"<title>(.*?)</title>", browser.dom(probe)).group(1)
    # The first card is the loss (scalars first): its value by run and rank.
    assert re.fullmatch(r"TIP:block\|gstep \d+.*run_a · rank 0: [-0-9.e]+.*", title), title
    image = matplotlib.imread(shot)
    assert image.shape[:2] == (2000, 1280)
    colours = np.unique((image[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 200  # Not a blank page: text, tables and drawn curves.


def test_report_command(runs, tmp_path):
    out = str(tmp_path / "cli.html")
    png = str(tmp_path / "png")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "xdl_trace",
            "report",
            runs["a"],
            runs["b"],
            "-o",
            out,
            "--png",
            png,
            "--keys",
            "w,loss",
            "--gsteps",
            "10:29",
            "--ranks",
            "0",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert result.returncode == 0, result.stderr
    model = _html_model(open(out, encoding="utf-8").read())
    # w: mean/std, l2, a distribution per run; loss: value; step time.
    cards = sum(len(c["charts"]) for c in model["cards"])
    assert cards == 5 and model["steps"]
    # And where run_b parts from run_a (its loss is scaled): one divergence chart.
    assert len(model["difference_charts"]) == 1
    charts = len(model["steps"]) + cards + 1
    assert f"wrote {out}: {charts} charts" in result.stdout
    assert f"wrote {charts} PNG(s)" in result.stdout
    assert len(os.listdir(png)) == charts
    assert [c["key"] for c in model["cards"]] == ["loss", "w"]  # Scalars first.
    assert model["runs"][0]["gsteps"] == [10, 29] and model["runs"][0]["ranks"] == [0]
    assert model["runs"][0]["records"] == 20
    bad = subprocess.run(
        [sys.executable, "-m", "xdl_trace", "report", runs["a"], "--keys", "nope*", "-o", out],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert bad.returncode == 1 and "no key matches" in bad.stderr


def test_device_tables_match_the_timeline(tmp_path, fake_plugin):
    """With a device tracer (the fake C plugin, conftest's fake_plugin), the report's kernel
    table and host CUDA API table sum the same events the timeline draws, each kind apart."""
    from xdl_trace.read import timeline

    run = str(tmp_path / "run")
    xdl.trace_tensor("w", np.arange(8, dtype=np.float32))
    config = {"output_dir": run, "device_tracers": [fake_plugin], "device_collect_interval_s": 0}
    with xdl.TraceHook(config) as hook:
        for step in range(6):
            hook.step()
    model = report.build_report(run)
    (gpu,) = model["gpu"]
    expected = {}
    for event in timeline.build_timeline(run)["traceEvents"]:
        if event.get("ph") == "X" and event["cat"] in ("kernel", "cuda_runtime", "cuda_driver"):
            table = "kernel" if event["cat"] == "kernel" else "api"
            name = event["name"] if table == "kernel" else gpu_steps.api_name(event["name"])
            entry = expected.setdefault((table, name), [0, 0.0])
            entry[0] += 1
            entry[1] += event["dur"] * 1e3  # us -> ns
    got = {("kernel", r["name"]): [r["count"], r["total_ns"]] for r in gpu["kernels"]}
    got.update({("api", r["name"]): [r["calls"], r["total_ns"]] for r in gpu["api"]})
    assert expected and got.keys() == expected.keys()
    for key, (events, total_ns) in expected.items():
        assert got[key][0] == events
        assert got[key][1] == pytest.approx(total_ns, rel=1e-6, abs=1)
    totals = [r["total_ns"] for r in gpu["kernels"]]
    assert totals == sorted(totals, reverse=True)
    page = report.render_html(model)
    assert "Host CUDA API calls" in page and "GPU busy" in page


def test_many_keys_get_fewer_buckets_within_the_memory_budget(tmp_path, monkeypatch):
    assert analysis._capacities(10, 1, 512, 128) == (512, 128)
    assert analysis._capacities(100, 8, 512, 128) == (256, 128)
    assert analysis._capacities(1000, 8, 512, 128) == (32, 32)  # The floor.
    out = str(tmp_path / "run")
    values = [np.zeros(4, np.float32) for _ in range(10)]
    for i, v in enumerate(values):
        xdl.trace_tensor(f"k{i}", v)
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for step in range(600):
            values[0][:] = step
            hook.step()
    monkeypatch.setattr(analysis, "SERIES_BUDGET_BYTES", 1 << 20)
    scan = analysis.scan_run(out)
    assert scan.capacity == 256
    assert all(s.capacity == 256 for s in scan.stats.values())
    x, mean, low, high = scan.stats[("k0", 0)].view()
    assert 128 <= len(x) <= 256 and high[:, analysis.MAX].max() == 599


def test_step_time_comes_from_the_host_spans_of_every_step(tmp_path):
    """A loop that sleeps a known time per step, traced every 3rd step: the step-time chart has
    a point per step the hook saw (untraced ones too), each about the sleep, in ms from the ns
    host spans (not the ms record timestamps, which read 0 or 1 ms on fast loops)."""
    out = str(tmp_path / "run")
    loss = np.zeros(1, np.float32)
    xdl.trace_tensor("loss", loss)
    sleep_s, steps = 0.02, 30
    import time

    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}, filter=3) as hook:
        for step in range(steps):
            time.sleep(sleep_s)
            loss[0] = 1.0 / (1 + step)
            hook.step(gstep=step)
    scan = analysis.scan_run(out)
    assert scan.step_source == {0: "host spans"} and scan.records[0] == 10
    model = report.build_report(out)
    (time_chart,) = model["steps"]  # No throughput chart (issue 32 #4).
    assert time_chart["ylabel"] == "ms / step" and "host spans" in time_chart["note"]
    assert "first step" in time_chart["note"]
    # The last untraced steps (28, 29) follow the last record: no record carries their spans.
    # Step 0 has no previous step (its span runs from the tracer's start): no point.
    ms = _series(time_chart, "rank 0")
    assert sorted(ms) == list(range(1, 28))
    values = np.array(list(ms.values()))
    assert values.min() >= sleep_s * 1e3 * 0.99  # time.sleep sleeps at least that long.
    assert np.median(values) == pytest.approx(sleep_s * 1e3, rel=0.25)


def test_step_time_falls_back_to_record_timestamps_without_spans(tmp_path):
    """A file with no host spans (XDL's, older ones): ms per gstep between records."""
    from trace_file_maker import record, write_file

    path = str(tmp_path / "train.trace.0.0")
    records = [
        record(g * 2, [np.float32(g)], timestamp=1_700_000_000_000 + g * 50) for g in range(8)
    ]
    write_file(path, ["loss"], records)
    scan = analysis.scan_run(path)
    assert scan.step_source == {0: "timestamps"}
    (time_chart,) = report.build_report(path)["steps"]
    assert time_chart["ylabel"] == "ms / gstep" and "timestamps" in time_chart["note"]
    assert _series(time_chart, "rank 0") == {g: 25.0 for g in range(2, 16, 2)}


def test_histogram_rows_of_many_small_tensors_count_every_nth_record(tmp_path, monkeypatch):
    """A row holding more than MAX_HISTOGRAM_SAMPLES values of tensors counted whole counts every
    n-th record (records per row x elements / MAX_HISTOGRAM_SAMPLES); its min and max stay exact
    and its percentiles stay close to those of every value."""
    out = str(tmp_path / "run")
    v = np.zeros(1024, np.float32)
    xdl.trace_tensor("v", v)
    rng = np.random.default_rng(9)
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for step in range(2048):
            v[:] = rng.normal(size=v.size) * (1 + step / 200) + step / 100
            hook.step()
    sampled = analysis.scan_run(out, histogram_capacity=16)
    monkeypatch.setattr(analysis, "_histogram_group", lambda *a: 1)
    every_value = analysis.scan_run(out, histogram_capacity=16)
    a, b = sampled.histograms["v"], every_value.histograms["v"]
    assert a.used == b.used == 16
    # Rows of 128 records x 1024 values (2048 / 16 buckets): every 8th record counted.
    assert analysis._core.MAX_HISTOGRAM_SAMPLES == 16384
    np.testing.assert_array_equal(
        a.counts[: a.used].sum(axis=1), b.counts[: b.used].sum(axis=1) / 8
    )
    np.testing.assert_array_equal(a.min[: a.used], b.min[: b.used])
    np.testing.assert_array_equal(a.max[: a.used], b.max[: b.used])
    quantiles = [0.05, 0.25, 0.5, 0.75, 0.95]
    _, qa = a.percentiles(quantiles)
    _, qb = b.percentiles(quantiles)
    # Within 2% of the spread of each time bucket (0.7% measured).
    spread = (b.max[: b.used] - b.min[: b.used])[:, None]
    assert np.all(np.abs(qa - qb) <= 0.02 * spread)


def test_histogram_rows_summed_in_groups_match_a_row_per_record(tmp_path, monkeypatch):
    """The C++ scan sums a group of consecutive records per histogram row when the Meta says how
    many records there are; the distribution is the same as with a row per record."""
    out = str(tmp_path / "run")
    v = np.zeros(32, np.float32)
    xdl.trace_tensor("v", v)
    rng = np.random.default_rng(5)
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for step in range(1000):
            v[:] = rng.normal(size=32) * (1 + step / 100)
            hook.step()
    grouped = analysis.scan_run(out, histogram_capacity=16)
    calls = []
    real = analysis._histogram_group
    monkeypatch.setattr(analysis, "_histogram_group", lambda *a: calls.append(real(*a)) or 1)
    per_record = analysis.scan_run(out, histogram_capacity=16)
    assert calls == [32]  # 1000 records / 16 buckets: groups of 32 fit buckets of 64.
    files = xdl.open_trace(out).files
    assert real(files, Selection(gsteps=(0, 499)), 16) == 16  # Half the gsteps: ~500 records.
    assert real(files, Selection(gsteps=range(0, 1000, 10)), 16) == 4  # 100 of them.
    a, b = grouped.histograms["v"], per_record.histograms["v"]
    assert a.span == b.span and a.used == b.used
    np.testing.assert_array_equal(a.gstep[: a.used], b.gstep[: b.used])
    np.testing.assert_array_equal(a.counts[: a.used], b.counts[: b.used])
    np.testing.assert_array_equal(a.min[: a.used], b.min[: b.used])


def test_page_packs_each_cards_charts(tmp_path):
    """A key's charts travel packed (issue 32 #6): styles once per page, values as float32
    bytes in base64 (or one constant), an even x as its start and step; read back, the page
    holds the model exactly. Before: 40 moving keys of 300 steps took 10 characters a value."""
    xdl.clear()
    rng = np.random.default_rng(3)
    tensors = [rng.normal(size=16).astype(np.float32) for _ in range(40)]
    for i, t in enumerate(tensors):
        xdl.trace_tensor(f"block{i // 10}/layer{i % 10}/w", t)
    frozen = np.full(4, 0.25, np.float32)
    xdl.trace_tensor("frozen", frozen)
    out = str(tmp_path / "run")
    with xdl.TraceHook({"output_dir": out, "fsync": False}) as hook:
        for step in range(300):
            for t in tensors:
                t += rng.normal(size=t.size).astype(np.float32)
            hook.step(gstep=step)
    xdl.clear()
    model = report.build_report(out)
    page = report_html.render_html(model)
    back = report_html.model_from_page(page)
    assert back["cards"] == model["cards"] and back["alerts"] == model["alerts"]
    blocks = re.findall(r"id='cd-\d+'>([^<]*)", page)
    assert len(blocks) == len(model["cards"]) - report_html.INLINE_CARDS
    values = sum(
        len(s["values"])
        for c in model["cards"][report_html.INLINE_CARDS :]
        for chart in c["charts"]
        for s in chart["series"]
    )
    # Under 6 characters a value, titles, labels and notes included (float32 in base64: 5.33).
    assert sum(len(b) for b in blocks) / values < 6.0
    n = [c["key"] for c in model["cards"]].index("frozen")
    packed = json.loads(re.search(rf"id='cd-{n}'>([^<]*)", page).group(1))[0]
    assert packed["x"] == {"a": 0, "d": 1, "n": 300}
    assert all(isinstance(s["v"], dict) and s["v"]["n"] == 300 for s in packed["series"])


def test_a_watched_gradient_s_card_gives_its_shape(tmp_path):
    """watch(model)'s gradients exist only after the first backward; watch declares their dtype
    and shape (their parameter's) in the Header, as its digests' (before: "tensor (shape not in
    the header)" on every gradient card)."""
    torch = pytest.importorskip("torch")
    xdl.clear()
    model = torch.nn.Linear(3, 2)
    xdl.watch(model)
    with xdl.TraceHook({"output_dir": str(tmp_path), "fsync": False, "on_error": "raise"}) as hook:
        for _ in range(3):
            model(torch.ones(4, 3)).sum().backward()
            hook.step()
    xdl.clear()
    cards = {c["key"]: c["meta"] for c in report.build_report([str(tmp_path)])["cards"]}
    assert cards["weight"].startswith("float32 [2, 3] · stats · variable")
    assert cards["gradient/weight"].startswith("float32 [2, 3] · stats · gradient")
    assert cards["gradient/bias"].startswith("float32 [2] · stats · gradient")


def _quantiles(x):
    return np.quantile(x, [0.1, 0.5, 0.9])


def test_a_user_summary_of_a_few_values_is_a_curve_per_value(tmp_path):
    """summary=callable returning a few values (quantiles): one curve per element, named after
    the function, the values it returned at each step; on two ranks a colour per rank and a dash
    per element. Before: "mean ± std, min / max" and "l2 norm" of the three quantiles taken
    together, drawn as if they were the tensor's. A wider output stays a tensor's charts."""
    xdl.clear()
    w = np.linspace(0, 1, 101, dtype=np.float32)
    xdl.trace_variable("w", w, summary=_quantiles)
    xdl.trace_tensor("wide", lambda: w[:20] * 2, summary=lambda x: x.astype(np.float64))
    xdl.trace_tensor("lambda", lambda: w[:4], summary=lambda x: x[:2].astype(np.float64))
    for rank in (0, 1):
        config = {"output_dir": str(tmp_path), "fsync": False, "on_error": "raise", "rank": rank}
        with xdl.TraceHook(config) as hook:
            w[:] = np.linspace(0, 1, 101) * (1 + rank)
            for _ in range(5):
                hook.step()
                w *= np.float32(0.5)
    xdl.clear()
    model = report.build_report([str(tmp_path)], run="all", ranks=[0])
    (chart,) = _card(model, "w")["charts"]
    assert chart["title"] == "values of _quantiles"
    assert [s["label"] for s in chart["series"]] == [
        "_quantiles[0]",
        "_quantiles[1]",
        "_quantiles[2]",
    ]
    want = np.quantile(np.linspace(0, 1, 101), [0.1, 0.5, 0.9])
    for i, s in enumerate(chart["series"]):
        got = _series(chart, s["label"])
        assert got == pytest.approx({g: want[i] * 0.5**g for g in range(5)}, rel=1e-4)
    # A lambda's curves are the summary's ("<lambda>[0]" says nothing).
    assert [s["label"] for s in _card(model, "lambda")["charts"][0]["series"]] == [
        "summary[0]",
        "summary[1]",
    ]
    assert [c["title"] for c in _card(model, "wide")["charts"]][:2] == [
        "mean ± std, min / max",
        "l2 norm",
    ]
    (chart,) = _card(report.build_report([str(tmp_path)], run="all"), "w")["charts"]
    styles = {s["label"]: (s["color"], s["dash"]) for s in chart["series"]}
    assert len(styles) == 6
    assert styles["rank 0 _quantiles[1]"][0] == styles["rank 0 _quantiles[0]"][0]
    assert styles["rank 0 _quantiles[1]"][0] != styles["rank 1 _quantiles[1]"][0]
    assert styles["rank 1 _quantiles[0]"][1] != styles["rank 1 _quantiles[1]"][1]
    got = _series(chart, "rank 1 _quantiles[2]")
    assert got == pytest.approx({g: 2 * want[2] * 0.5**g for g in range(5)}, rel=1e-4)


def _train_and_evaluate(out, steps=40, every=10, hook_per_eval=False, acc_nan_at=None):
    """A training hook (default scope) and its evaluation (scope "eval", is_training=False:
    test.* files): one long-lived eval hook, or a hook begun per evaluation with a fixed gstep
    (the XDL way). Returns the eval accuracies handed, by gstep."""
    xdl.clear()
    w = np.ones(4, np.float32)
    xdl.trace_variable("w", w)
    xdl.trace_value("loss")
    xdl.trace_value("acc", scope="eval")
    xdl.trace_value("loss", scope="eval")
    accs = {}
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    evaluate = None if hook_per_eval else xdl.TraceHook(config, is_training=False, scope="eval")
    with xdl.TraceHook(config, metadata={"steps": steps}) as train:
        for step in range(steps):
            w *= np.float32(0.99)
            train.step(gstep=step, values={"loss": float(w.sum())})
            if step % every == every - 1:
                accs[step] = np.nan if step == acc_nan_at else step / steps
                values = {"acc": accs[step], "loss": 1.0 - step / steps}
                if hook_per_eval:
                    with xdl.TraceHook(config, is_training=False, scope="eval", gstep=step) as h:
                        h.step(values=values)
                else:
                    evaluate.step(gstep=step, values=values)
    if evaluate is not None:
        evaluate.end()
    xdl.clear()
    return accs


@pytest.mark.parametrize("hook_per_eval", [False, True], ids=["one_eval_hook", "hook_per_eval"])
def test_a_runs_evaluation_is_drawn_beside_its_training(tmp_path, hook_per_eval):
    """The eval records of a run (TraceHook(is_training=False): test.* files beside train.*) come
    into its report as one more series, "<run> · eval", with their own Runs row, curves and
    alerts; no step time and no comparison against training. Before: `report RUN` read the
    train files alone and the eval curves were nowhere (only `--prefix test`, a second page)."""
    out = str(tmp_path / "run")
    accs = _train_and_evaluate(out, hook_per_eval=hook_per_eval, acc_nan_at=29)
    model = report.build_report(out)
    rows = {r["label"]: r for r in model["runs"]}
    assert set(rows) == {"run", "run · eval"}
    assert (rows["run"]["records"], rows["run · eval"]["records"]) == (40, 4)
    assert rows["run · eval"]["gsteps"] == [9, 39]
    (acc,) = _card(model, "eval/acc")["charts"]
    drawn = _series(acc, "run · eval")  # The NaN at gstep 29 is a gap.
    assert drawn == pytest.approx({g: v for g, v in accs.items() if not np.isnan(v)})
    assert [s["label"] for s in _card(model, "loss")["charts"][0]["series"]] == ["run"]
    # The NaN in the eval accuracy is an alert of the eval series, and opens the page.
    assert any(
        h["run"] == "run · eval" and h["gstep"] == 29 and h["keys"] == ["eval/acc"]
        for h in model["headline"]
    ), model["headline"]
    assert [s["label"] for c in model["steps"] for s in c["series"]] == ["rank 0"]  # Training's.
    # Where the evaluations ran, marked on the step time (their time is in the next step).
    assert model["steps"][0]["marks"] == sorted(accs) == [9, 19, 29, 39]
    assert report.render_pngs(model, str(tmp_path / "png"))[0].endswith("000_step_time.png")
    assert model["steps"][0]["note"].endswith(
        "dashed: an evaluation ran after that gstep (its time is in the next step)"
    )
    assert model["differences"] == []
    # --prefix test still reads the eval files alone, with nothing beside them.
    evaluated = report.build_report(out, prefix="test", run="all")  # A run a hook.
    labels = [r["label"] for r in evaluated["runs"]]
    assert len(labels) == (4 if hook_per_eval else 1) and not any("eval" in x for x in labels)


def test_a_key_selection_takes_from_training_and_evaluation_alike(tmp_path):
    """--keys 'eval/*' draws the eval keys alone (the training run stays in the Runs table);
    --keys loss the training loss alone (its evaluation, which has no such key, is left out);
    a pattern neither has, or a rank the run does not hold, is an error naming what it holds
    (before: --ranks 1 of a one-rank run wrote an empty page)."""
    out = str(tmp_path / "run")
    _train_and_evaluate(out)
    model = report.build_report(out, keys="eval/*")
    assert [c["key"] for c in model["cards"]] == ["eval/acc", "eval/loss"]
    assert [r["label"] for r in model["runs"]] == ["run", "run · eval"]
    model = report.build_report(out, keys="loss")
    assert [c["key"] for c in model["cards"]] == ["loss"]
    assert [r["label"] for r in model["runs"]] == ["run"]
    with pytest.raises(KeyError, match="no key matches 'nope'"):
        report.build_report(out, keys="nope")
    with pytest.raises(ValueError, match=r"no rank 1 \(ranks: 0\)"):
        report.build_report(out, ranks=[1])


def test_an_eval_hook_begun_before_the_training_hook_is_still_its_evaluation(tmp_path):
    out = str(tmp_path / "run")
    xdl.clear()
    xdl.trace_value("loss")
    xdl.trace_value("acc", scope="eval")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    with xdl.TraceHook(config, is_training=False, scope="eval") as ev, xdl.TraceHook(config) as tr:
        for step in range(10):
            tr.step(gstep=step, values={"loss": 1.0 / (step + 1)})
            if step % 5 == 4:
                ev.step(gstep=step, values={"acc": step / 10})
    xdl.clear()
    model = report.build_report(out)
    assert [r["label"] for r in model["runs"]] == ["run", "run · eval"]
    (acc,) = _card(model, "eval/acc")["charts"]
    assert _series(acc, "run · eval") == pytest.approx({4: 0.4, 9: 0.9})


@pytest.mark.parametrize("hook_per_eval", [False, True], ids=["one_eval_hook", "hook_per_eval"])
def test_each_training_run_of_a_directory_gets_its_own_evaluation(tmp_path, hook_per_eval):
    """Two runs written into one directory by one process (a notebook, a sweep): each run's eval
    records are those its process wrote after it began, so `report --run all` pairs them right;
    a hook per evaluation makes a run each, read together by their ids (before: only when they
    were every eval run of the directory, so a sweep's evaluations were drawn nowhere)."""
    out = str(tmp_path / "runs")
    _train_and_evaluate(out, steps=20, hook_per_eval=hook_per_eval)
    _train_and_evaluate(out, steps=40, hook_per_eval=hook_per_eval)
    model = report.build_report(out)
    labels = [r["label"] for r in model["runs"]]
    assert len(labels) == 4 and sum(label.endswith(" · eval") for label in labels) == 2, labels
    # Each evaluation named after its run, as the metadata that tells the runs apart names it.
    assert labels == ["steps 20", "steps 20 · eval", "steps 40", "steps 40 · eval"]
    (acc,) = _card(model, "eval/acc")["charts"]
    first, second = [s for s in acc["series"]]
    firsts = {x for x, v in zip(acc["x"], first["values"]) if v is not None}
    seconds = {x for x, v in zip(acc["x"], second["values"]) if v is not None}
    assert (sorted(firsts), sorted(seconds)) == ([9, 19], [9, 19, 29, 39])
    # In Python, the evaluation of every run read (run="all"), as of one (before: None).
    every = xdl.open_trace(out, run="all").evaluation()
    assert [r.gstep for r in every.records()] == [9, 19, 9, 19, 29, 39]
    latest = xdl.open_trace(out, run="latest").evaluation()
    assert [r.gstep for r in latest.records()] == [9, 19, 29, 39]


_EVAL_JOB = """
import sys, xdl_trace as xdl
xdl.trace_value("acc", scope="eval")
with xdl.TraceHook({"output_dir": sys.argv[1], "on_error": "raise"}, is_training=False,
                   scope="eval") as hook:
    for gstep in (9, 19):  # The checkpoints it evaluates.
        hook.step(gstep=gstep, values={"acc": float(sys.argv[2]) + gstep})
"""


def test_an_eval_job_of_its_own_is_the_evaluation_of_the_run_it_followed(tmp_path):
    """An eval job in a process of its own (it loads the run's checkpoints and evaluates them,
    as TensorFlow's evaluator task does) writes test.* files into the run's directory: it is the
    evaluation of the training run that began last before it, in report, info and Python. A
    sweep of two runs, each evaluated after it: each gets its own. Before: an eval run was
    paired only with a training run of its own process, so the job's accuracies were drawn
    nowhere while `info` called them "the runs' evaluations"."""
    out = str(tmp_path / "runs")
    env = {**os.environ, "PYTHONPATH": REPO}
    for first in (100, 200):
        _train_and_evaluate(out, steps=first // 5, every=1000)  # No evaluation of its own.
        job = [sys.executable, "-c", _EVAL_JOB, out, str(first)]
        subprocess.run(job, env=env, cwd=str(tmp_path), check=True, timeout=120)
    model = report.build_report(out)
    assert [r["label"] for r in model["runs"]] == [
        "steps 20",
        "steps 20 · eval",
        "steps 40",
        "steps 40 · eval",
    ]
    (acc,) = _card(model, "eval/acc")["charts"]
    assert _series(acc, "steps 20 · eval") == pytest.approx({9: 109, 19: 119})
    assert _series(acc, "steps 40 · eval") == pytest.approx({9: 209, 19: 219})
    latest = xdl.open_trace(out, run="latest")
    assert latest.evaluation().stack("eval/acc").tolist() == [209, 219]
    said = _xdl_trace("info", out, "--run", "latest", check=True).stdout
    assert "eval files test.trace.* (2 run(s), 4 records; the run shown: 1 run, 2 records)" in said


def test_an_evaluation_on_rank_0_alone_is_no_incomplete_run(tmp_path, monkeypatch):
    """Data-parallel training on 2 ranks, evaluated on rank 0 alone (the usual way): the eval
    run records the world size 2 and holds rank 0. Before: every read of it warned "holds 1 of
    2 ranks ... give every rank the same XDL_TRACE_RUN_ID", the report raised a "missing file"
    error alert ("world size 2 but no file of rank 1") and `info --prefix test` flagged the run
    incomplete; an evaluation need not run on every rank."""
    out = str(tmp_path / "ddp")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("XDL_TRACE_RUN_ID", "ddp-job")
    xdl.clear()
    xdl.trace_value("loss")
    xdl.trace_value("acc", scope="eval")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    for rank in (0, 1):
        with xdl.TraceHook(dict(config, rank=rank)) as train:
            for step in range(20):
                train.step(gstep=step, values={"loss": 1.0 / (step + 1)})
    with xdl.TraceHook(dict(config, rank=0), is_training=False, scope="eval") as evaluate:
        evaluate.step(gstep=19, values={"acc": 0.9})
    xdl.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = report.build_report(out)
        assert xdl.open_trace(out).evaluation().stack("eval/acc").tolist() == [0.9]
    assert [(r["label"], r["ranks"]) for r in model["runs"]] == [
        ("ddp", [0, 1]),
        ("ddp · eval", [0]),
    ]
    assert [a for a in model["alerts"] if a["kind"] == "missing file"] == []
    said = _xdl_trace("info", out, "--prefix", "test", check=True)
    assert "ranks 0 of 2" in said.stdout and "incomplete" not in said.stdout + said.stderr


def _sweep(out, lrs, nudge_last=False):
    xdl.clear()
    xdl.trace_value("loss")
    for n, lr in enumerate(lrs):
        config = {"output_dir": out, "on_error": "raise", "fsync": False}
        with xdl.TraceHook(config, metadata={"lr": lr}) as hook:
            for step in range(10):
                nudge = 1e-6 if nudge_last and n == len(lrs) - 1 and step >= 4 else 0.0
                hook.step(gstep=step, values={"loss": 1.0 / (1 + lr * step) + nudge})
    xdl.clear()


def test_a_sweeps_runs_configured_apart_are_named_not_compared(tmp_path, monkeypatch):
    """A report of a sweep's directory (5 runs, lr apart): the runs configured apart differ by
    design, so they are named in one line of information and not compared (each comparison
    reads both runs again: 0.93 s for 5 runs where the page took 0.23 s). Before: a warning
    each, and a sweep of 20 runs opened with 38 lines. Two runs are compared whatever their
    metadata (`report A B`), configured apart as information; of the same metadata, a
    difference is a warning, first on the page. More than FOLD_AFTER lines of one kind of
    information fold into one; past COMPARED_RUNS, runs are named, not compared."""
    sweep = str(tmp_path / "sweep")
    _sweep(sweep, [0.1, 0.2, 0.3, 0.4, 0.5])
    compared = []
    real_diff = report.compare.diff
    monkeypatch.setattr(
        report.compare, "diff", lambda *a, **k: compared.append(a) or real_diff(*a, **k)
    )
    model = report.build_report(sweep)
    assert compared == [] and model["differences"] == []
    # Its title names the directory, not 5 labels (a tab shows a few words).
    assert model["title"] == "xdl_trace report: sweep (5 runs)"
    (line,) = model["headline"]
    assert (line["tag"], line["severity"]) == ("not compared", "info")
    assert line["text"].startswith(
        "4 runs configured apart (their metadata differ: lr) not compared with lr 0.1; "
    )
    (alert,) = model["alerts"]
    assert alert["detail"].endswith(": lr 0.2, lr 0.3, lr 0.4, lr 0.5")
    # Past NAMED_RUNS (a sweep of 200 runs named 199 in its alert), the rest are counted.
    monkeypatch.setattr(alerts, "NAMED_RUNS", 2)
    (alert,) = report.build_report(sweep)["alerts"]
    assert alert["detail"].endswith(": lr 0.2, lr 0.3 and 2 more (the Runs table lists them)")
    two = str(tmp_path / "two")
    _sweep(two, [0.1, 0.2])
    model = report.build_report(two)
    assert model["title"] == "xdl_trace report: two: lr 0.1, lr 0.2"
    (line,) = model["headline"]
    assert (line["tag"], line["severity"]) == ("runs differ", "info")
    assert line["text"] == (
        "lr 0.2 vs lr 0.1: the runs differ from gstep 1 in loss; their metadata differ (lr)"
    )
    again = str(tmp_path / "again")  # A determinism check: one config run twice.
    _sweep(again, [0.1, 0.1], nudge_last=True)
    (line,) = report.build_report(again)["headline"]
    assert (line["tag"], line["severity"]) == ("runs differ", "warn")
    assert line["text"].endswith("the runs differ from gstep 4 in loss"), line["text"]
    many = str(tmp_path / "many")  # Five runs of one config: four comparisons, one line.
    _sweep(many, [0.1] * 5)
    (line,) = report.build_report(many)["headline"]
    assert line["text"].startswith("4 comparisons: runs agree, the first many · ")
    # A directory a script was launched into 11 times: its first compared with COMPARED_RUNS
    # of them, the last two named.
    _sweep(many, [0.1] * 6)
    compared.clear()
    agree, beyond = report.build_report(many)["headline"]
    assert len(compared) == report.COMPARED_RUNS == 8
    assert agree["text"].startswith("8 comparisons: runs agree")
    assert beyond["text"].startswith("2 more runs (a page compares at most 8) not compared with ")


def test_a_sweeps_runs_table_has_its_hyperparameters_and_last_values(tmp_path):
    """A sweep's Runs table (TensorBoard's hparams view, W&B's runs table): a column per metadata
    entry that differs between the runs (lr; not the shared "model"), and the last value of each
    scalar key (the loss, the eval accuracy: at the gstep written under it; "NaN" for a run
    that diverged), sortable as numbers; an evaluation's row has its run's hyperparameters.
    Before: the metadata in one cell per run, and no final value anywhere but the curves'
    ends (a sweep of 200 runs could not be ranked)."""
    from xdl_trace.read import report_html

    out = str(tmp_path / "sweep")
    for lr in (0.1, 0.2, 0.3):
        xdl.clear()
        xdl.trace_value("loss")
        xdl.trace_value("acc", scope="eval")
        config = {"output_dir": out, "on_error": "raise", "fsync": False}
        with xdl.TraceHook(config, metadata={"lr": lr, "model": "mlp"}) as hook, xdl.TraceHook(
            config, is_training=False, scope="eval"
        ) as evaluate:
            for step in range(10):
                loss = float("nan") if lr == 0.3 and step == 9 else 1 / (1 + lr * step)
                hook.step(gstep=step, values={"loss": loss})
                if step in (4, 8):
                    evaluate.step(gstep=step, values={"acc": lr + step / 100})
    xdl.clear()
    model = report.build_report(out)
    rows = {r["label"]: r for r in model["runs"]}
    assert rows["lr 0.2"]["last"] == {"loss": {"gstep": 9, "value": 1 / 2.8, "bad": None}}
    assert rows["lr 0.3"]["last"] == {"loss": {"gstep": 9, "value": None, "bad": "NaN"}}
    assert rows["lr 0.2 · eval"]["last"] == {
        "eval/acc": {"gstep": 8, "value": pytest.approx(0.28), "bad": None}
    }
    assert rows["lr 0.2 · eval"]["of_metadata"] == {"lr": 0.2, "model": "mlp"}
    table = report_html.runs_html(model)
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert heads[-3:] == ["lr", "last loss", "last eval/acc"] and "model" not in heads
    cells = {
        label: re.findall(r"<td[^>]* data-sort='([^']*)'>([^<]*)", row)
        for label, row in re.findall(r"<tr><td><b>([^<]*)</b>(.*?)</tr>", table)
    }
    assert cells["lr 0.2"] == [("0.2", "0.2"), (repr(1 / 2.8), "0.35714"), ("", "")]
    assert cells["lr 0.3"] == [("0.3", "0.3"), ("", "NaN"), ("", "")]
    assert cells["lr 0.2 · eval"] == [("0.2", "0.2"), ("", ""), ("0.28", "0.28")]
    # The hparams view: each last value against lr, a point a run in the run's colour (its
    # evaluation's in its run's); "model" is the same in every run: no chart.
    charts = {c["title"]: c for c in model["sweep"]["charts"]}
    assert sorted(charts) == ["last eval/acc by lr", "last loss by lr"]
    loss = charts["last loss by lr"]
    assert loss["x"] == [0.1, 0.2] and loss["xvalues"] and not loss["xlog"]
    assert [(s["label"], [v for v in s["values"] if v is not None]) for s in loss["series"]] == [
        ("lr 0.1", [pytest.approx(1 / 1.9, rel=1e-4)]),
        ("lr 0.2", [pytest.approx(1 / 2.8, rel=1e-4)]),
    ]
    assert loss["note"].endswith("; 1 run(s) ending in NaN/Inf have none")
    acc = charts["last eval/acc by lr"]
    colors = {s["label"]: s["color"] for s in loss["series"]}
    assert acc["x"] == [0.1, 0.2, 0.3] and [s["color"] for s in acc["series"]][:2] == [
        colors["lr 0.1"],
        colors["lr 0.2"],
    ]
    # One run: no hyperparameter column (nothing differs), its last values still.
    one = report_html.runs_html(report.build_report(out, run="latest"))
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", one)
    assert "lr" not in heads and heads[-2:] == ["last loss", "last eval/acc"]


def test_two_sweeps_on_one_page_name_their_runs_after_their_directory(tmp_path):
    """`report a b` of two sweeps of the same lrs: each run is named after its directory and
    what differs ("a · lr 0.1", "b · lr 0.1"), the title lists each directory's runs once.
    Before: both sweeps' runs were "lr 0.1" and "lr 0.2", four series of two names, and the
    page said "lr 0.1 vs lr 0.1: the runs agree"."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _sweep(a, [0.1, 0.2])
    _sweep(b, [0.1, 0.2])
    model = report.build_report([a, b])
    assert [r["label"] for r in model["runs"]] == [
        "a · lr 0.1",
        "a · lr 0.2",
        "b · lr 0.1",
        "b · lr 0.2",
    ]
    assert model["title"] == "xdl_trace report: a: lr 0.1, lr 0.2; b: lr 0.1, lr 0.2"
    assert model["headline"][0]["text"].startswith("b · lr 0.1 vs a · lr 0.1: the runs agree")
    # One directory: its runs as before, no directory in their names.
    assert [r["label"] for r in report.build_report(a)["runs"]] == ["lr 0.1", "lr 0.2"]


def test_a_sweeps_hparams_view_has_categories_and_log_axes(tmp_path):
    """An optimizer's name is a category on its chart's x axis ("adam", "sgd" at 0 and 1, the
    runs of each above it); a learning rate spanning a decade is a log axis. Before: a sweep had
    no such view (the curves' ends were the only final values)."""
    out = str(tmp_path / "sweep")
    final = {}
    for opt, lr in (("adam", 0.1), ("adam", 0.01), ("sgd", 0.1), ("sgd", 0.01)):
        xdl.clear()
        xdl.trace_value("loss")
        config = {"output_dir": out, "fsync": False}
        with xdl.TraceHook(config, metadata={"opt": opt, "lr": lr}) as hook:
            for step in range(5):
                final[opt, lr] = (0.5 if opt == "adam" else 1.0) * lr / (1 + step)
                hook.step(gstep=step, values={"loss": final[opt, lr]})
    xdl.clear()
    model = report.build_report(out)
    charts = {c["title"]: c for c in model["sweep"]["charts"]}
    by_opt, by_lr = charts["last loss by opt"], charts["last loss by lr"]
    assert by_opt["xnames"] == ["adam", "sgd"] and by_opt["x"] == [0.0, 1.0]
    assert not by_opt["xlog"] and by_lr["xlog"] and by_lr["x"] == [0.01, 0.1]
    points = {
        (s["label"], x): v
        for s in by_opt["series"]
        for x, v in zip(by_opt["x"], s["values"])
        if v is not None
    }
    labels = {r["label"]: r for r in model["runs"]}
    assert len(points) == 4 and all(
        v
        == pytest.approx(
            final[labels[label]["metadata"]["opt"], labels[label]["metadata"]["lr"]], rel=1e-4
        )
        and by_opt["xnames"][int(x)] == labels[label]["metadata"]["opt"]
        for (label, x), v in points.items()
    )


def test_a_page_of_many_runs_shares_one_memory_budget(tmp_path, monkeypatch):
    """The curves of a page's runs share report.PAGE_SERIES_BUDGET_BYTES: each run of a sweep
    keeps fewer points where one run alone keeps more (a sweep of 20 runs x 300 keys: 1.9 GB
    to build its page, 1.0 GB now). Here a budget that
    holds 64 points of a run's curves, shared by 3 runs: under 32 points each, 50 for one."""
    out = str(tmp_path / "sweep")
    xdl.clear()
    xdl.trace_value("loss")
    for lr in (0.1, 0.2, 0.3):
        with xdl.TraceHook({"output_dir": out, "fsync": False}, metadata={"lr": lr}) as hook:
            for step in range(100):
                hook.step(gstep=step, values={"loss": 1 / (1 + lr * step)})
    xdl.clear()
    per_point = 2 * len(analysis.STATS_FIELDS) * 4 * 8  # loss and the step time's, 4 arrays
    monkeypatch.setattr(report, "PAGE_SERIES_BUDGET_BYTES", 64 * per_point)
    assert report.series_budget(3) == 64 * per_point // 3
    (sweep,) = _card(report.build_report(out, keys="loss"), "loss")["charts"]
    assert 0 < len(sweep["x"]) <= 32
    (one,) = _card(report.build_report(out, keys="loss", run="latest"), "loss")["charts"]
    assert len(one["x"]) == 50  # 100 records in 64 buckets: two a bucket.


def test_a_sweeps_diverged_runs_open_the_page_in_one_line_first(tmp_path, monkeypatch):
    """A sweep of 6 runs whose 4 highest learning rates overflow: one NaN/Inf headline line,
    first on the page (before the runs' "not compared" information), and one alert, each naming
    the earliest run in full and the others with their first gstep. Before: a red line and an
    alert per diverged run (40 for a sweep of 200 whose lr 0.1 runs diverged), after the
    information. Up to FOLD_AFTER runs keep a line and an alert each."""
    out = str(tmp_path / "sweep")
    first_inf = {}
    for lr in (0.4, 0.3, 0.2, 0.15, 0.01, 0.001):
        xdl.clear()
        xdl.trace_value("loss")
        with xdl.TraceHook({"output_dir": out, "fsync": False}, metadata={"lr": lr}) as hook:
            loss = 1.0
            for step in range(60):
                loss = loss * (1 + lr * 100) if lr > 0.1 else loss / 2
                with np.errstate(over="ignore"):  # Past float32's largest: inf.
                    value = np.float32(min(loss, 1e39))
                if np.isinf(value):
                    first_inf.setdefault(lr, step)
                hook.step(gstep=step, values={"loss": value})
    xdl.clear()
    model = report.build_report(out)
    bad, compared = model["headline"]
    assert (bad["tag"], bad["severity"], compared["tag"]) == ("NaN/Inf", "error", "not compared")
    g = first_inf
    assert sorted(g) == [0.15, 0.2, 0.3, 0.4] and g[0.4] < g[0.3] < g[0.2] < g[0.15]
    assert bad["text"] == (
        f"4 runs, the earliest lr 0.4: first non-finite at gstep {g[0.4]} in 1 key (loss); then "
        f"lr 0.3 (gstep {g[0.3]}), lr 0.2 (gstep {g[0.2]}), lr 0.15 (gstep {g[0.15]}) (each "
        "run's in the alerts; the Runs table's last values say NaN or Inf)"
    )
    # Its alerts of one kind and key in more than FOLD_AFTER runs: one row, "4 runs", the
    # earliest in full and the others with their gstep (a sweep of 20 runs x 300 frozen keys
    # had 6,000 "never changes" rows, 300 now).
    (nan,) = [a for a in model["alerts"] if a["kind"] == "NaN/Inf"]
    assert (nan["run"], nan["key"], nan["gstep"]) == ("4 runs", "loss", g[0.4])
    assert nan["detail"].startswith(f"lr 0.4: first at lstep {g[0.4]}: 0 NaN, 1 Inf; ")
    assert nan["detail"].endswith(
        f"; also in lr 0.3 (gstep {g[0.3]}), lr 0.2 (gstep {g[0.2]}), lr 0.15 (gstep {g[0.15]})"
    )
    # Its PNGs' log axes label their ticks as numbers (before: "$\\mathdefault{10^{32}}$", the
    # mathtext that text.parse_math=False prints raw).
    import matplotlib.figure

    labels, save = {}, matplotlib.figure.Figure.savefig

    def saved(figure, path, *args, **kwargs):
        figure.canvas.draw()
        ax = figure.axes[0]
        if ax.get_yscale() == "log":
            labels[os.path.basename(path)] = [t.get_text() for t in ax.get_yticklabels()]
        return save(figure, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", saved)
    report.render_pngs(model, str(tmp_path / "png"))
    assert labels and all(
        text and "$" not in text and float(text) > 0 for texts in labels.values() for text in texts
    ), labels
    few = report.build_report([os.path.join(out, f"train.trace.0.{n}") for n in (1, 2)])
    assert [h["text"].split(":")[0] for h in few["headline"] if h["tag"] == "NaN/Inf"] == [
        "train.trace.0.1",
        "train.trace.0.2",
    ]
    assert [a["run"] for a in few["alerts"] if a["kind"] == "NaN/Inf"] == [
        "train.trace.0.1",
        "train.trace.0.2",
    ]


def test_a_sweeps_png_legend_stands_beside_the_plot(tmp_path, monkeypatch):
    """The PNG of a chart of more than LEGEND_INSIDE series (a sweep of 12 runs) puts its legend
    beside the plot, in a wider figure, never over the curves (before: 21 names covered the
    loss chart); two runs keep theirs inside, the figure as wide as ever. Each of the 12 runs
    has a colour of its own (before: the 11th took the 1st's). Past LEGEND_MOST names, none."""
    from PIL import Image

    from xdl_trace.read import report_png

    def loss_png(path, out):
        paths = report.render_pngs(report.build_report(path, keys="loss"), str(out))
        (loss,) = [p for p in paths if os.path.basename(p).endswith("_loss_value.png")]
        with Image.open(loss) as image:
            return np.asarray(image.convert("L"))

    sweep = str(tmp_path / "sweep")
    _sweep(sweep, [n / 10 for n in range(1, 13)])
    (chart,) = _card(report.build_report(sweep, keys="loss"), "loss")["charts"]
    assert len({s["color"] for s in chart["series"]}) == 12
    assert report_png.LEGEND_INSIDE < 12 <= report_png.LEGEND_ROWS
    twelve = loss_png(sweep, tmp_path / "p12")
    assert twelve.shape == (320, int((8 + 1.9) * 100))
    dark = twelve < 100
    right_spine = np.flatnonzero(dark.sum(axis=0) > 150).max()  # The axes' right border.
    assert dark[:, right_spine + 5 :].sum() > 50  # The names, beside it.
    two = str(tmp_path / "two")
    _sweep(two, [0.1, 0.2])
    assert loss_png(two, tmp_path / "p2").shape == (320, 800)
    # Past LEGEND_MOST names (a sweep of 200 runs: a figure 3,650 px wide, 14 columns of
    # names), no legend: the title says the HTML report names them.
    monkeypatch.setattr(report_png, "LEGEND_MOST", 10)
    unnamed = loss_png(sweep, tmp_path / "p12-unnamed")
    assert unnamed.shape == (320, 800)
    dark = unnamed < 100
    right_spine = np.flatnonzero(dark.sum(axis=0) > 150).max()
    assert dark[:, right_spine + 5 :].sum() == 0


def test_a_sweeps_directory_is_listed_once_per_report(tmp_path, monkeypatch):
    """A report (and a serve refresh) of a directory of 6 runs, each with its evaluation, lists
    the directory once per prefix: each run opened and each paired with its evaluation reads the
    listing kept (``trace_runs.listed_once``), not every file's Header and Meta again. Before:
    each run's open and pairing listed it anew (N runs: N^2 Header reads; a sweep of 200 runs:
    a 34 s report, 33 s of it listing; now 5 s). Every run still gets its own evaluation."""
    from xdl_trace.read import serve, trace_runs

    sweep = str(tmp_path / "sweep")
    for steps in range(20, 26):
        _train_and_evaluate(sweep, steps=steps, every=5)
    listed = []
    real = trace_runs.set_aside_copies
    monkeypatch.setattr(
        trace_runs, "set_aside_copies", lambda reader: listed.append(1) or real(reader)
    )
    model = report.build_report(sweep)
    assert len(listed) == 2  # train.*, then test.*
    labels = [r["label"] for r in model["runs"]]
    assert labels == [f"steps {n}{part}" for n in range(20, 26) for part in ("", " · eval")]
    # Each evaluation read is its own run's: 20 steps evaluated 4 times, 25 steps 5 times.
    evals = [r for r in model["runs"] if r["evaluation"]]
    assert [r["records"] for r in evals] == [4, 4, 4, 4, 4, 5]
    del listed[:]
    live = serve.LiveReport([sweep])
    live.refresh()
    assert len(listed) == 2 and len(live.state()[1]["runs"]) == 12
    # Outside a report, each open lists as before (the files as they are now).
    del listed[:]
    xdl.open_trace(sweep, run="latest")
    xdl.open_trace(sweep, run="latest")
    assert len(listed) == 2


def test_find_nan_over_every_run_reads_their_evaluations(tmp_path):
    """find-nan --run all of a directory of two runs: a NaN in the first run's eval accuracy is
    found (before: the evaluations of several runs were not read: "no NaN", exit 0); the latest
    run alone has none."""
    out = str(tmp_path / "runs")
    _train_and_evaluate(out, steps=20, acc_nan_at=9)
    _train_and_evaluate(out, steps=20)
    found = _xdl_trace("find-nan", out, "--run", "all")
    assert found.returncode == 1, found.stdout + found.stderr
    assert found.stdout.startswith("eval/acc (eval): first at gstep 9 "), found.stdout
    latest = _xdl_trace("find-nan", out, "--run", "latest")
    assert latest.returncode == 0 and "nor in 2 eval keys over 2 records" in latest.stdout


def test_a_damaged_run_of_a_sweep_leaves_the_others_drawn(tmp_path):
    """A sweep of three runs whose first run's Header took a flipped bit: `report DIR` draws the
    two others and opens with an error naming the run and the file; `info DIR` lists the runs
    and files, then the error (exit 1). Before: both failed whole on the one file, so drawing
    every run of a directory would have hidden the sound runs behind one damaged one."""
    sweep = str(tmp_path / "sweep")
    _sweep(sweep, [0.1, 0.2, 0.3])
    first = os.path.join(sweep, "train.trace.0.1")
    with open(first, "r+b") as f:
        f.seek(30)
        byte = f.read(1)
        f.seek(30)
        f.write(bytes([byte[0] ^ 0x20]))
    model = report.build_report(sweep)
    assert [r["label"] for r in model["runs"]] == ["lr 0.2", "lr 0.3"]
    line = model["headline"][0]
    assert (line["tag"], line["severity"]) == ("run not read", "error")
    assert "not read, the other runs drawn: " in line["text"] and first in line["text"]
    assert "a damaged Header" in line["text"]
    said = _xdl_trace("info", sweep)
    assert said.returncode == 1 and "runs: 3" in said.stdout, said.stdout
    assert said.stdout.count("  rank 0 #") == 3 and "a damaged Header" in said.stderr
    with pytest.raises(TraceError, match="a damaged Header"):  # That run alone: its error.
        report.build_report(sweep, run=xdl.runs(sweep)[0].id)


def test_a_sweeps_page_draws_the_distributions_of_its_first_runs(tmp_path):
    """A page of 6 runs draws the distributions of the first DISTRIBUTION_RUNS (4) and says so
    on the last drawn (before: one per run per key, 3,000 of the 3,601 charts of a sweep of 10
    runs x 300 keys: a 29 MB page that took 1.2 GB to build); a page of one of the others
    (--run ID) draws its own."""
    out = str(tmp_path / "sweep")
    for n in range(6):
        xdl.clear()
        w = np.arange(8, dtype=np.float32) * (n + 1)
        xdl.trace_variable("w", w)
        with xdl.TraceHook({"output_dir": out, "fsync": False}, metadata={"seed": n}) as hook:
            for step in range(5):
                w *= np.float32(0.9)
                hook.step(gstep=step)
    xdl.clear()
    model = report.build_report(out)
    distributions = [c for c in _card(model, "w")["charts"] if c.get("kind") == "distribution"]
    assert report.DISTRIBUTION_RUNS == 4
    assert [c["title"] for c in distributions] == [f"distribution · seed {n}" for n in range(4)]
    assert distributions[-1]["note"].endswith(
        "; the first 4 of 6 runs' distributions (a page of one run, --run ID, draws its own)"
    )
    assert "the first" not in distributions[0]["note"]
    from xdl_trace.read import serve

    live = serve.LiveReport([out])  # serve draws the same.
    live.refresh()
    assert live.state()[1]["cards"] == model["cards"]
    last = report.build_report(out, run=xdl.runs(out)[-1].id)
    assert [c["title"] for c in _card(last, "w")["charts"] if c.get("kind")] == ["distribution"]


def test_verify_checks_the_eval_files_beside_the_training_files(tmp_path):
    """verify RUN checks every data file of the directory, the eval files (test.*) too: a
    flipped bit in one fails verify naming it. Before: only train.* were verified ("4 of 4
    files verified", exit 0)."""
    out = str(tmp_path / "run")
    _train_and_evaluate(out, hook_per_eval=True)
    said = _xdl_trace("verify", out, check=True).stdout
    assert said.count("OK    test.trace.0.") == 4 and "OK    train.trace.0.1" in said, said
    assert said.rstrip().endswith("5 of 5 files verified")
    damaged = sorted(f for f in os.listdir(out) if f.startswith("test.") and "meta" not in f)[1]
    with open(os.path.join(out, damaged), "r+b") as f:
        f.seek(-3, os.SEEK_END)
        byte = f.read(1)
        f.seek(-3, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x10]))
    failed = _xdl_trace("verify", out)
    assert failed.returncode == 1, failed.stdout
    assert f"FAIL  {damaged}" in failed.stdout


@pytest.mark.parametrize("hook_per_eval", [False, True], ids=["one_eval_hook", "hook_per_eval"])
def test_a_key_of_the_evaluation_asked_of_the_training_run_says_where_it_is(
    tmp_path, hook_per_eval
):
    """dump/export --keys eval/acc of a training run: the error names the eval files that hold
    it and how to read them (before: "no key 'eval/acc'" and the training keys alone)."""
    out = str(tmp_path / "run")
    _train_and_evaluate(out, hook_per_eval=hook_per_eval)
    how = "--prefix test --run all" if hook_per_eval else "--prefix test"
    for command in (["dump", out], ["export", out, "-o", str(tmp_path / "x.csv")]):
        said = _xdl_trace(*command, "--keys", "eval/acc")
        assert said.returncode in (1, 2) and said.stderr.rstrip().endswith(
            f"the run's evaluation (test.trace.* beside it) holds eval/acc: read it with {how}"
        ), said.stderr


@pytest.mark.parametrize("hook_per_eval", [False, True], ids=["one_eval_hook", "hook_per_eval"])
def test_export_of_every_key_says_the_evaluation_is_not_in_it(tmp_path, hook_per_eval):
    """export of a training run with no --keys (every key): the file holds the training's keys,
    and a note names the eval keys beside it and how to export them (before: "wrote x.csv: 40
    rows, 2 keys", the evaluation silently left out); with --keys, no note. The eval export
    that the note gives writes the eval records."""
    out = str(tmp_path / "run")
    accs = _train_and_evaluate(out, hook_per_eval=hook_per_eval)
    how = "--prefix test --run all" if hook_per_eval else "--prefix test"
    for name in ("x.csv", "x.npz"):
        said = _xdl_trace("export", out, "-o", str(tmp_path / name))
        assert said.returncode == 0, said.stderr
        assert said.stderr.rstrip().endswith(
            f"note: the run's evaluation (eval/acc, eval/loss in test.trace.* beside it) is not in "
            f"{tmp_path / name}: export it with {how} -o <another file>"
        ), said.stderr
    assert said.stdout.startswith(f"wrote {tmp_path / 'x.npz'}: 8 arrays (2 keys x 1 rank)")
    asked = _xdl_trace("export", out, "--keys", "loss", "-o", str(tmp_path / "loss.csv"))
    assert asked.returncode == 0 and "note" not in asked.stderr, asked.stderr
    evaluation = str(tmp_path / "eval.csv")
    _xdl_trace("export", out, *how.split(), "-o", evaluation, check=True)
    with open(evaluation) as f:
        rows = list(csv.DictReader(f))
    assert {int(r["gstep"]): float(r["eval/acc"]) for r in rows} == accs


def test_info_and_find_nan_name_the_eval_files_beside_the_training_files(tmp_path):
    out = str(tmp_path / "run")
    _train_and_evaluate(out, hook_per_eval=True, acc_nan_at=29)
    said = _xdl_trace("info", out, check=True).stdout
    assert (
        "also here: eval files test.trace.* (4 run(s), 4 records; the run shown: 4 runs, 4 "
        "records): the runs' evaluations, which "
        "report, find-nan, diff and timeline read with them; alone: --prefix test"
    ) in said
    # find-nan reads the run's evaluation with it: a NaN in the eval accuracy is found (before:
    # "no NaN", exit 0, and a line saying the eval files were not read).
    found = _xdl_trace("find-nan", out)
    assert found.returncode == 1, found.stdout + found.stderr
    assert found.stdout.splitlines() == [
        "eval/acc (eval): first at gstep 29 (rank 0, lstep 0): 1 NaN, 0 Inf; 1 record(s) affected"
    ]
    found = _xdl_trace("find-nan", out, "--json")
    assert [(b["key"], b["gstep"], b["eval"]) for b in json.loads(found.stdout)] == [
        ("eval/acc", 29, True)
    ]
    said = _xdl_trace("find-nan", out, "--keys", "w,*loss", check=True).stdout
    assert said.startswith("no NaN or Inf in 2 keys over 40 records, nor in 1 eval key over 4")
    found = _xdl_trace("find-nan", out, "--prefix", "test", "--run", "all")
    assert found.returncode == 1 and "eval/acc: first at gstep 29" in found.stdout, found.stdout
    said = _xdl_trace("info", out, "--prefix", "test", check=True).stdout
    assert "also here: training files train.trace.* (1 run(s), 40 records)" in said
    only_eval = tmp_path / "only_eval"
    only_eval.mkdir()
    for f in os.listdir(out):
        if f.startswith("test."):
            os.rename(os.path.join(out, f), only_eval / f)
    failed = _xdl_trace("info", str(only_eval))
    assert failed.returncode == 1
    assert 'found: test.trace (prefix "test", name "trace")' in failed.stderr, failed.stderr
