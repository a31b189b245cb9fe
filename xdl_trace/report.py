"""``xdl-trace report``: one self-contained HTML page (and optional PNGs) showing runs over steps.

    write_report(["/tmp/run_a", "/tmp/run_b"], "report.html", png_dir="charts")

One streaming pass per run (``analysis.scan_run``) gives downsampled curves, histograms, NaN/Inf
and step times; ``build_report`` turns them into a list of chart specs (plain dicts, JSON-ready);
``render_html`` embeds the specs, the vendored uPlot (MIT, ``report_assets/``) and a small script
into one HTML file that needs no network; ``render_pngs`` draws the same specs with matplotlib.

Alert thresholds (documented in docs/report.md):
  * NaN/Inf: any NaN or Inf element in a key (first record per key, from full tensors).
  * never changes: the key's stats (count, min, max, mean, std, l2) are the same in every record
    (at least 2 records).
  * exploding gradient: a gradient key's l2 norm exceeds EXPLODING_FACTOR x the median of the
    norms before it (at least 3 earlier points), or EXPLODING_NORM.
  * vanishing gradient: the median l2 norm over the last quarter of steps is below
    VANISHING_NORM, or below VANISHING_FACTOR x the median over the first quarter.
"""

import bisect
import datetime
import html
import json
import math
import os
import re

import numpy as np

from . import analysis
from .analysis import COUNT, L2, MAX, MEAN, MIN, STD
from .cli import command

__all__ = ["build_report", "render_html", "render_pngs", "write_report"]

EXPLODING_FACTOR = 1e3
EXPLODING_NORM = 1e6
VANISHING_NORM = 1e-7
VANISHING_FACTOR = 1e-4

# TensorBoard's distribution view: percentiles at these fractions, drawn as nested bands.
DISTRIBUTION_QUANTILES = (0.0, 0.0668, 0.1587, 0.3085, 0.5, 0.6915, 0.8413, 0.9332, 1.0)

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)

_ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_assets")


# --- from scans to chart specs ---------------------------------------------------------------


def _rgba(color, alpha):
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


class _Chart:
    """Builds one chart spec: series over the union of their gsteps (None where a series has no
    point), bands between pairs of series."""

    def __init__(self, title, ylabel="", log=False, xlabel="gstep", note=""):
        self.spec = {"title": title, "ylabel": ylabel, "xlabel": xlabel, "log": log, "note": note}
        self.parts = []  # (gsteps, values, style)
        self.bands = []  # (index of upper series, index of lower series, fill)

    def line(self, gsteps, values, label, color, width=1.5, dash=None, tip=True):
        self.parts.append(
            (
                np.asarray(gsteps),
                np.asarray(values, dtype=np.float64),
                {"label": label, "color": color, "width": width, "dash": dash, "tip": tip},
            )
        )
        return len(self.parts) - 1

    def band(self, gsteps, low, high, label, color, alpha=0.18):
        hi = self.line(gsteps, high, label + " hi", _rgba(color, 0), width=0, tip=False)
        lo = self.line(gsteps, low, label + " lo", _rgba(color, 0), width=0, tip=False)
        self.bands.append((hi, lo, _rgba(color, alpha)))

    def empty(self):
        return not any(np.isfinite(v).any() for _, v, _ in self.parts)

    def build(self):
        x = np.unique(np.concatenate([g for g, _, _ in self.parts])) if self.parts else []
        series = []
        for gsteps, values, style in self.parts:
            column = np.full(len(x), np.nan)
            column[np.searchsorted(x, gsteps)] = values
            if self.spec["log"]:
                column[column <= 0] = np.nan
            series.append(dict(style, values=_compact(column)))
        spec = dict(self.spec, x=[int(v) for v in x], series=series)
        spec["bands"] = [{"hi": hi, "lo": lo, "fill": fill} for hi, lo, fill in self.bands]
        return spec


def _compact(values):
    """Floats rounded to 5 significant digits (keeps the HTML small); None for NaN/inf."""
    return [float(f"{v:.5g}") if math.isfinite(v) else None for v in values.tolist()]


def _wants_log(*arrays):
    values = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])
    values = values[np.isfinite(values) & (values > 0)]
    return bool(values.size > 1 and values.max() > 1e3 * values.min())


