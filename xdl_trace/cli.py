"""The ``xdl-trace`` command (also ``python3 -m xdl_trace``): info, dump, verify, export,
timeline, find-nan, diff, report, --version.

The top floor of the package: it imports the library (reader, analysis, timeline, report) and no
library module imports it. Each subcommand is one ``@command`` function plus the options it
declares; adding a subcommand is adding one decorated function here.
"""

import argparse
import bisect
import contextlib
import csv
import datetime
import hashlib
import json
import os
import shlex
import sys
import urllib.parse
import warnings
import zipfile

import numpy as np

from .read import analysis, gpu_steps, report, report_html, timeline, trace_runs
from .read.alerts import counted
from .read.compare import diff as diff_runs, has_norms, norm_change
from ._version import __version__
from .errors import RunChoiceError, TraceError, printable
from .read.progress import Progress
from .read.reader import STATS_FIELDS, open_trace, parse_summary  # STATS_FIELDS: from _core.
from .read.selection import ATTEMPTS, Selection

__all__ = ["main", "command", "Progress"]

_COMMANDS = {}  # name -> (help, configure(parser), run(args) -> exit code)


def command(name, help, configure=None):
    """Registers ``run(args) -> int`` as subcommand `name`; ``configure(parser)``
    adds its options (PATH, --prefix and --name are added for every command)."""

    def register(run):
        _COMMANDS[name] = (help, configure, run)
        return run

    return register


def _open(args, default_run=None):
    """The trace of the command's path, restricted to the run --run names and the attempts
    --attempts reads (docs/python.md "Runs")."""
    run = default_run if args.run is None else args.run
    return open_trace(
        args.path, prefix=args.prefix, name=args.name, run=run, attempts=args.attempts
    )


def _run_dict(run):
    return {
        "id": run.id,
        "ranks": run.ranks,
        "world_size": run.world_size,
        "hosts": run.hosts,
        "start_ms": run.start_ms,
        "end_ms": run.end_ms,
        "gsteps": None if run.gsteps is None else list(run.gsteps),
        "records": run.records,
        "files": run.files,
        "closed_cleanly": run.closed_cleanly,
        "argv": run.argv,
        "version": run.version,
        "metadata": run.metadata,
        "attempts": run.attempts,
        "resumes": run.resumes,
    }


def _parse_gsteps(text):
    """ "A:B" (inclusive, either side optional) or "A" -> (begin, end)."""
    if text is None:
        return None
    try:
        if ":" in text:
            begin, end = text.split(":", 1)
            return (int(begin) if begin else None, int(end) if end else None)
        return (int(text), int(text))
    except ValueError:
        raise ValueError(
            f"--gsteps {text!r}: expected A:B (inclusive; A: or :B open-ended) or one gstep A"
        ) from None


def _parse_list(text):
    return [k for k in text.split(",") if k] if text else None


def _parse_ranks(text):
    try:
        return [int(r) for r in _parse_list(text)] if text else None
    except ValueError:
        raise ValueError(
            f"--ranks {text!r}: expected ranks separated by commas, e.g. 0,1"
        ) from None


def _check_output(path):
    """Before any reading: a clear error when `path` cannot be created where it is asked for."""
    where = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(where):
        raise FileNotFoundError(f"cannot write {path}: no directory {where}")


def _selection_options(parser):
    parser.add_argument("--keys", help="comma-separated keys (default: all)")
    parser.add_argument("--gsteps", help="gstep range A:B, inclusive (A: or :B open-ended)")
    parser.add_argument("--ranks", help="comma-separated ranks (default: all)")


def _selection(args):
    """The Selection of the command's --keys, --gsteps, --ranks, --run and --attempts, those of
    them it has (each command's library call takes it whole)."""
    return Selection.of(
        keys=getattr(args, "keys", None),
        gsteps=_parse_gsteps(getattr(args, "gsteps", None)),
        ranks=_parse_ranks(getattr(args, "ranks", None)),
        run=args.run,
        attempts=args.attempts,
    )


def _shown(text):
    """`text` (a key, path or message from a trace) on one line, control characters escaped
    (errors.printable: C0, DEL, C1, line separators, bidi controls; issue 24)."""
    return printable(text)


