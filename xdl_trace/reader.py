"""Reads traces back: ``open_trace(path)`` on a data file or a directory of ranks and rolled-over files.

Decoding happens in C++ (``xdl_trace._core.TraceFile``, a memory-mapped file);
every column comes back as a read-only numpy array that views the mapping, so
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

import heapq
import os
import warnings

import numpy as np

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
    "bfloat16_to_float32",
]

_BATCH = 256  # Records decoded per call into C++ (amortizes the GIL round trip).


class TornTailWarning(UserWarning):
    """A data file ends inside a frame: the writer stopped mid-record (a crash)."""


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

    __slots__ = ("path", "prefix", "name", "rank", "index", "size", "meta", "meta_error", "_file")

    def __init__(self, path, prefix, name, rank, index):
        self.path = path
        self.prefix = prefix
        self.name = name
        self.rank = rank
        self.index = index
        self._file = None
        self.size = os.path.getsize(path)
        self.meta = None
        self.meta_error = None
        try:
            with open(path + ".meta", "rb") as f:
                self.meta = _core.parse_meta(f.read())
        except FileNotFoundError:
            self.meta_error = f"{path}.meta: no such file"
        except (OSError, ValueError) as error:
            self.meta_error = str(error)

    def open(self):
        """The mapped file (opened once, then cached)."""
        if self._file is None:
            self._file = _core.TraceFile.open(self.path)
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
    """Turns a gstep selection into (begin, end, members): an inclusive range
    for C++ (None = open) and an optional set for exact membership."""
    if gsteps is None:
        return None, None, None
    if isinstance(gsteps, range):
        if len(gsteps) == 0:
            return 1, 0, frozenset()
        lo, hi = min(gsteps[0], gsteps[-1]), max(gsteps[0], gsteps[-1])
        return lo, hi, (None if abs(gsteps.step) == 1 else frozenset(gsteps))
    if isinstance(gsteps, slice):
        if gsteps.step not in (None, 1):
            raise ValueError("a gstep slice cannot have a step; use range(begin, end, step)")
        stop = None if gsteps.stop is None else gsteps.stop - 1
        return gsteps.start, stop, None
    if isinstance(gsteps, tuple) and len(gsteps) == 2:
        return gsteps[0], gsteps[1], None
    members = frozenset(int(g) for g in gsteps)
    if not members:
        return 1, 0, members
    return min(members), max(members), members


class Trace:
    """The data files of one trace, grouped by rank (see ``open_trace``)."""

    def __init__(self, path, prefix="train", name="trace"):
        path = os.fspath(path)
        if path.startswith("file://"):
            path = path[len("file://") :]
        self.path = path
        self.prefix = prefix
        self.name = name
        self.torn_tails = {}  # path -> byte offset of the torn frame, as found while reading.
        if os.path.isdir(path):
            infos = _core.list_trace_files(path, prefix, name)
            if not infos:
                others = sorted(
                    {
                        f"{f['prefix']}.{f['name']}"
                        for p in ("train", "test")
                        for f in _core.list_trace_files(path, p, "")
                    }
                )
                hint = f" (found: {', '.join(others)})" if others else ""
                raise FileNotFoundError(
                    f"{path}: no data files named {prefix}.{name}.<rank>.<index>{hint}"
                )
        elif os.path.isfile(path):
            parsed = _core.parse_trace_file_name(os.path.basename(path))
            if parsed is None:
                parsed = {"prefix": "", "name": "", "rank": 0, "index": 0}
            parsed["path"] = path
            infos = [parsed]
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
        self.files = [
            TraceFileInfo(i["path"], i["prefix"], i["name"], i["rank"], i["index"]) for i in infos
        ]
        self.files.sort(key=lambda f: (f.rank, f.index))
        self.ranks = sorted({f.rank for f in self.files})

    # --- what is in it -------------------------------------------------------

    @property
    def keys(self):
        """Column keys, from the Header of the first file that has one."""
        for info in self.files:
            keys = info.open().keys
            if keys or not info.open().header_torn:
                return list(keys)
        return []

    def files_of_rank(self, rank):
        return [f for f in self.files if f.rank == rank]

    def schema(self):
        """``{key: (dtype name, shape)}`` from the first record (wire dtype names:
        "bfloat16" and "byte" stay distinct from uint16 and uint8)."""
        for info in self.files:
            f = info.open()
            described = f.describe(f.first_record_offset)
            if described is not None:
                return {k: (d, tuple(s)) for k, (d, s, _empty) in zip(f.keys, described)}
        return {}

    @property
    def nbytes(self):
        return sum(f.size for f in self.files)

    # --- records --------------------------------------------------------------

    def _skip_offset(self, info, begin, end):
        """Where reading a file starts for gsteps [begin, end]: its first record,
        past the part its Meta proves is outside the range, or None to skip it."""
        f = info.open()
        meta = info.meta
        if meta is None or (begin is None and end is None):
            return f.first_record_offset
        empty = begin is not None and end is not None and begin > end
        disjoint = meta["record_count"] == 0 or empty
        if meta["record_count"] > 0:
            disjoint = disjoint or (end is not None and meta["gstep_begin"] > end)
            disjoint = disjoint or (begin is not None and meta["gstep_end"] < begin)
        if not disjoint:
            return f.first_record_offset
        if meta["format_version"] == 0:
            # XDL's own Meta describes the whole closed file.
            return None if meta["gstep_end"] or meta["gstep_begin"] else f.first_record_offset
        covered = meta["data_bytes"]
        if covered >= f.size:
            return None
        return max(covered, f.first_record_offset)

    def _file_records(self, info, keys, begin, end, members, on_progress=None):
        f = info.open()
        file_keys = f.keys
        if keys is None:
            names, indices = list(file_keys), None
        else:
            index_of = {k: i for i, k in enumerate(file_keys)}
            missing = [k for k in keys if k not in index_of]
            if missing:
                raise KeyError(f"{info.path}: no key {missing[0]!r} (keys: {', '.join(file_keys)})")
            names, indices = list(keys), [index_of[k] for k in keys]
        offset = self._skip_offset(info, begin, end)
        if offset is None:
            return
        rank, path = info.rank, info.path
        while True:
            batch, next_offset, state = f.read(offset, _BATCH, indices, begin, end)
            for gstep, lstep, ts, arrays, extra, frame_offset in batch:
                if members is not None and gstep not in members:
                    continue
                yield Record(
                    gstep, lstep, ts, dict(zip(names, arrays)), rank, extra, path, frame_offset
                )
            if on_progress is not None:
                on_progress(next_offset - offset)
            offset = next_offset
            if state == "end":
                return
            if state == "torn":
                self._report_torn(path, offset)
                return

    def _report_torn(self, path, offset):
        if path not in self.torn_tails:
            self.torn_tails[path] = offset
            warnings.warn(
                f"{path}: torn final frame at byte offset {offset} (the writer stopped mid-record);"
                " the records before it are complete",
                TornTailWarning,
                stacklevel=4,
            )

    def _rank_records(self, rank, keys, begin, end, members, on_progress):
        for info in self.files_of_rank(rank):
            yield from self._file_records(info, keys, begin, end, members, on_progress)

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
        begin, end, members = _gstep_selection(gsteps)
        selected = self.ranks if ranks is None else [r for r in self.ranks if r in set(ranks)]
        streams = [self._rank_records(r, keys, begin, end, members, on_progress) for r in selected]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=lambda r: (r.gstep, r.rank))

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
        if rank is None:
            if len(self.ranks) > 1:
                raise ValueError(f"stack: the trace has ranks {self.ranks}; pass rank=")
            rank = self.ranks[0]
        keys = list(self.keys if keys is None else keys)
        begin, end, members = _gstep_selection(gsteps)
        parts = {k: ([], []) for k in keys}
        for info in self.files_of_rank(rank):
            f = info.open()
            file_keys = f.keys
            missing = [k for k in keys if k not in file_keys]
            if missing:
                raise KeyError(f"{info.path}: no key {missing[0]!r} (keys: {', '.join(file_keys)})")
            if self._skip_offset(info, begin, end) is None:
                continue
            results, torn = f.stack([file_keys.index(k) for k in keys], begin, end)
            if torn:
                self._report_torn(info.path, self._torn_offset(f))
            for key, (steps, values) in zip(keys, results):
                if values is None:
                    continue
                if members is not None:
                    keep = np.isin(steps, np.fromiter(members, dtype=np.int64))
                    steps, values = steps[keep], values[keep]
                parts[key][0].append(steps)
                parts[key][1].append(values)
        out = {}
        for key, (step_parts, value_parts) in parts.items():
            if not value_parts:
                out[key] = (np.zeros(0, dtype=np.int64), np.zeros((0,), dtype=np.float32))
                continue
            if (
                len({v.shape[1:] for v in value_parts}) > 1
                or len({v.dtype for v in value_parts}) > 1
            ):
                raise ValueError(f"stack({key!r}): shape or dtype differs between files")
            if len(value_parts) == 1:
                out[key] = (step_parts[0], value_parts[0])
            else:
                out[key] = (np.concatenate(step_parts), np.concatenate(value_parts))
        return out

    @staticmethod
    def _torn_offset(f):
        offset, state = f.first_record_offset, "more"
        while state == "more":
            _batch, offset, state = f.read(offset, 1 << 20, [])
        return offset

    # --- checks ---------------------------------------------------------------

    def verify(self, on_progress=None):
        """Checks every file against its Meta (record count, data bytes,
        crc32c). Returns one dict per file: ``path``, ``ok``, ``problems`` and
        the figures compared. A torn tail after the part the Meta covers is
        reported (``torn_tail``) but is not a failure."""
        reports = []
        for info in self.files:
            report = info.open().verify()
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
        return f"Trace({self.path!r}, ranks={self.ranks}, files={len(self.files)})"


def open_trace(path, prefix="train", name="trace"):
    """Opens a trace: a data file, or a directory holding
    ``{prefix}.{name}.{rank}.{index}`` files (``prefix`` "train" or "test")."""
    return Trace(path, prefix=prefix, name=name)
