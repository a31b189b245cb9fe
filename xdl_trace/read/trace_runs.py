"""Runs of a trace: ``runs(path)`` lists them; ``open_trace(path, run=...)`` picks one.

A run is what one tracer wrote between ``begin()`` and ``end()``: every file of it shares a
run id (Meta.run_id) and carries the run's RunInfo in its Header (docs/format.md "Runs").
Files written by XDL have no run id: they are one run with id "". The grouping is the C++
reader's (``TraceReader::Runs``); this module gives it a Pythonic face.

    for run in xdl.runs("out"):
        print(run.id, run.ranks, run.world_size, run.start, run.gsteps, run.metadata)
    trace = xdl.open_trace("out", run="latest")   # or a run id (a unique prefix is enough), "all"
"""

import collections
import contextlib
import datetime
import json
import os
import threading
import warnings

from .. import _core, errors
from .selection import attempts_of

__all__ = [
    "Run",
    "RestartedRunWarning",
    "CopiedFile",
    "CopiedFileWarning",
    "runs",
    "evaluation_of",
    "listed_once",
    "listing",
    "open_reader",
    "select_run",
    "set_aside_copies",
]


CopiedFile = collections.namedtuple("CopiedFile", "path rank index why")
CopiedFile.__doc__ = """A data file left out of reading: its ``path``, the ``rank`` and ``index`` of
its name, and ``why`` (what its Meta says instead)."""


class CopiedFileWarning(UserWarning):
    """A data file whose Meta names another rank or file index than its name: a copied or
    renamed file, holding another file's records. Readers leave it out (its records would be
    counted twice, or under a rank that never ran); ``verify`` fails it."""


class RestartedRunWarning(UserWarning):
    """A run id was written by more than one attempt (a job restarted with the same run id):
    their records are merged, so resumed gsteps appear more than once."""


def _datetime(ms):
    if not ms:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


