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
import json
import os

from ..errors import TraceError
from . import analysis, compare, gpu_advice, gpu_steps, report_charts, trace_runs
from .alerts import agreement_alerts, comparison_failed, find_alerts, headline, not_compared
from .alerts import FOLD_AFTER, SEVERITY_ORDER, folded_across_runs, run_not_read
from .alerts import EXPLODING_FACTOR, EXPLODING_NORM, VANISHING_FACTOR, VANISHING_NORM
from .report_charts import DISTRIBUTION_QUANTILES, PALETTE  # noqa: F401  (re-exported)
from .report_charts import DISTRIBUTION_RUNS
from .report_html import render_html
from .report_png import render_pngs
from .selection import Selection

__all__ = ["build_report", "gpu_section", "model_of", "render_html", "render_pngs", "write_report"]


def _run_facts(scan, run, selection, writing=None):
    """The Runs table's row. Its records: the run's own count (as ``xdl-trace info`` says,
    device-only records included) when a static report reads every step and rank of a run
    written in one attempt; else the records read (the selection's, or under serve what the
    files held so far). writing: under serve, whether the run's writer is alive (True: still
    being written; False: gone, closed or not); None in a static report."""
    g = scan.gstep_range
    whole = selection is not None and selection.gsteps is None and selection.ranks is None
    # A restarted run's Meta counts hold the superseded records too: the count read is its own.
    restarted = run is not None and run.attempts > 1
    records = (
        run.records
        if whole and not restarted and run is not None and run.records is not None
        else None
    )
    t = scan.time_range
    return {
        "label": scan.label,
        "evaluation": scan.evaluates is not None,  # An evaluation's row, under its run's.
        "id": run.id if run is not None else None,
        "metadata": run.metadata if run is not None else {},
        "path": scan.path,
        "ranks": scan.ranks,
        "files": scan.files,
        "bytes": scan.bytes,
        "records": scan.total_records if records is None else records,
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
        "restarts": (
            run.restarts()
            + (
                ": every attempt's records read, resumed gsteps twice"
                if selection is not None and selection.attempts == "all"
                else ": each gstep read from the attempt that wrote it last"
            )
            if restarted
            else None
        ),
        "writing": writing,
        "keys": len(scan.keys),
        "last": _last_values(scan),
    }


def _runs_facts(scans, runs, selection, writing):
    """The Runs table's rows (``_run_facts``); an evaluation's carries the metadata and label of
    the run it evaluates as "of_metadata" and "of_label" (its own hook has none), so a sweep's
    hyperparameter columns fill its row too and its points take that run's colour."""
    facts = [
        _run_facts(s, r, selection, None if writing is None else writing[i])
        for i, (s, r) in enumerate(zip(scans, runs))
    ]
    row_of = {id(scan): row for scan, row in zip(scans, facts)}
    for scan, row in zip(scans, facts):
        if scan.evaluates is not None and id(scan.evaluates) in row_of:
            row["of_metadata"] = row_of[id(scan.evaluates)]["metadata"]
            row["of_label"] = row_of[id(scan.evaluates)]["label"]
    return facts


# Columns the Runs table adds for a sweep, at most each: the metadata entries that differ
# between its runs (TensorBoard's hparams) and the last values of scalar keys (its metrics).
HPARAM_COLUMNS = 6
LAST_VALUE_COLUMNS = 4
SWEEP_CHART_HPARAMS = 3  # The first entries of those that get a chart (per last value).


def _sweep(rows):
    """The page's sweep view of its runs (`rows`: the Runs table's): {"hparams": metadata keys
    whose values differ between the training runs, "last": scalar keys with a last value in
    some run (the first HPARAM_COLUMNS and LAST_VALUE_COLUMNS, in page order), "charts": each
    last value against each of the first SWEEP_CHART_HPARAMS hparams
    (``report_charts.sweep_charts``)}."""
    trained = [r for r in rows if not r.get("evaluation")]
    hparams = []
    if len(trained) > 1:
        hparams = _metadata_differing([r.get("metadata") or {} for r in trained])
        hparams = hparams[:HPARAM_COLUMNS]
    last = list(dict.fromkeys(k for r in rows for k in r.get("last") or {}))[:LAST_VALUE_COLUMNS]
    charted = hparams[:SWEEP_CHART_HPARAMS]
    return {
        "hparams": hparams,
        "last": last,
        "charts": report_charts.sweep_charts(rows, charted, last),
    }


