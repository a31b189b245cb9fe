"""Reads traces back: ``open_trace(path)`` on a data file or a directory of ranks and rolled-over files.

Reading happens in C++ (``xdl_trace._core.TraceReader``: memory-mapped files,
key and gstep selection, Meta-based file skipping, the merge of ranks, torn-tail
reports, stacking); this module is its Pythonic face. Every column comes back as a read-only numpy array that views the mapping, so
reading costs no copy of the tensor bytes. Arrays keep their file mapped for as
long as they live. ``stack`` is the one call that copies: it gathers one key
over many steps into a single contiguous array.

    trace = open_trace("/tmp/run")            # train.trace.<rank>.<index> files
    print(trace.ranks, trace.keys)
    for gstep, lstep, timestamp, columns in trace.records(keys=["loss"], gsteps=(100, 200)):
        ...
    losses = trace.stack("loss")
    assert all(report["ok"] for report in trace.verify())

Column dtypes follow numpy; ``byte`` columns read as uint8 and ``bfloat16``
columns are widened to float32 (a copy); ``raw=True`` (on ``open_trace``, or per
call on ``records``/``stack``) keeps their uint16 bits instead, as zero-copy
views. A column that XDL writes empty (a ``trace_once`` value after its first
step) reads as a zero-length array.

Files written by xdl_trace describe their columns in the Header (docs/format.md,
"Column descriptors"): ``schema()[key].kind`` says whether a column is a value or
a summary, and ``record.summary(key)`` names a summary's fields (``Stats``,
``Histogram``). ``record.columns[key]`` is always the raw array, as XDL wrote it.
"""

import collections
import functools
import os
import warnings

import numpy as np

from .. import errors
from . import trace_runs
from .selection import Selection, attempts_of, gstep_window

try:
    from .. import _core
except ImportError as error:  # pragma: no cover - exercised only without a build
    raise ImportError(
        "xdl_trace._core is not built: run `make build` at the repository root "
        "(or read files with the stand-alone xdl_trace/tools/read_trace.py)"
    ) from error

__all__ = [
    "open_trace",
    "Trace",
    "TraceFileInfo",
    "Record",
    "ColumnSchema",
    "Stats",
    "Histogram",
    "STATS_FIELDS",
    "SUMMARY_LAYOUT_VERSION",
    "parse_summary",
    "TornTailWarning",
    "UnknownDTypeWarning",
    "bfloat16_to_float32",
]

_BATCH = 256  # Records decoded per call into C++ (amortizes the GIL round trip).


class TornTailWarning(UserWarning):
    """A data file ends inside a frame: its writer is still writing it, or stopped mid-record
    (a crash); every record before the partial frame is complete."""


class UnknownDTypeWarning(UserWarning):
    """A column has a dtype newer than this reader: it is read as its raw bytes (flat uint8)."""


# The built-in summaries' layout version this reader names the fields of
# (docs/format.md, "Summary columns"); the Header's descriptors carry it.
SUMMARY_LAYOUT_VERSION = 1

# Fields of a "stats" summary column (float64[8]), in column order.
STATS_FIELDS = tuple(_core.STATS_FIELDS)  # count, min, max, mean, std, l2, nan, inf

Stats = collections.namedtuple("Stats", STATS_FIELDS)
Stats.__doc__ = """A "stats" summary: element ``count``; ``min``, ``max``, ``mean``, ``std``
(population) and ``l2`` norm over the finite values (NaN, and l2 0, when there are
none); ``nan`` and ``inf`` counts. Scalars for one record, arrays over steps from
``Trace.stack_summary``."""

Histogram = collections.namedtuple("Histogram", "edges counts")
Histogram.__doc__ = """A "histogram" summary as ``numpy.histogram`` returns it: ``edges``
float64[bins + 1] (``lo``, then each bin's right edge), ``counts`` int64[bins] of the
finite values (the last bin includes its right edge). ``[steps, ...]`` over steps."""

