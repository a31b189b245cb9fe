"""The report as a user drives it, in a real Chromium (browser.py: chromedriver + selenium):
searching keys, the key tree, hovering a NaN step, zooming, log and smoothing; and the chart
model fixes of issue 32 (constant histograms, NaN regions, honest names, runs by metadata). Every
page opened fails its test on any JavaScript error or console error."""

import os
import re

import numpy as np
import pytest

import xdl_trace as xdl
from browser import page  # noqa: F401  (the fixture)
from conftest import trained_and_evaluated
from xdl_trace.read import analysis, report

HERE = os.path.dirname(os.path.abspath(__file__))
H100 = os.path.join(HERE, "..", "data", "h100_conv", "cupti_trace")
NAN_FROM = 150  # hidden holds a NaN from this gstep on.
GRAD_NAN_FROM = 180  # and the gradient from this one.
BIAS = -0.00482  # A constant bias, traced as a "histogram" summary.


def _train(out, steps=200, lr=0.02, metadata=None, nan=True):
    """A small model traced as a user would: a variable under block00/layer00 and its gradient,
    a constant bias (histogram summary), an activation that turns NaN, the loss and a constant
    learning rate (callbacks), a config vector (trace_once)."""
    xdl.clear()
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 4)).astype(np.float32)
    b2 = np.full(1, BIAS, np.float32)
    hidden = np.zeros(16, np.float32)
    state = {"loss": np.float32(1)}
    xdl.trace_variable("block00/layer00/w", w)
    xdl.trace_gradient("block00/layer00/w")
    xdl.trace_tensor("block00/b2", b2, summary="histogram")
    xdl.trace_tensor("hidden", hidden)
    xdl.trace_callback("loss", lambda: state["loss"])
    xdl.trace_callback("lr", lambda: np.float32(lr))
    xdl.trace_once("config/hidden_sizes", np.array([64, 32, 16], np.float32))
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    with xdl.TraceHook(config, metadata=metadata) as hook:
        for step in range(steps):
            grad = rng.normal(size=w.shape).astype(np.float32) * 0.1
            hidden[:] = rng.normal(size=16)
            if nan and step >= NAN_FROM:
                hidden[2] = np.nan
            if nan and step >= GRAD_NAN_FROM:
                grad[0, 0] = np.nan
            state["loss"] = np.float32(np.exp(-step * lr * 2.5) + 0.01 * rng.normal())
            xdl.send_gradient("block00/layer00/w", grad)
            hook.step(gstep=step)
            w -= lr * grad
    xdl.clear()


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("nan_run") / "nan")
    _train(out)
    return out


@pytest.fixture(scope="module")
def two_lr(tmp_path_factory):
    """One directory, two runs of different learning rates (the second shorter)."""
    out = str(tmp_path_factory.mktemp("two_lr") / "c_lr")
    _train(out, lr=0.02, metadata={"lr": 0.02, "seed": 0}, nan=False)
    _train(out, steps=150, lr=0.2, metadata={"lr": 0.2, "seed": 0}, nan=False)
    return out


def _card(model, key):
    return next(c for c in model["cards"] if c["key"] == key)


def _chart(model, key, title):
    return next(c for c in _card(model, key)["charts"] if c["title"].startswith(title))


# --- the chart model -------------------------------------------------------------------------


def test_a_constant_histogram_row_is_its_value(nan_run):
    """Issue 32 #2: the writer widens a constant tensor's range to value ± 0.5; every percentile
    is the value, not up to a bin (1/30) above it with the sign flipped."""
    (chart,) = _card(report.build_report(nan_run), "block00/b2")["charts"]
    for s in chart["series"]:
        values = [v for v in s["values"] if v is not None]
        assert values and values == pytest.approx([BIAS] * len(values), abs=1e-7), s["label"]
    edges = np.array([[BIAS - 0.5] + [BIAS - 0.5 + (k + 1) / 30 for k in range(30)]])
    counts = np.zeros((1, 30))
    counts[0, 15] = 32
    assert analysis.histogram_percentiles(edges, counts, (0.0, 0.5, 1.0))[0] == pytest.approx(
        [BIAS] * 3, abs=1e-9
    )


