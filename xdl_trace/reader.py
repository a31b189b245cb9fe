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
columns as their raw uint16 bits (see ``bfloat16_to_float32``). A column that
XDL writes empty (a ``trace_once`` value after its first step) reads as a
zero-length array.
"""

import functools
import os
import warnings

import numpy as np

from . import errors, trace_runs

try:
    from . import _core
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


class Record:
    """One traced step. Unpacks as ``gstep, lstep, timestamp, columns``.

    ``timestamp`` is milliseconds since the Unix epoch; ``columns`` maps key to
    a read-only array. ``rank`` is the writer's rank, ``extra`` the raw record
    fields numbered above 4 as ``(number, wire_type, payload)`` (device
    tracing) or None, ``path`` and ``offset`` locate the frame.
    """

    __slots__ = ("gstep", "lstep", "timestamp", "columns", "rank", "extra", "path", "offset")

    def __init__(self, gstep, lstep, timestamp, columns, rank, extra, path, offset):
        self.gstep = gstep
        self.lstep = lstep
        self.timestamp = timestamp
        self.columns = columns
        self.rank = rank
        self.extra = extra
        self.path = path
        self.offset = offset

    def __iter__(self):
        return iter((self.gstep, self.lstep, self.timestamp, self.columns))

    def __getitem__(self, key):
        return self.columns[key]

    def __repr__(self):
        cols = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.columns.items())
        return f"Record(rank={self.rank}, gstep={self.gstep}, lstep={self.lstep}, {{{cols}}})"


class TraceFileInfo:
    """A data file of the trace: where it is, whose it is, and what its Meta says."""

    __slots__ = (
        "path",
        "prefix",
        "name",
        "rank",
        "index",
        "size",
        "meta",
        "meta_error",
        "_file",
        "_open",
    )

    def __init__(self, path, prefix, name, rank, index, _open=None):
        self.path = path
        self.prefix = prefix
        self.name = name
        self.rank = rank
        self.index = index
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

    def __repr__(self):
        return (
            f"TraceFileInfo({self.path!r}, rank={self.rank}, index={self.index}, size={self.size})"
        )


def bfloat16_to_float32(bits):
    """Widens the raw uint16 bits of a bfloat16 column to float32."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _gstep_selection(gsteps):
    """Turns a gstep selection into (begin, end, steps): an inclusive range
    (None = open) and an optional list of the exact steps inside it."""
    if gsteps is None:
        return None, None, None
    if isinstance(gsteps, range):
        if len(gsteps) == 0:
            return 1, 0, []
        lo, hi = min(gsteps[0], gsteps[-1]), max(gsteps[0], gsteps[-1])
        return lo, hi, (None if abs(gsteps.step) == 1 else list(gsteps))
    if isinstance(gsteps, slice):
        if gsteps.step not in (None, 1):
            raise ValueError("a gstep slice cannot have a step; use range(begin, end, step)")
        stop = None if gsteps.stop is None else gsteps.stop - 1
        return gsteps.start, stop, None
    if isinstance(gsteps, tuple) and len(gsteps) == 2:
        return gsteps[0], gsteps[1], None
    steps = sorted({int(g) for g in gsteps})
    if not steps:
        return 1, 0, steps
    return steps[0], steps[-1], steps


