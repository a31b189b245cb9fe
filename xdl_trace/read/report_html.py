"""The report page: fills the template report_assets/report.html with a report model (see
``xdl_trace.read.report.build_report``), its styles and script (report.css, report.js) and the
vendored uPlot, into one HTML string that needs no network.

Every piece of markup is a fragment of the template; this module only escapes values and picks
fragments. The model travels as JSON in the page; report.js draws the charts from it.
"""

import base64
import functools
import html
import json
import os
import re
import string

import numpy as np

from . import compare
from .alerts import SEVERITY_ORDER
from .report_charts import hparams_of, is_number, metadata_text

__all__ = [
    "render_html",
    "runs_html",
    "alerts_html",
    "sections_html",
    "model_from_page",
    "human_bytes",
    "pack_charts",
    "unpack_charts",
    "charts_json",
]

_ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_assets")
_FRAGMENT = re.compile(r"<!-- (\w+) -->")


@functools.lru_cache(maxsize=None)
def _asset(name):
    with open(os.path.join(_ASSETS, name), encoding="utf-8") as f:
        return f.read()


def _asset_body(name):
    """An asset of ours less its first line (which says what the file is for), that line's
    line break kept."""
    text = _asset(name)
    return text[text.index("\n") :]


@functools.lru_cache(maxsize=None)
def _fragments():
    """{name: string.Template} of report.html: each fragment's lines joined without breaks."""
    fragments, name = {}, None
    for line in _asset("report.html").split("\n")[1:]:
        match = _FRAGMENT.fullmatch(line)
        if match:
            name = match.group(1)
            fragments[name] = []
        elif name is not None:
            fragments[name].append(line)
    return {n: string.Template("".join(lines)) for n, lines in fragments.items()}


def _fill(fragment, /, **values):
    return _fragments()[fragment].substitute(values)


def human_bytes(n):
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


_ANCHOR_KEPT = re.compile(r"[^A-Za-z0-9._/-]")


def _anchor_escape(match):
    code = ord(match.group())
    return (
        f"~{code:02x}" if code < 0x100 else f"~u{code:04x}" if code < 0x10000 else f"~U{code:06x}"
    )


def _anchor(key):
    """A card's anchor: the key with what an id or a URL fragment should not hold escaped as
    ``~hh``/``~uhhhh``/``~Uhhhhhh`` (``~`` itself included), so different keys ("a.b", "a_b",
    "a b") never share one (issue 24 #4). Plain keys ("layer0/w", "loss") read as themselves."""
    return _ANCHOR_KEPT.sub(_anchor_escape, key)


# The JSON of the data block with "<", ">" and "&" as \u escapes (as Django's json_script
# writes it): no key, scope or run name can close the <script>, open a comment or an entity
# inside it (issue 24 #4); JSON.parse reads the escapes back as the characters.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def _metadata(metadata):
    """A run's ``metadata=`` (hyperparameters), one line per entry."""
    return "".join(
        _fill(
            "metadata_item",
            key=html.escape(str(k)),
            value=html.escape(metadata_text(v)),
        )
        for k, v in sorted((metadata or {}).items())
    )


def _run_state(run):
    """Under serve: being written, or not closed with its writer gone (killed); in a static
    report: not closed cleanly, or nothing."""
    if run.get("writing"):
        return _fill("run_writing")
    if run["closed_cleanly"]:
        return ""
    return _fill("run_gone" if run.get("writing") is False else "run_not_closed")


def _sort_cell(text, number):
    """A cell sorted by `number` (None: blank, sorted last)."""
    return _fill("sort_cell", value=text, number="" if number is None else number)


def _hparam_cell(metadata, key):
    if key not in metadata:
        return _sort_cell("", None)
    v = metadata[key]
    return _sort_cell(html.escape(metadata_text(v)), v if is_number(v) else None)


def _last_cell(last, key):
    found = (last or {}).get(key)
    if found is None:
        return _sort_cell("", None)
    value = found["bad"] or f"{found['value']:.5g}"
    return _fill(
        "last_cell",
        value=value,
        gstep=found["gstep"],
        number="" if found["bad"] else found["value"],
    )