def _human(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0


# --- info --------------------------------------------------------------------


def _info_configure(parser):
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _scan(f):
    """What a scan of the data file finds (for a Meta that a crash or a running writer left
    stale): complete records and whether the last frame is torn, counted by hopping over the
    frames' length prefixes (no decoding, no checksum: `verify` checks those)."""
    count = f.open().count_frames()
    return {"records": count["records"], "torn_tail": bool(count["torn_tail"])}


@command(
    "info",
    "files, ranks (closed cleanly? dropped records), keys, dtypes, shapes, step ranges and sizes",
    _info_configure,
)
def _info(args):
    trace = _open(args, default_run="all")  # Lists every run; --run narrows the files.
    # A damaged file (its Header) leaves the keys unread: the runs and files are still listed,
    # then the error, exit 1 (a sweep with one damaged run: info says which file).
    unreadable = None
    try:
        schema = trace.schema()
        keys = [_key_info(k, entry) for k, entry in schema.items()] or [
            _header_key_info(k, trace) for k in trace.keys
        ]
    except TraceError as error:
        schema, keys, unreadable = {}, [], error
    files = []
    for f in trace.files:
        meta = f.meta or {}
        xdl_meta = bool(meta) and meta.get("format_version") == 0  # No record count: unknown.
        # XDL writes its Meta only when it finishes a file: there is no "closed" flag to read.
        closed = None if xdl_meta or not meta else meta.get("closed_cleanly")
        files.append(
            {
                "path": f.path,
                "rank": f.rank,
                "index": f.index,
                "bytes": f.size,
                "records": None if xdl_meta else meta.get("record_count"),
                "xdl_meta": xdl_meta,
                "gsteps": [meta.get("gstep_begin"), meta.get("gstep_end")] if meta else None,
                "lsteps": [meta.get("lstep_begin"), meta.get("lstep_end")] if meta else None,
                "closed_cleanly": closed,
                "dropped_records": meta.get("dropped_records") if meta else None,
                "meta": "ok" if meta else (f.meta_error or "missing"),
                # Meta is stale unless the writer closed the file (and an XDL Meta has no
                # count): count by scanning instead.
                "scanned": None if closed else _scan(f),
                # A restarted run's earlier attempt: its records from here on are not read.
                "superseded_from": f.superseded_from,
            }
        )
    ranks = []
    for rank in trace.ranks:
        mine = [f for f in files if f["rank"] == rank]
        ranks.append(
            {
                "rank": rank,
                "closed_cleanly": all(f["closed_cleanly"] in (True, None) for f in mine),
                "dropped_records": sum(f["dropped_records"] or 0 for f in mine),
            }
        )
    info = {
        "path": trace.path,
        "runs": [_run_dict(r) for r in trace.runs],
        "run": None if trace.run is None else trace.run.id,
        "ranks": trace.ranks,
        "rank_status": ranks,
        "files": files,
        "bytes": trace.nbytes,
        "gaps": trace.gaps(),
        "copies": [{"path": c.path, "why": c.why} for c in trace.copies],
        "keys": keys,
        "beside": _beside(trace.path, args.prefix, args.name, trace.run),
        "error": None if unreadable is None else str(unreadable),
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0 if unreadable is None else 1
    print(f"trace: {trace.path}")
    if len(trace.runs) > 1 or (trace.runs and trace.runs[0].id):
        shown = "all runs" if trace.run is None else f"run {trace.run.id}"
        print(f"runs: {len(trace.runs)}, oldest first (showing {shown}; pick one with --run)")
        for run in trace.runs:
            mine = [files[i] for i in run.file_indices if i < len(files)]
            # Not closed cleanly: the scan's count, never the stale Metas' "no records"; a file
            # closed cleanly beside them (a restarted run's later attempt) by its Meta's count.
            scanned = (
                sum(
                    f["records"] or 0 if f["scanned"] is None else f["scanned"]["records"]
                    for f in mine
                )
                if not run.closed_cleanly and any(f["scanned"] is not None for f in mine)
                else None
            )
            print(f"  {run.describe(scanned)}")
            if run.metadata:
                print(f"    metadata: {json.dumps(run.metadata, sort_keys=True)}")
    print(
        f"ranks: {', '.join(map(str, trace.ranks))}   files: {len(files)}   size: {_human(trace.nbytes)}"
    )
    for r in ranks:
        state = (
            "closed cleanly"
            if r["closed_cleanly"]
            else "NOT closed: still being written, or the writer stopped (crash)"
        )
        print(f"  rank {r['rank']}: {state}; {r['dropped_records']} records dropped")
    for gap in info["gaps"]:
        print(f"  missing: {_shown(gap)}")
    for copy in trace.copies:
        print(f"  left out: {_shown(os.path.basename(copy.path))}: {_shown(copy.why)}")
    print("files:")
    for f in files:
        steps = "gsteps ?" if f["gsteps"] is None else f"gsteps {f['gsteps'][0]}..{f['gsteps'][1]}"
        scanned = f["scanned"]["records"] if f["scanned"] is not None else None
        if scanned is not None and f["records"] is not None and scanned != f["records"]:
            # A live or killed run: its Meta is behind; the scan is what the file holds.
            records = f"{scanned} records (Meta, not final, says {f['records']})"
            steps = "gsteps ?" if not f["records"] else steps + " (per Meta)"
        elif f["records"] is not None:
            records = f"{f['records']} records"
        else:
            records = "records unknown (XDL Meta)" if f["xdl_meta"] else "? records"
        superseded = (
            ""
            if f["superseded_from"] is None
            else f"  (superseded from gstep {f['superseded_from']} by a later attempt)"
        )
        print(
            f"  rank {f['rank']} #{f['index']}  {_human(f['bytes']):>9}  {records}"
            f"  {steps}  {_shown(os.path.basename(f['path']))}{superseded}"
        )
        if f["meta"] != "ok":
            print(f"    meta: {_shown(f['meta'])}")
        if f["scanned"] is not None:
            torn = (
                ", then a torn (still being written?) final frame"
                if f["scanned"]["torn_tail"]
                else ""
            )
            why = (
                "XDL Meta has no record count" if f["xdl_meta"] else "not closed: Meta may be stale"
            )
            print(f"    {why}; scanning found {f['scanned']['records']} complete records{torn}")
    beside = info["beside"]
    if beside is not None:
        what = "eval" if beside["prefix"] == "test" else "training"
        read = (
            "the runs' evaluations, which report, find-nan, diff and timeline read with them; "
            "alone: --prefix test"
            if what == "eval"
            else f"read them with --prefix {beside['prefix']}"
        )
        of_run = beside["of_run"]
        shown = (
            ""
            if of_run is None
            else f"; the run shown: {counted(of_run['runs'], 'run')}, "
            f"{of_run['records']} records"
        )
        print(
            f"also here: {what} files {beside['prefix']}.{args.name}.* ({beside['runs']} run(s), "
            f"{beside['records']} records{shown}): {read}"
        )
    if unreadable is not None:
        print(f"keys: not read: {_shown(str(unreadable))}")
        print(f"xdl-trace info: error: {_shown(str(unreadable))}", file=sys.stderr)
        return 1
    print(f"keys ({len(info['keys'])}{'' if schema else ', from the Header: no record yet'}):")
    for k in info["keys"]:
        stored = _spec_text(k, "not declared at start")
        if k.get("summary_of") is None:
            print(f"  {_shown(k['key'])}  {stored}")
        else:  # What the user traced, then the row the file stores per step.
            source = _spec_text(k["summary_of"], "a tensor not declared at start")
            stored = "" if k["dtype"] is None and k["shape"] is None else f" (stored as {stored})"
            print(f"  {_shown(k['key'])}  {k['kind']} of {source}{stored}")
    return 0


def _beside(path, prefix, name, run=None):
    """The other file set of a run directory (a training run's eval files, test.*, or the
    reverse), which `prefix` does not read: {"prefix", "runs", "records", "of_run"}, else None.
    "of_run": for the training Run `run`, the eval runs paired with it
    (``trace_runs.evaluation_of``) as {"runs", "records"}; None when not asked."""
    other = "test" if prefix == "train" else "train"
    if not os.path.isdir(path):
        return None
    try:
        others = trace_runs.runs(path, prefix=other, name=name)
    except FileNotFoundError:
        return None
    records = sum(r.records or 0 for r in others)
    of_run = None
    if run is not None and other == "test":
        found = trace_runs.evaluation_of(path, run, name)
        ids = () if found is None else found[0] if isinstance(found[0], tuple) else (found[0],)
        mine = [r for r in others if r.id in ids]
        of_run = {"runs": len(mine), "records": sum(r.records or 0 for r in mine)}
    return {"prefix": other, "runs": len(others), "records": records, "of_run": of_run}


def _header_key_info(key, trace):
    """A key of `info` with no record to read: what the first file's Header says of it (the
    tensor it declares, and for a summary its kind); the stored dtype and shape are unknown."""
    descriptors = trace.descriptors_of(0) if trace.files else None
    descriptor = (descriptors or {}).get(key)
    out = {"key": key, "dtype": None, "shape": None}
    if descriptor is not None:
        _describe_source(out, descriptor)
    return out


def _describe_source(out, descriptor):
    """Adds to a key of `info` the tensor its Header descriptor declares: for a summary its kind
    and `summary_of`; for a value its dtype and shape where no record gave them."""
    shape = descriptor.get("input_shape")
    source = {
        "dtype": descriptor.get("input_dtype") or None,
        "shape": None if shape is None else list(shape),
    }
    if descriptor["kind"] in (None, "value"):
        if out["dtype"] is None and out["shape"] is None:
            out.update(source)
    else:
        out["kind"] = descriptor["kind"]
        out["summary_of"] = source


def _spec_text(spec, unknown):
    """A dtype and shape ("float32[3, 2]", "?" for a part unknown), or `unknown` for both."""
    if spec["dtype"] is None and spec["shape"] is None:  # Known only at each capture.
        return unknown
    return f"{spec['dtype'] or '?'}{_shape_text(spec['shape'])}"


def _shape_text(shape):
    return "?" if shape is None else "[" + ", ".join(map(str, shape)) + "]"


def _key_info(key, entry):
    """A key of `info`: its stored dtype and shape, and for a summary column (stats, histogram,
    digest, user summary) its kind and the dtype and shape of the tensor it summarises."""
    dtype, shape = entry
    out = {"key": key, "dtype": dtype, "shape": list(shape)}
    if entry.descriptor is not None:
        _describe_source(out, entry.descriptor)
    return out


# --- dump --------------------------------------------------------------------


def _dump_configure(parser):
    _selection_options(parser)
    parser.add_argument("--max-records", type=int, default=None, help="stop after N records")
    parser.add_argument(
        "--summary", action="store_true", help="min/max/mean of value columns instead of values"
    )


def _format_stats(stats):
    return " ".join(f"{name}={value:g}" for name, value in zip(stats._fields, stats))


def _dump_column(record, key, array, summarize):
    """One line's body: a summary column by its fields' names (stats, histogram, digest),
    a value column as its values, or with `summarize` their min/max/mean over
    the finite values (and the NaN/inf counts)."""
    info = None if record.descriptors is None else record.descriptors.get(key)
    kind = None if info is None else info["kind"]
    if kind in ("stats", "histogram", "digest") and array.size:
        try:
            summary = record.summary(key)
        except ValueError as error:  # A layout newer than this reader: print the raw values.
            return f"{np.array2string(array, threshold=20, edgeitems=3)} ({error})"
        if kind == "stats":
            return "stats " + _format_stats(summary)
        if kind == "digest":  # A checksum: its 64 bits, never statistics of its halves.
            return f"digest {summary:016x}"
        edges, counts = summary
        return (
            f"histogram {len(counts)} bins over [{edges[0]:g}, {edges[-1]:g}]: counts "
            + np.array2string(counts, threshold=40, edgeitems=5)
        )
    if summarize and array.size and array.dtype.kind in "biuf":
        values = array.astype(np.float64).reshape(-1)
        finite = values[np.isfinite(values)]
        nan = int(np.isnan(values).sum())
        inf = values.size - finite.size - nan
        if finite.size == 0:
            return f"no finite value (nan={nan} inf={inf})"
        body = f"min={finite.min():g} max={finite.max():g} mean={finite.mean():g}"
        return body + (f" nan={nan} inf={inf}" if nan or inf else "")
    return np.array2string(array, threshold=20, edgeitems=3)


def _run_of_file(trace, args):
    """{data file path: run id} when the trace reads several runs (--run all), else {}."""
    if trace.run is not None or len(trace.runs) < 2:
        return {}
    # --run all reads every listed file, in the listing's order (Run.file_indices).
    return {trace.files[i].path: run.id for run in trace.runs for i in run.file_indices}


def _iso_utc(ms):
    """Epoch milliseconds as ISO 8601 UTC with milliseconds, '2026-11-28T14:19:25.123Z' (the
    raw number stays beside it in dump and CSV); "" when out of range."""
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return ""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@command("dump", "print records (gstep, lstep, timestamp, columns)", _dump_configure)
def _dump(args):
    trace = _open(args)
    run_of = _run_of_file(trace, args)
    printed = 0
    for record in trace.records(selection=_selection(args).replace(keys=_parse_list(args.keys))):
        if args.max_records is not None and printed >= args.max_records:
            break
        printed += 1
        run = f" run: {run_of[record.path]}" if run_of else ""
        print(
            f"rank: {record.rank} gstep: {record.gstep} lstep: {record.lstep} timestamp: "
            f"{record.timestamp} ({_iso_utc(record.timestamp) or 'out of range'}){run}"
        )
        for key, array in record.columns.items():
            body = _dump_column(record, key, array, args.summary)
            print(f"  {_shown(key)} {array.dtype}{list(array.shape)}: {body}")
    if not printed:  # Say so: an empty output reads like an empty trace.
        steps = [f.meta for f in trace.files if f.meta and f.meta.get("record_count")]
        span = (
            f"; gsteps {min(m['gstep_begin'] for m in steps)}.."
            f"{max(m['gstep_end'] for m in steps)}"
            if steps
            else ""
        )
        print(
            f"no record in the selection (ranks: {', '.join(map(str, trace.ranks))}{span})",
            file=sys.stderr,
        )
    return 0  # A torn final frame was reported as a TornTailWarning on stderr.


# --- verify ------------------------------------------------------------------


@command("verify", "check every file against its Meta (exit 1 on any problem)")
def _verify(args):
    trace = _open(args, default_run="all")  # Every file, whatever run wrote it.
    traces = [trace]
    if args.run is None and _beside(trace.path, args.prefix, args.name) is not None:
        # And the directory's other file set (a training run's eval files, test.*): a damaged
        # eval file fails verify as a training file does.
        other = "test" if args.prefix == "train" else "train"
        traces.append(
            open_trace(trace.path, prefix=other, name=args.name, run="all", attempts=args.attempts)
        )
    with Progress(sum(t.nbytes for t in traces), "verify") as progress:
        reports = [r for t in traces for r in t.verify(on_progress=progress)]
    failed = unverifiable = 0
    for r in reports:
        name = _shown(os.path.basename(r["path"]))
        if r["ok"] and r["unverifiable"]:  # XDL's Meta, or a crash before the first Meta.
            unverifiable += 1
            print(f"UNVERIFIABLE {name}: {_shown(r['note'])}")
        elif r["ok"]:
            tail = ""
            if r["unverified_tail_bytes"]:  # Written since the last Meta: a live or killed run.
                after = r["records_read"] - r["records_counted"]
                tail = (
                    f", then {after} records ({r['unverified_tail_bytes']} bytes) written after"
                    " the Meta, their record checksums ok"
                )
            if r["torn_tail"]:
                tail += ", torn final frame"
            print(
                f"OK    {name}: {r['records_counted']} records, crc32c {r['crc_actual']:08x}{tail}"
            )
        else:
            failed += 1
            print(f"FAIL  {name}")
            for problem in r["problems"]:
                print(f"      {_shown(problem)}")
    verified = len(reports) - failed - unverifiable
    note = f", {unverifiable} unverifiable (nothing to check them against)" if unverifiable else ""
    print(f"{verified} of {len(reports)} files verified{note}")
    gaps = [gap for t in traces for gap in t.gaps()]  # Missing files and ranks fail too.
    for gap in gaps:
        print(f"MISSING {_shown(gap)}")
    return 1 if failed or gaps else 0


# --- export ------------------------------------------------------------------


def _export_configure(parser):
    _selection_options(parser)
    parser.add_argument("-o", "--output", required=True, help="output file (.npz or .csv)")
    parser.add_argument(
        "--format", choices=("npz", "csv"), help="default: from the output's extension"
    )


# The npz layout (docs/reader.md "export"), one for one rank or many: each rank's index arrays
# (gstep, lstep, timestamp) and its keys' arrays live apart, under rank<R>/ and rank<R>/keys/,
# so no key can take an index array's name; a key's array name is the key percent-encoded into
# one path segment (never "..", never a "/"), and a key too long for a zip member name is cut
# and hashed. The top-level arrays `keys` and `members` map every key to its array name.
_MEMBER_MAX = 200  # Characters of an array name (a file name once unzipped: at most 255 bytes).


def npz_member(key):
    """The array name of `key` under rank<R>/keys/ (docs/reader.md "export")."""
    member = urllib.parse.quote(key, safe="").replace("~", "%7E")  # "~" marks a hashed name.
    if not member.strip("."):  # "", "." or "..": never a path segment of its own.
        member = member.replace(".", "%2E") or "%"  # A lone "%" encodes no character.
    if len(member) <= _MEMBER_MAX:
        return member
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{member[:_MEMBER_MAX - 17]}~{digest}"


def _export_npz(trace, args, selection):
    keys, ranks = selection.keys, selection.ranks
    # A stats key is a structured array: one named field per statistic (z[...]["max"]).
    schema = trace.schema()  # Once: schema() builds a dict of every key.
    stats = {key for key in keys if _is_stats(schema.get(key))}
    # A digest key: its uint64 digests, one a step (as Record.summary and CSV's hex cell).
    digests = {key for key in keys if getattr(schema.get(key), "kind", None) == "digest"}
    stats_dtype = np.dtype([(field, np.float64) for field in STATS_FIELDS])
    members = {key: npz_member(key) for key in keys}
    arrays = {
        "ranks": np.asarray(ranks, dtype=np.int32),
        "keys": np.asarray(keys, dtype=str),
        "members": np.asarray([members[k] for k in keys], dtype=str),
    }
    total = sum(f.size for f in trace.files if f.rank in ranks)
    with Progress(total * 2, "export") as progress:
        for rank in ranks:
            prefix = f"rank{rank}/"
            steps, lsteps, stamps = [], [], []
            steps_only = selection.replace(keys=[], ranks=[rank])
            for r in trace.records(on_progress=progress, selection=steps_only):
                steps.append(r.gstep)
                lsteps.append(r.lstep)
                stamps.append(r.timestamp)
            arrays[prefix + "gstep"] = np.asarray(steps, dtype=np.int64)
            arrays[prefix + "lstep"] = np.asarray(lsteps, dtype=np.int64)
            arrays[prefix + "timestamp"] = np.asarray(stamps, dtype=np.int64)
            # A key whose shape changes (an activation of a last, smaller batch) comes flattened,
            # its shapes beside it: it used to fail the whole export ("stack needs one shape").
            stacked = trace.stack_many(keys, gsteps=selection.gsteps, rank=rank, ragged=True)
            progress(sum(f.size for f in trace.files_of_rank(rank)))
            for key, (key_steps, values, shapes) in stacked.items():
                if shapes is not None:
                    arrays[prefix + "shape_of/" + members[key]] = shapes
                if key in stats:
                    values = np.ascontiguousarray(values).view(stats_dtype)[..., 0]
                elif key in digests:
                    values = parse_summary(key, values, schema[key].descriptor, trace.path)
                arrays[prefix + "keys/" + members[key]] = values
                if len(key_steps) != len(steps) or not np.array_equal(key_steps, steps):
                    arrays[prefix + "gstep_of/" + members[key]] = key_steps
    output = args.output if args.output.endswith(".npz") else args.output + ".npz"  # As np.savez.
    with _replaced_when_complete(output, "wb") as out:
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            for name, array in arrays.items():
                with archive.open(name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
    print(
        f"wrote {_shown(output)}: {counted(len(arrays), 'array')} "
        f"({counted(len(keys), 'key')} x {counted(len(ranks), 'rank')})"
    )


@contextlib.contextmanager
def _replaced_when_complete(path, mode, **kwargs):
    """A file object writing beside `path` (as `timeline` does), renamed to it once the body has
    run: a failure (a full disk, an error, ^C) leaves no partial file and any older `path`."""
    partial = f"{path}.partial-{os.getpid()}"
    try:
        with open(partial, mode, **kwargs) as out:
            yield out
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _is_stats(entry):
    """Whether a schema entry is a stats column (float64[8]: so described in the Header, or
    any float64[8] in a file without column descriptors)."""
    if entry is None:
        return False
    dtype, shape = entry
    kind = getattr(entry, "kind", None)
    stats_like = dtype == "float64" and tuple(shape or ()) == (len(STATS_FIELDS),)
    return kind == "stats" or (kind is None and stats_like)


def _csv_columns(schema, keys):
    """(key, header names, is a digest) for every key that fits a CSV row: scalars (one
    element), stats columns and digests (one hex cell); and the keys that do not fit."""
    out, skipped = [], []
    for key in keys:
        entry = schema.get(key)
        shape = None if entry is None else entry[1]
        if shape is None:
            skipped.append(key)
        elif getattr(entry, "kind", None) == "digest":
            out.append((key, [key], True))
        elif int(np.prod(shape)) == 1:
            out.append((key, [key], False))
        elif _is_stats(entry):
            out.append((key, [f"{key}.{f}" for f in STATS_FIELDS], False))
        else:
            skipped.append(key)
    return out, skipped


def _export_csv(trace, args, selection):
    columns, skipped = _csv_columns(trace.schema(), selection.keys)
    if skipped and (args.keys or not columns):  # Asked for by name, or nothing would be left.
        names = ", ".join(repr(k) for k in skipped)
        print(
            f"xdl-trace export: error: {names} cannot be written as CSV (one value, one stats "
            f"row or one digest per step fits a row); write them to npz: "
            f"-o {_npz_name(args.output)}",
            file=sys.stderr,
        )
        return 2
    if skipped:
        names = _shown(", ".join(skipped))
        print(f"csv: skipping non-scalar keys: {names} (use npz)", file=sys.stderr)
    total = sum(f.size for f in trace.files if f.rank in selection.ranks)
    rows = 0
    with _replaced_when_complete(args.output, "w", newline="") as out, Progress(
        total, "export"
    ) as progress:
        writer = csv.writer(out)
        writer.writerow(
            ["rank", "gstep", "lstep", "timestamp", "time_utc"]
            + [_csv_text(h) for _, hs, _ in columns for h in hs]
        )
        selected = [k for k, _, _ in columns]
        for r in trace.records(on_progress=progress, selection=selection.replace(keys=selected)):
            row = [r.rank, r.gstep, r.lstep, r.timestamp, _iso_utc(r.timestamp)]
            for key, headers, digest in columns:
                values = r.columns[key].reshape(-1)
                if values.size == 0:  # Empty (trace_once) column.
                    row.extend([""] * len(headers))
                elif digest:  # 0x and its 64 bits in hex: text to a spreadsheet and pandas.
                    row.append(f"0x{r.summary(key):016x}")
                else:
                    row.extend(v.item() for v in values)
            writer.writerow(row)
            rows += 1
    print(f"wrote {args.output}: {counted(rows, 'row')}, {counted(len(columns), 'key')}")
    return 0


def _csv_text(text):
    """A text cell that a spreadsheet shows as text: one starting with = + - @, a tab or a CR is
    prefixed with ' (OWASP, "CSV Injection"), so a key named =HYPERLINK(...) is no formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _npz_name(output):
    base, ext = os.path.splitext(output)
    return (base if ext.lower() == ".csv" else output) + ".npz"


@command(
    "export",
    "write selected keys to .npz (any column; stats keys as named fields) or .csv (scalar, "
    "stats and digest columns)",
    _export_configure,
)
def _export(args):
    ext = os.path.splitext(args.output)[1].lower()
    if args.format is None and ext not in ("", ".npz", ".csv"):
        raise ValueError(
            f"-o {args.output}: export writes .npz or .csv (name the file so, or give --format)"
        )
    _check_output(args.output)
    trace = _open(args)
    fmt = args.format or ("csv" if ext == ".csv" else "npz")
    all_keys = trace.keys  # A fresh list per access: read it once (issue 24 row 2).
    keys = _parse_list(args.keys) or all_keys
    known = set(all_keys)
    missing = [k for k in keys if k not in known]
    if missing:  # Exit 2, as for a key CSV cannot hold: the command was asked wrongly.
        print(
            f"xdl-trace export: error: no key {_shown(repr(missing[0]))} "
            f"(keys: {_shown(', '.join(all_keys))}){_eval_keys_hint(args)}",
            file=sys.stderr,
        )
        return 2
    selection = _selection(args)
    selection = selection.replace(keys=keys, ranks=selection.ranks or trace.ranks)
    if fmt == "npz":
        _export_npz(trace, args, selection)
    elif _export_csv(trace, args, selection):
        return 2  # Said: keys CSV cannot hold.
    evaluation = None if args.keys else trace.evaluation()
    if evaluation is not None:  # Every key asked for: say where the others are.
        several = " --run all" if evaluation.run is None else ""
        print(
            f"note: the run's evaluation ({', '.join(evaluation.keys[:5])} in "
            f"test.{args.name}.* beside it) is not in {_shown(args.output)}: export it with "
            f"--prefix test{several} -o <another file>",
            file=sys.stderr,
        )
    return 0


# --- find-nan ----------------------------------------------------------------


def _find_nan_configure(parser):
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    parser.add_argument("--keys", help="comma-separated key globs (default: all)")
    parser.add_argument("--gsteps", help="gstep range A:B, inclusive (A: or :B open-ended)")


@command(
    "find-nan",
    "first NaN/Inf per key (rank, gstep, lstep, count); exit 1 when any is found",
    _find_nan_configure,
)
def _find_nan(args):
    trace = _open(args)
    selection = _selection(args)
    with Progress(trace.nbytes, "find-nan") as progress:
        scan, evaluation = analysis.nan_scans(
            args.path, args.prefix, args.name, selection, on_progress=progress
        )
    found = analysis.first_bad_values(scan, evaluation, selection)  # [(BadValue, of eval)]
    scans = [scan] if evaluation is None else [scan, evaluation]
    unchecked = sum(len(s.unchecked) for s in scans)
    # What a histogram summary can say (issue 24 #11): its counts are of finite values only.
    unchecked = (
        f"{counted(unchecked, 'histogram key')} not "
        'checked: a histogram summary counts finite values only (docs/format.md "Summary '
        'columns"); trace a stats summary to count NaN/Inf'
        if unchecked
        else ""
    )
    if args.json:
        print(json.dumps([dict(b.as_dict(), eval=evaluated) for b, evaluated in found], indent=2))
        if unchecked:
            print(f"xdl-trace find-nan: note: {unchecked}", file=sys.stderr)
        return 1 if found else 0
    if not found:
        read = [(s, what) for s, what in zip(scans, ("", "eval ")) if s.keys]
        print(
            "no NaN or Inf in "
            + ", nor in ".join(
                f"{counted(len(s.keys) - len(s.unchecked), what + 'key')} over "
                f"{counted(s.total_records, 'record')}"
                for s, what in read or [(scan, "")]
            )
        )
    traced = _traced_gsteps(trace, [b for b, evaluated in found if not evaluated])
    for b, evaluated in found:
        print(
            f"{_shown(b.key)}{' (eval)' if evaluated else ''}: first at gstep {b.gstep} (rank "
            f"{b.rank}, lstep {b.lstep}): {b.nan} NaN, {b.inf} Inf; {b.records} record(s) affected"
            + ("" if evaluated else _clean_before(traced[b.rank], b.gstep))
        )
    if unchecked:
        print(unchecked)
    beside = _beside(trace.path, args.prefix, args.name)
    if beside is not None and evaluation is None:
        print(
            f"not read: the {beside['records']} records of {beside['prefix']}.{args.name}.* beside"
            f" them (find-nan --prefix {beside['prefix']} reads those)"
        )
    return 1 if found else 0


def _traced_gsteps(trace, found):
    """{rank: sorted gsteps of its records up to its last first-NaN gstep}, read once (no
    column decoded) for every rank in `found`."""
    traced = {}
    for rank in {b.rank for b in found}:
        last = max(b.gstep for b in found if b.rank == rank)
        upto = Selection(keys=[], ranks=[rank], gsteps=(None, last))
        traced[rank] = sorted({r.gstep for r in trace.records(selection=upto)})
    return traced


def _clean_before(traced, gstep):
    """Where a filtered run (traced every N steps) leaves a first NaN at `gstep`: "; last clean
    traced gstep 151, so it appeared between 151 and 155 (...)" when the traced gstep before it
    (in `traced`, sorted) is not the step before; "" when it is, or when none comes before."""
    i = bisect.bisect_left(traced, gstep)
    if i == 0 or traced[i - 1] == gstep - 1:
        return ""
    last = traced[i - 1]
    return (
        f"; last clean traced gstep {last}, so it appeared between {last} and {gstep} "
        "(the steps between were not traced)"
    )


# --- diff --------------------------------------------------------------------


def _diff_configure(parser):
    parser.add_argument(
        "other", nargs="?", metavar="B", help="the run to compare with PATH (omit: its ranks)"
    )
    parser.add_argument(
        "--ranks",
        nargs="?",
        const="",
        help="compare the ranks of PATH, each against the lowest (optionally only these, "
        "comma-separated); with B: the ranks compared, rank r with rank r",
    )
    parser.add_argument("--keys", help="comma-separated key globs (default: all)")
    parser.add_argument("--gsteps", help="gstep range A:B, inclusive (A: or :B open-ended)")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    parser.add_argument(
        "--per-rank",
        metavar="GLOBS",
        help="keys that legitimately differ per rank (not compared across ranks; activations, "
        "losses and other non-parameter sources already are not)",
    )
    parser.add_argument("--run-b", help="which run of B (default: as --run)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _g(value):
    return "inf" if value == float("inf") else f"{value:.3g}"


@command(
    "diff",
    "where two runs (or the ranks of one) first differ, key by key; exit 1 when anything does",
    _diff_configure,
)
def _diff(args):
    if args.other is not None and args.ranks == "":
        raise ValueError("--ranks without a list compares the ranks of one run: give PATH only")
    ranks = _parse_ranks(args.ranks)
    result = diff_runs(
        args.path,
        args.other,
        keys=args.keys,
        gsteps=_parse_gsteps(args.gsteps),
        ranks=ranks,
        rtol=args.rtol,
        atol=args.atol,
        per_rank=args.per_rank,
        prefix=args.prefix,
        name=args.name,
        run=args.run,
        run_b=args.run_b,
        attempts=args.attempts,
    )
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
        return 0 if result.identical else 1
    if result.keys or result.evaluation is None:  # Else --keys took the evaluations' alone.
        print(_diff_text(result, args.other is None) + "\n")
    if result.evaluation is not None:
        print(f"evaluations (test.{args.name}.* beside the runs):")
        print(_diff_text(result.evaluation, False))
    elif result.evaluation_only:
        print(f"evaluation only in {result.evaluation_only} (test.{args.name}.*): not compared")
    return 0 if result.identical else 1


def _diff_text(result, ranks):
    """The diff as text: the differing keys (earliest first), then what one side lacks."""
    lines = []
    side = "rank" if ranks else "run"
    differing = result.differing
    if differing:
        # Digests say where, not how much: their l2 norms (watch's stats, or values) say it.
        norms = any(has_norms(k.first) for k in differing)
        rows = [
            ("KEY", "RANKS", "FIRST", "BY", "DIFFERING", "AT", "MAX ABS", "MAX REL", "ULP", "LAST")
            + ("ABS",)
            + (("L2 FIRST", "L2 LAST") if norms else ())
        ]
        for k in differing:
            first, last = k.first, k.last
            blind = k.structural or first["basis"] != "values"
            rows.append(
                (
                    _shown(k.key),
                    f"{k.rank_a}:{k.rank_b}",
                    str(first["gstep"]),
                    "structure" if k.structural else first["basis"],
                    f"{first['differing']}/{first['elements']}" if not blind else "-",
                    str(first["first_index"]) if not blind else "-",
                    _g(first["max_abs"]) if not blind else "-",
                    _g(first["max_rel"]) if not blind else "-",
                    str(first["max_ulp"]) if not blind else "-",
                    str(last["gstep"]),
                    _g(last["max_abs"]) if not blind else "-",
                )
                + ((norm_change(first), norm_change(last)) if norms else ())
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.append(
            "(FIRST: the first differing gstep, BY what it was compared, the elements that differ "
            "there, the first of them (AT, C order), their max abs/rel difference and ULPs; LAST: "
            "the last differing gstep and its max abs"
            + (
                "; L2 FIRST/LAST: by digests, how B's l2 norm differs from A's there)"
                if norms
                else ")"
            )
        )
        for k in differing:
            if k.structural:
                lines.append(
                    f"structural: {_shown(k.key)} (ranks {k.rank_a}:{k.rank_b}) from gstep "
                    f"{k.structural_gstep}: {_shown(k.structural)}"
                )
        digest_note = "exact; how much: the L2 columns" if norms else "exact; no magnitudes"
        for basis, note in (("digests", digest_note), ("summaries", "not exact")):
            keys = sorted({k.key for k in differing if k.first["basis"] == basis})
            if keys:  # The BY column names each: a few here, not a model's thousand keys.
                named = ", ".join(_shown(k) for k in keys[:5])
                more = f" (and {len(keys) - 5} more)" if len(keys) > 5 else ""
                lines.append(f"compared by {basis} ({note}): {named}{more}")
    for keys, where in ((result.only_a, "A"), (result.only_b, "B")):
        if keys:
            lines.append(f"keys only in {where}: {', '.join(_shown(k) for k in keys)}")
    for ranks_only, where in ((result.ranks_only_a, "A"), (result.ranks_only_b, "B")):
        if ranks_only:
            lines.append(f"ranks only in {where}: {', '.join(map(str, ranks_only))}")
    for s in result.steps:
        for count, named, where in (
            (s["only_a"], s["only_a_gsteps"], "A" if not ranks else f"rank {s['rank_a']}"),
            (s["only_b"], s["only_b_gsteps"], "B" if not ranks else f"rank {s['rank_b']}"),
        ):
            if count:
                more = f" (and {count - len(named)} more)" if count > len(named) else ""
                lines.append(
                    f"{count} gstep(s) only in {where}"
                    + ("" if ranks else f" (ranks {s['rank_a']}:{s['rank_b']})")
                    + f": {', '.join(map(str, named))}{more}"
                )
    if result.per_rank:
        lines.append(
            f"not compared across ranks (per rank: activations, losses, declared): "
            f"{len(result.per_rank)} key(s)"
        )
    if ranks and result.replicated:
        lines.append(f"compared across ranks: {result.replicated}")
    compared = {k.key for k in result.keys}
    steps = sum(s["compared"] for s in result.steps)
    bases = sorted({k.basis for k in result.keys if k.basis})
    how = " and ".join(bases) if bases else "nothing"
    if result.records_identical:
        lines.append(
            f"{'ranks agree' if ranks else 'identical'}: {len(compared)} key(s) over {steps} "
            f"step pair(s), compared by {how}"
            + ("" if bases != ["summaries"] else " (equal summaries prove nothing exact)")
        )
    elif differing:
        first = differing[0]
        lines.append(
            f"{side} {first.rank_b if ranks else 'B'} differs from {side} "
            f"{first.rank_a if ranks else 'A'} from gstep {first.first['gstep']} in "
            f"{_shown(first.key)}"
            + (f" (and {len(differing) - 1} more)" if len(differing) > 1 else "")
        )
    return "\n".join(lines)


# --- timeline ----------------------------------------------------------------


def _timeline_configure(parser):
    parser.add_argument(
        "-o", "--output", default="trace.json", help="JSON file to write (default trace.json)"
    )
    parser.add_argument("--gsteps", help="gstep window A:B, inclusive (A: or :B open-ended)")
    parser.add_argument("--ranks", help="comma-separated ranks (default: all)")


@command(
    "timeline",
    "write host steps and device activity as a Chrome/Perfetto trace (JSON)",
    _timeline_configure,
)
def _timeline(args):
    _check_output(args.output)
    # Written beside the output and renamed at the end: an error leaves no file behind.
    partial = f"{args.output}.partial-{os.getpid()}"
    try:
        info = timeline.write_timeline(
            args.path,
            partial,
            prefix=args.prefix,
            name=args.name,
            selection=_selection(args),
        )
        os.replace(partial, args.output)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    print(
        f"wrote {args.output}: {info['steps']} traced steps, {info['steps_not_traced']} steps "
        f"not traced, "
        + (f"{info['eval_steps']} eval steps, " if info["eval_steps"] else "")
        + f"{info['device_events']} device events, {info['flows']} flows from "
        f"{info['ranks']} rank(s)"
        + (
            f"; {info['dropped_events']} device events dropped while tracing"
            if info["dropped_events"]
            else ""
        )
        + " (open in ui.perfetto.dev or chrome://tracing)"
    )
    if info["bytes"] > timeline.BROWSER_LIMIT_BYTES:
        print(
            f"warning: {args.output} is {info['bytes'] / 2**20:.0f} MiB; browser viewers "
            f"struggle above {timeline.BROWSER_LIMIT_BYTES // 2**20} MiB: write a window, e.g. "
            "--gsteps A:B (and --ranks R)",
            file=sys.stderr,
        )
    if info["steps"] == 0 and info["steps_not_traced"] == 0 and info["device_events"] == 0:
        print(
            "note: no host spans or device events in these records (files written before "
            "host spans existed, or a window with no steps)",
            file=sys.stderr,
        )
    return 0


# --- report ------------------------------------------------------------------


def _report_configure(parser):
    parser.add_argument("more_runs", nargs="*", metavar="RUN", help="more runs to overlay")
    parser.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    parser.add_argument("--png", metavar="DIR", help="also write one PNG per chart into DIR")
    parser.add_argument("--keys", help="comma-separated key globs (default: all)")
    parser.add_argument("--gsteps", help="gstep range A:B, inclusive (A: or :B open-ended)")
    parser.add_argument("--ranks", help="comma-separated ranks (default: all)")


@command(
    "report",
    "write an HTML report (curves, distributions, alerts) of one or more runs",
    _report_configure,
)
def _report(args):
    _check_output(args.output)
    runs = [args.path] + list(args.more_runs)
    traces = [
        open_trace(r, prefix=args.prefix, name=args.name, run=args.run or "all") for r in runs
    ]
    _say_every_run_drawn(traces, args.run)
    with Progress(sum(t.nbytes for t in traces), "report") as progress:
        result = report.write_report(
            runs,
            args.output,
            png_dir=args.png,
            prefix=args.prefix,
            name=args.name,
            on_progress=progress,
            selection=_selection(args),
        )
    errors = sum(a["severity"] == "error" for a in result["alerts"])
    print(
        f"wrote {args.output}: {result['charts']} charts, {len(result['alerts'])} alert(s)"
        + (f" ({errors} error{'s' if errors > 1 else ''})" if errors else "")
        + f", {report_html.human_bytes(result['bytes'])}"
    )
    if result["pngs"]:
        print(f"wrote {len(result['pngs'])} PNG(s) to {args.png}")
    return 0


def _say_every_run_drawn(traces, run):
    """The note of report and serve given a directory of several runs and no --run: each run is
    drawn, a series of its own (a sweep, a notebook run twice), and how to pick one."""
    for trace in traces:
        if run is None and len(trace.runs) > 1:
            print(
                f"{trace.path} holds {len(trace.runs)} runs: each is drawn, a series of its own "
                "(--run latest or --run ID for one; `xdl-trace info` lists them)",
                file=sys.stderr,
            )


_GPU_SORT = {"total": "total_ns", "count": "count", "mean": "mean_ns"}


def _gpu_configure(parser):
    parser.add_argument("--csv", metavar="DIR", help="write every row as CSV files into DIR")
    parser.add_argument(
        "--sort", choices=sorted(_GPU_SORT), default="total", help="kernel order (default total)"
    )
    parser.add_argument("--grep", help="only kernels and calls whose name holds this text")
    parser.add_argument("--top", type=int, default=15, help="rows printed per table (default 15)")
    _selection_options(parser)


@command(
    "gpu",
    "the GPU time of a run: busy, idle in HTA's categories, advice, every kernel and CUDA call",
    _gpu_configure,
)
def _gpu(args):
    scan = analysis.scan_run(
        args.path, prefix=args.prefix, name=args.name, selection=_selection(args)
    )
    if scan.gpu is None:
        print(
            f"xdl-trace gpu: {args.path} has no device events (trace with"
            " device_tracers=['cupti'] on a GPU: docs/device-tracing.md)",
            file=sys.stderr,
        )
        return 1
    tables = gpu_steps.full_tables(scan.gpu, scan.device_events.columns(), args.grep)
    key = _GPU_SORT[args.sort]
    tables["kernels"].sort(key=lambda row: -row[key])
    section = report.gpu_section(scan.label, scan.gpu)
    p = section["per_step"]
    if section["steps"]:
        print(
            f"GPU busy {100 * section['busy']:.1f}% of {section['steps']} step(s), "
            f"{p['window'] / 1e6:.2f} ms a step; idle {p['idle'] / 1e6:.2f} ms = host wait "
            f"{p['idle_host_wait'] / 1e6:.2f} (after a sync {p['idle_blocking'] / 1e6:.2f}) + "
            f"kernel wait {p['idle_kernel_wait'] / 1e6:.2f} + other {p['idle_other'] / 1e6:.2f}"
        )
    for line in section["advice"]:
        print(f"- {line}")
    for name, rows in tables.items():
        if name in ("steps", "modules"):
            continue
        # Kernels with the device's limits recorded: their theoretical occupancy too.
        occupancy = any(row.get("occupancy") is not None for row in rows)
        print(f"{name} ({len(rows)}{', occupancy' if occupancy else ''}):")
        for row in rows[: args.top]:
            total = row.get("total_ns", 0) / 1e6
            occ = row.get("occupancy")
            occ = ("" if occ is None else f"{100 * occ:5.1f}%  ") if occupancy else ""
            print(
                f"  {total:10.3f} ms  {row.get('count', row.get('calls')):>7}  {occ}"
                f"{_shown(row['name'])}"
            )
    if tables["modules"]:
        print(
            f"modules: GPU time by the layer and phase that launched it ({len(tables['modules'])}):"
        )
        for row in tables["modules"][: args.top]:
            where = "(no range)" if row["module"] is None else f"{row['phase']} {row['module']}"
            print(
                f"  {row['per_step_ns'] / 1e6:10.3f} ms/step  {row['kernels']:>7}  {_shown(where)}"
            )
    if args.csv:
        os.makedirs(args.csv, exist_ok=True)
        for name, rows in tables.items():
            if not rows:
                continue
            path = os.path.join(args.csv, f"{name}.csv")
            with open(path, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
            print(f"wrote {path} ({len(rows)} rows)")
    return 0


# --- ranges ------------------------------------------------------------------

_RANGE_SORT = {"self": "self_ns", "total": "total_ns", "calls": "calls"}


def _ranges_configure(parser):
    parser.add_argument(
        "--sort", choices=sorted(_RANGE_SORT), default="self", help="row order (default self)"
    )
    parser.add_argument("--top", type=int, default=20, help="rows printed (default 20)")
    parser.add_argument("--csv", metavar="FILE", help="write every row to FILE as CSV")
    _selection_options(parser)


@command(
    "ranges",
    "host time by named range (xdl.watch's module marks, the optimizer step, xdl.host_range "
    "blocks): own and total time a step, as torch.profiler's Self CPU and CPU total",
    _ranges_configure,
)
def _ranges(args):
    selection = _selection(args)
    scan = analysis.scan_run(args.path, prefix=args.prefix, name=args.name, selection=selection)
    if args.prefix == "train":  # Its evaluation's time, where it ran.
        evaluation = analysis.scan_evaluation(
            args.path, _open(args).runs_read, args.name, selection
        )
        if evaluation is not None:
            analysis.add_evaluation_ranges(scan, evaluation[0])
    rows = sorted(scan.host_ranges, key=lambda row: -row[_RANGE_SORT[args.sort]])
    if not rows:
        print(
            f"xdl-trace ranges: {args.path} has no named host ranges between two steps (trace "
            "with xdl.watch(model, marks=True) or `with xdl.host_range(name):` blocks)",
            file=sys.stderr,
        )
        return 1
    print(f"host time by range ({len(rows)}), ms a step and share of the step time:")
    print(f"  {'self ms':>9} {'self':>6} {'total ms':>9} {'total':>6} {'calls':>7}  range")
    for row in rows[: args.top]:
        where = f"{row['category']} {row['name']}" if row["category"] else row["name"]
        print(
            f"  {row['per_step_self_ns'] / 1e6:9.3f} {100 * row['share_self']:5.1f}%"
            f" {row['per_step_total_ns'] / 1e6:9.3f} {100 * row['share_total']:5.1f}%"
            f" {row['calls']:>7}  {_shown(where)}"
        )
    if args.csv:
        _check_output(args.csv)
        with _replaced_when_complete(args.csv, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv} ({len(rows)} rows)")
    return 0


# --- serve -------------------------------------------------------------------


def _port(text):
    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is no port: 0 to 65535 (0: any free port)")
    return port


def _serve_configure(parser):
    parser.add_argument("more_runs", nargs="*", metavar="RUN", help="more runs to follow")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: local only)"
    )
    parser.add_argument("--port", type=_port, default=8080, help="port (default 8080; 0: any free)")


@command(
    "serve",
    "serve the report as a local web page that follows the runs as they write (every run of "
    "each directory, new ones as they begin; --run latest follows the newest alone)",
    _serve_configure,
)
def _serve(args):
    from .read import serve

    runs = [args.path] + list(args.more_runs)
    for path in runs:
        try:
            _say_every_run_drawn(
                [open_trace(path, prefix=args.prefix, name=args.name, run="all")], args.run
            )
        except FileNotFoundError:
            pass  # Not written yet: serve waits for it.

    def ready(url):
        print(f"serving {', '.join(runs)} at {url} (Ctrl-C stops)", flush=True)

    try:
        serve.serve(
            runs, args.host, args.port, args.prefix, args.name, on_ready=ready, run=args.run
        )
    except KeyboardInterrupt:
        pass
    return 0


# --- entry point -------------------------------------------------------------


# Commands whose exit 1 is an answer (diff: the runs differ; find-nan: one was found): an error
# exits 2 there, as diff(1) and grep(1) do, so a script tells the two apart.
_ANSWER_BY_EXIT_1 = ("diff", "find-nan")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="xdl-trace", description="Inspect xdl_trace / XDL trace files."
    )
    parser.add_argument(
        "--version", action="version", version=f"xdl-trace {__version__} (Python {sys.executable})"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (help_text, configure, run) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("path", help="a data file or a directory of them")
        p.add_argument("--prefix", default="train", help='"train" (default) or "test"')
        p.add_argument("--name", default="trace", help='output_file_name (default "trace")')
        p.add_argument(
            "--run",
            default=None,
            help='which run when the directory holds several: "latest", a run id (or a unique '
            'prefix of one) or "all" (info, verify, report and serve default to all; `info` '
            "lists the runs)",
        )
        p.add_argument(
            "--attempts",
            choices=ATTEMPTS,
            default="latest",
            help="of a run a restarted job wrote in several attempts (same run id): read each "
            'gstep from the attempt that wrote it last ("latest", the default), or every '
            'attempt\'s records as written ("all": resumed gsteps twice)',
        )
        if configure is not None:
            configure(p)
        p.set_defaults(_run=run, _error_exit=2 if name in _ANSWER_BY_EXIT_1 else 1)
    return parser


def _run_choice_message(error, command):
    """A RunChoiceError in CLI terms: --run, not run='...'; for diff, how to compare two runs
    of the directory (reading them together compares nothing)."""
    if error.run is None:
        head = f"{error.path} holds {len(error.runs)} runs"
    elif sum(r.id.startswith(error.run) for r in error.runs) > 1:
        head = f"--run {error.run!r} is the prefix of several runs in {error.path}"
    else:
        head = f"--run {error.run!r} matches no run in {error.path}"
    pick = (
        "pick one with --run latest, --run ID (a unique prefix is enough) or read them together "
        "with --run all"
    )
    if command == "diff":
        path = shlex.quote(error.path)
        pick = (
            f"compare two of them with `xdl-trace diff {path} {path} --run ID --run-b ID` (a "
            "unique prefix is enough), or the ranks of one with --run ID"
        )
    return f"{head}; {pick} (oldest first):\n" + "\n".join(r.listing() for r in error.runs)


def _format_warning(message, category, filename, lineno, line=None):
    return f"xdl-trace: warning: {_shown(message)}\n"


def main(argv=None):
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # Bare `xdl-trace`: what it can do.
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    warnings.formatwarning = _format_warning  # One plain line per torn file, no source echo.
    try:
        return args._run(args)
    except BrokenPipeError:  # pragma: no cover - `xdl-trace dump | head`
        return 0
    except RunChoiceError as error:
        message = _run_choice_message(error, args.command)
        print(f"xdl-trace {args.command}: error: {message}", file=sys.stderr)
        return args._error_exit
    except (TraceError, OSError, KeyError, ValueError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        hint = _eval_keys_hint(args) if isinstance(error, LookupError) else ""
        print(f"xdl-trace {args.command}: error: {_shown(message)}{hint}", file=sys.stderr)
        return args._error_exit


def _eval_keys_hint(args):
    """For a key the training run lacks: "; the run's evaluation holds eval/acc (...): read it
    with --prefix test" where the --keys asked for match keys of its eval records; else ""."""
    if not getattr(args, "keys", None) or getattr(args, "prefix", None) != "train":
        return ""
    try:
        evaluation = _open(args).evaluation()
    except (TraceError, OSError, ValueError):
        return ""
    keys = [] if evaluation is None else analysis.select_keys(evaluation.keys, args.keys)
    if not keys:
        return ""
    several = " --run all" if evaluation.run is None else ""  # A hook begun per evaluation.
    return (
        f"; the run's evaluation (test.{args.name}.* beside it) holds {', '.join(keys[:5])}: "
        f"read it with --prefix test{several}"
    )


if __name__ == "__main__":
    sys.exit(main())
