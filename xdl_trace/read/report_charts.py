"""The report's chart model: the curves of scanned runs (``analysis.RunScan``) as chart specs,
plain JSON-ready dicts that the HTML page (report.js, with uPlot) and the PNG writer both draw.

A spec: title, ylabel, xlabel, log, note, x (the union of the series' gsteps), series (label,
color, width, dash, tip, legend, values: None where a series has no value, gaps: the indices of
x where its value is not finite, drawn as a break in the line) and bands (fills between two
series).
"""

import json
import math
import weakref

import numpy as np

from . import analysis, compare, gpu_steps
from .analysis import COUNT, INF, L2, MAX, MEAN, MIN, NAN, STD

__all__ = [
    "Chart",
    "step_charts",
    "gpu_charts",
    "key_charts",
    "mark_evaluations",
    "once_text",
    "rgba",
    "divergence_charts",
]

# Runs whose distributions a page draws, at most (the first; build_report scans the others
# without histograms): a sweep of 10 runs x 300 keys drew 3,000 distribution charts of its
# 3,601 (29 MB, 1.2 GB to build).
DISTRIBUTION_RUNS = 4

# TensorBoard's distribution view: percentiles at these fractions, drawn as nested bands.
DISTRIBUTION_QUANTILES = (0.0, 0.0668, 0.1587, 0.3085, 0.5, 0.6915, 0.8413, 0.9332, 1.0)

# Matplotlib's tab10, then tab20's light shade of each: a sweep's 11th to 20th runs get colours
# of their own before any repeats.
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
    "#aec7e8",
    "#ff9896",
    "#98df8a",
    "#ffbb78",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#9edae5",
    "#c7c7c7",
    "#dbdb8d",
)


def rgba(color, alpha):
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


class Chart:
    """Builds one chart spec: series over the union of their gsteps (None where a series has no
    point), bands between pairs of series."""

    def __init__(self, title, ylabel="", log=False, xlabel="gstep", note=""):
        self.spec = {"title": title, "ylabel": ylabel, "xlabel": xlabel, "log": log, "note": note}
        self.parts = []  # (gsteps, values, style)
        self.bands = []  # (index of upper series, index of lower series, fill)

    def line(self, gsteps, values, label, color, width=1.5, dash=None, tip=True, **more):
        """more: legend (True/False: in the legend or not, whatever the default rule), draw
        (False: only in the tooltip)."""
        style = {"label": label, "color": color, "width": width, "dash": dash, "tip": tip}
        self.parts.append(
            (np.asarray(gsteps), np.asarray(values, dtype=np.float64), dict(style, **more))
        )
        return len(self.parts) - 1

    def band(self, gsteps, low, high, label, color, alpha=0.18, **more):
        hi = self.line(gsteps, high, label + " hi", rgba(color, 0), width=0, tip=False, **more)
        lo = self.line(gsteps, low, label + " lo", rgba(color, 0), width=0, tip=False, **more)
        self.bands.append((hi, lo, rgba(color, alpha)))

    def empty(self):
        return not any(np.isfinite(v).any() for _, v, _ in self.parts)

    def build(self):
        x = np.unique(np.concatenate([g for g, _, _ in self.parts])) if self.parts else []
        series = []
        for gsteps, values, style in self.parts:
            column = np.full(len(x), np.nan)
            where = np.searchsorted(x, gsteps)
            column[where] = values
            if self.spec["log"]:
                column[column <= 0] = np.nan
            # A point the series has whose value is not finite (a NaN/Inf record, a bucket of
            # them): a gap, which the page draws as a break in the line; elsewhere None is a
            # gstep the series has no point at, which the line spans.
            gaps = where[~np.isfinite(np.asarray(values, dtype=np.float64))]
            series.append(dict(style, values=_compact(column), gaps=[int(i) for i in gaps]))
        # x counts gsteps, or (a sweep's chart: "xvalues") holds a hyperparameter's values.
        whole = not self.spec.get("xvalues")
        spec = dict(self.spec, x=[int(v) if whole else float(v) for v in x], series=series)
        spec["bands"] = [{"hi": hi, "lo": lo, "fill": fill} for hi, lo, fill in self.bands]
        return spec