class Run:
    """One run of a trace.

    ``id`` ("" for XDL's files), ``ranks``, ``world_size`` (None when not recorded), ``hosts``,
    ``pids`` ({rank: pid}), ``argv`` and ``version`` (of the lowest rank), ``metadata`` (the
    ``TraceHook(metadata=...)`` dict, {} when none), ``start_ms``/``end_ms`` (milliseconds since
    the epoch, None when unknown; ``start``/``end`` as UTC datetimes), ``gsteps`` ((first, last)
    or None), ``records`` (the Metas' counts, a restarted run's superseded records included; None
    when a file's count is unknown), ``files`` (how many),
    ``closed_cleanly``, ``infos`` ({rank: the Header's RunInfo as a dict}), ``attempts``
    (writers of one rank under this run id, by pid and start time: more than 1 when a job
    restarted with the same run id) and ``resumes`` (where each later attempt took over: a dict
    of ``rank``, ``attempt`` (2 for the second) and ``gstep``, its first; the earlier attempts'
    records from there on are superseded, see ``open_trace``'s ``attempts``); ``evaluation``:
    eval files (test.*), which need not hold every rank of the world size (an evaluation on
    rank 0 alone is no incomplete run)."""

    __slots__ = (
        "id",
        "ranks",
        "world_size",
        "hosts",
        "pids",
        "argv",
        "version",
        "metadata",
        "start_ms",
        "end_ms",
        "gsteps",
        "records",
        "files",
        "closed_cleanly",
        "infos",
        "attempts",
        "resumes",
        "file_indices",
        "evaluation",
        "_listed",  # The listing that made it (``listing``'s _Listed), or None.
    )

    def __init__(self, summary, evaluation=False):
        self._listed = None
        self.id = summary["run_id"]
        self.evaluation = evaluation
        self.ranks = list(summary["ranks"])
        self.infos = {
            rank: info for rank, info in zip(self.ranks, summary["run_infos"]) if info is not None
        }
        first = self.infos[min(self.infos)] if self.infos else {}
        sizes = {info["world_size"] for info in self.infos.values() if info["world_size"] > 0}
        self.world_size = max(sizes) if sizes else None
        self.hosts = sorted({info["hostname"] for info in self.infos.values() if info["hostname"]})
        self.pids = {rank: info["pid"] for rank, info in self.infos.items() if info["pid"]}
        self.argv = list(first.get("argv", []))
        self.version = first.get("version") or None
        text = first.get("metadata_json") or ""
        try:
            self.metadata = json.loads(text) if text else {}
        except ValueError:
            self.metadata = {"_unparsed": text}
        self.start_ms = summary["start_time_ms"] or None
        self.end_ms = summary["end_time_ms"] or None
        self.gsteps = None if summary["gsteps"] is None else tuple(summary["gsteps"])
        self.records = None if summary["records"] < 0 else summary["records"]
        self.files = len(summary["files"])
        self.file_indices = list(summary["files"])  # Into the reader's files (Trace.files).
        self.closed_cleanly = summary["closed_cleanly"]
        self.attempts = summary.get("attempts", 1)
        self.resumes = list(summary.get("resumes", []))

    def writers(self, rank=None):
        """The processes that wrote the run (of `rank`; default every rank): {(host, pid)}."""
        return {
            (info["hostname"], info["pid"])
            for r, info in self.infos.items()
            if info["pid"] and (rank is None or r == rank)
        }

    @property
    def incomplete(self):
        """Whether a training run lacks ranks its world size counts (ranks started by hand that
        became separate runs, or ranks that wrote elsewhere)."""
        return (
            not self.evaluation
            and self.world_size is not None
            and len(self.ranks) < self.world_size
        )

    @property
    def start(self):
        return _datetime(self.start_ms)

    @property
    def end(self):
        return _datetime(self.end_ms)

    def describe(self, scanned=None):
        """One line: id, ranks, world size, hosts, start, gsteps, records. `scanned`: the
        complete records of a run not closed cleanly, its files whose Meta is not final counted
        by a scan (the stale Metas' counts and step ranges are not said)."""
        start = self.start.strftime("%Y-%m-%d %H:%M:%S UTC") if self.start else "start unknown"
        if scanned is not None:
            counted = f"{scanned} records found by scanning (the Meta is not final; gsteps ?)"
        else:
            steps = (
                "no records"
                if self.gsteps is None
                else f"gsteps {self.gsteps[0]}..{self.gsteps[1]}"
            )
            records = "?" if self.records is None else self.records
            counted = steps if self.records == 0 else f"{steps}  {records} records"
        # A C++-written run (or an older writer) records no world size: say so, not "of ?".
        world = (
            " (world size not recorded)" if self.world_size is None else f" of {self.world_size}"
        )
        return (
            f"{self.id or '(no run id: XDL)'}  ranks {','.join(map(str, self.ranks))}{world}"
            f"  {start}  {counted}"
            + (f"  hosts {','.join(self.hosts)}" if self.hosts else "")
            + ("" if self.closed_cleanly else "  (not closed cleanly)")
            + (
                f"  (incomplete: {len(self.ranks)} of {self.world_size} ranks; the others wrote "
                "elsewhere or as another run: give every rank the same XDL_TRACE_RUN_ID)"
                if self.incomplete
                else ""
            )
            + (f"  ({self.restarts()})" if self.attempts > 1 else "")
        )

    def restarts(self):
        """What the attempts of a restarted run did, in a phrase: "2 attempts under one run id:
        attempt 2 resumed at gstep 20" (ranks named where they differ)."""
        where = {}
        for resume in self.resumes:
            where.setdefault((resume["attempt"], resume["gstep"]), []).append(resume["rank"])
        parts = [
            f"attempt {attempt} resumed at gstep {gstep}"
            + ("" if len(ranks) == len(self.ranks) else f" on rank {','.join(map(str, ranks))}")
            for (attempt, gstep), ranks in sorted(where.items())
        ]
        return f"{self.attempts} attempts under one run id: " + (
            "; ".join(parts) if parts else "restarted"
        )

    def listing(self):
        """describe(), then the run's metadata on a line of its own when it has some."""
        if not self.metadata:
            return "  " + self.describe()
        return f"  {self.describe()}\n    metadata: {json.dumps(self.metadata, sort_keys=True)}"

    def __repr__(self):
        return (
            f"Run({self.id!r}, ranks={self.ranks}, world_size={self.world_size}, "
            f"gsteps={self.gsteps}, records={self.records})"
        )


def runs(path, prefix="train", name="trace"):
    """The runs of the trace at ``path`` (a directory or one data file), oldest first."""
    return listing(path, prefix, name)[2]