def _runs_table(runs, sweep):
    """The Runs table; `sweep`: the model's (``report._sweep``), whose hparams and last values
    are columns of their own."""
    hparams, last = sweep["hparams"], sweep["last"]
    heads = "".join(_fill("head", name=html.escape(k)) for k in hparams) + "".join(
        _fill("last_head", key=html.escape(k)) for k in last
    )
    rows = []
    for r in runs:
        g = r["gsteps"]
        rows.append(
            _fill(
                "run_row",
                label=html.escape(r["label"]),
                state=_run_state(r),
                path=html.escape(r["path"]),
                run_id=(_fill("run_id", id=html.escape(r["id"])) if r.get("id") else "")
                + (
                    _fill("run_restarts", text=html.escape(r["restarts"]))
                    if r.get("restarts")
                    else ""
                ),
                metadata=_metadata(r.get("metadata")),
                ranks=_ranks_text(r["ranks"]),
                gsteps="–" if g is None else f"{g[0]} … {g[1]}",
                records=r["records"],
                dropped=_fill("bad_cell" if r["dropped"] else "cell", value=r["dropped"]),
                duration=_human_seconds(r["duration_s"]),
                seconds="" if r["duration_s"] is None else r["duration_s"],
                size=human_bytes(r["bytes"]),
                bytes=r["bytes"],
                files=r["files"],
                keys=r["keys"],
                sweep="".join(_hparam_cell(hparams_of(r), k) for k in hparams)
                + "".join(_last_cell(r.get("last"), k) for k in last),
            )
        )
    return _fill("runs_table", heads=heads, rows="".join(rows))


# Rows of a static report's alerts table before its scripts (errors first); the others follow
# the charts' data in a <template> that report.js moves into the table once the page is read,
# so 980 "never changes" rows do not hold up the first chart.
ALERT_ROWS = 20


def _alerts_table(alerts, multi_run, shown=None):
    """(the alerts table with its first `shown` rows (None: all) and, when rows are left, a
    row saying so; the rows left in a <template id=alerts-rest>, else "")."""
    if not alerts:
        return _fill("no_alerts"), ""
    alerts = sorted(alerts, key=lambda a: SEVERITY_ORDER.get(a["severity"], 2))
    rows = []
    for a in alerts:
        key = html.escape(a["key"] or "")
        rows.append(
            _fill(
                "alert_row",
                severity=a["severity"],
                kind=html.escape(a["kind"]),
                run=_fill("cell", value=html.escape(a["run"])) if multi_run else "",
                link=_fill("key_link", anchor=_anchor(a["key"]), key=key) if a["key"] else "",
                rank="" if a["rank"] is None else a["rank"],
                gstep="" if a["gstep"] is None else a["gstep"],
                detail=html.escape(a["detail"]),
            )
        )
    run_head = _fill("run_head") if multi_run else ""
    shown = len(rows) if shown is None else shown
    first, rest = rows[:shown], rows[shown:]
    if rest:
        first.append(_fill("alerts_more", columns=6 if multi_run else 5, n=len(rest)))
    table = _fill("alerts_table", run_head=run_head, rows="".join(first))
    return table, _fill("alerts_rest", rows="".join(rest)) if rest else ""


def _ms(ns, digits=3):
    return "–" if ns is None else f"{ns / 1e6:.{digits}f}"


def _us(ns):
    return "–" if ns is None else f"{ns / 1e3:.1f}"


def _duration(ns):
    """A duration with its unit: µs under a millisecond, else ms ("6.55 ms", not "6554.8 µs")."""
    if ns is None:
        return "–"
    return f"{ns / 1e3:.1f} µs" if abs(ns) < 1e6 else f"{ns / 1e6:.2f} ms"