def _compact(values):
    """Floats rounded to 5 significant digits (keeps the HTML small); None for NaN/inf."""
    return [float(f"{v:.5g}") if math.isfinite(v) else None for v in values.tolist()]


def _wants_log(*arrays):
    values = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])
    values = values[np.isfinite(values) & (values > 0)]
    return bool(values.size > 1 and values.max() > 1e3 * values.min())


def _wants_log_of_positive(curves):
    """A log axis for curves of values spanning decades, none of them 0 or below."""
    return _wants_log(*curves) and all(
        bool(np.nanmin(v) > 0) for v in curves if np.isfinite(v).any()
    )


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


# Evaluations marked on the step-time chart at most; more (an evaluation every few steps) would
# hide the curve.
MAX_EVALUATION_MARKS = 100


def mark_evaluations(charts, evaluations):
    """Marks on the step-time chart (``step_charts``' first) the gsteps where the runs'
    evaluations (their eval scans) ran: their time is in the training step after it, a spike
    that the marks explain. Not past MAX_EVALUATION_MARKS."""
    gsteps = sorted(
        {int(g) for scan in evaluations for steps, _ in scan.step_calls.values() for g in steps}
    )
    if not charts or not gsteps or len(gsteps) > MAX_EVALUATION_MARKS:
        return
    spec = charts[0]
    spec["marks"] = gsteps
    spec["note"] += "; dashed: an evaluation ran after that gstep (its time is in the next step)"


def step_charts(scans):
    groups = _groups(scans, lambda s: s.step_time)
    if not groups:
        return []
    sources = {scan.step_source[rank] for scan, rank, _, _ in groups}
    if sources == {"host spans"}:
        note = (
            "per step the hook saw (traced or not), from its host spans: Step() to Step(); "
            "a rank's first step (from the tracer's start, setup included) is not shown"
        )
        unit = "ms / step"
    elif sources == {"timestamps"}:
        note = "per gstep, between consecutive records' timestamps"
        unit = "ms / gstep"
    else:
        note = (
            "host spans (per step) where a run has them, else record timestamps (per gstep); "
            "a rank's first step is not shown"
        )
        unit = "ms / step"
    # No throughput chart: steps / s is 1000 / (ms / step) of the same points, and per step it
    # swings between 0 and tens of thousands where steps are short (issue 32 #4); the smoothing
    # slider smooths the step time.
    time = Chart("step time", unit, note=note)
    times = []
    for scan, rank, label, color in groups:
        x, mean, low, high = scan.step_time[rank].view()
        if scan.step_time[rank].span > 1:
            time.band(x, low[:, 0], high[:, 0], label, color, alpha=0.12)
        time.line(x, mean[:, 0], label, color)
        times.append(mean[:, 0])
    time.spec["log"] = _wants_log(*times)
    return [] if time.empty() else [time.build()]


def _stack(chart, x, parts, colors):
    """Stacked bands: parts [(label, values)] drawn bottom up, each a band from the sum of the
    ones below to its own top, with its own values in the tooltip."""
    below = np.zeros(len(x))
    for (label, values), color in zip(parts, colors):
        top = below + values
        chart.band(x, below, top, label, color, alpha=0.55, legend=False)
        chart.line(x, values, label, color, width=1, legend=True, draw=False)  # Tooltip only.
        below = top


GPU_COLORS = {
    "compute": "#2ca02c",
    "memcpy": "#1f77b4",
    "memset": "#17becf",
    "idle": "#c7cdd8",
    "host wait after a sync": "#d62728",
    "host wait": "#ff7f0e",
    "kernel wait": "#bcbd22",
    "other": "#9467bd",
}


# A sweep's charts: its runs' last value of a key against a hyperparameter, when the page holds
# at least SWEEP_RUNS training runs (fewer: the Runs table says it).
SWEEP_RUNS = 3