_SUMMARY_KINDS = ("stats", "histogram", "user_summary", "digest")


def _not_a_summary(key, info, where):
    kind = "a value" if info is None or info["kind"] == "value" else f"a {info['kind']!r} column"
    if info is None:
        kind = "not described (a file written by XDL or before column descriptors)"
    return errors.InvalidArgumentError(
        f"{where}: key '{key}' is {kind}, not a summary; read it with columns['{key}']"
    )


def parse_summary(key, array, info, where="xdl_trace"):
    """Names the fields of summary column(s) `array` (one column, or ``stack``'s
    ``[steps, ...]``) as the column descriptor `info` (``schema()[key].descriptor``)
    says: ``Stats`` for "stats", ``Histogram`` for "histogram", the digest (an int; uint64
    over steps) for "digest", the array itself for a user summary. InvalidArgumentError (a ValueError) naming the key for a
    value column, a column without a descriptor, a layout newer than this reader
    or a column of the wrong length."""
    kind = None if info is None else info["kind"]
    if kind not in _SUMMARY_KINDS:
        raise _not_a_summary(key, info, where)
    if kind == "user_summary":
        return array
    if info["layout_version"] != SUMMARY_LAYOUT_VERSION:
        raise errors.InvalidArgumentError(
            f"{where}: key '{key}': {kind} layout version {info['layout_version']} is not one "
            f"this reader knows ({SUMMARY_LAYOUT_VERSION}); read the raw columns['{key}']"
        )
    array = np.asarray(array)
    bins = info["histogram_bins"]
    expected = {"stats": len(STATS_FIELDS), "digest": 2}.get(kind, 2 + 2 * bins)
    if array.dtype != np.float64 or array.ndim < 1 or array.shape[-1] != expected:
        raise errors.InvalidArgumentError(
            f"{where}: key '{key}': a {kind} column must be float64[{expected}], "
            f"got {array.dtype}{list(array.shape)}"
        )
    if kind == "digest":  # float64[2]: the high and low 32 bits (docs/format.md "Tensor digest").
        digest = (array[..., 0].astype(np.uint64) << np.uint64(32)) | array[..., 1].astype(
            np.uint64
        )
        return int(digest) if array.ndim == 1 else digest
    if kind == "stats":
        fields = [array[..., i] for i in range(len(STATS_FIELDS))]
        for i in (0, 6, 7):  # count, nan, inf
            fields[i] = fields[i].astype(np.int64)
        if array.ndim == 1:
            fields = [f.item() for f in fields]
        return Stats(*fields)
    edges = np.concatenate([array[..., :1], array[..., 2 : 2 + bins]], axis=-1)
    counts = array[..., 2 + bins :].astype(np.int64)
    return Histogram(edges, counts)


class ColumnSchema(collections.namedtuple("_ColumnSchema", "dtype shape")):
    """A key's ``(dtype name, shape)`` in the trace's first record, plus what the
    column holds, from the Header's column descriptor: ``kind`` ("value",
    "stats", "histogram", "user_summary"; None for a file without descriptors),
    ``source`` ("tensor", "variable", "gradient", "callback", "once"), and
    ``descriptor``, the whole descriptor as a dict (``layout_version``,
    ``histogram_bins``, ``summary_name``, ``input_dtype``, ``input_shape``: the
    tensor a summary is computed from, None when unknown at Start). Compares
    and unpacks as the ``(dtype, shape)`` tuple."""

    def __new__(cls, dtype, shape, descriptor=None):
        self = super().__new__(cls, dtype, shape)
        self.descriptor = descriptor
        return self

    @property
    def kind(self):
        return None if self.descriptor is None else self.descriptor["kind"]

    @property
    def source(self):
        return None if self.descriptor is None else self.descriptor["source"]

    def __repr__(self):
        return f"ColumnSchema(dtype={self.dtype!r}, shape={self.shape!r}, kind={self.kind!r})"