def _last_values(scan):
    """{key: {"gstep", "value", "bad"}} of the run's scalar value keys (the loss, an eval
    accuracy: shape (), traced as values), each its last record's value on its lowest rank
    (``RunScan.last_values``): what a sweep's runs are compared by, as W&B's run summary and
    TensorBoard's hparams metrics take a run's last value."""
    out = {}
    for key in scan.keys:
        schema = scan.schema.get(key)
        if schema is None or schema.shape != () or (schema.kind or "value") != "value":
            continue
        ranks = [r for r in scan.ranks if (key, r) in scan.last_values]
        if ranks:
            gstep, value, bad = scan.last_values[(key, min(ranks))]
            out[key] = {"gstep": gstep, "value": None if bad else value, "bad": bad}
    return out


def _gpu_sections(scans):
    """Per run with device work: ``gpu_section`` of its GPU time."""
    return [
        gpu_section(scan.label, scan.gpu, module_norms(scan))
        for scan in scans
        if scan.gpu is not None
    ]


def _gpu_headline(sections):
    """Per run with GPU advice, a headline item: its line of the largest share of the step."""
    out = []
    for section in sections:
        line = section["first_advice"]
        if line is None:
            continue
        more = len(section["advice"]) - 1
        more = f" ({more} more under GPU)" if more else ""
        where = f"{section['run']}: " if len(sections) > 1 else ""
        item = {"run": section["run"], "gstep": None, "keys": [], "text": where + line + more}
        out.append(dict(item, tag="GPU", severity="info"))
    return out


def _module_of(key):
    """The module of a parameter's key ("scope/gradient/layer1.0.conv1.weight" ->
    "layer1.0.conv1"): torch names parameters <module path>.<name>; None for the root's own."""
    param = key.rsplit("/", 1)[-1]
    return param.rsplit(".", 1)[0] if "." in param else None


def module_norms(scan):
    """{module: (||gradient|| of its parameters, the largest ||gradient|| / ||variable|| of them)}
    at the last bucket of the first rank's curves (xdl.watch's gradient/<parameter> keys)."""
    if not scan.ranks:
        return {}
    rank, l2 = scan.ranks[0], analysis.STATS_FIELDS.index("l2")
    squares, ratios = {}, {}
    for (key, r), series in scan.stats.items():
        module = _module_of(key)
        if r != rank or module is None or "gradient/" not in key or not series.used:
            continue
        last = float(series.view()[1][-1, l2])
        squares[module] = squares.get(module, 0.0) + last * last
    for (var, r), series in scan.ratio.items():
        module = _module_of(var)
        if r == rank and module is not None and series.used:
            last = float(series.view()[1][-1, 0])
            ratios[module] = max(ratios.get(module, last), last)
    return {m: (squares[m] ** 0.5, ratios.get(m)) for m in squares}


HOST_RANGE_ROWS = 500  # Rows of each run's host-time-by-range table (by self time).
MODULE_ROWS = 500  # Rows of the GPU-time-by-module table (sortable and searchable on the page).


def module_rows(modules, steps, norms=None, top=MODULE_ROWS):
    """The GPU section's rows of device time by module (``gpu_steps.module_table``'s rows
    folded per module): module (None: launched by no range), per phase ns a step (forward,
    backward, other: the optimizer's and the user's ranges), kernels, share of the step
    windows, and from `norms` (``module_norms``) grad_norm and ratio; by total, `top` rows."""
    rows = {}
    for m in modules:
        row = rows.setdefault(
            m["module"],
            {
                "module": m["module"],
                "forward": 0.0,
                "backward": 0.0,
                "other": 0.0,
                "kernels": 0,
                "share": 0.0,
                "phases": [],
            },
        )
        phase = m["phase"] if m["phase"] in ("forward", "backward") else "other"
        row[phase] += m["time_ns"] / max(steps, 1)
        row["kernels"] += m["kernels"]
        row["share"] += m["share"] or 0.0
        if phase == "other" and m["phase"] is not None:
            row["phases"].append(m["phase"])
    out = sorted(rows.values(), key=lambda r: -(r["forward"] + r["backward"] + r["other"]))
    for row in out:
        norm = (norms or {}).get(row["module"])
        row["grad_norm"], row["ratio"] = norm if norm else (None, None)
    return out[:top]