def sweep_charts(rows, hparams, last):
    """TensorBoard's hparams scatter: per scalar key of `last` and metadata entry of `hparams`
    (columns of the Runs table), each run's last value (its evaluation's for an eval key)
    against the entry's value, a point a run in its colour. A numeric entry is the x axis, log
    where its values are positive and span a decade or more (a learning rate); any other (an
    optimizer's name, a flag) is a category, its values in sorted order at 0, 1, ... ("xnames").
    `rows`: the model's runs. A run whose last value is NaN or Inf has no point (the note counts
    them)."""
    trained = [r for r in rows if not r.get("evaluation")]
    if len(trained) < SWEEP_RUNS:
        return []
    color = {r["label"]: PALETTE[i % len(PALETTE)] for i, r in enumerate(trained)}

    def hparam(row, name):
        return hparams_of(row).get(name, _MISSING)

    charts = []
    for name in hparams:
        values = [v for v in (hparam(r, name) for r in trained) if v is not _MISSING]
        numeric = all(is_number(v) for v in values)
        names = None if numeric else sorted({metadata_text(v) for v in values})
        for key in last:
            chart = Chart(f"last {key} by {name}", key, xlabel=name)
            chart.spec["xvalues"] = True
            xs, bad = [], 0
            for r in rows:
                value = (r.get("last") or {}).get(key)
                x = hparam(r, name)
                if value is None or x is _MISSING:
                    continue
                if value["bad"]:
                    bad += 1
                    continue
                x = x if numeric else names.index(metadata_text(x))
                of = r.get("of_label", r["label"])
                chart.line(
                    [x],
                    [value["value"]],
                    r["label"],
                    color.get(of, PALETTE[0]),
                    width=0,
                    points=True,
                    legend=False,
                )
                xs.append(x)
            if len(set(xs)) < 2:
                continue
            chart.spec["xlog"] = numeric and min(xs) > 0 and max(xs) >= 10 * min(xs)
            if names is not None:
                chart.spec["xnames"] = names
            points = [p[1][0] for p in chart.parts]
            chart.spec["log"] = _wants_log_of_positive([np.asarray(points)])
            chart.spec["note"] = "a run a point, at its last record; hover: the runs" + (
                f"; {bad} run(s) ending in NaN/Inf have none" if bad else ""
            )
            charts.append(chart.build())
    return sorted(charts, key=lambda c: last.index(c["ylabel"]))  # A key's charts together.


_MISSING = object()  # A run without the metadata entry.


def hparams_of(row):
    """The metadata a Runs table row's hyperparameters come from: its run's; an evaluation's,
    the run it evaluates ("of_metadata": its own hook has none)."""
    return row.get("metadata") or row.get("of_metadata") or {}


def is_number(value):
    """Whether a metadata value is a number (a bool, JSON's true/false, is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metadata_text(value):
    """A metadata value in words, as labels and the Runs table write it: a string as it is,
    else its JSON ("0.1", "true", "[64, 32]")."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def gpu_charts(scans):
    """The GPU's time per step, on the gstep axis of the other charts: busy %, the time by kind
    (stacked, ms / step) and the idle time by cause (stacked); per run and rank."""
    fields = {f: i for i, f in enumerate(gpu_steps.STEP_FIELDS)}
    groups = _groups(scans, lambda s: set(s.gpu["steps"]) if s.gpu else set())
    memory = _memory_chart(scans)
    if not groups:
        return [memory.build()] if memory is not None else []
    busy = Chart(
        "GPU busy",
        "% of the step",
        note="kernels, copies and memsets (their union) over the step's window",
    )
    charts = [busy]
    for scan, rank, label, color in groups:
        gsteps, rows = scan.gpu["steps"][rank]
        series = analysis.Series(len(fields), scan.capacity)
        series.add(gsteps, rows)
        x, mean, _, _ = series.view()
        with np.errstate(invalid="ignore", divide="ignore"):
            busy.line(x, 100.0 * mean[:, fields["busy"]] / mean[:, fields["window"]], label, color)
        suffix = f" · {label}" if label and len(groups) > 1 else ""
        kinds = Chart(
            "GPU time by kind" + suffix,
            "ms / step",
            note="overlaps count as compute, then memcpy, then memset; idle: none of them",
        )
        _stack(
            kinds,
            x,
            [(f, mean[:, fields[f]] / 1e6) for f in ("compute", "memcpy", "memset", "idle")],
            [GPU_COLORS[f] for f in ("compute", "memcpy", "memset", "idle")],
        )
        idle = Chart(
            "GPU idle by cause" + suffix,
            "ms / step",
            note="HTA's categories: host wait (the next work launched after the GPU went idle; "
            "after a sync: the host had waited in a blocking call), kernel wait (a gap under "
            "30 µs, work queued), other (queued work waiting on a dependency)",
        )
        column = {f: mean[:, fields[f]] / 1e6 for f in fields}
        causes = (
            ("host wait after a sync", column["idle_blocking"]),
            ("host wait", column["idle_host_wait"] - column["idle_blocking"]),
            ("kernel wait", column["idle_kernel_wait"]),
            ("other", column["idle_other"]),
        )
        _stack(idle, x, causes, [GPU_COLORS[name] for name, _ in causes])
        charts += [kinds, idle]
    if memory is not None:
        charts.append(memory)
    return [c.build() for c in charts if not c.empty()]