def _groups(scans, per_rank):
    """[(scan, rank, label, color)] in a fixed order: runs, then ranks."""
    out = []
    multi_run = len(scans) > 1
    for scan in scans:
        for rank in scan.ranks:
            if rank not in per_rank(scan):
                continue
            parts = ([scan.label] if multi_run else []) + (
                [f"rank {rank}"] if len(scan.ranks) > 1 or not multi_run else []
            )
            out.append((scan, rank, " · ".join(parts)))
    return [(s, r, label, PALETTE[i % len(PALETTE)]) for i, (s, r, label) in enumerate(out)]


def _step_charts(scans):
    groups = _groups(scans, lambda s: s.step_time)
    if not groups:
        return []
    sources = {scan.step_source[rank] for scan, rank, _, _ in groups}
    if sources == {"host spans"}:
        note = (
            "per step the hook saw (traced or not), from its host spans (ns): Step() to Step(); "
            "a rank's first step (from the tracer's start, setup included) is not shown"
        )
        unit, rate_unit = "ms / step", "steps / s"
    elif sources == {"timestamps"}:
        note = "per gstep between consecutive records, from their timestamps (ms)"
        unit, rate_unit = "ms / gstep", "gsteps / s"
    else:
        note = (
            "host spans (per step) where a run has them, else record timestamps (per gstep); "
            "a rank's first step is not shown"
        )
        unit, rate_unit = "ms / step", "steps / s"
    time = _Chart("step time", unit, note=note)
    rate = _Chart("throughput", rate_unit, note=rate_unit.replace(" / s", " per second"))
    times, rates = [], []
    for scan, rank, label, color in groups:
        x, mean, low, high = scan.step_time[rank].view()
        if scan.step_time[rank].span > 1:
            time.band(x, low[:, 0], high[:, 0], label, color, alpha=0.12)
            rate.band(x, low[:, 1], high[:, 1], label, color, alpha=0.12)
        time.line(x, mean[:, 0], label, color)
        rate.line(x, mean[:, 1], label, color)
        times.append(mean[:, 0])
        rates.append(mean[:, 1])
    time.spec["log"] = _wants_log(*times)
    rate.spec["log"] = _wants_log(*rates)
    return [c.build() for c in (time, rate) if not c.empty()]


def _key_charts(scans, key):
    """Chart specs of one key: its values (or stats band), l2 norm, distribution, update ratio."""
    charts = []
    groups = _groups(scans, lambda s: {r for (k, r) in s.stats if k == key})
    if not groups:
        return charts
    scalar = all(s.elements.get(key, 0) <= 1 for s, _, _, _ in groups)
    if scalar:
        chart = _Chart("value", "value")
        values = []
        for scan, rank, label, color in groups:
            series = scan.stats[(key, rank)]
            x, mean, low, high = series.view()
            if series.span > 1:
                chart.band(x, low[:, MEAN], high[:, MEAN], label, color, alpha=0.15)
            chart.line(x, mean[:, MEAN], label, color)
            values.append(mean[:, MEAN])
        chart.spec["log"] = _wants_log(*values) and all(
            bool(np.nanmin(v) > 0) for v in values if np.isfinite(v).any()
        )
        return [chart.build()] + _ratio_charts(scans, key)
    values = _Chart("mean ± std, min / max", "value", note="band: mean ± std; dashed: min and max")
    norms = _Chart("l2 norm", "l2 norm")
    norm_values = []
    for scan, rank, label, color in groups:
        x, mean, low, high = scan.stats[(key, rank)].view()
        m, s = mean[:, MEAN], mean[:, STD]
        values.band(x, m - s, m + s, label, color)
        exact = scan.stats[(key, rank)].span == 1  # Else a bucket's envelope: low/high.
        for field, name, envelope in ((MIN, "min", low), (MAX, "max", high)):
            y = mean[:, field] if exact else envelope[:, field]
            values.line(x, y, f"{label} {name}", color, width=1, dash=[4, 3])
        values.line(x, m, label + " mean", color, width=2)
        norms.line(x, mean[:, L2], label, color)
        norm_values.append(mean[:, L2])
    norms.spec["log"] = _wants_log(*norm_values)
    charts += [values.build(), norms.build()]
    colors = {(s, r): color for s, r, _, color in groups}
    for scan in scans:
        hist = scan.histograms.get(key)
        if hist is None or hist.used == 0:
            continue
        title = "distribution" + (f" · {scan.label}" if len(scans) > 1 else "")
        if len(scan.ranks) > 1:
            title += f" (rank {scan.ranks[0]})"
        color = colors.get((scan, scan.ranks[0]), PALETTE[0])
        charts.append(_distribution_chart(hist, title, key, color))
    charts += _ratio_charts(scans, key)
    return charts