def gpu_section(label, gpu, norms=None):
    """What the report shows of one run's GPU time (``gpu_steps.summarize``'s dict `gpu`): the
    STEP_FIELDS averaged over every step of every rank (per_step, ns) and of each rank (ranks,
    with several), the kernel and host CUDA API tables, the launch statistics, the straggler
    ranks (``gpu_steps.stragglers``), the advice lines (``gpu_advice.advise``; first_advice: the
    one of the largest share, ``gpu_advice.largest``) and the device time by module and phase
    (``module_rows``, beside each module's gradient norm from `norms`)."""
    t = gpu["totals"]
    steps = sum(len(g) for g, _ in gpu["steps"].values())
    per_step = {f: (t[f] / steps if steps else None) for f in gpu_steps.STEP_FIELDS}
    ranks = {
        str(rank): dict(zip(gpu_steps.STEP_FIELDS, rows.mean(axis=0).tolist()))
        for rank, (_, rows) in sorted(gpu["steps"].items())
        if len(rows)
    }
    section = {
        "run": label,
        "steps": steps,
        "busy": t["busy"] / t["window"] if t["window"] else None,
        "per_step": per_step,
        "kernels": gpu["kernels"],
        "kernel_names": gpu["kernel_names"],
        "api": gpu["api"],
        "api_names": gpu["api_names"],
        "launch": gpu["launch"],
        "copies": gpu.get("copies", []),
        "events": gpu["events"],
        "dropped": gpu["dropped"],
        "ranks": ranks if len(ranks) > 1 else {},
        "stragglers": gpu_steps.stragglers(gpu["steps"]),
        "modules": module_rows(gpu.get("modules", []), steps, norms),
    }
    advice = gpu_advice.advise(section) if steps else []
    section["advice"] = [line for _, line in advice]
    section["first_advice"] = gpu_advice.largest(advice)  # What the page opens with.
    return section


def _card_meta(schema, rows):
    """What a key's card says of it: the traced tensor (dtype and shape, of the input for a
    summary), the column kind and how many records: "float32 [64, 1] · histogram (30 bins) ·
    60 records"."""
    if schema is None:
        return f"{rows} records" if rows is not None else ""
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
    counted = [f"{rows} records"] if rows is not None else []  # None: not scanned (a digest).
    return " · ".join([tensor, kind] + ([source] if source else []) + counted)


def run_labels(paths):
    """Each path's label: its base name, numbered where two paths share one."""
    labels = [os.path.basename(os.path.normpath(os.fspath(p))) or os.fspath(p) for p in paths]
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            labels[i] = f"{label} ({i + 1})"
    return labels


def _expand_runs(paths, run, prefix, name):
    """[(path, label, Run or None)]: one entry per path, or, where a directory holds several
    runs and `run` is None or "all", one per run (each its own series, labelled with the start
    of its id; ``_label_by_metadata`` names them after what differs), as TensorBoard draws every
    run of its logdir."""
    out = []
    for path, label in zip(paths, run_labels(paths)):
        if run is not None and run != "all":
            out.append(
                (path, label, analysis.open_trace(path, prefix=prefix, name=name, run=run).run)
            )
            continue
        every = trace_runs.runs(path, prefix=prefix, name=name)
        if len(every) > 1:
            out += [(path, f"{label} · {r.id[:8]}", r) for r in every]
        else:
            out.append((path, label, every[0] if every else None))
    return out


COMPARED_RUNS = 8  # Runs a page compares with its first, at most.