class _Listed:
    """What a listing of a directory found: the paths of its files (copies set aside), the
    copies, and its Runs, each of which keeps it (``Run._listed``: ``open_trace(path,
    run=<Run>)`` opens the run from it)."""

    __slots__ = ("key", "paths", "copies", "runs")

    def __init__(self, key, paths, copies, runs):
        self.key, self.paths, self.copies, self.runs = key, paths, copies, runs


# Listings kept by ``listed_once`` (its thread's): (path, prefix, name) -> _Listed.
_kept = threading.local()


@contextlib.contextmanager
def listed_once():
    """Within it (on its thread), each directory is listed once: a report of a sweep opens each
    of its N runs and pairs each with its evaluation, and every open would read the Headers and
    Metas of every file again (N runs: N^2 reads; 200 runs, 33 s of a 34 s report). The files
    are taken as they were at the first listing; nesting keeps the outer listings."""
    if getattr(_kept, "listings", None) is not None:
        yield
        return
    _kept.listings = {}
    try:
        yield
    finally:
        _kept.listings = None


def _once(key, make):
    """make(), kept under `key` within ``listed_once``."""
    kept = getattr(_kept, "listings", None)
    if kept is None:
        return make()
    if key not in kept:
        kept[key] = make()
    return kept[key]


def listing(path, prefix="train", name="trace", verify_checksums=True, run=None):
    """(C++ reader of every file less the copied ones, [CopiedFile] set aside, [Run] oldest
    first) of `path`. Listed once within ``listed_once``; else, given a Run of an earlier
    listing of the same directory (`run`), from that listing while the directory holds the same
    files (a run's reader over the files it listed; new or removed files: listed again).
    FileNotFoundError when nothing matches."""
    key = (os.path.abspath(os.fspath(path)), prefix, name)
    kept = getattr(_kept, "listings", None)
    found = None if kept is None else kept.get(key)
    snapshot = found is not None  # listed_once's: the files as they were, new ones left out.
    if found is None and run is not None and getattr(run, "_listed", None) is not None:
        found = run._listed if run._listed.key == key else None
    if found is not None:
        # The files listed, in a reader of their own (no Header read): it maps only what its
        # reads map, where the listing's keeps each run's first files mapped (their Headers).
        reader = open_reader(path, prefix, name, verify_checksums)
        now = {f[0] for f in reader.files}
        listed = set(found.paths)
        if listed <= now and (snapshot or now == listed | {c.path for c in found.copies}):
            if kept is not None:
                kept[key] = found
            return reader.without(list(now - listed)), found.copies, found.runs
        # A listed file removed since, or (a Run's listing) files added: listed again.
    reader, copies = set_aside_copies(open_reader(path, prefix, name, verify_checksums))
    # Eval files (an eval hook's): a rank subset is no gap, their restarts' warnings say so.
    evaluation = any(f[1] == "test" for f in reader.files)
    every = [Run(s, evaluation) for s in reader.runs()]
    found = _Listed(key, [f[0] for f in reader.files], copies, every)
    for r in every:
        r._listed = found
    if kept is not None:
        kept[key] = found
    return reader, copies, every


def evaluation_of(path, run, name="trace", trains=None):
    """How to read the eval records beside the train Run `run` (or a list of Runs: their
    evaluations together, those of run="all") in the directory `path`: its "test" files
    (``TraceHook(is_training=False)``, a hook of its own, so a run id of its own) written by a
    process that wrote `run` (a rank's host and pid), each paired with the latest train run of
    `trains` (default: the directory's) that process began before it (so a pid the OS gave again
    to a later job pairs with that job), else the first it was still open for (an eval hook
    begun before the training hook). An eval run of a process that wrote no train run here (an
    eval job of its own) pairs by the same rule with the train runs of every process. (run, Run)
    for ``open_trace``: the eval run's id, or (a tuple of their ids, None) for several (a hook
    begun per evaluation, or per rank); None for none, for a data file and for a run of XDL's
    files (no RunInfo)."""
    of = [run] if isinstance(run, Run) else [r for r in run or () if r is not None]
    ids = {r.id for r in of if r.infos}
    if not ids or not os.path.isdir(os.fspath(path)):
        return None
    try:
        evals = runs(path, "test", name)
        if trains is None:  # The directory's pairing, made once within listed_once.
            key = ("paired", os.path.abspath(os.fspath(path)), name)
            paired = _once(key, lambda: _paired(evals, runs(path, "train", name)))
        else:
            paired = _paired(evals, trains)
    except FileNotFoundError:
        return None
    mine = [ev for ev in evals if paired[ev.id] in ids]
    if len(mine) == 1:
        return mine[0].id, mine[0]
    return (tuple(ev.id for ev in mine), None) if mine else None


