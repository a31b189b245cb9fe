"""The report page: fills the template report_assets/report.html with a report model (see
``xdl_trace.report.build_report``), its styles and script (report.css, report.js) and the
vendored uPlot, into one HTML string that needs no network.

Every piece of markup is a fragment of the template; this module only escapes values and picks
fragments. The model travels as JSON in the page; report.js draws the charts from it.
"""

import functools
import html
import json
import os
import re
import string

__all__ = ["render_html", "runs_html", "alerts_html", "model_from_page", "human_bytes"]

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
            value=html.escape(v if isinstance(v, str) else json.dumps(v, sort_keys=True)),
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


def _runs_table(runs):
    rows = []
    for r in runs:
        g = r["gsteps"]
        rows.append(
            _fill(
                "run_row",
                label=html.escape(r["label"]),
                state=_run_state(r),
                path=html.escape(r["path"]),
                run_id=_fill("run_id", id=html.escape(r["id"])) if r.get("id") else "",
                metadata=_metadata(r.get("metadata")),
                ranks=_ranks_text(r["ranks"]),
                gsteps="–" if g is None else f"{g[0]} … {g[1]}",
                records=r["records"],
                dropped=_fill("bad_cell" if r["dropped"] else "cell", value=r["dropped"]),
                duration=_human_seconds(r["duration_s"]),
                size=human_bytes(r["bytes"]),
                files=r["files"],
                keys=r["keys"],
            )
        )
    return _fill("runs_table", rows="".join(rows))


def _alerts_table(alerts, multi_run):
    if not alerts:
        return _fill("no_alerts")
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
    return _fill("alerts_table", run_head=run_head, rows="".join(rows))


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


def _percent(share):
    return "–" if share is None else f"{100 * share:.1f}%"


def _bar(share):
    return f"{min(100 * (share or 0), 100):.0f}"


def _gpu_html(sections):
    """The GPU section: per run, the summary of its steps, the kernel table and the host CUDA
    API table (blocking calls marked), after the charts that report.js draws."""
    if not sections:
        return ""
    out = [_fill("gpu_heading")]
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
    return _runs_table(model["runs"])


def alerts_html(model):
    """The alerts table of a model (serve sends it with each update)."""
    return _alerts_table(model["alerts"], len(model["runs"]) > 1)


# Cards whose charts travel in the page's main data block; the others' follow the scripts, one
# block each, parsed when the card comes into view: the first charts draw before the browser
# has read the rest of a large page (issue 32 #6).
INLINE_CARDS = 8


# One encoder for every card block (json.dumps would build one per call: 30,000 keys, 30,000).
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _card_data(n, charts):
    return _fill("card_data", n=n, data=_ENCODE(charts).translate(_SCRIPT_SAFE))


def model_from_page(page):
    """The report model a page holds (its main data block with each card's charts put back):
    what tests and tools read back from a written report."""
    # The blocks hold no "<" (_SCRIPT_SAFE): each ends where the next tag begins.
    model = json.loads(re.search(r"id='xdl-report-data'>([^<]*)", page).group(1))
    for n, block in re.findall(r"id='cd-(\d+)'>([^<]*)", page):
        model["cards"][int(n)]["charts"] = json.loads(block)
    for card in model["cards"]:
        card.pop("n_charts", None)
    return model


def render_html(model, live=False, version=0):
    """The report page as one string: styles, uPlot and the data inlined, no external URL.
    live: the page of ``xdl-trace serve`` (report_assets/live.js polls the server for new
    data); else a static report, complete as written."""
    inline = model["cards"] if live else model["cards"][:INLINE_CARDS]
    later = [] if live else model["cards"][INLINE_CARDS:]
    page_model = dict(
        model,
        cards=[dict(c, n_charts=len(c["charts"])) for c in inline]
        + [dict(c, charts=None, n_charts=len(c["charts"])) for c in later],
    )
    data = json.dumps(page_model, separators=(",", ":"), allow_nan=False).translate(_SCRIPT_SAFE)
    card_data = "".join(_card_data(n, c["charts"]) for n, c in enumerate(later, start=len(inline)))
    bad_keys = {a["key"] for a in model["alerts"] if a["severity"] == "error"}
    cards = [_card(n, card, card["key"] in bad_keys) for n, card in enumerate(model["cards"])]
    items = "".join(
        _fill("headline_item", text=html.escape(h["text"])) for h in model.get("headline", ())
    )
    return _fill(
        "page",
        headline=_fill("headline", items=items) if items else "",
        title=html.escape(model["title"]),
        live="1" if live else "0",
        version=version,
        live_state=_fill("live_state") if live else "",
        live_js=_fill("live_script", js=_asset_body("live.js")) if live else "",
        tool="serve" if live else "report",
        uplot_css=_asset("uPlot.min.css"),
        css=_asset_body("report.css"),
        runs=html.escape(", ".join(r["label"] for r in model["runs"])),
        generated=html.escape(model["generated"]),
        runs_table=_runs_table(model["runs"]),
        n_alerts=len(model["alerts"]),
        alerts_table=_alerts_table(model["alerts"], len(model["runs"]) > 1),
        steps=_fill("steps" if model["steps"] else "no_steps"),
        gpu=_gpu_html(model["gpu"]),
        n_cards=len(model["cards"]),
        cards="".join(cards),
        data=data,
        uplot_js=_asset("uPlot.iife.min.js"),
        js=_asset_body("report.js"),
        card_data=card_data,
    )