def _folded(items):
    """The comparisons' headline items, those of information (a sweep's runs that differ as their
    metadata do; ranks that agree) of one kind folded into one line where there are more than
    FOLD_AFTER: a sweep of 20 runs opens with one line, not 38. Each stays in the alerts and in
    "Where the runs differ"."""
    counts = {}
    for item in items:
        if item["severity"] == "info":
            counts[item["tag"]] = counts.get(item["tag"], 0) + 1
    out, folded = [], set()
    for item in items:
        tag = item["tag"]
        if item["severity"] != "info" or counts[tag] <= FOLD_AFTER:
            out.append(item)
        elif tag not in folded:
            folded.add(tag)
            text = (
                f"{counts[tag]} comparisons: {tag}, the first {item['text']}; each in the alerts "
                "and under Where the runs differ"
            )
            out.append(dict(item, run="", gstep=None, keys=[], text=text))
    return out


def _differences(scans, runs, selection, prefix, name):
    """Where the ranks of each multi-rank run part ways (every rank against the lowest), and with
    several runs where each later run parts from the first (``compare.diff``, a second pass over
    the files): per comparison its headline, alerts and the diff as a dict. Of more than two
    runs, those whose metadata differ from the first's (a sweep) are named in one line, not
    compared, as are the runs past COMPARED_RUNS; two runs are compared whatever their
    metadata (``report A B``)."""
    out = []

    def add(a, b, what, expected=()):
        """`expected`: the metadata entries in which run b differs from run a (information)."""
        run_a = runs[a].id if runs[a] is not None and runs[a].id else None
        run_b = None if b is None or runs[b] is None or not runs[b].id else runs[b].id
        label = scans[a].label if b is None else f"{scans[b].label} vs {scans[a].label}"
        try:
            result = compare.diff(
                scans[a].path,
                None if b is None else scans[b].path,
                keys=selection.keys,
                gsteps=selection.gsteps,
                ranks=selection.ranks,
                run=run_a,
                run_b=run_b,
                attempts=selection.attempts,
                prefix=prefix,
                name=name,
            )
        except (ValueError, TraceError, OSError) as error:  # The page stands without it.
            headline_item, alerts = comparison_failed(label, what, error)
            out.append({"headline": headline_item, "alerts": alerts, "diff": None, "charts": []})
            return
        # Two runs' evaluations (compare.diff pairs them) are a comparison of their own.
        compared = [(result, label)]
        if result.evaluation is not None:
            compared.append(
                (result.evaluation, f"{scans[b].label} · eval vs {scans[a].label} · eval")
            )
        for one, named in compared:
            headline_item, alerts = agreement_alerts(one, named, what, expected)
            diff = dict(one.as_dict(), label=named, what=what)
            diff.pop("evaluation", None)  # Drawn as its own comparison.
            charts = report_charts.divergence_charts(one, named, what)
            out.append(
                {"headline": headline_item, "alerts": alerts, "diff": diff, "charts": charts}
            )

    for i, scan in enumerate(scans):
        if len(scan.ranks) > 1:
            add(i, None, "ranks")
    # Each comparison reads both runs again (5 runs: the page in 0.93 s, 0.23 s without): of
    # more than two runs, those configured apart are named, not compared, and past
    # COMPARED_RUNS the others too (a directory a script was launched into 50 times).
    apart, beyond, compared = {}, [], 0
    for i in range(1, len(scans)):
        if scans[i].path == scans[0].path and runs[i] is runs[0]:
            continue
        # A sweep's runs differ by design: by the hyperparameters their metadata record.
        differ = _metadata_differing([_metadata(runs[0]), _metadata(runs[i])])
        if differ and len(scans) > 2:
            apart[scans[i].label] = differ
        elif compared == COMPARED_RUNS:
            beyond.append(scans[i].label)
        else:
            add(0, i, "runs", differ)
            compared += 1
    if apart or beyond:
        headline_item, alerts = not_compared(scans[0].label, apart, beyond, COMPARED_RUNS)
        out.append({"headline": headline_item, "alerts": alerts, "diff": None, "charts": []})
    return out