def _paired(evals, trains):
    """{eval run id: the id of the train run it evaluates, or None}: ``evaluation_of``'s rule."""
    by_writer = {}  # (host, pid) -> the indices in `trains` of the runs it wrote.
    for i, t in enumerate(trains):
        for writer in t.writers():
            by_writer.setdefault(writer, []).append(i)

    def trained_by(ev):
        # An eval job of its own (a process that evaluates checkpoints, as TensorFlow's
        # evaluator task does) wrote no training run here: the run it evaluates is one of
        # another process, by the same rule of time.
        wrote = sorted({i for w in ev.writers() for i in by_writer.get(w, ())})
        same = [trains[i] for i in wrote] or trains
        began = [t for t in same if (t.start_ms or 0) <= (ev.start_ms or 0)]
        if began:
            return max(began, key=lambda t: t.start_ms or 0).id
        # An eval hook begun before its training hook (`with eval_hook, train_hook:`): still
        # open when that began (not an earlier run's eval hook, closed before it).
        during = [t for t in same if ev.end_ms is None or ev.end_ms >= (t.start_ms or 0)]
        return min(during, key=lambda t: t.start_ms or 0).id if during else None

    return {ev.id: trained_by(ev) for ev in evals}


def set_aside_copies(reader):
    """(reader without the copied files, [CopiedFile] of those left out).

    A copied or renamed file is told by its Meta (written by our writer: format_version 1): the
    rank and file_index it records differ from the ones in the file's name, as ``verify`` finds
    (docs/reader.md "Copied files"). Its records are another file's: read, they would be counted
    twice (a phantom rank for a copy named after another rank). Warns once, naming each file."""
    copies = []
    for path, prefix, _name, rank, index, _superseded in reader.files:
        if not prefix:  # A data file opened by a name that is not <prefix>.<name>.<rank>.<index>.
            continue
        try:
            meta = _core.read_meta(path + ".meta")
        except (errors.TraceError, OSError):
            continue  # No Meta to compare with: reading or verifying the file says what is wrong.
        meta_rank, meta_index = meta.get("rank", 0), meta.get("file_index", 0)
        # XDL's Meta (format 0) records neither; a file_index of 0 is a Meta that never did.
        if meta.get("format_version", 0) < 1 or meta_index == 0:
            continue
        if (meta_rank, meta_index) != (rank, index):
            copies.append(
                CopiedFile(
                    path,
                    rank,
                    index,
                    f"its Meta says rank {meta_rank} file_index {meta_index} but the file is "
                    f"named rank {rank} index {index} (a copied or renamed file: its records "
                    "are another file's)",
                )
            )
    if not copies:
        return reader, []
    # Asked for by its own path (or every file is one): read it, but say what it is.
    kept = len(copies) == len(reader.files)
    warnings.warn(
        ("xdl_trace: reading anyway " if kept else "xdl_trace: left out ")
        + "; ".join(f"{os.path.basename(c.path)}: {c.why}" for c in copies)
        + "; `xdl-trace verify` fails it: remove it, or rename it back",
        CopiedFileWarning,
        stacklevel=5,  # open_trace's caller: set_aside_copies, listing, Trace, open_trace.
    )
    return (reader, []) if kept else (reader.without([c.path for c in copies]), copies)


def open_reader(path, prefix, name, verify_checksums=True):
    """The C++ TraceReader of a path, every run (FileNotFoundError when nothing matches).
    verify_checksums=False skips each record's checksum (docs/format.md "Record checksums")."""
    path = os.fspath(path)
    if path.startswith("file://"):
        path = path[len("file://") :]
    try:
        return _core.TraceReader.open(path, prefix, name, check_record_crc=verify_checksums)
    except errors.NotFoundError as error:
        raise FileNotFoundError(str(error)) from None