MEMORY_DASH = {"allocated_mib": None, "reserved_mib": [6, 3], "peak_mib": [2, 2]}


def _memory_chart(scans):
    """GPU memory per step (``xdl.trace_gpu_memory``'s keys): allocated, reserved and the peak
    since the previous traced step, MiB, per run and rank; None when no run traced them."""
    keys = {k: f"gpu_memory/{k}" for k in MEMORY_DASH}
    groups = _groups(scans, lambda s: {r for r in s.ranks if (keys["allocated_mib"], r) in s.stats})
    if not groups:
        return None
    chart = Chart(
        "GPU memory",
        "MiB",
        note="torch's allocator counters at each traced step (no sync): allocated (solid), "
        "reserved (dashed), peak since the previous traced step (dotted)",
    )
    for scan, rank, label, color in groups:
        for name, dash in MEMORY_DASH.items():
            series = scan.stats.get((keys[name], rank))
            if series is None:
                continue
            x, mean, _, _ = series.view()
            what = name.replace("_mib", "")
            chart.line(x, mean[:, analysis.MEAN], f"{label} {what}".strip(), color, dash=dash)
    return chart


def key_charts(scans, key):
    """Chart specs of one key: its values (or stats band), l2 norm, distribution, update ratio;
    for a "histogram" summary key, its distribution over steps (from its own bins)."""
    charts = []
    if any(getattr(s.schema.get(key), "kind", None) == "histogram" for s in scans):
        return _summary_histogram_charts(scans, key)
    if any(s.summary_values for s in scans):
        values = _summary_value_charts(scans, key)
        if values:
            return values
    # Looked up per rank, never by a walk over every (key, rank): linear in keys (issue 24 #2).
    groups = _groups(scans, lambda s: {r for r in s.ranks if (key, r) in s.stats})
    if not groups:
        return charts
    scalar = all(s.elements.get(key, 0) <= 1 for s, _, _, _ in groups)
    if scalar:
        chart = Chart("value", "value")
        values = []
        for scan, rank, label, color in groups:
            series = scan.stats[(key, rank)]
            x, mean, low, high = series.view()
            if series.span > 1:
                chart.band(x, low[:, MEAN], high[:, MEAN], label, color, alpha=0.15)
            chart.line(x, mean[:, MEAN], label, color)
            values.append(mean[:, MEAN])
        chart.spec["log"] = _wants_log_of_positive(values)
        return [chart.build()] + _ratio_charts(scans, key)
    values = Chart("mean ± std, min / max", "value", note="band: mean ± std; dashed: min and max")
    norms = Chart("l2 norm", "l2 norm")
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
    distributions = []
    for scan in scans:
        hist = scan.histograms.get(key)
        if hist is None or hist.used == 0:
            continue
        title = "distribution" + (f" · {scan.label}" if len(scans) > 1 else "")
        if len(scan.ranks) > 1:
            title += f" (rank {scan.ranks[0]})"
        color = colors.get((scan, scan.ranks[0]), PALETTE[0])
        bad = _nonfinite_gsteps(scan.stats.get((key, scan.ranks[0])))
        distributions.append(_distribution_chart(hist, title, key, color, bad))
    drawn_of = sum(1 for s in scans if s.ranks and (key, s.ranks[0]) in s.stats)
    if distributions and drawn_of > max(len(distributions), DISTRIBUTION_RUNS - 1):
        distributions[-1]["note"] += (
            f"; the first {len(distributions)} of {drawn_of} runs' distributions (a page of one "
            "run, --run ID, draws its own)"
        )
    _share_y(distributions)
    charts += distributions
    charts += _ratio_charts(scans, key)
    return charts