def _label_by_metadata(scans, runs):
    """Runs expanded from one directory (labelled "dir · <id prefix>") relabelled by the
    metadata entries that differ between them: "lr 0.02" and "lr 0.2", as legends should say
    (issue 32 #5); where runs share those values (a sweep's repeats), each also by the start of
    its id: "lr 0.1 · d8f5ad2a"; on a page of several directories (two sweeps), after their
    directory: "sweep_a · lr 0.1". Labels are unchanged where no metadata tells the runs
    apart."""
    groups = {}
    for i, scan in enumerate(scans):
        groups.setdefault((scan.path, scan.prefix), []).append(i)
    paths = list(dict.fromkeys(scan.path for scan in scans))
    directory = dict(zip(paths, run_labels(paths))) if len(paths) > 1 else {}
    for members in groups.values():
        metas = [_metadata(runs[i]) for i in members]
        if len(members) < 2:
            continue
        differ = _metadata_differing(metas)
        if not differ:
            continue
        labels = [
            " · ".join(f"{k} {report_charts.metadata_text(m.get(k))}" for k in differ)
            for m in metas
        ]
        if len(set(labels)) < len(labels) and all(
            runs[i] is not None and runs[i].id for i in members
        ):
            labels = [f"{label} · {runs[i].id[:8]}" for i, label in zip(members, labels)]
        if len(set(labels)) < len(labels):
            continue
        for i, label in zip(members, labels):
            where = directory.get(scans[i].path)
            scans[i].label = f"{where} · {label}" if where else label


def _metadata(run):
    """A Run's ``TraceHook(metadata=...)`` dict; {} for None (a file of no run)."""
    return {} if run is None else run.metadata


def _metadata_differing(metas):
    """The entries whose values differ between the metadata dicts `metas`, sorted."""
    names = sorted({k for m in metas for k in m})
    return [k for k in names if len({json.dumps(m.get(k), sort_keys=True) for m in metas}) > 1]


TITLE_RUNS = 4  # A directory drawn whole is named by its runs' labels up to this many.


def _named(scans, runs, several):
    """The runs of a page in a few words, for its title and header: each run's `_title_part`, a
    directory drawn whole (several of its runs) as "sweep: lr 0.1, lr 0.2", or past TITLE_RUNS
    runs "sweep (21 runs)" (a title of 21 labels says nothing a tab can show)."""
    by_path = {}
    for scan, run in zip(scans, runs):
        by_path.setdefault(scan.path, []).append((scan, run))
    parts = []
    for path, members in by_path.items():
        if len(members) == 1:
            scan, run = members[0]
            parts.append(_title_part(scan, run, several.get(path, False)))
            continue
        base = os.path.basename(os.path.normpath(path)) or path
        if len(members) > TITLE_RUNS:
            parts.append(f"{base} ({len(members)} runs)")
        else:  # Its runs' labels less the directory's name (two sweeps' runs carry it).
            strip = f"{base} · "
            labels = [
                scan.label[len(strip) :] if scan.label.startswith(strip) else scan.label
                for scan, _ in members
            ]
            parts.append(f"{base}: " + ", ".join(labels))
    return "; ".join(parts)


