"""A report a user can trust on CPU runs: a NaN shows as a gap and opens the page, histogram
summaries are drawn as distributions, runs in one directory stay apart with their metadata, key
cards say what was traced."""

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace.read import report

NAN_AT = 150


def _train(out_dir, steps=200, nan_at=None, lr=0.05, metadata=None, seed=0):
    """A numpy regression with a ReLU layer: the loss (a callback), w and its gradient, the
    hidden activations as a histogram summary. nan_at: w becomes NaN there, so every later
    loss, gradient and activation is NaN (a diverged run)."""
    xdl.clear()
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
    w = np.full((4, 1), 0.1, np.float32)
    state = {"loss": np.float32(0), "hidden": np.zeros((64, 8), np.float32)}
    proj = rng.normal(size=(4, 8)).astype(np.float32)
    xdl.trace_variable("w", w)
    xdl.trace_gradient("w")
    xdl.trace_callback("loss", lambda: state["loss"])
    xdl.trace_tensor("hidden", lambda: state["hidden"], summary="histogram")
    xdl.trace_tensor("x", x, summary="stats")
    hidden = []
    config = {"output_dir": out_dir, "on_error": "raise", "fsync": False}
    with xdl.TraceHook(config, metadata=metadata) as hook:
        for step in range(steps):
            if nan_at is not None and step == nan_at:
                w[0, 0] = np.nan
            err = x @ w - y
            state["loss"] = np.float32((err**2).mean())
            state["hidden"] = np.maximum(x @ proj, 0) * (1 + step / steps)
            hidden.append(state["hidden"].copy())
            grad = (2 * x.T @ err / len(x)).astype(np.float32)
            xdl.send_gradient("w", grad.copy())
            hook.step(gstep=step)
            w -= lr * grad
    xdl.clear()
    return hidden


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("nan") / "run")
    hidden = _train(out, nan_at=NAN_AT)
    return out, hidden


def _card(model, key):
    return next(c for c in model["cards"] if c["key"] == key)


def test_a_nan_is_a_gap_in_every_norm_chart_and_opens_the_page(nan_run):
    out, _ = nan_run
    model = report.build_report(out)
    norm_charts = [
        (card["key"], chart)
        for card in model["cards"]
        for chart in card["charts"]
        if chart["title"] == "l2 norm"
    ]
    assert {key for key, _ in norm_charts} == {"w", "gradient/w", "x"}
    for key, chart in norm_charts:
        if key == "x":  # The input: finite throughout, no gap.
            assert not chart["series"][0]["gaps"]
            continue
        (series,) = chart["series"]
        at = chart["x"].index(NAN_AT)
        assert at in series["gaps"], key
        # Never a number after the NaN (l2 of an all-NaN row is 0 in the file: not drawn).
        assert all(v is None for v in series["values"][at:]), key
        assert all(v is not None for v in series["values"][:at]), key
    (loss,) = _card(model, "loss")["charts"]
    assert loss["x"].index(NAN_AT) in loss["series"][0]["gaps"]
    kinds = {a["kind"] for a in model["alerts"]}
    assert "vanishing gradient" not in kinds and "exploding gradient" not in kinds
    assert "NaN/Inf" in kinds
    (headline,) = model["headline"]
    assert headline["gstep"] == NAN_AT
    # w is NaN from gstep 150, and so are the loss and the gradient computed from it.
    assert headline["keys"][0] == "loss"  # Scalars first.
    assert set(headline["keys"]) == {"loss", "w", "gradient/w"}
    assert headline["text"].startswith(f"first non-finite at gstep {NAN_AT} in 3 keys (loss, ")
    page = report.render_html(model)
    assert page.index("first non-finite at gstep 150") < page.index("<h2 id=runs>Runs</h2>")


def test_histogram_summaries_are_drawn_as_distributions(nan_run, tmp_path):
    out = str(tmp_path / "run")
    hidden = _train(out, steps=60)
    model = report.build_report(out)
    card = _card(model, "hidden")
    (chart,) = card["charts"]
    assert chart["kind"] == "distribution" and chart["ylabel"] == "value"
    median = next(s for s in chart["series"] if s["label"] == "median")
    top = next(s for s in chart["series"] if s["label"] == "max")
    for step in (0, 30, 59):
        at = chart["x"].index(step)
        values = hidden[step]
        bin_width = values.max() / 30 * 1.01  # The summary's 30 bins over [min, max].
        assert median["values"][at] == pytest.approx(np.median(values), abs=bin_width)
        assert top["values"][at] == pytest.approx(values.max(), rel=1e-3)
    # Not the stats of the bucket encoding (edges and counts, in the thousands).
    assert max(v for v in median["values"] if v is not None) < 2 * max(h.max() for h in hidden)
    assert "· histogram (30 bins) ·" in card["meta"]


def test_two_runs_in_one_directory_are_drawn_apart_with_their_metadata(tmp_path):
    out = str(tmp_path / "runs")
    _train(out, steps=30, lr=0.05, metadata={"lr": 0.05, "model": "a"})
    _train(out, steps=20, lr=0.01, metadata={"lr": 0.01, "model": "b"})
    runs = xdl.runs(out)
    model = report.build_report(out, run="all")
    assert [r["id"] for r in model["runs"]] == [r.id for r in runs]
    assert [r["metadata"] for r in model["runs"]] == [
        {"lr": 0.05, "model": "a"},
        {"lr": 0.01, "model": "b"},
    ]
    assert [r["records"] for r in model["runs"]] == [30, 20]
    # Labelled by the metadata that differs (issue 32 #5), not by their ids.
    labels = [r["label"] for r in model["runs"]]
    assert labels == ["lr 0.05 · model a", "lr 0.01 · model b"]
    (loss,) = _card(model, "loss")["charts"]
    series = {s["label"]: s for s in loss["series"] if s["tip"]}
    assert set(series) == set(labels)
    first = [v for v in series[labels[0]]["values"] if v is not None]
    second = [v for v in series[labels[1]]["values"] if v is not None]
    assert len(first) == 30 and len(second) == 20
    assert first[:20] != second  # Different learning rates: different curves.
    page = report.render_html(model)
    assert page.count("<span class=mkey>lr</span>") == 2 and "0.01" in page


def test_key_cards_say_what_was_traced_scalars_first(nan_run):
    out, _ = nan_run
    model = report.build_report(out)
    keys = [c["key"] for c in model["cards"]]
    assert keys[0] == "loss"
    meta = {c["key"]: c["meta"] for c in model["cards"]}
    assert meta["loss"].startswith("scalar float32 · value · callback")
    assert meta["w"].startswith("float32 [4, 1] · value · variable")
    assert meta["x"].startswith("float32 [64, 4] · stats · tensor")
    # A callable's tensor is not known when the header is written.
    assert meta["hidden"].startswith("tensor (shape not in the header) · histogram (30 bins)")
    assert all(m.endswith("200 records") for m in meta.values())