def _ranks_rows(ranks):
    """The per-rank rows of a run with several ranks (ms a step): window, busy, idle by cause,
    communication and its part not overlapped."""
    if not ranks:
        return ""
    rows = "".join(
        _fill(
            "gpu_rank_row",
            rank=html.escape(r),
            window=_ms(p["window"], 2),
            busy=_percent(p["busy"] / p["window"] if p["window"] else None),
            host_wait=_ms(p["idle_host_wait"], 2),
            kernel_wait=_ms(p["idle_kernel_wait"], 2),
            other=_ms(p["idle_other"], 2),
            comm=_ms(p["comm"], 2),
            exposed=_ms(p["comm"] - p["comm_overlap"], 2),
        )
        for r, p in ranks.items()
    )
    return _fill("gpu_ranks", rows=rows)


def _copies(copies):
    """The table of copies and memsets (``gpu_steps.copy_table``); "" when there are none."""
    if not copies:
        return ""
    rows = "".join(
        _fill(
            "copy_row",
            name=html.escape(c["name"]),
            count=c["count"],
            mb=f"{c['bytes'] / 1e6:.3f}",
            total_ms=_ms(c["total_ns"]),
            gbs="–" if c["bandwidth_gbs"] is None else f"{c['bandwidth_gbs']:.3g}",
        )
        for c in copies
    )
    return _fill("gpu_copies", rows=rows)


def _modules(rows):
    """The table of device time by module (``report.module_rows``); "" when the run has no
    ranges. Times are ms a step."""
    if not rows:
        return ""

    def number(value):
        return "–" if value is None else f"{value:.3g}"

    body = "".join(
        _fill(
            "module_row",
            module=html.escape("(no range)" if r["module"] is None else r["module"]),
            phases=html.escape(", ".join(sorted(set(r["phases"]))), quote=True),
            forward=_ms(r["forward"], 3),
            backward=_ms(r["backward"], 3),
            other=_ms(r["other"], 3),
            kernels=r["kernels"],
            bar=_bar(r["share"]),
            share=_percent(r["share"]),
            grad_norm=number(r["grad_norm"]),
            ratio=number(r["ratio"]),
        )
        for r in rows
    )
    return _fill("gpu_modules", rows=body)


def _configs_title(configs):
    """The grid cell's tooltip: whether the kernel ran with one launch configuration or several."""
    if configs > 1:
        return f"the configuration with the most time; {configs} distinct ones were launched"
    return "its only launch configuration" if configs == 1 else "no launch configuration recorded"


def _percent(share):
    return "–" if share is None else f"{100 * share:.1f}%"


def _bar(share):
    return f"{min(100 * (share or 0), 100):.0f}"


def _host_ranges(sections):
    """The tables of host time by range (``report.model_of``'s host_ranges), one per run that
    has named ranges; "" when none has."""
    several = len(sections) > 1
    return "".join(
        _fill(
            "host_ranges",
            run=f" ({html.escape(section['run'])})" if several else "",
            rows="".join(
                _fill(
                    "host_range_row",
                    name=html.escape(r["name"]),
                    category=html.escape(r["category"] or "–"),
                    calls=r["calls"],
                    self_ms=_ms(r["per_step_self_ns"]),
                    bar=_bar(r["share_self"]),
                    self_share=_percent(r["share_self"]),
                    total_ms=_ms(r["per_step_total_ns"]),
                    total_share=_percent(r["share_total"]),
                )
                for r in section["rows"]
            ),
        )
        for section in sections
    )


def _gpu_html(sections):
    """The GPU section: per run, the summary of its steps, the kernel table and the host CUDA
    API table (blocking calls marked), after the charts that report.js draws."""
    return _fill("gpu_heading", runs=_gpu_runs(sections)) if sections else ""