def select_run(reader, every, path, run, attempts="latest"):
    """(reader restricted to the chosen run, that Run or None for several, every Run): of a
    ``listing``'s reader and Runs (`every`).

    run: None (the only run; ValueError listing them when there are several), "latest", "all",
    a run id (a unique prefix is enough; ValueError listing the runs when none matches), or a
    tuple of whole run ids (read together, as "all" reads every one).
    attempts: "latest" (each gstep from the attempt of a restarted run that wrote it last) or
    "all" (every attempt's records as written), as ``open_trace`` says."""
    several = isinstance(run, tuple) and all(isinstance(r, str) for r in run)
    if run is not None and not isinstance(run, str) and not several:
        raise errors.InvalidArgumentError(
            f"xdl_trace: run must be None, 'latest', 'all', a run id or a tuple of run ids, "
            f"got {run!r}"
        )
    attempts = attempts_of(attempts)
    # A trace without restarts is read as it is: no second pass over its Headers.
    latest = attempts == "latest" and any(r.attempts > 1 for r in every)

    def reader_of(chosen):
        """`reader` narrowed to the Runs `chosen` (None: as it is), less what later attempts
        superseded."""
        if chosen is None or len(chosen) == len(every):
            narrowed = reader
        else:  # Their files, by the listing's indices: no Header read again.
            kept = {i for r in chosen for i in r.file_indices}
            narrowed = reader.without([f[0] for i, f in enumerate(reader.files) if i not in kept])
        return narrowed.latest_attempts() if latest else narrowed

    if run == "all":
        _warn_restarted(every, attempts)
        return reader_of(None), (every[0] if len(every) == 1 else None), every
    if several:  # Those runs together (a run's eval hooks, one run each): their files.
        chosen = [r for r in every if r.id in run]
        missing = sorted(set(run) - {r.id for r in chosen})
        if missing:
            raise errors.RunChoiceError(
                f"xdl_trace: no run {', '.join(map(repr, missing))} in {path}; its runs (oldest "
                "first):\n" + "\n".join(r.listing() for r in every),
                path,
                run,
                every,
            )
        _warn_restarted(chosen, attempts)
        return reader_of(chosen), None, every
    if run is None:
        _warn_restarted(every[:1] if len(every) == 1 else [], attempts)
        _warn_incomplete(every[0] if len(every) == 1 else None)
        if len(every) > 1:
            raise errors.RunChoiceError(
                f"xdl_trace: {path} holds {len(every)} runs; pick one with run='latest', "
                "run='<id>' (a unique prefix is enough) or read them together with run='all' "
                "(oldest first):\n" + "\n".join(r.listing() for r in every),
                path,
                run,
                every,
            )
        return reader_of(None), (every[0] if every else None), every
    if run == "latest":
        chosen = every[-1]
    else:
        matches = [r for r in every if r.id == run] or [r for r in every if r.id.startswith(run)]
        if len(matches) != 1:
            why = "matches no run" if not matches else f"is the prefix of {len(matches)} runs"
            raise errors.RunChoiceError(
                f"xdl_trace: run {run!r} {why} in {path}; its runs (oldest first):\n"
                + "\n".join(r.listing() for r in every),
                path,
                run,
                every,
            )
        chosen = matches[0]
    _warn_restarted([chosen], attempts)
    _warn_incomplete(chosen)
    return reader_of([chosen]), chosen, every


def _warn_incomplete(run):
    """Warns when the run read is incomplete (``Run.incomplete``)."""
    if run is not None and run.incomplete:
        warnings.warn(
            f"xdl_trace: run {run.id} holds {len(run.ranks)} of {run.world_size} ranks "
            f"({', '.join(map(str, run.ranks))}); the others wrote elsewhere or as another run: "
            "give every rank the same XDL_TRACE_RUN_ID",
            RuntimeWarning,
            stacklevel=4,
        )


def _warn_restarted(read, attempts):
    """Says of each run read that several attempts wrote under one run id (a job restarted with
    the same TORCHELASTIC_RUN_ID or XDL_TRACE_RUN_ID) where they resumed and what is read (of
    eval files, whose run shares the training run's id, that they are)."""
    for run in read:
        if run is not None and run.attempts > 1:
            what = (
                "every attempt's records are read, so resumed gsteps appear more than once"
                if attempts == "all"
                else "each gstep is read from the attempt that wrote it last (attempts='all', "
                "--attempts all, reads the superseded records too)"
            )
            warnings.warn(
                f"xdl_trace: run {run.id}{' (eval files, test.*)' * run.evaluation}: "
                f"{run.restarts()} (a job restarted with the same run "
                f'id): {what} (docs/python.md, "Runs")',
                RestartedRunWarning,
                stacklevel=4,
            )