class Record:
    """One traced step. Unpacks as ``gstep, lstep, timestamp, columns``.

    ``timestamp`` is milliseconds since the Unix epoch; ``columns`` maps key to
    a read-only array. ``rank`` is the writer's rank, ``extra`` the raw record
    fields numbered above 4 as ``(number, wire_type, payload)`` (device
    tracing) or None, ``path`` and ``offset`` locate the frame.
    ``descriptors`` maps key to its column descriptor (dict), or is None for a
    file without them; ``summary(key)`` names a summary column's fields.
    """

    __slots__ = (
        "gstep",
        "lstep",
        "timestamp",
        "columns",
        "rank",
        "extra",
        "path",
        "offset",
        "descriptors",
    )

    def __init__(
        self, gstep, lstep, timestamp, columns, rank, extra, path, offset, descriptors=None
    ):
        self.gstep = gstep
        self.lstep = lstep
        self.timestamp = timestamp
        self.columns = columns
        self.rank = rank
        self.extra = extra
        self.path = path
        self.offset = offset
        self.descriptors = descriptors

    def summary(self, key):
        """The summary column `key` with named fields: ``Stats`` (count, min, max,
        mean, std, l2, nan, inf) for "stats", ``Histogram`` (edges, counts) for
        "histogram", the array itself for a user summary; None when the column
        is empty at this step (a trace_once entry after its first record, a
        missing gradient). KeyError for a key not read; InvalidArgumentError (a
        ValueError) naming the key for a value column or a file without column
        descriptors (XDL's)."""
        array = self.columns[key]
        info = None if self.descriptors is None else self.descriptors.get(key)
        if info is None or info["kind"] not in _SUMMARY_KINDS:
            raise _not_a_summary(key, info, f"{self.path} (gstep {self.gstep})")
        if array.size == 0 and array.shape == (0,):
            return None
        return parse_summary(key, array, info, f"{self.path} (gstep {self.gstep})")

    def __iter__(self):
        return iter((self.gstep, self.lstep, self.timestamp, self.columns))

    def __getitem__(self, key):
        return self.columns[key]

    def __repr__(self):
        cols = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.columns.items())
        return f"Record(rank={self.rank}, gstep={self.gstep}, lstep={self.lstep}, {{{cols}}})"


class TraceFileInfo:
    """A data file of the trace: where it is, whose it is, what its Meta says, and
    ``superseded_from``: None, or the gstep from which a later attempt of a restarted job
    wrote its records again (reads leave this file's records from there on out)."""

    __slots__ = (
        "path",
        "prefix",
        "name",
        "rank",
        "index",
        "superseded_from",
        "size",
        "meta",
        "meta_error",
        "_file",
        "_open",
    )

    def __init__(self, path, prefix, name, rank, index, superseded_from=None, _open=None):
        self.path = path
        self.prefix = prefix
        self.name = name
        self.rank = rank
        self.index = index
        # A restarted job's earlier attempt: its records from this gstep on were written again
        # by a later attempt, and reads leave them out (open_trace's ``attempts``).
        self.superseded_from = superseded_from
        self._file = None
        self._open = _open  # Maps the file through its Trace's reader (one mapping per file).
        try:
            self.size = os.path.getsize(path)
        except OSError:  # A dangling link: reading it says so, naming the file.
            self.size = 0
        self.meta = None
        self.meta_error = None
        try:
            self.meta = _core.read_meta(path + ".meta")
        except (errors.TraceError, OSError) as error:
            self.meta_error = str(error)

    def open(self):
        """The mapped file (opened once, then cached)."""
        if self._file is None:
            self._file = self._open() if self._open else _core.TraceFile.open(self.path)
        return self._file

    @property
    def keys(self):
        return list(self.open().keys)

    @property
    def columns(self):
        """The Header's column descriptors (dicts, one per key), or None when it has none."""
        return self.open().columns

    def __repr__(self):
        return (
            f"TraceFileInfo({self.path!r}, rank={self.rank}, index={self.index}, size={self.size})"
        )