def _ratio_charts(scans, key):
    """The update ratio ||gradient|| / ||variable|| of a gradient key whose variable is traced."""
    variable = analysis.gradient_variable(key)
    groups = _groups(scans, lambda s: {r for (v, r) in s.ratio if v == variable})
    if variable is None or not groups:
        return []
    ratio = _Chart("update ratio", "ratio", log=True, note=f"||{key}|| / ||{variable}|| per record")
    for scan, rank, label, color in groups:
        x, mean, _, _ = scan.ratio[(variable, rank)].view()
        ratio.line(x, mean[:, 0], label, color)
    return [] if ratio.empty() else [ratio.build()]


def _distribution_chart(hist, title, key, color):
    x, q = hist.percentiles(DISTRIBUTION_QUANTILES)
    chart = _Chart(
        title, "value", note="bands: min..max, 7..93, 16..84, 31..69 percentiles; median"
    )
    n = len(DISTRIBUTION_QUANTILES)
    for i in range(n // 2):
        chart.band(x, q[:, i], q[:, n - 1 - i], f"p{i}", color, alpha=0.12 + 0.1 * i)
    chart.line(x, q[:, n // 2], "median", color, width=1.5)
    for i, label in ((0, "min"), (n - 1, "max")):
        chart.line(x, q[:, i], label, _rgba(color, 0), width=0)  # Shown in the tooltip only.
    spec = chart.build()
    spec["kind"] = "distribution"
    return spec


def _once_text(scans, key):
    for scan in scans:
        for rank in scan.ranks:
            series = scan.stats.get((key, rank))
            if series is None or series.used == 0:
                continue
            x, mean, _, _ = series.view()
            row = mean[0]
            where = f"gstep {x[0]}" + (f", rank {rank}" if len(scan.ranks) > 1 else "")
            if row[COUNT] <= 1:
                return f"traced once ({where}): {row[MEAN]:.6g}"
            return (
                f"traced once ({where}): {row[COUNT]:.0f} values, min {row[MIN]:.6g}, "
                f"max {row[MAX]:.6g}, mean {row[MEAN]:.6g}, std {row[STD]:.6g}"
            )
    return "no values in the selected steps"


def _alerts(scans):
    alerts = []
    for scan in scans:
        run = scan.label
        if scan.dropped:
            alerts.append(
                _alert(
                    "warn",
                    "dropped records",
                    run,
                    "",
                    None,
                    None,
                    f"{scan.dropped} record(s) dropped while tracing (overflow: drop)",
                )
            )
        for bad in sorted(scan.first_bad.values(), key=lambda b: (b.gstep, b.rank, b.key)):
            alerts.append(
                _alert(
                    "error",
                    "NaN/Inf",
                    run,
                    bad.key,
                    bad.rank,
                    bad.gstep,
                    f"first at lstep {bad.lstep}: {bad.nan} NaN, {bad.inf} Inf; "
                    f"{bad.records} record(s) affected",
                )
            )
        for key in scan.keys:
            if scan.constant.get(key) and scan.rows.get(key, 0) >= 2:
                alerts.append(
                    _alert(
                        "warn",
                        "never changes",
                        run,
                        key,
                        None,
                        None,
                        f"the same value in all {scan.rows[key]} records",
                    )
                )
        for key in scan.keys:
            if analysis.gradient_variable(key) is None and "grad" not in key:
                continue
            for rank in scan.ranks:
                series = scan.stats.get((key, rank))
                if series is None or series.records < 8:
                    continue
                alert = _gradient_alert(series)
                if alert:
                    x, text = alert
                    alerts.append(_alert("warn", text[0], run, key, rank, x, text[1]))
    return alerts


def _gradient_alert(series):
    x, mean, _, high = series.view()
    norms, peaks = mean[:, L2], high[:, L2]
    finite = np.isfinite(norms)
    if finite.sum() < 4:
        return None
    earlier = []  # The finite norms before point i, sorted: their median as np.median's.
    for i in range(len(norms)):
        if i > 0 and finite[i - 1]:
            bisect.insort(earlier, float(norms[i - 1]))
        reference = _sorted_median(earlier) if len(earlier) >= 3 else None
        peak = float(peaks[i])
        if peak > EXPLODING_NORM or (
            reference is not None and reference > 0 and peak > EXPLODING_FACTOR * reference
        ):
            return int(x[i]), (
                "exploding gradient",
                f"l2 norm {peak:.3g}"
                + (f" vs median {reference:.3g} before it" if reference is not None else "")
                + f" (thresholds: > {EXPLODING_FACTOR:g} x the earlier median or "
                f"> {EXPLODING_NORM:g})",
            )
    quarter = max(len(norms) // 4, 1)
    first = norms[:quarter][np.isfinite(norms[:quarter])]
    last = norms[-quarter:][np.isfinite(norms[-quarter:])]
    if first.size and last.size:
        early, late = float(np.median(first)), float(np.median(last))
        if late < VANISHING_NORM or (early > 0 and late < VANISHING_FACTOR * early):
            return int(x[-quarter]), (
                "vanishing gradient",
                f"median l2 norm {late:.3g} over the last quarter vs {early:.3g} over the first "
                f"(thresholds: < {VANISHING_NORM:g} or < {VANISHING_FACTOR:g} x the first)",
            )
    return None


def _sorted_median(values):
    """np.median of a sorted list of floats: the middle value, or the mean of the two."""
    half = len(values) // 2
    if len(values) % 2:
        return values[half]
    return (values[half - 1] + values[half]) / 2.0


def _alert(severity, kind, run, key, rank, gstep, detail):
    return {
        "severity": severity,
        "kind": kind,
        "run": run,
        "key": key,
        "rank": rank,
        "gstep": gstep,
        "detail": detail,
    }


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
            cards.append({"key": key, "meta": meta, "charts": [], "text": _once_text(scans, key)})
            continue
        charts = _key_charts(scans, key)
        if charts:
            cards.append({"key": key, "meta": meta, "charts": charts})
    return {
        "title": "xdl_trace report: " + ", ".join(s.label for s in scans),
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": [_run_facts(s) for s in scans],
        "alerts": _alerts(scans),
        "steps": _step_charts(scans),
        "device": _device_tables(scans),
        "cards": cards,
    }


# --- HTML ------------------------------------------------------------------------------------


def _asset(name):
    with open(os.path.join(_ASSETS, name), encoding="utf-8") as f:
        return f.read()


def _human_bytes(n):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0


def _human_seconds(s):
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _ranks_text(ranks):
    """How many ranks and which: "1 (0)", "8 (0–7)", "3 (0, 2, 5)"."""
    if not ranks:
        return "0"
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        which = f"{ranks[0]}–{ranks[-1]}"
    else:
        which = ", ".join(map(str, ranks))
    return html.escape(f"{len(ranks)} ({which})")


def _runs_table(runs):
    rows = []
    for r in runs:
        g = r["gsteps"]
        state = "" if r["closed_cleanly"] else ' <span class="tag warn">not closed cleanly</span>'
        rows.append(
            "<tr>"
            f"<td><b>{html.escape(r['label'])}</b>{state}<div class=path>{html.escape(r['path'])}"
            "</div></td>"
            f"<td>{_ranks_text(r['ranks'])}</td>"
            f"<td>{'–' if g is None else f'{g[0]} … {g[1]}'}</td>"
            f"<td>{r['records']}</td>"
            f"<td{' class=bad' if r['dropped'] else ''}>{r['dropped']}</td>"
            f"<td>{_human_seconds(r['duration_s'])}</td>"
            f"<td>{_human_bytes(r['bytes'])} in {r['files']} file(s)</td>"
            f"<td>{r['keys']}</td>"
            "</tr>"
        )
    return (
        "<table class=facts><thead><tr><th>run</th><th>ranks</th><th>gsteps</th><th>records</th>"
        "<th>dropped</th><th>duration</th><th>size</th><th>keys</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _alerts_table(alerts, multi_run):
    if not alerts:
        return "<p class=ok>No alerts: no NaN/Inf, constant keys or gradient-norm outliers.</p>"
    rows = []
    for a in alerts:
        key = html.escape(a["key"] or "")
        link = f'<a href="#key-{_anchor(a["key"])}">{key}</a>' if a["key"] else ""
        rows.append(
            f"<tr class={a['severity']}><td><span class='tag {a['severity']}'>"
            f"{html.escape(a['kind'])}</span></td>"
            + (f"<td>{html.escape(a['run'])}</td>" if multi_run else "")
            + f"<td>{link}</td>"
            f"<td>{'' if a['rank'] is None else a['rank']}</td>"
            f"<td>{'' if a['gstep'] is None else a['gstep']}</td>"
            f"<td>{html.escape(a['detail'])}</td></tr>"
        )
    head = "<th>alert</th>" + ("<th>run</th>" if multi_run else "")
    head += "<th>key</th><th>rank</th><th>gstep</th><th>detail</th>"
    return (
        f"<table class=alerts><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _device_html(tables):
    if not tables:
        return ""
    out = ["<h2>Device time by kernel</h2>"]
    for t in tables:
        rows = "".join(
            f"<tr><td>{html.escape(r['kind'])}</td><td class=mono>{html.escape(r['name'])}</td>"
            f"<td>{r['events']}</td><td>{r['total_ms']:.3f}</td><td>{r['mean_us']:.1f}</td>"
            f"<td><span class=bar style='width:{100 * r['share']:.0f}px'></span>"
            f" {100 * r['share']:.1f}%</td></tr>"
            for r in t["rows"]
        )
        dropped = f"; {t['dropped']} events dropped while tracing" if t["dropped"] else ""
        out.append(
            f"<p class=caption>{html.escape(t['run'])}: top {len(t['rows'])} of {t['kinds']} "
            f"(kind, name) pairs by total time{dropped}</p>"
            "<table class=device><thead><tr><th>kind</th><th>name</th><th>events</th>"
            "<th>total ms</th><th>mean µs</th><th>share</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    return "".join(out)


def _anchor(key):
    return re.sub(r"[^A-Za-z0-9_-]", "_", key)


_CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 color:#1d2330;background:#f3f5f8}
header{background:#1d2330;color:#fff;padding:14px 28px;display:flex;align-items:baseline;gap:16px}
header h1{font-size:18px;margin:0;font-weight:600}
header .sub{color:#aab3c5;font-size:13px}
main{padding:12px 28px 40px;max-width:1600px;margin:0 auto}
h2{font-size:15px;margin:22px 0 8px;color:#3a4354;text-transform:uppercase;letter-spacing:.04em}
table{border-collapse:collapse;background:#fff;width:100%;border-radius:6px;overflow:hidden;
 box-shadow:0 1px 2px rgba(0,0,0,.08)}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e8ebf0;vertical-align:top}
th{background:#f8f9fb;font-weight:600;color:#56607a;font-size:12px}
.path{color:#7a8396;font-size:12px;word-break:break-all}
td.bad{color:#c0392b;font-weight:600}
.tag{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;font-weight:600;
 white-space:nowrap}
.tag.error{background:#fde2e0;color:#b3261e}.tag.warn{background:#fff1d6;color:#8a5a00}
.tag.info{background:#e3edfb;color:#1d4f91}
p.ok{background:#e5f5e9;color:#1e6b34;padding:8px 12px;border-radius:6px;margin:0}
.toolbar{display:flex;gap:12px;align-items:center;margin:6px 0 10px}
.toolbar input{padding:6px 10px;border:1px solid #c9cfda;border-radius:6px;width:280px;font:inherit}
.toolbar .hint{color:#7a8396;font-size:12px}
.card{background:#fff;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08);margin:0 0 12px;
 padding:10px 14px 6px}
.card h3{margin:0 0 4px;font-size:14px;font-family:ui-monospace,SFMono-Regular,Menlo,monospace}
.card h3 .meta{font-family:system-ui,sans-serif;font-weight:400;color:#7a8396;font-size:12px;
 margin-left:8px}
.card h3 .tag{margin-left:8px;font-family:system-ui,sans-serif}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:6px 14px}
.chart .ctitle{font-size:12px;color:#56607a;font-weight:600;margin:4px 0 0 4px}
.chart .note{font-size:11px;color:#8a93a6;margin:0 0 4px 4px;min-height:14px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:4px 0 8px;font-size:12px;color:#3a4354}
.legend i,.tip i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;
 vertical-align:-1px}
.tip{position:absolute;pointer-events:none;background:rgba(29,35,48,.92);color:#fff;font-size:12px;
 padding:5px 8px;border-radius:4px;white-space:nowrap;z-index:10;display:none}
.uplot{font-family:inherit}
.u-select{background:rgba(31,119,180,.12)}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;word-break:break-all}
.bar{display:inline-block;height:9px;background:#1f77b4;border-radius:2px;vertical-align:0}
p.caption{margin:0 0 6px;color:#56607a;font-size:12px}
table.device{margin-bottom:12px}
p.once{margin:2px 0 8px;color:#3a4354;font-size:13px}
footer{color:#8a93a6;font-size:12px;margin-top:24px}
"""

_JS = r"""
(function () {
  var D = JSON.parse(document.getElementById('xdl-report-data').textContent);
  function fmt(v) {
    if (v === null) return '';
    if (v == null || !isFinite(v)) return '–';
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return String(+v.toPrecision(4));
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
    });
  }
  function isDecade(v) {
    var e = Math.log10(Math.abs(v));
    return Math.abs(e - Math.round(e)) < 1e-9;
  }
  // On a log axis, ticks and grid lines at powers of ten only (when there are two or more).
  function decades(u, splits) {
    var n = splits.filter(function (v) { return v != null && isDecade(v); }).length;
    return n >= 2 ? splits.map(function (v) { return v != null && isDecade(v) ? v : null; }) : splits;
  }
  function tooltip(spec) {
    var tip;
    return {hooks: {
      init: function (u) {
        tip = document.createElement('div'); tip.className = 'tip'; u.over.appendChild(tip);
      },
      setCursor: function (u) {
        var i = u.cursor.idx;
        if (i == null) { tip.style.display = 'none'; return; }
        var h = '<b>gstep ' + u.data[0][i] + '</b>';
        spec.series.forEach(function (s, k) {
          var v = u.data[k + 1][i];
          if (!s.tip || v == null) return;
          h += '<div><i style="background:' + s.color + '"></i>' + esc(s.label) + ': ' + fmt(v) +
               '</div>';
        });
        tip.innerHTML = h; tip.style.display = 'block';
        var left = u.cursor.left, w = tip.offsetWidth;
        tip.style.left = (left + 14 + w > u.over.clientWidth ? left - w - 14 : left + 14) + 'px';
        tip.style.top = Math.max(0, u.cursor.top - 12) + 'px';
      }
    }};
  }
  function chart(spec, el) {
    var width = Math.max(260, el.clientWidth);
    var series = [{label: spec.xlabel}];
    spec.series.forEach(function (s) {
      series.push({label: s.label, stroke: s.color, width: s.width, dash: s.dash || undefined,
                   spanGaps: true, points: {show: false}});
    });
    // Axis titles: the quantity and its unit (spec.ylabel), and gstep.
    var labelFont = '11px system-ui, sans-serif';
    var yAxis = {size: 64, values: function (u, v) { return v.map(fmt); },
                 grid: {stroke: '#eef0f4'}, label: spec.ylabel || undefined, labelSize: 16,
                 labelFont: labelFont};
    if (spec.log) {
      yAxis.grid.filter = decades;
      yAxis.ticks = {filter: decades};
    }
    var opts = {
      width: width, height: 210, series: series, legend: {show: false},
      bands: spec.bands.map(function (b) { return {series: [b.hi + 1, b.lo + 1], fill: b.fill}; }),
      cursor: {sync: {key: 'gstep'}, drag: {x: true, y: false}, points: {size: 5}},
      scales: {x: {time: false}, y: spec.log ? {distr: 3} : {}},
      axes: [
        {size: 30, values: function (u, v) { return v.map(fmt); }, grid: {stroke: '#eef0f4'},
         label: spec.xlabel, labelSize: 16, labelFont: labelFont},
        yAxis
      ],
      plugins: [tooltip(spec)]
    };
    var data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
    return new uPlot(opts, data, el);
  }
  function legend(spec) {
    var seen = {}, out = '';
    spec.series.forEach(function (s) {
      if (!s.tip || !s.width) return;
      var name = s.label.replace(/ (mean|min|max)$/, '');
      if (seen[name]) return;
      seen[name] = 1;
      out += '<span><i style="background:' + s.color + '"></i>' + esc(name) + '</span>';
    });
    return out;
  }
  var plots = [];
  function mount(spec, container) {
    var box = document.createElement('div'); box.className = 'chart';
    box.innerHTML = '<div class="ctitle">' + esc(spec.title) + (spec.log ? ' (log scale)' : '') +
      '</div><div class="note">' + esc(spec.note || '') + '</div><div class="plot"></div>' +
      '<div class="legend">' + legend(spec) + '</div>';
    container.appendChild(box);
    plots.push(chart(spec, box.querySelector('.plot')));
  }
  var steps = document.getElementById('steps');
  D.steps.forEach(function (spec) { mount(spec, steps); });
  // The first cards are drawn at once; the others when they come near the viewport, so a
  // report of hundreds of keys opens quickly.
  var EAGER = 24;
  var lazy = 'IntersectionObserver' in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      lazy.unobserve(e.target);
      draw(+e.target.getAttribute('data-n'));
    });
  }, {rootMargin: '800px'}) : null;
  function draw(n) {
    var box = document.getElementById('card-' + n).querySelector('.charts');
    D.cards[n].charts.forEach(function (spec) { mount(spec, box); });
    document.body.setAttribute('data-charts', String(plots.length));
  }
  D.cards.forEach(function (card, n) {
    var el = document.getElementById('card-' + n);
    el.setAttribute('data-n', String(n));
    if (n < EAGER || !lazy) draw(n); else lazy.observe(el);
  });
  var filter = document.getElementById('filter');
  if (filter) {
    filter.addEventListener('input', function () {
      var q = filter.value.toLowerCase();
      document.querySelectorAll('.card').forEach(function (el) {
        el.style.display = el.getAttribute('data-key').toLowerCase().indexOf(q) >= 0 ? '' : 'none';
      });
    });
  }
  document.body.setAttribute('data-charts', String(plots.length));
})();
"""


def render_html(model):
    """The report page as one string: styles, uPlot and the data inlined, no external URL."""
    data = json.dumps(model, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    multi_run = len(model["runs"]) > 1
    bad_keys = {a["key"] for a in model["alerts"] if a["severity"] == "error"}
    cards = []
    for n, card in enumerate(model["cards"]):
        tag = " <span class='tag error'>NaN/Inf</span>" if card["key"] in bad_keys else ""
        cards.append(
            f"<div class=card id='card-{n}' data-key='{html.escape(card['key'], quote=True)}'>"
            f"<h3 id='key-{_anchor(card['key'])}'>{html.escape(card['key'])}"
            f"<span class=meta>{html.escape(card['meta'])}</span>{tag}</h3>"
            + (f"<p class=once>{html.escape(card['text'])}</p>" if card.get("text") else "")
            + "<div class=charts></div></div>"
        )
    n_alerts = len(model["alerts"])
    steps = (
        "<h2>Steps</h2><div class='card'><div class=charts id=steps></div></div>"
        if model["steps"]
        else "<div id=steps></div>"
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>{html.escape(model['title'])}</title>"
        # Any script error shows in the title (the headless-browser test reads it).
        "<script>window.addEventListener('error',function(e){document.title='ERROR: '+e.message;});"
        "</script>"
        f"<style>{_asset('uPlot.min.css')}</style><style>{_CSS}</style></head><body>"
        f"<header><h1>xdl_trace report</h1><div class=sub>"
        f"{html.escape(', '.join(r['label'] for r in model['runs']))} · generated "
        f"{html.escape(model['generated'])}</div></header><main>"
        f"<h2>Runs</h2>{_runs_table(model['runs'])}"
        f"<h2>Alerts ({n_alerts})</h2>{_alerts_table(model['alerts'], multi_run)}"
        f"{steps}{_device_html(model['device'])}"
        f"<h2>Keys ({len(model['cards'])})</h2>"
        "<div class=toolbar><input id=filter placeholder='filter keys…' autocomplete=off>"
        "<span class=hint>hover: values at a gstep · drag: zoom · double-click: reset</span></div>"
        + "".join(cards)
        + "<footer>Written by xdl-trace report. Charts: uPlot (MIT licence, "
        "© Leon Sorokin), inlined.</footer></main>"
        f"<script type='application/json' id='xdl-report-data'>{data}</script>"
        f"<script>{_asset('uPlot.iife.min.js')}</script><script>{_JS}</script>"
        "</body></html>"
    )


# --- PNG -------------------------------------------------------------------------------------


def _slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60] or "chart"


def _css_color(color):
    """A uPlot colour ('#rrggbb' or 'rgba(r,g,b,a)') as a matplotlib RGBA tuple."""
    if color.startswith("#"):
        return tuple(int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)) + (1.0,)
    r, g, b, a = (float(v) for v in color[color.index("(") + 1 : -1].split(","))
    return (r / 255, g / 255, b / 255, a)


def render_pngs(model, directory, dpi=100):
    """Draws every chart of the model with matplotlib (Agg) into `directory`; returns the paths."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    charts = [("steps", spec) for spec in model["steps"]]
    charts += [(card["key"], spec) for card in model["cards"] for spec in card["charts"]]
    paths = []
    for n, (key, spec) in enumerate(charts):
        fig, ax = plt.subplots(figsize=(8, 3.2), dpi=dpi)
        x = np.asarray(spec["x"], dtype=np.float64)

        def column(i):
            return np.array([np.nan if v is None else v for v in spec["series"][i]["values"]])

        for band in spec["bands"]:
            hi, lo = column(band["hi"]), column(band["lo"])
            ok = np.isfinite(hi) & np.isfinite(lo)
            ax.fill_between(x[ok], lo[ok], hi[ok], color=_css_color(band["fill"]), linewidth=0)
        labelled = set()
        for s in spec["series"]:
            if not s["width"]:
                continue
            y = column(spec["series"].index(s))
            ok = np.isfinite(y)
            name = re.sub(r" (mean|min|max)$", "", s["label"])
            ax.plot(
                x[ok],
                y[ok],
                color=_css_color(s["color"]),
                linewidth=s["width"],
                linestyle=(0, tuple(s["dash"])) if s["dash"] else "-",
                label=None if name in labelled else name,
            )
            labelled.add(name)
        if spec["log"]:
            ax.set_yscale("log")
        title = spec["title"] if key == "steps" else f"{key}: {spec['title']}"
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel(spec["xlabel"], fontsize=9)
        ax.set_ylabel(spec["ylabel"], fontsize=9)
        ax.grid(True, color="#e6e9ef", linewidth=0.8)
        ax.tick_params(labelsize=8)
        if len(labelled) > 1:
            ax.legend(fontsize=8, frameon=False, ncol=min(len(labelled), 4))
        fig.tight_layout()
        path = os.path.join(directory, f"{n:03d}_{_slug(title)}.png")
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


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


# --- the `xdl-trace report` subcommand (registered with xdl_trace.cli) -----------------------


def _configure(parser):
    parser.add_argument("more_runs", nargs="*", metavar="RUN", help="more runs to overlay")
    parser.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    parser.add_argument("--png", metavar="DIR", help="also write one PNG per chart into DIR")
    parser.add_argument("--keys", help="comma-separated key globs (default: all)")
    parser.add_argument("--gsteps", help="gstep range A:B, inclusive (A: or :B open-ended)")
    parser.add_argument("--ranks", help="comma-separated ranks (default: all)")


def _run(args):
    from .cli import Progress, _parse_gsteps
    from .reader import open_trace

    runs = [args.path] + list(args.more_runs)
    total = sum(
        open_trace(r, prefix=args.prefix, name=args.name, run=args.run).nbytes for r in runs
    )
    ranks = [int(r) for r in args.ranks.split(",") if r] if args.ranks else None
    with Progress(total, "report") as progress:
        result = write_report(
            runs,
            args.output,
            png_dir=args.png,
            keys=args.keys,
            gsteps=_parse_gsteps(args.gsteps),
            ranks=ranks,
            prefix=args.prefix,
            name=args.name,
            on_progress=progress,
            run=args.run,
        )
    errors = sum(a["severity"] == "error" for a in result["alerts"])
    print(
        f"wrote {args.output}: {result['charts']} charts, {len(result['alerts'])} alert(s)"
        + (f" ({errors} NaN/Inf)" if errors else "")
        + f", {_human_bytes(result['bytes'])}"
    )
    if result["pngs"]:
        print(f"wrote {len(result['pngs'])} PNG(s) to {args.png}")
    return 0


# The `xdl-trace` subcommand (cli.py imports this module when it starts).
command(
    "report",
    "write an HTML report (curves, distributions, alerts) of one or more runs",
    _configure,
)(_run)