def _gpu_runs(sections):
    out = []
    for g in sections:
        p, launch = g["per_step"], g["launch"]
        kernel_rows = "".join(
            _fill(
                "kernel_row",
                name=html.escape(k["name"]),
                mangled=html.escape(k["mangled"], quote=True),
                count=k["count"],
                total_ms=_ms(k["total_ns"]),
                mean_us=_us(k["mean_ns"]),
                bar=_bar(k["share"]),
                share=_percent(k["share"]),
                grid=k["grid"] or "–",
                block=k["block"] or "–",
                registers="–" if k["registers"] is None else k["registers"],
                shared_kb="–" if k["shared_memory"] is None else f"{k['shared_memory'] / 1024:.1f}",
                configs=_configs_title(k["configs"]),
                occupancy=_percent(k["occupancy"]),
                est_occupancy=_percent(k["est_occupancy"]),
            )
            for k in g["kernels"]
        )
        api_rows = "".join(
            _fill(
                "api_row",
                name=html.escape(a["name"]),
                calls=a["calls"],
                total_ms=_ms(a["total_ns"]),
                mean_us=_us(a["mean_ns"]),
                bar=_bar(a["share"]),
                share=_percent(a["share"]),
                blocking=(
                    _fill("blocking_tag", calls=a["blocking"], of=a["calls"])
                    if a["blocking"]
                    else ""
                ),
            )
            for a in g["api"]
        )
        out.append(
            _fill(
                "gpu_run",
                run=html.escape(g["run"]),
                busy=_percent(g["busy"]),
                steps=g["steps"],
                window=_ms(p["window"], 2),
                compute=_ms(p["compute"], 2),
                memcpy=_ms(p["memcpy"], 3),
                memset=_ms(p["memset"], 3),
                idle=_ms(p["idle"], 2),
                idle_host_wait=_ms(p["idle_host_wait"], 2),
                idle_blocking=_ms(p["idle_blocking"], 2),
                idle_kernel_wait=_ms(p["idle_kernel_wait"], 2),
                idle_other=_ms(p["idle_other"], 2),
                ranks=_ranks_rows(g.get("ranks")),
                kernels="–" if p["kernels"] is None else f"{p['kernels']:.1f}",
                kernel_time=_ms(p["kernel_time"], 2),
                launches=(
                    "–"
                    if launch["launches_per_step"] is None
                    else f"{launch['launches_per_step']:g}"
                ),
                short_kernels=launch["short_kernels"],
                all_kernels=launch["kernels"],
                short_share=_percent(launch["short_share"]),
                delay_median=_duration(launch["delay_median_ns"]),
                delay_p99=_duration(launch["delay_p99_ns"]),
                dropped=_fill("gpu_dropped", dropped=g["dropped"]) if g["dropped"] else "",
                advice=(
                    _fill(
                        "gpu_advice",
                        items="".join(
                            _fill("gpu_advice_item", text=html.escape(a)) for a in g["advice"]
                        ),
                    )
                    if g.get("advice")
                    else ""
                ),
                top=len(g["kernels"]),
                kernel_names=g["kernel_names"],
                kernel_rows=kernel_rows,
                api_top=len(g["api"]),
                api_names=g["api_names"],
                api_rows=api_rows,
                copies=_copies(g.get("copies")),
                modules=_modules(g.get("modules")),
            )
        )
    return "".join(out)


# Rows of each comparison's table in "where the runs differ" (the earliest differing keys).
DIFFER_ROWS = 20


def _number(v):
    """A difference as the table shows it: "inf" (as_dict's string), 3 significant digits."""
    if v is None:
        return "–"
    return v if isinstance(v, str) else f"{v:.3g}"


def _differ_summary(d):
    """What one comparison found, in a line: how many keys differ of how many, and what exists
    on one side only (keys, ranks, gsteps)."""
    keys = {k["key"] for k in d["keys"]}
    differing = [k for k in d["keys"] if k["steps_differing"]]
    bases = sorted({k["basis"] for k in d["keys"] if k["basis"]})
    how = " and ".join(bases) or "nothing"
    if differing:
        parts = [
            f"{len({k['key'] for k in differing})} of {len(keys)} keys differ (compared by "
            f"{how}; the earliest first)"
        ]
    else:
        parts = [f"all {len(keys)} keys compared agree (by {how})"]
    if d["only_a"] or d["only_b"]:
        parts.append(f"keys on one side only: {len(d['only_a'])} + {len(d['only_b'])}")
    if d["ranks_only_a"] or d["ranks_only_b"]:
        parts.append(f"ranks on one side only: {d['ranks_only_a'] + d['ranks_only_b']}")
    only = sum(s["only_a"] + s["only_b"] for s in d["steps"])
    if only:
        parts.append(f"{only} gsteps on one side only")
    if d["per_rank"]:
        parts.append(f"{len(d['per_rank'])} per-rank keys not compared (activations, loss)")
    return " · ".join(parts)