def _nonfinite_gsteps(series):
    """The gsteps of a stats Series' buckets where some record held NaN or Inf."""
    if series is None:
        return np.zeros(0, np.int64)
    x, mean, _, _ = series.view()
    return x[(np.nan_to_num(mean[:, NAN]) > 0) | (np.nan_to_num(mean[:, INF]) > 0)]


def _share_y(specs):
    """One y range for the charts of one quantity drawn per run (distributions): overlaid runs
    compare on the same axis (issue 32 #5)."""
    if len(specs) < 2:
        return
    values = [v for spec in specs for s in spec["series"] for v in s["values"] if v is not None]
    if values:
        for spec in specs:
            spec["yrange"] = [min(values), max(values)]


def _ratio_charts(scans, key):
    """The update ratio ||gradient|| / ||variable|| of a gradient key whose variable is traced."""
    variable = analysis.gradient_variable(key)
    groups = _groups(scans, lambda s: {r for r in s.ranks if (variable, r) in s.ratio})
    if variable is None or not groups:
        return []
    # Not the update ratio lr·||g|| / ||w|| (whose rule of thumb is ~1e-3): no learning rate
    # is known here, so it is named for what it is (issue 32 #4).
    ratio = Chart(
        "gradient norm / weight norm",
        "||g|| / ||w||",
        log=True,
        note=f"||{key}|| / ||{variable}|| per record; times the learning rate: the update ratio",
    )
    update = None
    for scan, rank, label, color in groups:
        x, mean, _, _ = scan.ratio[(variable, rank)].view()
        ratio.line(x, mean[:, 0], label, color)
        lr_key, lr = _learning_rate(scan, rank, x)
        if lr_key is None:
            continue
        if update is None:
            # Where the learning rate is traced: the update ratio itself (issue 32 #4).
            update = Chart(
                "update ratio",
                "lr · ||g|| / ||w||",
                log=True,
                note=f"{lr_key} × ||{key}|| / ||{variable}|| per record (the learning rate "
                "in force at the record's gstep); rule of thumb: ~1e-3",
            )
        update.line(x, lr * mean[:, 0], label, color)
    charts = [] if ratio.empty() else [ratio.build()]
    return charts + ([] if update is None or update.empty() else [update.build()])


# Keys read as the learning rate (a scalar, traced by a callback or as a value): the first of
# a run's keys named so, or ending in "/" and one of these names.
LEARNING_RATE_KEYS = ("lr", "learning_rate")
_LR_CANDIDATES = weakref.WeakKeyDictionary()  # RunScan -> its learning-rate keys.


def _learning_rate(scan, rank, x):
    """(key, its value at each gstep of `x`: the last point at or before it, NaN before the
    first) of the run's learning rate on `rank`; (None, None) when none is traced."""
    if scan not in _LR_CANDIDATES:  # Once per scan: a walk over its keys per gradient key
        # would be quadratic in keys (30,000 keys, issue 24 #2).
        _LR_CANDIDATES[scan] = [
            k
            for k in scan.keys
            if k.rsplit("/", 1)[-1] in LEARNING_RATE_KEYS and scan.elements.get(k, 0) <= 1
        ]
    for key in _LR_CANDIDATES[scan]:
        series = scan.stats.get((key, rank))
        if series is None or series.used == 0:
            continue
        lr_x, mean, _, _ = series.view()
        at = np.searchsorted(lr_x, x, side="right") - 1
        values = np.where(at >= 0, mean[np.clip(at, 0, None), MEAN], np.nan)
        return key, values
    return None, None