def test_non_finite_steps_are_gaps_in_every_chart_of_the_key(nan_run):
    """Issue 32 #3: the distribution has no band from the first NaN on (its log buckets count
    finite values only); the norm ratio keeps its NaN steps as gaps (its axis runs to the end)."""
    model = report.build_report(nan_run)
    dist = _chart(model, "hidden", "distribution")
    at = dist["x"].index(NAN_FROM)
    median = next(s for s in dist["series"] if s["label"] == "median")
    assert all(v is None for v in median["values"][at:])
    assert all(v is not None for v in median["values"][:at])
    assert set(range(at, len(dist["x"]))) <= set(median["gaps"])
    ratio = _chart(model, "gradient/block00/layer00/w", "gradient norm / weight norm")
    assert ratio["x"][-1] == 199
    (line,) = ratio["series"]
    assert set(range(ratio["x"].index(GRAD_NAN_FROM), len(ratio["x"]))) <= set(line["gaps"])


def test_names_units_order_and_alerts_say_what_they_show(nan_run, tmp_path):
    """Issue 32 #4: the norm ratio is not called the update ratio; no unsmoothed throughput;
    the step time's caption has the unit of its axis; the keys come before the step timing; a
    trace_once config is shown as its values; a constant learning rate from a callback raises
    no "never changes" (a constant tensor still does)."""
    model = report.build_report(nan_run)
    charts = _card(model, "gradient/block00/layer00/w")["charts"]
    titles = [c["title"] for c in charts]
    assert "gradient norm / weight norm" in titles
    # The lr is traced: the update ratio is lr times the norm ratio, named so (issue 32 #4).
    norm_ratio, update = (_chart(model, "gradient/block00/layer00/w", t) for t in titles[-2:])
    assert titles[-2:] == ["gradient norm / weight norm", "update ratio"]
    assert update["x"] == norm_ratio["x"] and "lr ×" in update["note"]
    for mine, theirs in zip(update["series"][0]["values"], norm_ratio["series"][0]["values"]):
        assert (mine is None) == (theirs is None)
        if mine is not None:
            assert mine == pytest.approx(0.02 * theirs, rel=1e-4)
    assert [c["title"] for c in model["steps"]] == ["step time"]
    (step_time,) = model["steps"]
    assert "ms" in step_time["ylabel"] and "(ns)" not in step_time["note"]
    once = _card(model, "config/hidden_sizes")
    assert once["charts"] == [] and "[64, 32, 16]" in once["text"]
    never = {a["key"] for a in model["alerts"] if a["kind"] == "never changes"}
    assert "lr" not in never and "block00/b2" in never
    out = str(tmp_path / "page.html")
    report.write_report(nan_run, out)
    page_text = open(out, encoding="utf-8").read()
    assert page_text.index("id=keys") < page_text.index("id=steps-heading")


def test_runs_are_told_apart_by_their_metadata_on_one_y_axis(two_lr):
    """Issue 32 #5: legends by the metadata that differs, one y range for the per-run
    distributions of a key, and two per-run pages of one directory with different titles."""
    model = report.build_report(two_lr, run="all")
    assert [r["label"] for r in model["runs"]] == ["lr 0.02", "lr 0.2"]
    (loss,) = _card(model, "loss")["charts"]
    assert {s["label"] for s in loss["series"] if s["tip"]} == {"lr 0.02", "lr 0.2"}
    dists = [c for c in _card(model, "block00/layer00/w")["charts"] if c.get("kind")]
    assert len(dists) == 2 and dists[0]["yrange"] == dists[1]["yrange"]
    titles = {report.build_report(two_lr, run=r.id)["title"] for r in xdl.runs(two_lr)}
    assert len(titles) == 2


# --- in Chromium -----------------------------------------------------------------------------


def _visible_cards(page):
    return page.js(
        "return [...document.querySelectorAll('.card[data-key]')]"
        ".filter(e => e.checkVisibility()).map(e => e.getAttribute('data-key'))"
    )