def _differences_html(differences):
    """The "where the runs differ" section (issue 31): per comparison (the ranks of a run, or a
    later run against the first) its summary and the table of its differing keys, sorted by
    first divergence; the chart of their growth is report.js's (D.difference_charts)."""
    if not differences:
        return ""
    items = []
    for d in differences:
        differing = [k for k in d["keys"] if k["steps_differing"]]
        rows = []
        for k in differing[:DIFFER_ROWS]:
            p = k["first"] or {}
            rows.append(
                _fill(
                    "differ_row",
                    link=_fill("key_link", anchor=_anchor(k["key"]), key=html.escape(k["key"])),
                    ranks=f"{k['rank_a']} / {k['rank_b']}",
                    gstep=(k["structural_gstep"] if k["structural"] else p.get("gstep", "–")),
                    basis=html.escape(
                        k["structural"] if k["structural"] else p.get("basis") or "–"
                    ),
                    elements=(
                        f"{p['differing']} of {p['elements']}"
                        if p.get("elements") and p.get("basis") == "values"
                        else "–"
                    ),
                    max_abs=_number(p.get("max_abs")) if p.get("basis") == "values" else "–",
                    max_rel=_number(p.get("max_rel")) if p.get("basis") == "values" else "–",
                    ulps=_number(p.get("max_ulp")) if p.get("basis") == "values" else "–",
                    norms=(
                        f"{compare.norm_change(p)} / {compare.norm_change(k['last'])}"
                        if compare.has_norms(p)
                        else "–"
                    ),
                    steps=f"{k['steps_differing']} of {k['steps_compared']}",
                )
            )
        table = _fill("differ_table", rows="".join(rows)) if rows else ""
        if len(differing) > DIFFER_ROWS:
            table += _fill("differ_more", more=len(differing) - DIFFER_ROWS)
        label = d.get("label", "")
        if d.get("what") == "ranks":
            label = (
                f"ranks of {label} (each against rank {d['steps'][0]['rank_a']})"
                if d["steps"]
                else f"ranks of {label}"
            )
        items.append(
            _fill(
                "differ_item",
                label=html.escape(label),
                summary=html.escape(_differ_summary(d)),
                table=table,
            )
        )
    return _fill("differ_section", items="".join(items))


def _card(n, card, bad):
    key = card["key"]
    return _fill(
        "card",
        n=n,
        key_attr=html.escape(key, quote=True),
        anchor=_anchor(key),
        key=html.escape(key),
        meta=html.escape(card["meta"]),
        tag=_fill("nan_tag") if bad else "",
        once=_fill("once", text=html.escape(card["text"])) if card.get("text") else "",
    )


def runs_html(model):
    """The runs table of a model (serve sends it with each update)."""
    return _runs_table(model["runs"], model["sweep"])


def alerts_html(model):
    """The alerts table of a model, every row (serve sends it with each update)."""
    return _alerts_table(model["alerts"], len(model["runs"]) > 1)[0]


def sections_html(model):
    """What else of a model's page is a table that changes as a run is written (serve sends
    them with each update): {element id: its inner HTML}."""
    return {
        "headline-box": _headline(model),
        "host-ranges": _host_ranges(model.get("host_ranges", ())),
        "gpu-runs": _gpu_runs(model["gpu"]),
    }


def _headline(model):
    items = "".join(
        _fill(
            "headline_item",
            severity=h["severity"],
            tag=html.escape(h["tag"]),
            text=html.escape(h["text"]),
        )
        for h in model.get("headline", ())
    )
    return _fill("headline", items=items) if items else ""