def bfloat16_to_float32(bits):
    """Widens the raw uint16 bits of a bfloat16 column to float32."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


class Trace:
    """The data files of one trace, grouped by rank (see ``open_trace``).

    A wrapper of the C++ ``TraceReader`` (``xdl_trace._core``), which selects,
    skips files by their Meta, merges ranks and stacks."""

    def __init__(
        self,
        path,
        prefix="train",
        name="trace",
        raw=False,
        run=None,
        verify_checksums=True,
        attempts="latest",
    ):
        path = os.fspath(path)
        self.raw = bool(raw)  # Default for records/stack: keep bfloat16 bits.
        self.verify_checksums = verify_checksums
        self._descriptors = {}  # file index -> {key: descriptor} or None.
        if path.startswith("file://"):
            path = path[len("file://") :]
        self.path = path
        self.prefix = prefix
        self.name = name
        self.torn_tails = {}  # path -> byte offset of the torn frame, as found while reading.
        self._unknown_dtypes = set()  # (path, dtype) already warned about.
        # The run read (a trace_runs.Run; None for run="all" over several) and every run there.
        # A Run of xdl.runs(path): read from the listing that found it (files unchanged since).
        of = run if isinstance(run, trace_runs.Run) else None
        run = run.id if of is not None else run
        reader, copies, every = trace_runs.listing(path, prefix, name, verify_checksums, run=of)
        # Copied or renamed files (CopiedFile: path, rank, index, why): left out of reading,
        # failed by verify().
        self.copies = copies
        self._reader, self.run, self.runs = trace_runs.select_run(
            reader, every, path, run, attempts
        )
        # The ids of the runs read (None: every run), for a reader that opens the files again
        # (diff's C++ pass).
        self.run_ids = (
            (self.run.id,) if self.run is not None else run if isinstance(run, tuple) else None
        )
        self.attempts = attempts_of(attempts)
        self.files = [
            TraceFileInfo(*info, _open=functools.partial(self._reader.file, i))
            for i, info in enumerate(self._reader.files)
        ]
        self.ranks = list(self._reader.ranks)

    # --- what is in it -------------------------------------------------------

    @property
    def keys(self):
        """Column keys, from the Header of the first file that has one."""
        return list(self._reader.keys)

    def files_of_rank(self, rank):
        return [f for f in self.files if f.rank == rank]

    @property
    def runs_read(self):
        """The Runs this trace reads, of ``runs`` (every run of its directory)."""
        return [r for r in self.runs if self.run_ids is None or r.id in self.run_ids]

    def writers(self, rank=None):
        """The processes that wrote the runs read (of `rank`; default every rank):
        {(host, pid)} (``Run.writers``)."""
        return set().union(*(r.writers(rank) for r in self.runs_read))

    def evaluation(self):
        """The eval records of the training runs read (``TraceHook(is_training=False)``'s test.*
        files their processes wrote, paired as the report pairs them,
        ``trace_runs.evaluation_of``) as a Trace read the same way (several eval runs, a hook
        begun per evaluation or the evaluations of run="all" over a sweep, read together); None
        when they have none, or for test files."""
        if self.prefix != "train":
            return None
        found = trace_runs.evaluation_of(self.path, self.runs_read, self.name, self.runs)
        if found is None:
            return None
        return Trace(
            self.path,
            prefix="test",
            name=self.name,
            raw=self.raw,
            run=found[0],
            verify_checksums=self.verify_checksums,
            attempts=self.attempts,
        )

    def schema(self):
        """``{key: ColumnSchema}`` from the first record: a ``(dtype name, shape)``
        tuple (wire dtype names: "bfloat16" and "byte" stay distinct from uint16
        and uint8) that also says what the column holds (``.kind``: "value",
        "stats", "histogram", "user_summary", or None without descriptors)."""
        return {
            key: ColumnSchema(dtype, shape, descriptor)
            for key, dtype, shape, descriptor in self._reader.schema()
        }

    def descriptors_of(self, file_index):
        """``{key: descriptor}`` of ``files[file_index]``, or None when its Header has none."""
        if file_index not in self._descriptors:
            columns = self.files[file_index].columns
            keys = self.files[file_index].keys
            self._descriptors[file_index] = None if columns is None else dict(zip(keys, columns))
        return self._descriptors[file_index]

    @property
    def nbytes(self):
        return sum(f.size for f in self.files)

    # --- records --------------------------------------------------------------

    def _report_torn(self, torn):
        if torn.path not in self.torn_tails:
            self.torn_tails[torn.path] = torn.offset
            # One wording for every reader (C++ DescribeTornTail): a torn final frame, or a
            # zero-filled tail (a power loss) with where the zeros start.
            warnings.warn(str(torn), TornTailWarning, stacklevel=3)

    def _report_unknown_dtype(self, path, dtype):
        if (path, dtype) not in self._unknown_dtypes:
            self._unknown_dtypes.add((path, dtype))
            warnings.warn(
                f"{path}: dtype {dtype} is unknown to this reader: its columns are read as raw bytes",
                UnknownDTypeWarning,
                stacklevel=3,
            )

    def _records(self, cursor, on_progress):
        files = self.files
        read = 0
        while True:
            batch, torn, done, unknown_dtypes = cursor.next_batch(_BATCH)
            for file, dtype in unknown_dtypes:
                self._report_unknown_dtype(files[file].path, dtype)
            for gstep, lstep, ts, columns, extra, file, offset in batch:
                info = files[file]
                descriptors = self.descriptors_of(file)
                yield Record(
                    gstep, lstep, ts, columns, info.rank, extra, info.path, offset, descriptors
                )
            if on_progress is not None:
                now = cursor.bytes_read
                on_progress(now - read)
                read = now
            if torn is not None:
                self._report_torn(torn)
            if done:
                cursor.check_not_cut()  # The last batch's arrays were read since it came.
                return

    def records(
        self, keys=None, gsteps=None, ranks=None, on_progress=None, raw=None, selection=None
    ):
        """Iterates records of the selected ranks (default all), merged by gstep
        across ranks (ties in rank order).

        ``selection``: a ``Selection`` (xdl_trace/read/selection.py); the keywords
        keys, gsteps and ranks stand for its fields, and its run and attempts
        are the Trace's (``open_trace``'s). ``keys``: a list of keys (default all).
        ``gsteps``: ``(begin, end)`` inclusive (either may be None), a
        ``range``, a ``slice`` or a collection of steps; files whose Meta
        proves they hold none of them are skipped without being read.
        ``on_progress(n_bytes)`` is called as bytes are consumed. ``raw``
        (default: the Trace's) keeps bfloat16 columns as their uint16 bits
        instead of widening them to float32.
        """
        selection = Selection.of(selection, keys=keys, gsteps=gsteps, ranks=ranks)
        keys, ranks = selection.keys, selection.ranks
        if isinstance(keys, str):
            keys = [keys]
        begin, end, steps = selection.window()
        keys = None if keys is None else list(keys)
        ranks = None if ranks is None else list(ranks)
        raw = self.raw if raw is None else bool(raw)
        cursor = self._reader.read(keys, begin, end, steps, ranks, raw)
        return self._records(cursor, on_progress)

    def __iter__(self):
        return self.records()

    def stack(self, key, gsteps=None, rank=None, return_gsteps=False, raw=None):
        """One key over steps as one array ``[steps, *shape]`` (a copy), in file
        order for one rank (default: the only rank). Empty (trace_once) columns
        are left out. With ``return_gsteps`` returns ``(gsteps, values)``.
        ``raw`` as in ``records``."""
        (result,) = self.stack_many([key], gsteps=gsteps, rank=rank, raw=raw).values()
        return result if return_gsteps else result[1]

    def stack_summary(self, key, gsteps=None, rank=None):
        """A summary key over steps, fields named: ``(gsteps, Stats)`` whose fields
        are arrays ``[steps]``, or ``(gsteps, Histogram)`` with ``edges[steps,
        bins + 1]`` and ``counts[steps, bins]``, or ``(gsteps, values)`` for a
        user summary. Errors as ``Record.summary`` (the descriptor is the first
        file's that has one)."""
        info = self.schema().get(key)
        descriptor = None if info is None else info.descriptor
        if info is None:
            for i in range(len(self.files)):
                found = self.descriptors_of(i)
                if found is not None and key in found:
                    descriptor = found[key]
                    break
        key_steps, values = self.stack(key, gsteps=gsteps, rank=rank, return_gsteps=True)
        if descriptor is not None and descriptor["kind"] in _SUMMARY_KINDS and values.size == 0:
            values = np.zeros((0, _summary_width(descriptor)), dtype=np.float64)
        return key_steps, parse_summary(key, values, descriptor, self.path)

    def stack_many(self, keys=None, gsteps=None, rank=None, raw=None, ragged=False):
        """``stack`` for several keys (default all) in one pass over the files:
        ``{key: (gsteps, values)}``. With ``ragged``, ``{key: (gsteps, values,
        shapes)}``: a key whose shape changes between steps (an activation of a
        last, smaller batch; its dtype and number of dimensions kept) comes as
        its steps' values flattened one after another, with ``shapes`` int64
        ``[steps, ndim]`` (``np.split(values, np.cumsum(shapes.prod(1))[:-1])``
        gives them back); ``shapes`` is None for a key of one shape."""
        keys = list(self.keys if keys is None else keys)
        begin, end, steps = gstep_window(gsteps)
        raw = self.raw if raw is None else bool(raw)
        results, torn_tails = self._reader.stack(keys, begin, end, steps, rank, raw, ragged)
        for torn in torn_tails:
            self._report_torn(torn)
        out = {}
        for key, (key_steps, values, dtype, shapes) in zip(keys, results):
            if dtype is not None:  # Newer than this reader: raw bytes.
                self._report_unknown_dtype(self.path, dtype)
            if values is None:
                values = np.zeros((0,), dtype=np.float32)
            out[key] = (key_steps, values, shapes) if ragged else (key_steps, values)
        return out

    # --- checks ---------------------------------------------------------------

    def gaps(self):
        """What is missing from the trace's runs, as lines (issue 24): a rank whose file indices
        skip one (a deleted or lost file: "run R, rank 0: no file #3 (its files run #1..#5)"),
        and ranks absent from a training run whose RunInfo gives its world size (an evaluation
        need not run on every rank: ``Run.evaluation``). A file copied under
        another rank or index is ``verify``'s (its Meta's rank and file_index)."""
        problems = []
        by_run, present = {}, {}
        for f in self.files:
            run_id = (f.meta or {}).get("run_id", "")
            by_run.setdefault(run_id, {}).setdefault(f.rank, set()).add(f.index)
            present.setdefault(f.rank, set()).add(f.index)  # Whatever run (or no Meta) it has.
        for run_id, ranks in by_run.items():
            name = f"run {run_id}" if run_id else "files without a run id"
            for rank, indices in sorted(ranks.items()):
                lo, hi = min(indices), max(indices)
                missing = sorted(set(range(lo, hi + 1)) - present[rank])
                if missing:
                    listed = ", ".join(f"#{i}" for i in missing[:10])
                    more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
                    problems.append(
                        f"{name}, rank {rank}: no file {listed}{more} (its files run #{lo}..#{hi})"
                    )
        for run in self.runs:
            if run.id in by_run and run.world_size and not run.evaluation:
                absent = sorted(set(range(run.world_size)) - set(run.ranks))
                if absent:
                    problems.append(
                        f"run {run.id}: world size {run.world_size} but no file of rank "
                        + ", ".join(map(str, absent))
                    )
        return problems

    def verify(self, on_progress=None):
        """Checks every file against its Meta (record count, data bytes,
        crc32c, step and time ranges). Returns one dict per file: ``path``,
        ``ok``, ``problems`` and the figures compared. A torn tail after the
        part the Meta covers is reported (``torn_tail``) but is not a failure.
        A file with nothing to check against (XDL's Meta has no checksum; no
        Meta and no record is what a crash before the first Meta leaves) is
        ``ok`` and ``unverifiable``, with a ``note`` saying why. A file that
        cannot be opened (not a regular file, ...) fails, naming it. The copied files that
        reading leaves out (``copies``) are checked too: they fail."""
        reports = []
        copies = [
            TraceFileInfo(c.path, self.prefix, self.name, c.rank, c.index) for c in self.copies
        ]
        for info in sorted(self.files + copies, key=lambda f: (f.rank, f.index)):
            try:
                report = info.open().verify()
            except (errors.TraceError, OSError) as error:
                report = {"ok": False, "unverifiable": False, "note": "", "torn_tail": False}
                report.update(has_meta=info.meta is not None, problems=[str(error)])
            report["path"] = info.path
            report["rank"] = info.rank
            report["index"] = info.index
            if report["torn_tail"]:
                self.torn_tails.setdefault(info.path, None)
            reports.append(report)
            if on_progress is not None:
                on_progress(info.size)
        return reports

    def __repr__(self):
        run = "" if self.run is None else f", run={self.run.id!r}"
        return f"Trace({self.path!r}, ranks={self.ranks}, files={len(self.files)}{run})"


def _summary_width(descriptor):
    if descriptor["kind"] == "stats":
        return len(STATS_FIELDS)
    if descriptor["kind"] == "histogram":
        return 2 + 2 * descriptor["histogram_bins"]
    if descriptor["kind"] == "digest":
        return 2
    return 0


def open_trace(
    path,
    prefix="train",
    name="trace",
    raw=False,
    run=None,
    verify_checksums=True,
    attempts="latest",
):
    """Opens a trace: a data file, or a directory holding
    ``{prefix}.{name}.{rank}.{index}`` files (``prefix`` "train" or "test").
    ``raw=True`` reads bfloat16 columns as their uint16 bits (zero-copy views)
    instead of widening them to float32; ``records`` and ``stack`` take ``raw``
    per call too.

    ``run``: which run to read when the directory holds several (``xdl.runs(path)`` lists
    them): "latest", a run id (or a unique prefix of one), a tuple of run ids (read together:
    a run's eval hooks, a run each), "all", or a ``Run`` of ``xdl.runs(path)`` (opened from
    the listing that found it, with no file's Header read again, while the directory holds the
    same files: ``for run in xdl.runs(d): xdl.open_trace(d, run=run)`` over a sweep of 200 runs
    lists it once); the default None reads the only run and raises ValueError listing the runs
    when there are several.

    ``verify_checksums``: each record's checksum (Record.crc32c) is checked before its values
    are returned, a damaged record raising TraceIOError naming the file and offset;
    ``False`` skips that pass over the bytes for a hot path that trusts its disk (the cost is in
    docs/benchmarks.md). Records without one (XDL's files) are read unchecked either way.

    ``attempts``: a job restarted under the same run id (a torchrun restart, a fixed
    XDL_TRACE_RUN_ID) wrote one run in several attempts; a resumed attempt writes again the gsteps
    from its checkpoint on. "latest" (the default) reads each rank's gstep from the attempt that
    wrote it last: an earlier attempt's records at or after a later attempt's first gstep are
    superseded (``Run.resumes`` says where), as TensorBoard purges a restarted job's orphaned
    steps. "all" reads every attempt's records as written, resumed gsteps twice (what the
    crashed attempt traced before it died)."""
    return Trace(
        path,
        prefix=prefix,
        name=name,
        raw=raw,
        run=run,
        verify_checksums=verify_checksums,
        attempts=attempts,
    )