# Dashes that tell a summary's elements apart where colours tell runs and ranks apart.
_ELEMENT_DASHES = (None, [6, 3], [2, 3], [8, 3, 2, 3])


def _summary_value_charts(scans, key):
    """A user summary key of a few elements (``analysis.SUMMARY_VALUES_WIDTH``): one curve per
    element, named after the summary callable: "q[0]", "q[1]", ... Its stats would be of the
    summary's values taken together, which no summary means (the mean of three quantiles)."""
    groups = _groups(scans, lambda s: {r for r in s.ranks if (key, r) in s.summary_values})
    if not groups:
        return []
    descriptor = groups[0][0].schema[key].descriptor or {}
    function = (descriptor.get("summary_name") or "").rsplit(".", 1)[-1]
    if not function.isidentifier():  # A lambda's "<lambda>", a callable object's nothing.
        function = "summary"
    chart = Chart(
        f"values of {function}",
        "value",
        note=f"{function}'s output, one curve per element ({function}[i])",
    )
    single = len(groups) == 1
    values = []
    for scan, rank, label, color in groups:
        x, rows = scan.summary_values[(key, rank)]
        for i in range(rows.shape[1]):
            name = f"{function}[{i}]"
            if single:  # One run and rank: a colour per element.
                chart.line(x, rows[:, i], name, PALETTE[i % len(PALETTE)])
            else:  # A colour per run or rank, a dash per element.
                dash = _ELEMENT_DASHES[i % len(_ELEMENT_DASHES)]
                chart.line(x, rows[:, i], f"{label} {name}", color, dash=dash)
            values.append(rows[:, i])
    chart.spec["log"] = _wants_log_of_positive(values)
    return [chart.build()]


def _summary_histogram_charts(scans, key):
    """A "histogram" summary key as TensorBoard draws one: percentile bands over steps,
    one chart per run (first rank)."""
    charts = []
    for i, scan in enumerate(scans):
        found = scan.summary_histograms.get(key)
        if found is None:
            continue
        title = "distribution" + (f" · {scan.label}" if len(scans) > 1 else "")
        if len(scan.ranks) > 1:
            title += f" (rank {scan.ranks[0]})"
        x, q = found
        note = "from the traced histogram's bins: " + _DISTRIBUTION_NOTE
        charts.append(_distribution_spec(x, q, title, PALETTE[i % len(PALETTE)], note))
    return charts


_DISTRIBUTION_NOTE = "bands: min..max, 7..93, 16..84, 31..69 percentiles; median"


def _distribution_chart(hist, title, key, color, bad=()):
    """bad: gsteps where the key held NaN/Inf; the log buckets count finite values only, so a
    bucket of the distribution holding such a gstep is left empty (a gap, shaded), not drawn
    as a normal band (issue 32 #3)."""
    x, q = hist.percentiles(DISTRIBUTION_QUANTILES)
    if len(bad) and len(x):
        where = np.searchsorted(x, bad, side="right") - 1
        q[where[where >= 0]] = np.nan
    return _distribution_spec(x, q, title, color, _DISTRIBUTION_NOTE)