# Cards whose charts travel in the page's main data block; the others' follow the scripts, one
# block each, parsed when the card comes into view: the first charts draw before the browser
# has read the rest of a large page (issue 32 #6).
INLINE_CARDS = 8


# One encoder for every card block (json.dumps would build one per call: 30,000 keys, 30,000).
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _card_data(n, charts, styles):
    data = _ENCODE(pack_charts(charts, styles)).translate(_SCRIPT_SAFE)
    return _fill("card_data", n=n, data=data)


# A key's charts travel packed (issue 32 #6: a 1,000 keys x 10,000 steps page was 14 MB of JSON
# numbers and of the same titles, notes, labels and colours repeated in every card): what
# describes a chart or a series (all but its data) once per page in a table of styles, each
# chart and series naming its entry ("h", "s"); an x that steps evenly as {"a": first, "d":
# step, "n": count}; a series' values (at least PACK_MIN of them) as {"c": value, "n": count}
# where they are all one value (a key that never moves), else as the base64 of their float32
# bytes, little-endian, NaN for None (5.3 characters a value, where JSON takes 8 to 11 for 5
# significant digits). report.js unpacks a card's charts (unpackCharts) when it draws them.
PACK_MIN = 16


def _pack_x(x):
    if len(x) >= 3 and all(b - a == x[1] - x[0] for a, b in zip(x, x[1:])):
        return {"a": x[0], "d": x[1] - x[0], "n": len(x)}
    return x


def _pack_values(values):
    if len(values) < PACK_MIN:
        return values
    if all(v == values[0] for v in values):
        return {"c": values[0], "n": len(values)}
    floats = np.array([np.nan if v is None else v for v in values], dtype="<f4")
    return base64.b64encode(floats.tobytes()).decode("ascii")


def _style(styles, described):
    """The index of `described` (a dict) in the page's table of styles (JSON -> index)."""
    return styles.setdefault(_ENCODE(described), len(styles))


def pack_charts(charts, styles):
    """Chart specs (``report_charts``) as the page holds them; styles: the page's table (a dict
    of JSON -> index, filled here; the page writes its keys in order)."""
    out = []
    for spec in charts:
        series = []
        for s in spec["series"]:
            packed = {"s": _style(styles, {k: v for k, v in s.items() if k not in _DATA})}
            packed["v"] = _pack_values(s["values"])
            if s.get("gaps"):
                packed["g"] = s["gaps"]
            series.append(packed)
        head = {k: v for k, v in spec.items() if k not in ("x", "series")}
        out.append({"h": _style(styles, head), "x": _pack_x(spec["x"]), "series": series})
    return out


_DATA = ("values", "gaps")


def charts_json(charts):
    """A card's charts as serve's /card sends them: {"styles": [...], "charts": [packed]}."""
    styles = {}
    packed = pack_charts(charts, styles)
    return _ENCODE({"styles": list(styles), "charts": packed}).translate(_SCRIPT_SAFE)


def _unpack_values(values):
    if isinstance(values, list):
        return values
    if isinstance(values, dict):
        return [values["c"]] * values["n"]
    floats = np.frombuffer(base64.b64decode(values), dtype="<f4").tolist()
    # The values were rounded to 5 significant digits before packing (report_charts): rounded
    # again, the float32 gives them back exactly.
    return [None if v != v else float(f"{v:.5g}") for v in floats]


def unpack_charts(charts, styles):
    """``pack_charts`` undone: the specs as ``report_charts`` built them. styles: the page's
    table, as a list."""
    out = []
    for packed in charts:
        x = packed["x"]
        if not isinstance(x, list):
            x = [x["a"] + i * x["d"] for i in range(x["n"])]
        series = [
            dict(styles[s["s"]], values=_unpack_values(s["v"]), gaps=s.get("g", []))
            for s in packed["series"]
        ]
        out.append(dict(styles[packed["h"]], x=x, series=series))
    return out


