"""``xdl-trace report``: one self-contained HTML page (and optional PNGs) showing runs over steps.

    write_report(["/tmp/run_a", "/tmp/run_b"], "report.html", png_dir="charts")

One streaming pass per run (``analysis.scan_run``) gives downsampled curves, histograms, NaN/Inf
and step times; ``build_report`` turns them into the report model, a JSON-ready dict of run
facts, alerts (``alerts.py``, which documents the thresholds), chart specs (``report_charts.py``)
and device-time tables; ``render_html`` (``report_html.py``) fills the page template of
``report_assets/`` with it, the vendored uPlot (MIT) and a small script, into one HTML file that
needs no network; ``render_pngs`` (``report_png.py``) draws the same specs with matplotlib.
"""

import datetime
import os

from . import analysis, report_charts
from .alerts import find_alerts
from .alerts import (  # noqa: F401  (re-exported: the thresholds, as before the split)
    EXPLODING_FACTOR,
    EXPLODING_NORM,
    VANISHING_FACTOR,
    VANISHING_NORM,
)
from .report_charts import DISTRIBUTION_QUANTILES, PALETTE  # noqa: F401  (re-exported)
from .report_html import render_html
from .report_png import render_pngs

__all__ = ["build_report", "render_html", "render_pngs", "write_report"]


def _run_facts(scan):
    g = scan.gstep_range
    t = scan.time_range
    return {
        "label": scan.label,
        "path": scan.path,
        "ranks": scan.ranks,
        "files": scan.files,
        "bytes": scan.bytes,
        "records": scan.total_records,
        "gsteps": list(g) if g else None,
        "duration_s": (t[1] - t[0]) / 1000.0 if t else None,
        "start": (
            datetime.datetime.fromtimestamp(t[0] / 1000.0, datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC"
            )
            if t
            else None
        ),
        "dropped": scan.dropped,
        "closed_cleanly": scan.closed_cleanly,
        "keys": len(scan.keys),
    }


DEVICE_TOP = 15  # Rows of the device-time table per run.


def _device_tables(scans):
    """Per run with device events: the DEVICE_TOP (kind, name) pairs by total time."""
    tables = []
    for scan in scans:
        if not scan.device:
            continue
        total = sum(ns for _, ns in scan.device.values()) or 1
        rows = sorted(scan.device.items(), key=lambda item: -item[1][1])[:DEVICE_TOP]
        tables.append(
            {
                "run": scan.label,
                "kinds": len(scan.device),
                "dropped": scan.device_dropped,
                "rows": [
                    {
                        "kind": kind,
                        "name": name,
                        "events": events,
                        "total_ms": ns / 1e6,
                        "mean_us": ns / 1e3 / max(events, 1),
                        "share": ns / total,
                    }
                    for (kind, name), (events, ns) in rows
                ],
            }
        )
    return tables


def _labels(paths):
    labels = [os.path.basename(os.path.normpath(os.fspath(p))) or os.fspath(p) for p in paths]
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            labels[i] = f"{label} ({i + 1})"
    return labels


def build_report(
    paths,
    keys=None,
    gsteps=None,
    ranks=None,
    prefix="train",
    name="trace",
    on_progress=None,
    run=None,
):
    """Scans each run once and returns the report model (a JSON-ready dict). run: which run
    of a directory that holds several (as ``open_trace``), the same for every path."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    scans = [
        analysis.scan_run(
            p,
            label=label,
            keys=keys,
            gsteps=gsteps,
            ranks=ranks,
            prefix=prefix,
            name=name,
            on_progress=on_progress,
            run=run,
        )
        for p, label in zip(paths, _labels(paths))
    ]
    key_order = []
    for scan in scans:
        key_order += [k for k in scan.keys if k not in key_order]
    cards = []
    for key in key_order:
        scan = next(s for s in scans if key in s.keys)
        dtype, shape = scan.schema.get(key, ("?", ()))
        rows = sum(s.rows.get(key, 0) for s in scans)
        meta = f"{dtype} [{', '.join(map(str, shape))}] · {rows} records"
        if rows <= 1:  # trace_once, or a single traced step: a line of text, no curve.
            cards.append(
                {
                    "key": key,
                    "meta": meta,
                    "charts": [],
                    "text": report_charts.once_text(scans, key),
                }
            )
            continue
        charts = report_charts.key_charts(scans, key)
        if charts:
            cards.append({"key": key, "meta": meta, "charts": charts})
    return {
        "title": "xdl_trace report: " + ", ".join(s.label for s in scans),
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": [_run_facts(s) for s in scans],
        "alerts": find_alerts(scans),
        "steps": report_charts.step_charts(scans),
        "device": _device_tables(scans),
        "cards": cards,
    }


def write_report(
    paths,
    output,
    png_dir=None,
    keys=None,
    gsteps=None,
    ranks=None,
    prefix="train",
    name="trace",
    on_progress=None,
    run=None,
):
    """Writes the HTML report of the runs at `paths` to `output` (and PNGs to `png_dir`).
    Returns the model's summary: {"output", "charts", "alerts", "pngs"}."""
    model = build_report(
        paths,
        keys=keys,
        gsteps=gsteps,
        ranks=ranks,
        prefix=prefix,
        name=name,
        on_progress=on_progress,
        run=run,
    )
    page = render_html(model)
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    pngs = render_pngs(model, png_dir) if png_dir else []
    charts = len(model["steps"]) + sum(len(c["charts"]) for c in model["cards"])
    return {
        "output": output,
        "charts": charts,
        "alerts": model["alerts"],
        "pngs": pngs,
        "bytes": len(page.encode("utf-8")),
    }