def _distribution_spec(x, q, title, color, note):
    chart = Chart(title, "value", note=note)
    n = len(DISTRIBUTION_QUANTILES)
    for i in range(n // 2):
        chart.band(x, q[:, i], q[:, n - 1 - i], f"p{i}", color, alpha=0.12 + 0.1 * i)
    chart.line(x, q[:, n // 2], "median", color, width=1.5)
    for i, label in ((0, "min"), (n - 1, "max")):
        chart.line(x, q[:, i], label, rgba(color, 0), width=0)  # Shown in the tooltip only.
    spec = chart.build()
    spec["kind"] = "distribution"
    return spec


# A trace_once value shown in full up to this many elements (a config vector), else its stats.
ONCE_VALUES = 16


def once_text(scans, key, trace_of=lambda scan: None):
    """A key traced once (or at a single step) as a line of text per run: its values when
    trace_of(scan) gives the run's Trace and they are few (a trace_once config), else its
    stats."""
    parts = []
    for scan in scans:
        for rank in scan.ranks:
            series = scan.stats.get((key, rank))
            if series is None or series.used == 0:
                continue
            x, mean, _, _ = series.view()
            row = mean[0]
            where = f"gstep {x[0]}" + (f", rank {rank}" if len(scan.ranks) > 1 else "")
            if len(scans) > 1:
                where = f"{scan.label}, {where}"
            trace = trace_of(scan) if row[COUNT] <= ONCE_VALUES else None
            if trace is not None:
                values = np.asarray(trace.stack(key, gsteps=[int(x[0])], rank=rank))
                if values.size:
                    shown = ", ".join(f"{v:.6g}" for v in values.reshape(-1).tolist())
                    parts.append(f"traced once ({where}): [{shown}]")
                    break
            if row[COUNT] <= 1:
                parts.append(f"traced once ({where}): {row[MEAN]:.6g}")
            else:
                parts.append(
                    f"traced once ({where}): {row[COUNT]:.0f} values, min {row[MIN]:.6g}, "
                    f"max {row[MAX]:.6g}, mean {row[MEAN]:.6g}, std {row[STD]:.6g}"
                )
            break
    return "; ".join(parts) if parts else "no values in the selected steps"


# The differing keys whose divergence the "where the runs differ" chart draws (the earliest).
DIVERGENCE_KEYS = 6


def divergence_charts(result, label, what):
    """How the first differing keys of a ``compare.diff`` result part ways over gsteps, at the
    first differing step, at each step where it passed twice the previous point's
    (``KeyDiff.growth``) and at the last; log y. Keys compared by values or summaries: the
    largest absolute difference. Keys compared by digests (``watch``'s default), where a digest
    says only that the tensors differ: how far apart the l2 norms their stats give are, relative
    to A's (``|‖b‖ - ‖a‖| / ‖a‖``, a lower bound of ``‖b - a‖ / ‖a‖``). A chart for each that has a
    key to draw: none for identical runs, or where only structure differs."""
    by_value = Chart(
        f"divergence · {label}",
        "max |a - b|",
        log=True,
        note=(
            "per key (the earliest to differ): the largest absolute difference at its first "
            "differing gstep, where it doubled, and at the last"
            + ("; rank against rank" if what == "ranks" else "")
        ),
    )
    by_norm = Chart(
        f"l2 change · {label}",
        "|‖b‖ − ‖a‖| / ‖a‖",
        log=True,
        note=(
            "per key compared by digests (the earliest to differ): how far B's l2 norm is from "
            "A's, relative, at its first differing gstep, where it doubled, and at the last; a "
            "lower bound of the relative distance ‖b − a‖ / ‖a‖"
            + ("; rank against rank" if what == "ranks" else "")
        ),
    )
    drawn = {by_value: 0, by_norm: 0}  # Keys drawn on each chart.
    for k in result.differing:
        chart, points = by_value, {}
        for p in [k.first, *k.growth, k.last]:
            if p is None:
                continue
            if p.get("basis") == "digests":
                chart = by_norm
                if compare.has_norms(p) and p["norm_a"] != 0:
                    points[p["gstep"]] = abs(p["norm_b"] - p["norm_a"]) / abs(p["norm_a"])
            elif p.get("max_abs") is not None:
                points[p["gstep"]] = p["max_abs"]
        finite = {g: v for g, v in points.items() if math.isfinite(v) and v > 0}
        if not finite or drawn[chart] == DIVERGENCE_KEYS:
            continue
        gsteps = sorted(points)
        name = k.key if what != "ranks" else f"{k.key} (rank {k.rank_b})"
        color = PALETTE[drawn[chart] % len(PALETTE)]
        chart.line(gsteps, [points[g] for g in gsteps], name, color, points=True)
        drawn[chart] += 1
    return [chart.build() for chart in (by_value, by_norm) if not chart.empty()]