def model_from_page(page):
    """The report model a page holds (its main data block with each card's charts put back):
    what tests and tools read back from a written report."""
    # The blocks hold no "<" (_SCRIPT_SAFE): each ends where the next tag begins.
    model = json.loads(re.search(r"id='xdl-report-data'>([^<]*)", page).group(1))
    rest = re.search(r"id='xdl-report-rest'>([^<]*)", page)
    if rest:
        model.update(json.loads(rest.group(1)))
    for n, block in re.findall(r"id='cd-(\d+)'>([^<]*)", page):
        model["cards"][int(n)]["charts"] = json.loads(block)
    styles = [json.loads(s) for s in model.pop("styles", [])]
    for card in model["cards"]:
        card.pop("n_charts", None)
        if card["charts"] is not None:
            card["charts"] = unpack_charts(card["charts"], styles)
    return model


def render_html(model, live=False, version=0):
    """The report page as one string: styles, uPlot and the data inlined, no external URL.
    live: the page of ``xdl-trace serve`` (report_assets/live.js polls the server for new
    data); else a static report, complete as written."""
    # serve's page (live) holds no chart data: its cards fetch their charts (live.js).
    inline = [] if live else model["cards"][:INLINE_CARDS]
    later = model["cards"] if live else model["cards"][INLINE_CARDS:]
    # What the page's script does not read (the alerts, drawn here as a table; the differences)
    # follows the scripts in a block of its own: the first charts draw before it is read.
    rest = {} if live else {k: model[k] for k in ("alerts", "differences") if k in model}
    styles = {}  # The page's table of styles (pack_charts): JSON -> index.
    packed = [dict(c, charts=pack_charts(c["charts"], styles)) for c in inline]
    card_data = "".join(
        _card_data(n, c["charts"], styles)
        for n, c in enumerate([] if live else later, start=len(inline))
    )
    page_model = dict(
        {k: v for k, v in model.items() if k not in rest},
        cards=[dict(c, n_charts=len(c["charts"])) for c in packed]
        + [dict(c, charts=None, n_charts=len(c["charts"])) for c in later],
        styles=list(styles),
    )
    data = json.dumps(page_model, separators=(",", ":"), allow_nan=False).translate(_SCRIPT_SAFE)
    if rest:
        card_data = _fill("rest_data", data=_ENCODE(rest).translate(_SCRIPT_SAFE)) + card_data
    # serve's page is small and each update replaces the table whole: every row in place.
    alerts_table, alerts_rest = _alerts_table(
        model["alerts"], len(model["runs"]) > 1, None if live else ALERT_ROWS
    )
    bad_keys = {a["key"] for a in model["alerts"] if a["severity"] == "error"}
    cards = [_card(n, card, card["key"] in bad_keys) for n, card in enumerate(model["cards"])]
    return _fill(
        "page",
        headline=_headline(model),
        title=html.escape(model["title"]),
        live="1" if live else "0",
        version=version,
        live_state=_fill("live_state") if live else "",
        live_js=_fill("live_script", js=_asset_body("live.js")) if live else "",
        tool="serve" if live else "report",
        uplot_css=_asset("uPlot.min.css"),
        css=_asset_body("report.css"),
        runs=html.escape(model["named"]),
        generated=html.escape(model["generated"]),
        runs_table=_runs_table(model["runs"], model["sweep"]),
        sweep=_fill("sweep_section") if model["sweep"]["charts"] else "",
        n_alerts=len(model["alerts"]),
        alerts_table=alerts_table,
        steps=(
            _fill("steps", host_ranges=_host_ranges(model.get("host_ranges", ())))
            if model["steps"]
            else _fill("no_steps")
        ),
        gpu=_gpu_html(model["gpu"]),
        n_cards=len(model["cards"]),
        differ=_differences_html(model.get("differences")),
        cards="".join(cards),
        data=data,
        uplot_js=_asset("uPlot.iife.min.js"),
        js=_asset_body("report.js"),
        card_data=card_data + alerts_rest,
    )
