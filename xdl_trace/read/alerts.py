"""The report's alert rules: what in a scanned run (``analysis.RunScan``) deserves a look.

Thresholds (documented in docs/report.md):
  * missing file / copied file left out: what ``xdl-trace verify`` fails besides damage: a
    rank's file missing from its sequence, a rank absent from its run's world size, a copied or
    renamed data file (its Meta names another rank or index) that the readers leave out.
  * NaN/Inf: any NaN or Inf element in a key (first record per key, from full tensors).
  * never changes: the key's stats (count, min, max, mean, std, l2) are the same in every record
    (at least 2 records); not for a callback's value or a trace_once key, which may rightly
    never change (a constant learning rate). A parameter traced without its gradient where
    others have theirs (``analysis.frozen_variables``: watch traces no gradient of a
    requires_grad=False parameter) is frozen: those never changing are one "frozen" info alert.
  * exploding gradient: a gradient key's l2 norm exceeds EXPLODING_FACTOR x the median of the
    norms before it (at least 3 earlier points), or EXPLODING_NORM.
  * vanishing gradient: the median l2 norm over the last quarter of steps is below
    VANISHING_NORM, or below VANISHING_FACTOR x the median over the first quarter.
  * ranks differ / runs differ (``agreement_alerts``): a replicated key (parameters, gradients:
    ``compare.REPLICATED_SOURCES``) that differs between two ranks of a run, bit for bit where
    values or digests are traced; a key that differs between the first run and another.
Records holding a NaN or Inf take no part in the gradient rules (their norms are gaps, see
``analysis._add_records``); ``headline`` names the first of them instead.
"""

import bisect

import numpy as np

from . import analysis, compare
from .analysis import L2

__all__ = [
    "agreement_alerts",
    "comparison_failed",
    "find_alerts",
    "headline",
    "EXPLODING_FACTOR",
    "EXPLODING_NORM",
    "VANISHING_NORM",
    "VANISHING_FACTOR",
]

EXPLODING_FACTOR = 1e3
EXPLODING_NORM = 1e6
VANISHING_NORM = 1e-7
VANISHING_FACTOR = 1e-4


def find_alerts(scans):
    """The alerts of the scanned runs (dicts: severity, kind, run, key, rank, gstep, detail), in a
    fixed order: per run, missing and copied files, dropped records, NaN/Inf by gstep, constant keys, gradient norms.
    """
    alerts = []
    for scan in scans:
        run = scan.label
        for gap in scan.gaps:  # What `verify` fails, the report says too (issue 37 #6).
            alerts.append(_alert("error", "missing file", run, "", None, None, gap))
        for copy in scan.copies:
            alerts.append(_alert("error", "copied file left out", run, "", None, None, copy))
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
        frozen = []  # Parameters without a gradient traced that never change: as expected.
        for key in scan.keys:
            # A callback's value (a learning rate, a flag) or a trace_once config may rightly
            # never change: the alert is for tensors that should move (issue 32 #4).
            if getattr(scan.schema.get(key), "source", None) in ("callback", "once"):
                continue
            if not scan.constant.get(key) or scan.rows.get(key, 0) < 2:
                continue
            if key in scan.frozen:
                frozen.append(key)
            else:
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
        if frozen:
            named = ", ".join(frozen[:FROZEN_NAMED]) + (
                f" and {len(frozen) - FROZEN_NAMED} more" if len(frozen) > FROZEN_NAMED else ""
            )
            alerts.append(
                _alert(
                    "info",
                    "frozen",
                    run,
                    "",
                    None,
                    None,
                    f"{len(frozen)} parameter(s) never change and have no gradient traced "
                    f"(requires_grad=False), as a frozen layer should: {named}",
                )
            )
        for key in scan.keys:
            if analysis.gradient_variable(key) is None and "grad" not in key:
                continue
            if getattr(scan.schema.get(key), "kind", None) in ("histogram", "user_summary"):
                continue  # Its stats describe the summary's encoding, not the gradient.
            for rank in scan.ranks:
                series = scan.stats.get((key, rank))
                if series is None or series.records < 8:
                    continue
                alert = _gradient_alert(series)
                if alert:
                    x, text = alert
                    alerts.append(_alert("warn", text[0], run, key, rank, x, text[1]))
    return alerts


HEADLINE_KEYS = 4  # Keys named in the headline; the others are counted.
SEVERITY_ORDER = {"error": 0, "warn": 1}  # Then "info": how headlines and alerts are ordered.
FOLD_AFTER = 3  # Headline items of one kind shown one by one, at most; more fold into one.
NAMED_RUNS = 12  # Runs an alert or a folded headline item names, at most.
FROZEN_NAMED = 5  # Frozen parameters named in their one alert; the others are counted.