def _title_part(scan, run, several):
    """A run in the page's title: its label, and the start of its id when its directory holds
    other runs (two pages of one directory's runs get different titles, issue 32 #5)."""
    base = os.path.basename(os.path.normpath(scan.path)) or scan.path
    if run is None or not run.id or scan.label.startswith(base) and run.id[:8] in scan.label:
        return scan.label
    if several:
        where = f"run {run.id[:8]}"
        return f"{base} · {where}" if scan.label == base else f"{scan.label} ({base} · {where})"
    return scan.label


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
    directory that holds several (as ``open_trace``); None or "all": each of them, a series
    each."""
    selection = Selection.of(selection, keys=keys, gsteps=gsteps, ranks=ranks, run=run)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    with trace_runs.listed_once():  # A sweep's directory listed once, not once per run.
        scans, runs, unread = _scan_runs(paths, selection, prefix, name, on_progress)
        return model_of(scans, runs, prefix, name, selection=selection, unread=unread)


# What the curves of every run of a page may hold together: a sweep of 20 runs x 300 keys kept
# 512 points a curve in each run (1.9 GB to build its page, docs/benchmarks.md).
PAGE_SERIES_BUDGET_BYTES = 512 << 20


def series_budget(runs):
    """Each of `runs` runs' share of PAGE_SERIES_BUDGET_BYTES, at most a scan's own budget
    (``analysis.SERIES_BUDGET_BYTES``: up to 5 runs each keep what one run would)."""
    return min(analysis.SERIES_BUDGET_BYTES, PAGE_SERIES_BUDGET_BYTES // max(runs, 1))


def _scan_runs(paths, selection, prefix, name, on_progress):
    """(scans, Run of each, unread: ``alerts.run_not_read`` of each run that failed) of the
    runs of `paths` (``_expand_runs``), each training run followed by its evaluation's scan."""
    scans, runs, unread = [], [], []
    entries = _expand_runs(paths, selection.run, prefix, name)
    budget = series_budget(len(entries))
    for n, (p, label, chosen) in enumerate(entries):
        histograms = n < DISTRIBUTION_RUNS
        try:
            evaluation = (
                analysis.scan_evaluation(
                    p,
                    chosen,
                    name,
                    selection,
                    label=f"{label} · eval",
                    histograms=histograms,
                    series_budget=budget,
                )
                if prefix == "train"
                else None
            )
            scan = analysis.scan_run(
                p,
                label=label,
                prefix=prefix,
                name=name,
                on_progress=on_progress,
                selection=selection.replace(
                    run=chosen.id if chosen is not None and chosen.id else selection.run
                ),
                must_match=evaluation is None,  # --keys 'eval/*' selects its evaluation's.
                histograms=histograms,
                series_budget=budget,
            )
        except TraceError as error:  # A damaged run of several: the others are drawn.
            if len(entries) == 1:
                raise
            unread.append(run_not_read(label, None if chosen is None else chosen.id, error))
            continue
        scans.append(scan)
        runs.append(chosen)
        if evaluation is not None:
            evaluation[0].evaluates = scans[-1]  # Labelled after it (model_of).
            scans.append(evaluation[0])
            runs.append(evaluation[1])
    if not scans:
        raise TraceError(
            f"no run of {', '.join(map(os.fspath, paths))} could be read: "
            + "; ".join(alerts[0]["detail"] for _, alerts in unread)
        )
    return scans, runs, unread