class Trace:
    """The data files of one trace, grouped by rank (see ``open_trace``).

    A wrapper of the C++ ``TraceReader`` (``xdl_trace._core``), which selects,
    skips files by their Meta, merges ranks and stacks."""

    def __init__(self, path, prefix="train", name="trace", run=None):
        path = os.fspath(path)
        if path.startswith("file://"):
            path = path[len("file://") :]
        self.path = path
        self.prefix = prefix
        self.name = name
        self.torn_tails = {}  # path -> byte offset of the torn frame, as found while reading.
        self._unknown_dtypes = set()  # (path, dtype) already warned about.
        # The run read (a trace_runs.Run; None for run="all" over several) and every run there.
        self._reader, self.run, self.runs = trace_runs.select_run(
            _open_reader(path, prefix, name), path, run
        )
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

    def schema(self):
        """``{key: (dtype name, shape)}`` from the first record (wire dtype names:
        "bfloat16" and "byte" stay distinct from uint16 and uint8)."""
        return {key: (dtype, shape) for key, dtype, shape in self._reader.schema()}

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
                yield Record(gstep, lstep, ts, columns, info.rank, extra, info.path, offset)
            if on_progress is not None:
                now = cursor.bytes_read
                on_progress(now - read)
                read = now
            if torn is not None:
                self._report_torn(torn)
            if done:
                return

    def records(self, keys=None, gsteps=None, ranks=None, on_progress=None):
        """Iterates records of the selected ranks (default all), merged by gstep
        across ranks (ties in rank order).

        ``keys``: a list of keys (default all). ``gsteps``: ``(begin, end)``
        inclusive (either may be None), a ``range``, a ``slice`` or a
        collection of steps; files whose Meta proves they hold none of them are
        skipped without being read. ``on_progress(n_bytes)`` is called as
        bytes are consumed.
        """
        if isinstance(keys, str):
            keys = [keys]
        begin, end, steps = _gstep_selection(gsteps)
        keys = None if keys is None else list(keys)
        ranks = None if ranks is None else [int(r) for r in ranks]
        cursor = self._reader.read(keys, begin, end, steps, ranks)
        return self._records(cursor, on_progress)

    def __iter__(self):
        return self.records()

    def stack(self, key, gsteps=None, rank=None, return_gsteps=False):
        """One key over steps as one array ``[steps, *shape]`` (a copy), in file
        order for one rank (default: the only rank). Empty (trace_once) columns
        are left out. With ``return_gsteps`` returns ``(gsteps, values)``."""
        (result,) = self.stack_many([key], gsteps=gsteps, rank=rank).values()
        return result if return_gsteps else result[1]

    def stack_many(self, keys=None, gsteps=None, rank=None):
        """``stack`` for several keys (default all) in one pass over the files:
        ``{key: (gsteps, values)}``."""
        keys = list(self.keys if keys is None else keys)
        begin, end, steps = _gstep_selection(gsteps)
        results, torn_tails = self._reader.stack(keys, begin, end, steps, rank)
        for torn in torn_tails:
            self._report_torn(torn)
        out = {}
        for key, (key_steps, values, dtype) in zip(keys, results):
            if dtype is not None:  # Newer than this reader: raw bytes.
                self._report_unknown_dtype(self.path, dtype)
            if values is None:
                values = np.zeros((0,), dtype=np.float32)
            out[key] = (key_steps, values)
        return out

    # --- checks ---------------------------------------------------------------

    def verify(self, on_progress=None):
        """Checks every file against its Meta (record count, data bytes,
        crc32c, step and time ranges). Returns one dict per file: ``path``,
        ``ok``, ``problems`` and the figures compared. A torn tail after the
        part the Meta covers is reported (``torn_tail``) but is not a failure.
        A file with nothing to check against (XDL's Meta has no checksum; no
        Meta and no record is what a crash before the first Meta leaves) is
        ``ok`` and ``unverifiable``, with a ``note`` saying why. A file that
        cannot be opened (not a regular file, ...) fails, naming it."""
        reports = []
        for info in self.files:
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


def _open_reader(path, prefix, name):
    """The C++ TraceReader of a path (FileNotFoundError when nothing matches)."""
    path = os.fspath(path)
    if path.startswith("file://"):
        path = path[len("file://") :]
    try:
        return _core.TraceReader.open(path, prefix, name)
    except errors.NotFoundError as error:
        raise FileNotFoundError(str(error)) from None


def open_trace(path, prefix="train", name="trace", run=None):
    """Opens a trace: a data file, or a directory holding
    ``{prefix}.{name}.{rank}.{index}`` files (``prefix`` "train" or "test").

    ``run``: which run to read when the directory holds several (``xdl.runs(path)`` lists
    them): "latest", a run id (or a unique prefix of one) or "all"; the default None reads the
    only run and raises ValueError listing the runs when there are several."""
    return Trace(path, prefix=prefix, name=name, run=run)