def test_search_tree_and_only_this_key(nan_run, page, tmp_path):
    """Issue 32 #1: the search box filters the cards (it threw a TypeError on the Steps card
    before); the tree groups keys by prefix, collapses, and shows one key alone."""
    out = str(tmp_path / "nan.html")
    report.write_report(nan_run, out)
    page.open(out)
    assert page.js("return document.title").startswith("xdl_trace report")
    everything = _visible_cards(page)
    assert len(everything) == 7
    page.type("#filter", "layer00")
    assert sorted(_visible_cards(page)) == ["block00/layer00/w", "gradient/block00/layer00/w"]
    assert page.element("#shown").text == "2 of 7 keys"
    page.type("#filter", "")
    assert len(_visible_cards(page)) == 7
    # The tree: block00/ holds layer00/ (w) and b2; collapsing hides its leaves.
    groups = page.js(
        "return [...document.querySelectorAll('#key-tree > details > summary')]"
        ".map(e => e.textContent)"
    )
    assert "block00/ 2" in groups and "gradient/ 1" in groups
    leaf_shown = "return document.querySelector('#key-tree > details .leaf a').checkVisibility()"
    assert page.js(leaf_shown)
    page.click("#key-tree > details > summary")
    assert not page.js(leaf_shown)
    page.click("#key-tree > details > summary")
    assert page.js(leaf_shown)
    page.click("#key-tree .leaf[data-n] .only")
    assert len(_visible_cards(page)) == 1
    page.click("#show-all")
    assert len(_visible_cards(page)) == 7


def test_hover_a_nan_step_zoom_log_and_smoothing(nan_run, page, tmp_path):
    out = str(tmp_path / "nan.html")
    report.write_report(nan_run, out)
    page.open(out)
    hidden = page.js(
        "return [...document.querySelectorAll('.card[data-key]')]"
        ".findIndex(e => e.getAttribute('data-key') == 'hidden')"
    )
    card = f"#card-{hidden}"
    page.js(f"document.querySelector('{card}').scrollIntoView()")
    page.wait(f"return document.querySelector('{card} .u-over')")
    # The non-finite region is shaded and said so; hovering there says NaN/Inf.
    assert page.js(f"return document.querySelector('{card} .chart').dataset.nonfinite") == str(
        NAN_FROM
    )
    page.hover(f"{card} .chart .u-over", 0.95)
    tip = page.wait(
        f"var t = document.querySelector('{card} .chart .tip');"
        "return t && t.style.display == 'block' && t.textContent"
    )
    assert f"NaN/Inf from gstep {NAN_FROM}" in tip and "NaN/Inf" in tip.split("from gstep")[1]
    # Zoom: a drag over the middle of the loss chart narrows its x range.
    page.drag("#card-0 .u-over", 0.3, 0.6)
    x_range = page.js(
        "var u = xdlReport.plots.find(p => p.box.closest('#card-0')).plot;"
        "return [u.scales.x.min, u.scales.x.max]"
    )
    assert 30 < x_range[0] < x_range[1] < 150
    # Log y: every drawn chart redrawn on a log scale.
    page.select("#yscale", "log")
    assert page.js("return xdlReport.view.yscale") == "log"
    assert page.js("return document.querySelector('#card-0 .chart').dataset.scale") == "log"
    assert page.js("return xdlReport.plots[0].plot.scales.y.distr") == 3
    page.select("#yscale", "linear")
    assert page.js("return xdlReport.plots[0].plot.scales.y.distr") == 1
    # Smoothing: the loss line is the EMA, its raw values a faint twin.
    page.js(
        "var s = document.getElementById('smooth'); s.value = 0.9;"
        "s.dispatchEvent(new Event('input'))"
    )
    loss = page.js(
        "var p = xdlReport.plots.find(p => p.box.closest('#card-0'));"
        "return {raw: p.spec.series[0].values, drawn: p.plot.data[1],"
        " twin: p.plot.data[p.plot.data.length - 1], n: p.plot.series.length}"
    )
    assert loss["n"] == 3  # x, the smoothed line, the raw twin.
    assert loss["twin"] == loss["raw"]
    raw, drawn = np.array(loss["raw"]), np.array(loss["drawn"])
    assert np.abs(np.diff(drawn)).sum() < 0.5 * np.abs(np.diff(raw)).sum()
    assert page.element("#smooth-value").text == "0.90"