def model_of(scans, runs, prefix="train", name="trace", writing=None, selection=None, unread=()):
    """The report model of scanned runs (``analysis.RunScan``, with the ``Run`` each read, or
    None). writing: per scan, whether its writer is alive (``xdl-trace serve``), else None.
    selection: what a static report read (None: serve). unread: (headline item, alerts) of each
    run of the page that could not be read (``alerts.run_not_read``), first on the page."""
    _label_by_metadata(scans, runs)
    for scan in scans:  # An evaluation is named after its run, as the metadata named that.
        if scan.evaluates is not None:
            scan.label = f"{scan.evaluates.label} · eval"
            analysis.add_evaluation_ranges(scan.evaluates, scan)  # Its time in their steps.
    # The runs asked for; an eval scan beside one (``analysis.scan_evaluation``) has curves and
    # alerts, but no step times, no comparison (its values differ from training's by design),
    # no title.
    main = [i for i, scan in enumerate(scans) if scan.prefix == prefix]
    steps = report_charts.step_charts([scans[i] for i in main])
    report_charts.mark_evaluations(steps, [s for s in scans if s.evaluates is not None])
    several = {}  # path -> whether its directory holds other runs (for the title).
    for i in main:
        path = scans[i].path
        if writing is None and path not in several:
            several[path] = len(trace_runs.runs(path, prefix=prefix, name=name)) > 1
    # Where ranks and runs part ways: a second pass over the files, so a static report's only
    # (serve would re-read the whole run at every update).
    differences = (
        []
        if selection is None
        else _differences(
            [scans[i] for i in main], [runs[i] for i in main], selection, prefix, name
        )
    )
    # Every key once, in the order the runs name them, with the first run that has it: dicts,
    # never a list searched per key (linear in keys, issue 24 #2).
    first_scan, in_scans = {}, {}
    for scan in scans:
        for k in scan.keys:
            first_scan.setdefault(k, scan)
            in_scans.setdefault(k, []).append(scan)
    key_order = list(first_scan)
    # Digest columns are not scanned (analysis.begin_scan): a companion (watch's digest=, beside
    # a key the run traces) adds a word to that key's card; a key traced as summary="digest"
    # alone gets a card of text.
    digested, digest_cards = set(), {}
    for scan in scans:
        for k in scan.digests:
            of = analysis.digested_key(k)
            if of is not None and of in scan.schema:
                digested.add(of)
            else:
                digest_cards.setdefault(k, scan)

    # Scalars (the loss, a learning rate: shape ()) first, then one-element tensors, then the
    # others, each group in file order.
    def group(key):
        schema = first_scan[key].schema.get(key)
        if schema is not None and (schema.kind or "value") == "value" and schema.shape == ():
            return 0
        return 1 if all(s.elements.get(key, 0) <= 1 for s in in_scans[key]) else 2

    key_order.sort(key=group)
    cards = []
    opened = {}  # (path, prefix, run) -> Trace: read only for the values of trace_once keys.

    def trace_of(scan):
        where = (scan.path, scan.prefix, scan.selection.run)  # The runs its scan read.
        if where not in opened:
            opened[where] = analysis.open_trace(
                scan.path,
                prefix=scan.prefix,
                name=name,
                run=scan.selection.run,
                attempts=None if selection is None else selection.attempts,
            )
        return opened[where]

    for key in key_order:
        scan = first_scan[key]
        schema = scan.schema.get(key)
        rows = sum(s.rows.get(key, 0) for s in scans)
        meta = _card_meta(schema, rows)
        if key in digested:
            meta += " · exact digest beside it (digest/…)"
        once = getattr(schema, "source", None) == "once"
        if rows <= 1 or once:
            # trace_once (a config: its values, never a curve of their mean and std), or a
            # single traced step: a line of text per run.
            text = report_charts.once_text(scans, key, trace_of if once else lambda scan: None)
            cards.append({"key": key, "meta": meta, "charts": [], "text": text})
            continue
        charts = report_charts.key_charts(scans, key)
        if charts:
            cards.append({"key": key, "meta": meta, "charts": charts})
    for key, scan in digest_cards.items():  # A checksum: no curve, no statistics.
        text = "a digest (an exact checksum of the tensor): compared by xdl-trace diff"
        cards.append(
            {"key": key, "meta": _card_meta(scan.schema.get(key), None), "charts": [], "text": text}
        )
    gpu = _gpu_sections(scans)
    named = _named([scans[i] for i in main], [runs[i] for i in main], several)
    rows = _runs_facts(scans, runs, selection, writing)
    return {
        "title": f"xdl_trace report: {named}",
        "named": named,  # What the page's header says it shows.
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": rows,
        "sweep": _sweep(rows),
        # Errors first (a run not read, NaN/Inf), then warnings, then information.
        "headline": sorted(
            [item for item, _ in unread]
            + _folded([d["headline"] for d in differences])
            + headline(scans)
            + _gpu_headline(gpu),
            key=lambda item: SEVERITY_ORDER.get(item["severity"], 2),
        ),
        "alerts": folded_across_runs(
            [a for _, alerts in unread for a in alerts]
            + [a for d in differences for a in d["alerts"]]
            + find_alerts(scans)
        ),
        "differences": [d["diff"] for d in differences if d["diff"] is not None],
        "difference_charts": [chart for d in differences for chart in d["charts"]],
        "steps": steps,
        "host_ranges": [
            {"run": scans[i].label, "rows": scans[i].host_ranges[:HOST_RANGE_ROWS]}
            for i in main
            if scans[i].host_ranges
        ],
        "gpu_charts": report_charts.gpu_charts(scans),
        "gpu": gpu,
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
        + len(model.get("difference_charts", ()))
        + sum(len(c["charts"]) for c in model["cards"])
    )
    return {
        "output": output,
        "charts": charts,
        "alerts": model["alerts"],
        "pngs": pngs,
        "bytes": len(page.encode("utf-8")),
    }