def headline(scans):
    """What the page opens with: per run holding NaN/Inf, the first gstep holding one and the
    keys that do at that gstep, as {"run", "gstep", "keys", "text", "tag", "severity"}: "first
    non-finite at gstep 150 in 13 keys (loss, gradient/w, ...)". Past FOLD_AFTER runs (a sweep
    whose high learning rates diverged), one line: the earliest run's, and the others named with
    their gstep ("_folded_bad")."""
    out = []
    for scan in scans:
        bad = sorted(scan.first_bad.values(), key=lambda b: (b.gstep, b.rank, b.key))
        if not bad:
            continue
        gstep = bad[0].gstep
        order = {key: i for i, key in enumerate(scan.keys)}
        keys = sorted(
            {b.key for b in bad if b.gstep == gstep},
            key=lambda k: (scan.elements.get(k, 0) > 1, order.get(k, 0)),
        )
        named = ", ".join(keys[:HEADLINE_KEYS]) + (", …" if len(keys) > HEADLINE_KEYS else "")
        where = f"{scan.label}: " if len(scans) > 1 else ""
        count = counted(len(keys), "key")
        out.append(
            {
                "run": scan.label,
                "gstep": gstep,
                "keys": keys,
                "text": f"{where}first non-finite at gstep {gstep} in {count} ({named})",
                "tag": "NaN/Inf",
                "severity": "error",
            }
        )
    return out if len(out) <= FOLD_AFTER else [_folded_bad(out)]


def _some(names, more=""):
    """The first NAMED_RUNS of `names`, then "and 187 more" (and `more`) for the others."""
    left = len(names) - NAMED_RUNS
    return ", ".join(names[:NAMED_RUNS]) + (f" and {left} more{more}" if left > 0 else "")


def _folded_bad(items):
    """The NaN/Inf headline items of more than FOLD_AFTER runs as one: the earliest in full, the
    next NAMED_RUNS by name and gstep (40 red lines opened a sweep of 200 runs whose lr 0.1 runs
    diverged)."""
    items = sorted(items, key=lambda item: item["gstep"])
    named = _some([f"{item['run']} (gstep {item['gstep']})" for item in items[1:]])
    text = (
        f"{len(items)} runs, the earliest {items[0]['text']}; then {named} (each run's in the "
        "alerts; the Runs table's last values say NaN or Inf)"
    )
    return dict(items[0], text=text)


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


# Differing keys a comparison lists as alerts, the earliest first (the rest are counted).
AGREEMENT_ALERT_KEYS = 10


def counted(n, noun):
    """ "1 key", "3 keys": a count in words that agree with it."""
    return f"{n} {noun}{'s' * (n != 1)}"


def agreement_alerts(result, label, what, expected=()):
    """A ``compare.diff`` result (`what`: "ranks" of one run, or "runs") as the page's opening line
    ({"run", "gstep", "keys", "text", "tag", "severity"}: "ranks agree", "rank 1 differs from rank 0 from gstep 110
    in 0.weight (and 5 more keys)") and alerts: one per differing key (the first
    AGREEMENT_ALERT_KEYS), each naming its first differing gstep and what was compared.
    `expected`: the metadata entries that differ between two runs (a sweep's "lr"): runs
    configured apart are expected to differ, so it is said as information, not a warning."""
    differing = result.differing
    bases = sorted({k.basis for k in result.keys if k.basis})
    how = " and ".join(bases) if bases else "nothing"
    # Which keys a rank comparison took, in words (the rule, the run's declaration, a selection).
    which = f"; {result.replicated}" if what == "ranks" and result.replicated else ""
    if what == "ranks" and not result.keys:  # Nothing replicated (replicated=False): no verdict.
        return _run_verdict(
            "info", "ranks not compared", label, f"{label}: ranks not compared{which}"
        )
    if not differing:
        steps_only = sum(s["only_a"] + s["only_b"] for s in result.steps)
        text = (
            f"{label}: ranks agree" if what == "ranks" else f"{label}: the runs agree"
        ) + f" ({counted(len({k.key for k in result.keys}), 'key')} compared by {how}"
        text += ")" if not steps_only else f"; {steps_only} gsteps on one side only)"
        text += which
        if bases == ["summaries"]:
            text += (
                ": equal summaries prove nothing exact; watch(model) records digests beside "
                "them (digest=True), or trace summary='digest'"
            )
        return _run_verdict("info", "ranks agree" if what == "ranks" else "runs agree", label, text)
    first = differing[0]
    kind = "ranks differ" if what == "ranks" else "runs differ"
    keys = sorted({k.key for k in differing}, key=[k.key for k in differing].index)
    more = f" (and {counted(len(keys) - 1, 'more key')})" if len(keys) > 1 else ""
    if what == "ranks":
        text = (
            f"{label}: rank {first.rank_b} differs from rank {first.rank_a} from gstep "
            f"{first.first['gstep']} in {first.key}{more}"
        )
    else:
        text = f"{label}: the runs differ from gstep {first.first['gstep']} in {first.key}{more}"
    text += which
    severity = "warn"
    if expected:
        severity = "info"
        text += f"; their metadata differ ({', '.join(expected)})"
    headline_item = {"run": label, "gstep": first.first["gstep"], "keys": keys, "text": text}
    headline_item.update(tag=kind, severity=severity)
    alerts = []
    for k in differing[:AGREEMENT_ALERT_KEYS]:
        p = k.first
        if k.structural:
            detail = f"{k.structural} from gstep {k.structural_gstep}"
        elif p["basis"] == "values":
            detail = (
                f"{p['differing']} of {p['elements']} elements differ (max abs "
                f"{p['max_abs']:.3g}, rel {p['max_rel']:.3g}); {k.steps_differing} gsteps "
                f"differ, max abs {k.last['max_abs']:.3g} at the last ({k.last['gstep']})"
            )
        else:
            detail = f"by {p['basis']}; {k.steps_differing} gsteps differ"
            if compare.has_norms(p):
                detail += (
                    f"; l2 norm {compare.norm_change(p)} at the first, "
                    f"{compare.norm_change(k.last)} at the last ({k.last['gstep']})"
                )
        rank = k.rank_b if what == "ranks" else None
        alerts.append(_alert(severity, kind, label, k.key, rank, p["gstep"], detail))
    if len(differing) > AGREEMENT_ALERT_KEYS:
        alerts.append(
            _alert(
                severity,
                kind,
                label,
                "",
                None,
                None,
                f"{len(differing) - AGREEMENT_ALERT_KEYS} more differing keys: xdl-trace diff",
            )
        )
    return headline_item, alerts


