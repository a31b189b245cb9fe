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

from . import analysis, compare, gpu_steps, report_charts, trace_runs
from .alerts import agreement_alerts, find_alerts, headline
from .alerts import (  # noqa: F401  (re-exported: the thresholds, as before the split)
    EXPLODING_FACTOR,
    EXPLODING_NORM,
    VANISHING_FACTOR,
    VANISHING_NORM,
)
from .report_charts import DISTRIBUTION_QUANTILES, PALETTE  # noqa: F401  (re-exported)
from .report_html import render_html
from .report_png import render_pngs
from .selection import Selection

__all__ = ["build_report", "render_html", "render_pngs", "write_report"]


def _run_facts(scan, run):
    g = scan.gstep_range
    t = scan.time_range
    return {
        "label": scan.label,
        "id": run.id if run is not None else None,
        "metadata": run.metadata if run is not None else {},
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


def _gpu_sections(scans):
    """Per run with device work: its GPU time over the steps (``gpu_steps.summarize``), in ms
    and shares, with the kernel and host CUDA API tables and the launch statistics."""
    sections = []
    for scan in scans:
        gpu = scan.gpu
        if gpu is None:
            continue
        t = gpu["totals"]
        steps = sum(len(g) for g, _ in gpu["steps"].values())
        per_step = {f: (t[f] / steps if steps else None) for f in gpu_steps.STEP_FIELDS}
        sections.append(
            {
                "run": scan.label,
                "steps": steps,
                "busy": t["busy"] / t["window"] if t["window"] else None,
                "per_step": per_step,
                "kernels": gpu["kernels"],
                "kernel_names": gpu["kernel_names"],
                "api": gpu["api"],
                "api_names": gpu["api_names"],
                "launch": gpu["launch"],
                "events": gpu["events"],
                "dropped": gpu["dropped"],
            }
        )
    return sections


def _card_meta(schema, rows):
    """What a key's card says of it: the traced tensor (dtype and shape, of the input for a
    summary), the column kind and how many records: "float32 [64, 1] · histogram (30 bins) ·
    60 records"."""
    if schema is None:
        return f"{rows} records"
    info = schema.descriptor or {}
    kind = schema.kind or "value"
    if kind == "value":
        dtype, shape = schema.dtype, schema.shape
    else:
        dtype, shape = info.get("input_dtype"), info.get("input_shape")
    if shape is None:
        tensor = f"{dtype + ' ' if dtype else ''}tensor (shape not in the header)"
    elif len(shape) == 0:
        tensor = f"scalar {dtype}"
    else:
        tensor = f"{dtype} [{', '.join(map(str, shape))}]"
    if kind == "histogram":
        kind = f"histogram ({info.get('histogram_bins')} bins)"
    elif kind == "user_summary":
        kind = f"summary {info.get('summary_name') or ''}".rstrip()
    source = schema.source
    return " · ".join([tensor, kind] + ([source] if source else []) + [f"{rows} records"])


def _labels(paths):
    labels = [os.path.basename(os.path.normpath(os.fspath(p))) or os.fspath(p) for p in paths]
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            labels[i] = f"{label} ({i + 1})"
    return labels


def _expand_runs(paths, run, prefix, name):
    """[(path, label, Run or None)]: one entry per path, or with run="all" one per run of a
    path that holds several (each its own series, labelled with the start of its id)."""
    out = []
    for path, label in zip(paths, _labels(paths)):
        every = trace_runs.runs(path, prefix=prefix, name=name) if run == "all" else []
        if len(every) > 1:
            out += [(path, f"{label} · {r.id[:8]}", r) for r in every]
            continue
        if run == "all" or run is None:
            chosen = every[0] if every else _only_run(path, prefix, name)
        else:
            chosen = analysis.open_trace(path, prefix=prefix, name=name, run=run).run
        out.append((path, label, chosen))
    return out


def _differences(scans, runs, selection, prefix, name):
    """Where the ranks of each multi-rank run part ways (every rank against the lowest), and with
    several runs where each later run parts from the first (``compare.diff``, a second pass over
    the files): per comparison its headline, alerts and the diff as a dict."""
    out = []

    def add(a, b, what):
        run_a = runs[a].id if runs[a] is not None and runs[a].id else None
        run_b = None if b is None or runs[b] is None or not runs[b].id else runs[b].id
        result = compare.diff(
            scans[a].path,
            None if b is None else scans[b].path,
            keys=selection.keys,
            gsteps=selection.gsteps,
            ranks=selection.ranks,
            run=run_a,
            run_b=run_b,
            prefix=prefix,
            name=name,
        )
        label = scans[a].label if b is None else f"{scans[b].label} vs {scans[a].label}"
        headline_item, alerts = agreement_alerts(result, label, what)
        out.append({"headline": headline_item, "alerts": alerts, "diff": result.as_dict()})

    for i, scan in enumerate(scans):
        if len(scan.ranks) > 1:
            add(i, None, "ranks")
    for i in range(1, len(scans)):
        if scans[i].path != scans[0].path or runs[i] is not runs[0]:
            add(0, i, "runs")
    return out


def _only_run(path, prefix, name):
    every = trace_runs.runs(path, prefix=prefix, name=name)
    return every[0] if len(every) == 1 else None


def build_report(
    paths,
    keys=None,
    gsteps=None,
    ranks=None,
    prefix="train",
    name="trace",
    on_progress=None,
    run=None,
    selection=None,
):
    """Scans each run once and returns the report model (a JSON-ready dict). selection: a
    ``Selection`` (keys as glob patterns, as ``analysis.scan_run``), the same for every path;
    the keywords keys, gsteps, ranks and run stand for its fields. Its run: which run of a
    directory that holds several (as ``open_trace``), "all" for each of them."""
    selection = Selection.of(selection, keys=keys, gsteps=gsteps, ranks=ranks, run=run)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    scans, runs = [], []
    for p, label, chosen in _expand_runs(paths, selection.run, prefix, name):
        scans.append(
            analysis.scan_run(
                p,
                label=label,
                prefix=prefix,
                name=name,
                on_progress=on_progress,
                selection=selection.replace(
                    run=chosen.id if chosen is not None and chosen.id else selection.run
                ),
            )
        )
        runs.append(chosen)
    differences = _differences(scans, runs, selection, prefix, name)
    # Every key once, in the order the runs name them, with the first run that has it: dicts,
    # never a list searched per key (linear in keys, issue 24 #2).
    first_scan, in_scans = {}, {}
    for scan in scans:
        for k in scan.keys:
            first_scan.setdefault(k, scan)
            in_scans.setdefault(k, []).append(scan)
    key_order = list(first_scan)

    # Scalars (the loss, a learning rate: shape ()) first, then one-element tensors, then the
    # others, each group in file order.
    def group(key):
        schema = first_scan[key].schema.get(key)
        if schema is not None and (schema.kind or "value") == "value" and schema.shape == ():
            return 0
        return 1 if all(s.elements.get(key, 0) <= 1 for s in in_scans[key]) else 2

    key_order.sort(key=group)
    cards = []
    for key in key_order:
        scan = first_scan[key]
        rows = sum(s.rows.get(key, 0) for s in scans)
        meta = _card_meta(scan.schema.get(key), rows)
        if getattr(scan.schema.get(key), "kind", None) == "digest":  # A checksum: no curve.
            text = "a digest (an exact checksum of the tensor): compared by xdl-trace diff"
            cards.append({"key": key, "meta": meta, "charts": [], "text": text})
            continue
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
        "runs": [_run_facts(s, r) for s, r in zip(scans, runs)],
        "headline": [d["headline"] for d in differences] + headline(scans),
        "alerts": [a for d in differences for a in d["alerts"]] + find_alerts(scans),
        "differences": [d["diff"] for d in differences],
        "steps": report_charts.step_charts(scans),
        "gpu_charts": report_charts.gpu_charts(scans),
        "gpu": _gpu_sections(scans),
        "cards": cards,
    }


def write_report(paths, output, png_dir=None, **build_options):
    """Writes the HTML report of the runs at `paths` to `output` (and PNGs to `png_dir`).
    build_options: ``build_report``'s (selection or keys, gsteps, ranks, run; prefix, name,
    on_progress). Returns the model's summary: {"output", "charts", "alerts", "pngs"}."""
    model = build_report(paths, **build_options)
    page = render_html(model)
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    pngs = render_pngs(model, png_dir) if png_dir else []
    charts = (
        len(model["steps"])
        + len(model["gpu_charts"])
        + sum(len(c["charts"]) for c in model["cards"])
    )
    return {
        "output": output,
        "charts": charts,
        "alerts": model["alerts"],
        "pngs": pngs,
        "bytes": len(page.encode("utf-8")),
    }