def test_cards_keep_their_height_before_they_draw(tmp_path, page):
    """Issue 32 #6: a page of many keys does not grow as its cards draw (each reserves the
    height of its charts)."""
    out = str(tmp_path / "many")
    xdl.clear()
    values = [np.zeros(4, np.float32) for _ in range(120)]
    for i, v in enumerate(values):
        xdl.trace_tensor(f"block{i // 10:02d}/layer{i % 10:02d}/w", v)
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for step in range(20):
            for v in values:
                v[:] = step + np.arange(4)
            hook.step(gstep=step)
    xdl.clear()
    html = str(tmp_path / "many.html")
    report.write_report(out, html)
    page.open(html)
    before = page.js("return document.documentElement.scrollHeight")
    drawn_before = int(page.js("return document.body.dataset.charts"))
    page.js("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.wait("return +document.body.dataset.charts > %d" % drawn_before)
    for y in range(0, before, 800):
        page.js(f"window.scrollTo(0, {y})")
    after = page.js("return document.documentElement.scrollHeight")
    assert abs(after - before) < 0.03 * before, (before, after)
    # The tree: 12 groups of 10 leaves ("layer03/w": a group of one key is its leaf).
    assert len(page.js("return [...document.querySelectorAll('#key-tree details')]")) == 12
    leaves = page.js("return [...document.querySelectorAll('#key-tree .leaf a')].map(a => a.text)")
    assert len(leaves) == 120 and leaves[3] == "layer03/w"


def test_every_kind_of_page_opens_without_errors(nan_run, two_lr, page, tmp_path):
    """A GPU run, two runs of one directory, a NaN run: no JavaScript error on any of them (the
    fixture checks the console), every chart drawn, legends by metadata."""
    pages = [
        ("gpu.html", H100, {}),
        ("two.html", two_lr, {"run": "all"}),
        ("nan.html", nan_run, {}),
    ]
    for name, path, options in pages:
        out = str(tmp_path / name)
        result = report.write_report(path, out, **options)
        page.open(out)
        assert not page.js("return document.title").startswith("ERROR")
        page.wait("return +document.body.dataset.charts == %d" % result["charts"])
        page.check()
    legend = page.js("return document.querySelector('#card-0 .legend').textContent")
    assert legend == "rank 0"
    page.open(str(tmp_path / "two.html"))
    assert re.fullmatch(r"lr 0\.02\s*lr 0\.2", page.element("#card-0 .legend").text)


def test_where_the_runs_differ(tmp_path, page):
    """Issue 31: `report A B` has a "where the runs differ" section: its table sorted by first
    divergence (the learning rate at gstep 0, then the parameter and the loss it moves from
    gstep 1; the gradients, drawn from the same generator, agree), a divergence chart that
    hovers, and key links that jump to the cards."""
    a, b = str(tmp_path / "lr_a"), str(tmp_path / "lr_b")
    _train(a, steps=60, lr=0.02, nan=False)
    _train(b, steps=60, lr=0.021, nan=False)
    out = str(tmp_path / "ab.html")
    result = report.write_report([a, b], out)
    page.open(out)
    page.wait("return +document.body.dataset.charts == %d" % result["charts"])
    rows = page.js(
        "return [...document.querySelectorAll('#differ ~ table.differ tbody tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [r[0] for r in rows] == ["lr", "block00/layer00/w", "loss"], rows
    assert [int(r[2]) for r in rows] == [0, 1, 1]
    assert all(r[3] == "values" for r in rows)
    assert "3 of 7 keys differ" in page.element("#differ ~ p.caption").text
    page.hover("#differ-charts .u-over", 0.5)
    tip = page.wait(
        "var t = document.querySelector('#differ-charts .tip');"
        "return t && t.style.display == 'block' && t.textContent"
    )
    assert "gstep" in tip and "block00/layer00/w" in tip
    page.click("#differ ~ table.differ a[href='#key-loss']")
    top = page.js("return document.getElementById('key-loss').getBoundingClientRect().top")
    assert abs(top) < 50


def test_gpu_tables_hold_every_row_and_sort_and_search_as_a_user_clicks_and_types(tmp_path, page):
    """The kernel table holds every kernel of the H100 trace (not a top 15); a click on a
    column's head sorts by it (numbers largest first, a second click smallest first; names
    alphabetically), and its search box keeps the rows holding what is typed."""
    out = str(tmp_path / "gpu.html")
    report.write_report(H100, out)
    names = analysis.scan_run(H100).gpu["kernel_names"]
    page.open(out)
    table = "document.querySelector('table.kernels')"
    column = (
        "return Array.from(%s.tBodies[0].rows).filter(r => r.style.display != 'none')"
        ".map(r => r.cells[arguments[0]].textContent.trim())" % table
    )
    assert len(page.js(column, 0)) == names > 15
    before = [float(v) for v in page.js(column, 3)]  # By total time, as the page comes.
    assert before != sorted(before, reverse=True)
    page.click("table.kernels th:nth-child(4)")  # mean µs
    means = [float(v) for v in page.js(column, 3)]
    assert means == sorted(before, reverse=True)
    page.click("table.kernels th:nth-child(4)")
    assert [float(v) for v in page.js(column, 3)] == sorted(means)
    page.click("table.kernels th:nth-child(1)")
    kernels = page.js(column, 0)
    assert kernels == sorted(kernels, key=str.lower)
    word = "gemm" if any("gemm" in k.lower() for k in kernels) else kernels[0].split("<")[0][:8]
    box = page.js(
        "var t = %s, e = t.parentNode.classList.contains('table-scroll') ? t.parentNode : t;"
        "return e.previousElementSibling.className" % table
    )
    assert box == "table-search"
    page.js(
        "var t = %s; (t.parentNode.classList.contains('table-scroll') ? t.parentNode : t)"
        ".previousElementSibling.id = 'kernel-search'" % table
    )
    page.type("#kernel-search", word)
    shown = page.js(column, 0)
    assert shown and len(shown) == sum(word.lower() in k.lower() for k in kernels) < len(kernels)
    assert all(word.lower() in k.lower() for k in shown)
    page.check()


def test_a_long_alerts_table_comes_after_the_charts_whole_and_searchable(tmp_path, page):
    """Issue 32's 2-second first chart: of 41 alerts (40 keys that never change, one NaN) the
    page holds the first report_html.ALERT_ROWS before its scripts, the error first; the others
    follow the charts' data and join the table once the page is read, which then sorts and
    searches all of them."""
    from xdl_trace.read import report_html

    xdl.clear()
    frozen = [np.full(4, i, np.float32) for i in range(40)]
    for i, v in enumerate(frozen):
        xdl.trace_tensor(f"frozen/k{i:02d}", v)
    moving = np.zeros(4, np.float32)
    xdl.trace_tensor("moving", moving)
    with xdl.TraceHook({"output_dir": str(tmp_path / "run"), "fsync": False}) as hook:
        for step in range(30):
            moving[:] = step if step < 20 else np.nan
            hook.step(gstep=step)
    xdl.clear()
    out = str(tmp_path / "alerts.html")
    report.write_report(str(tmp_path / "run"), out)
    alerts = report.build_report(str(tmp_path / "run"))["alerts"]
    assert len(alerts) > report_html.ALERT_ROWS + 5
    with open(out, encoding="utf-8") as f:
        before_scripts = f.read().split("<script type='application/json'", 1)[0]
    table = before_scripts.split("id=alerts-table>", 1)[1].split("</table>", 1)[0]
    assert table.count("<tr class=") == report_html.ALERT_ROWS
    assert table.split("<tr class=", 2)[1].startswith("error")
    page.open(out)
    page.wait("return !document.getElementById('alerts-more')")
    rows = "return Array.from(document.querySelectorAll('table.alerts tbody tr'))"
    assert page.js(rows + ".length") == len(alerts)
    box = page.element("#alerts-table .table-search")
    assert box.get_attribute("placeholder") == f"search {len(alerts)} rows"
    page.js("document.querySelector('#alerts-table .table-search').id = 'alert-search'")
    page.type("#alert-search", "frozen/k3")
    shown = page.js(
        rows + ".filter(r => r.style.display != 'none').map(r => r.cells[1].textContent)"
    )
    assert sorted(shown) == [f"frozen/k{i}" for i in range(30, 40)]
    page.check()


def test_a_diverging_loss_keeps_the_labels_of_its_y_axis(tmp_path, page):
    """A loss that grows to 2.1e35 before its first Inf (a run blowing up, as a too-large learning
    rate does): the loss chart's y axis is labelled up to its top, linear and log (uPlot's own
    tick steps stop at 5e31, and its log splits drift off the powers of ten past 1e22: before,
    the axis had no label at all, then none above 1e21)."""
    out = str(tmp_path / "run")
    xdl.clear()
    state = {}
    xdl.trace_callback("loss", lambda: state["loss"])
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for step in range(60):
            state["loss"] = np.float32(2.1 * 10.0 ** (step * 35 / 49) if step < 50 else np.inf)
            hook.step(gstep=step)
    xdl.clear()
    html = str(tmp_path / "diverging.html")
    report.write_report(out, html)
    page.open(html)
    for scale, top in (("linear", 2e35), ("log", 1e32)):
        page.select("#yscale", scale)
        page.wait("return document.querySelector('#card-0 .u-over')")
        labels = page.js(
            "var u = xdlReport.plots.find(p => p.box.closest('#card-0')).plot;"
            "return (u.axes[1]._values || []).filter(v => v)"
        )
        assert len(labels) >= 2 and max(float(v) for v in labels) >= top, (scale, labels)


def test_a_flat_line_sits_in_a_band_and_a_short_run_has_whole_gsteps(tmp_path, page):
    """A key that never changes from 0 (a frozen layer): its chart's y axis is a band around 0
    (before: uPlot's 0..100, the line along the floor); three gsteps: ticks at whole gsteps only
    (before: 0, 0.25, 0.5...)."""
    out = str(tmp_path / "run")
    xdl.clear()
    xdl.trace_variable("frozen", np.zeros(3, np.float32))
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for step in range(3):
            hook.step(gstep=step)
    xdl.clear()
    html = str(tmp_path / "flat.html")
    report.write_report(out, html)
    page.open(html)
    page.wait("return document.querySelector('#card-0 .u-over')")
    x_labels, y_labels = page.js(
        "var u = xdlReport.plots.find(p => p.box.closest('#card-0')).plot;"
        "return [u.axes[0]._values.filter(v => v), u.axes[1]._values.filter(v => v)]"
    )
    assert [float(v) for v in x_labels] == [0, 1, 2]
    ys = [float(v) for v in y_labels]
    assert min(ys) < 0 < max(ys) <= 1, ys


def test_the_evaluations_are_marked_on_the_step_time_as_a_user_sees_it(tmp_path, page):
    """A run evaluated after gsteps 9, 19 and 29 (an eval hook, 2 ms of work each): the page's
    step-time chart draws a dashed line at each (pixels on its canvas there, none between), its
    note says what they are, hovering the step after one shows that gstep, and the lines are
    drawn again on a log axis and with smoothing; no JavaScript error."""
    import time

    out = str(tmp_path / "run")
    with trained_and_evaluated(out) as (train, evaluate):
        for step in range(40):
            train.step(values={"loss": 1.0 / (1 + step)})
            if step in (9, 19, 29):
                time.sleep(0.002)
                evaluate.step(values={"acc": step / 40})
    html = str(tmp_path / "r.html")
    report.write_report(out, html)
    page.open(html)
    page.js("document.getElementById('steps-heading').scrollIntoView()")
    page.wait("return document.querySelector('#steps .u-over')")
    assert "dashed: an evaluation ran after that gstep" in page.element("#steps .note").text
    # A column of the canvas at a mark holds the line's grey; halfway between two marks, none.
    ink = (
        "var p = xdlReport.plots.find(p => p.where.group == 'steps'), u = p.plot;"
        "var x = Math.round(u.valToPos(arguments[0], 'x', true)), b = u.bbox;"
        "var d = u.ctx.getImageData(x, b.top, 1, b.height).data, n = 0;"
        "for (var i = 0; i < d.length; i += 4) if (d[i + 3] && d[i] < 200 && d[i] == d[i + 2]) n++;"
        "return n;"
    )
    assert page.js("return xdlReport.plots.find(p => p.where.group == 'steps').spec.marks") == [
        9,
        19,
        29,
    ]
    for gstep in (9, 19, 29):
        assert page.js(ink, gstep) > 20, gstep
    assert page.js(ink, 14.5) < 5
    page.hover("#steps .u-over", (10 - 1) / (39 - 1))  # The step after the first evaluation.
    tip = page.wait(
        "var t = document.querySelector('#steps .tip');"
        "return t && t.style.display == 'block' && t.textContent"
    )
    assert "gstep 10" in tip, tip
    page.select("#yscale", "log")
    page.js(
        "var s = document.getElementById('smooth'); s.value = 0.5;"
        "s.dispatchEvent(new Event('input'))"
    )
    page.wait("return document.querySelector('#steps .u-over')")
    assert page.js(ink, 19) > 20
    page.check()


def test_a_sweeps_runs_table_is_searched_sorted_and_scrolled(tmp_path, page):
    """A sweep of 26 runs into one directory, each named "lr <value>": its Runs table scrolls in
    a box of its own (the charts stay in reach), has a search box (typing "lr 0.13" leaves that
    run's row) and sorts by a column, the size by bytes ("9.9 KB" below "10.5 KB"). Before: 26
    rows pushed the charts a page down, with no search and no sort."""
    out = str(tmp_path / "sweep")
    for n in range(1, 27):
        xdl.clear()
        xdl.trace_tensor("w", np.ones(40 * n, np.float32))
        with xdl.TraceHook({"output_dir": out, "on_error": "raise"}, metadata={"lr": n / 100}) as h:
            for step in range(4):
                h.step(gstep=step)
    xdl.clear()
    html = str(tmp_path / "sweep.html")
    report.write_report(out, html)
    page.open(html)
    rows = "return Array.from(document.querySelectorAll('#runs-table tbody tr'))"
    assert page.js(rows + ".length") == 26
    assert page.js("return !!document.querySelector('#runs-table .table-scroll table.runs')")
    page.js("document.querySelector('#runs-table .table-search').id = 'run-search'")
    page.type("#run-search", "lr 0.13")
    shown = page.js(
        rows + ".filter(r => r.style.display != 'none').map(r => r.cells[0].textContent)"
    )
    assert len(shown) == 1 and shown[0].startswith("lr 0.13"), shown
    page.type("#run-search", "")
    page.js("document.querySelectorAll('#runs-table thead th')[6].id = 'size-head'")
    page.click("#size-head")  # Numbers sort largest first.
    labels = page.js(rows + ".map(r => r.cells[0].querySelector('b').textContent)")
    assert labels[:2] == ["lr 0.26", "lr 0.25"] and labels[-1] == "lr 0.01", labels
    page.check()


def test_a_sweeps_runs_are_filtered_in_every_chart(tmp_path, page):
    """A sweep of 4 runs (loss about 10 x lr, weights with a mean ± std band, an evaluation each):
    typing a regular expression in the sidebar's run filter ("lr 0.[12]$", as TensorBoard's
    "Filter runs") leaves those runs in every chart, each legend and the tooltip, their
    evaluations with them; the y axis fits the runs shown; text that is no regular expression
    is matched as typed (no error); cleared, every run is back. Before: no filter, and a sweep
    of 200 runs drew 200 lines and a legend of 200 names in every chart. A page of one run
    offers none."""
    out = str(tmp_path / "sweep")
    for lr in (0.1, 0.2, 0.3, 0.4):
        xdl.clear()
        w = np.linspace(-1, 1, 64).astype(np.float32)
        xdl.trace_variable("w", w, summary="stats")
        xdl.trace_value("loss")
        xdl.trace_value("acc", scope="eval")
        config = {"output_dir": out, "on_error": "raise", "fsync": False}
        with xdl.TraceHook(config, metadata={"lr": lr}) as hook, xdl.TraceHook(
            config, is_training=False, scope="eval"
        ) as evaluate:
            for step in range(20):
                hook.step(gstep=step, values={"loss": 10 * lr / (1 + step)})
                if step % 5 == 4:
                    evaluate.step(gstep=step, values={"acc": lr + step / 100})
    xdl.clear()
    html = str(tmp_path / "sweep.html")
    report.write_report(out, html)
    page.open(html)
    page.wait("return document.body.getAttribute('data-charts') > 0")
    assert page.js("return document.getElementById('run-filter-row').hidden") is False

    def chart_group(key):
        """The id of `key`'s card, scrolled to (a card is drawn as it comes near the viewport)."""
        return page.js(
            """var key = arguments[0];
               var n = window.xdlReport.data.cards.findIndex(c => c.key === key);
               document.getElementById('card-' + n).scrollIntoView();
               return 'card-' + n;""",
            key,
        )

    def chart(key):
        """The drawn series (shown, by label), legend, bands and y scale's top of the first
        chart of `key`'s card."""
        group = chart_group(key)
        find = "return window.xdlReport.plots.filter(p => p.where.group === arguments[0])[0]"
        page.wait(find + " != null", 10, group)
        return page.js(
            find
            + """.plot ? (function (p) {
                 return {shown: p.plot.series.slice(1).filter(s => s.show).map(s => s.label),
                         legend: p.box.querySelector('.legend').textContent,
                         bands: (p.plot.bands || []).length, top: p.plot.scales.y.max};
               })(window.xdlReport.plots.filter(p => p.where.group === arguments[0])[0]) : null""",
            group,
        )

    every = chart("loss")
    assert every["shown"] == ["lr 0.1", "lr 0.2", "lr 0.3", "lr 0.4"] and every["top"] >= 4
    assert chart("w")["bands"] == 4
    page.type("#run-filter", "lr 0.[12]$")
    page.wait("return document.body.getAttribute('data-shown-runs') === '2'")
    assert page.js("return document.getElementById('runs-shown').textContent") == "2 of 4 runs"
    loss = chart("loss")
    assert loss["shown"] == ["lr 0.1", "lr 0.2"] and loss["legend"] == "lr 0.1lr 0.2"
    assert loss["top"] < 4  # Fits the runs shown (2 at most), not the sweep's 4.
    w = chart("w")
    runs = {re.sub(r" (mean|min|max|hi|lo)$", "", label) for label in w["shown"]}
    assert w["bands"] == 2 and runs == {"lr 0.1", "lr 0.2"}
    assert chart("eval/acc")["shown"] == ["lr 0.1 · eval", "lr 0.2 · eval"]
    loss_card = "#" + chart_group("loss")
    page.hover(loss_card + " .plot", 0.5)
    tip = page.wait(
        f"var t = document.querySelector('{loss_card} .tip');"
        "return t && t.offsetParent && t.textContent"
    )
    assert "lr 0.1" in tip and "lr 0.2" in tip and "lr 0.3" not in tip, tip
    # The hparams view's "last loss by lr": a point a run (lr spans 0.1..0.4: a linear axis),
    # filtered as the curves are; hovered, its tooltip names lr and the runs there.
    sweep = page.js(
        "var p = window.xdlReport.plots.filter(p => p.where.group === 'sweep')[0];"
        "return {title: p.spec.title, x: p.plot.data[0], log: p.plot.scales.x.distr,"
        " shown: p.plot.series.slice(1).filter(s => s.show).map(s => s.label)};"
    )
    assert sweep["title"] == "last loss by lr" and sweep["x"] == [0.1, 0.2, 0.3, 0.4]
    assert sweep["log"] == 1 and sweep["shown"] == ["lr 0.1", "lr 0.2"]
    at = page.js(
        "var u = window.xdlReport.plots.filter(p => p.where.group === 'sweep')[0].plot;"
        "return u.valToPos(0.1, 'x') / u.over.clientWidth;"
    )
    page.hover("#sweep-charts .u-over", at)
    # (The page scrolls under the pointer first: the tooltip may name another lr a moment.)
    tip = page.wait(
        "var t = document.querySelector('#sweep-charts .tip');"
        "return t && t.offsetParent && t.textContent.indexOf('lr 0.1') === 0 && t.textContent"
    )
    assert tip == "lr 0.1lr 0.1: 0.05", tip  # The title, then the one run at lr 0.1.
    page.type("#run-filter", "lr 0.(")  # No regular expression: matched as typed.
    page.wait("return document.body.getAttribute('data-shown-runs') === '0'")
    assert chart("loss")["shown"] == []
    page.type("#run-filter", "")
    page.wait("return document.body.getAttribute('data-shown-runs') === '4'")
    assert chart("loss")["shown"] == every["shown"]
    assert page.js("return document.getElementById('runs-shown').textContent") == ""
    # The Runs table ranks the sweep by its last loss (a click: largest first, blanks last).
    page.js(
        "Array.from(document.querySelectorAll('#runs-table thead th'))"
        ".find(h => h.textContent === 'last loss').id = 'last-loss'"
    )
    page.click("#last-loss")
    order = page.js(
        "return Array.from(document.querySelectorAll('#runs-table tbody tr'))"
        ".map(r => r.cells[0].querySelector('b').textContent)"
    )
    assert order[:4] == ["lr 0.4", "lr 0.3", "lr 0.2", "lr 0.1"], order
    page.check()
    one = str(tmp_path / "one.html")
    report.write_report(os.path.join(out, "train.trace.0.1"), one)
    page.open(one)
    assert page.js("return document.getElementById('run-filter-row').hidden") is True