def not_compared(first, apart, beyond, most):
    """agreement_alerts' headline item and alert for the runs of a page left uncompared with its
    first run (labelled `first`): `apart` (label -> the metadata entries in which each differs
    from it: configured apart, a sweep's, they differ by design) and `beyond` (the labels past
    the `most` a page compares)."""
    parts = []
    if apart:
        entries = sorted({k for differ in apart.values() for k in differ})
        parts.append(
            f"{counted(len(apart), 'run')} configured apart (their metadata differ: "
            f"{', '.join(entries)})"
        )
    if beyond:
        parts.append(f"{counted(len(beyond), 'more run')} (a page compares at most {most})")
    text = (
        f"{' and '.join(parts)} not compared with {first}; `xdl-trace diff A B` compares two, "
        "`report A B` draws where two part"
    )
    headline_item, _ = _run_verdict("info", "not compared", first, text)
    # A sweep of 200 runs has its Runs table for the runs past the first NAMED_RUNS.
    detail = f"{text}: {_some([*apart, *beyond], ' (the Runs table lists them)')}"
    return headline_item, [_alert("info", "not compared", first, "", None, None, detail)]


def run_not_read(label, run_id, error):
    """The headline item and alert of a run of a page that could not be read (`error`: a damaged
    Header, ...): the page draws the others."""
    which = f" (run {run_id})" if run_id and run_id[:8] not in label else ""
    text = f"{label}{which} not read, the other runs drawn: {error}"
    return _run_verdict("error", "run not read", label, text)


def comparison_failed(label, what, error):
    """agreement_alerts' headline item and alert for a comparison that could not be made (`what`:
    "ranks" or "runs"; `error`: why, e.g. a malformed TraceHook(replicated=) entry in the run's
    metadata): the rest of the page stands."""
    kind = f"{what} not compared"
    return _run_verdict("error", kind, label, f"{label}: {kind}: {error}")


def _run_verdict(severity, kind, label, text):
    """A verdict on a whole comparison, naming no key: the headline item and its one alert."""
    headline_item = {"run": label, "gstep": None, "keys": [], "text": text}
    headline_item.update(tag=kind, severity=severity)
    return headline_item, [_alert(severity, kind, label, "", None, None, text)]


def folded_across_runs(alerts):
    """`alerts` with those of one severity, kind and key raised in more than FOLD_AFTER runs (a
    sweep: "never changes" in each of 20 runs x 300 keys, 6,000 rows) as one, in the place of
    its first: the earliest by gstep in full, the others named (NAMED_RUNS, with their gstep),
    its run "20 runs". Alerts of fewer runs stay as they are."""
    groups = {}
    for a in alerts:
        groups.setdefault((a["severity"], a["kind"], a["key"]), []).append(a)
    out, done = [], set()
    for a in alerts:
        group = (a["severity"], a["kind"], a["key"])
        members = groups[group]
        runs = list(dict.fromkeys(m["run"] for m in members))
        if len(runs) <= FOLD_AFTER:
            out.append(a)
            continue
        if group in done:
            continue
        done.add(group)
        first = min(members, key=lambda m: (m["gstep"] is None, m["gstep"] or 0))
        named = _some(
            [
                m["run"] + ("" if m["gstep"] is None else f" (gstep {m['gstep']})")
                for m in members
                if m is not first
            ]
        )
        detail = f"{first['run']}: {first['detail']}; also in {named}"
        out.append(dict(first, run=counted(len(runs), "run"), detail=detail))
    return out


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
