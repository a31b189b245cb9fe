"""Reading traces too big for one process with Dask: a DataFrame of per-step column statistics, a
stacked array of one key, or a Bag of records, computed on Dask workers.

    import xdl_trace.dask as xdd
    df = xdd.to_dataframe("out", keys=["loss", "w"], gsteps=(0, 10_000))
    df.groupby("key")["l2"].max().compute()
    grads = xdd.to_array("out", "gradient/w", rank=0)    # [steps, *shape]

Every partition is one data file, planned on the client from the Meta files alone: a file whose
Meta proves it holds none of the selected gsteps is never opened. Tasks carry file paths, never
open handles, so they run on any ``dask.distributed`` cluster whose workers see the same file
system (docs/scale.md). Dask is optional: ``pip install "dask[dataframe,distributed]"`` or
Debian's python3-dask, python3-distributed and python3-pandas.
"""

import warnings

import numpy as np

try:
    import dask
    import dask.array as da
    import dask.bag as db
    import dask.dataframe as dd
    import pandas as pd
except ImportError as error:  # pragma: no cover - exercised only without dask
    raise ImportError(
        "xdl_trace.dask needs dask with its dataframe extra (pandas): "
        'pip install "dask[dataframe,distributed]", or apt install python3-dask '
        "python3-distributed python3-pandas"
    ) from error

from . import _core
from ._names import WIRE_DTYPE
from .read import reader as _reader
from .read.selection import Selection

__all__ = ["STATS", "plan", "to_dataframe", "to_array", "records"]

# The statistics of each column, as the built-in "stats" summary defines them (docs/format.md;
# the names come from _core through xdl_trace.read.reader).
STATS = _reader.STATS_FIELDS

_COLUMNS = {
    "run": object,
    "rank": np.int32,
    "gstep": np.int64,
    "lstep": np.int64,
    "timestamp": np.int64,
    "key": object,
    "count": np.int64,
    "min": np.float64,
    "max": np.float64,
    "mean": np.float64,
    "std": np.float64,
    "l2": np.float64,
    "nan": np.int64,
    "inf": np.int64,
}


def _meta_frame():
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in _COLUMNS.items()})


def _may_hold(meta, begin, end):
    """False only when the Meta proves the file holds no gstep in [begin, end]."""
    if not meta:
        return True
    if meta.get("format_version", 0) >= 1:
        if not meta.get("closed_cleanly"):  # Still written, or cut short: records may follow.
            return True
        if meta.get("record_count", 0) == 0:
            return False
        lo, hi = meta["gstep_begin"], meta["gstep_end"]
    else:  # XDL's Meta: -1 where it never learnt an end.
        lo = meta.get("gstep_begin", -1)
        hi = meta.get("gstep_end", -1)
        lo = None if lo < 0 else lo
        hi = None if hi < 0 else hi
    if begin is not None and hi is not None and hi < begin:
        return False
    if end is not None and lo is not None and lo > end:
        return False
    return True


DEFAULT_RUN = "latest"  # The run read when the selection names none (said: ``plan``).


def _selection(selection, **fields):
    """The read's Selection (``Selection.of``); a run of None is DEFAULT_RUN (``plan``)."""
    return Selection.of(selection, **fields)


def plan(path, gsteps=None, run=None, ranks=None, prefix="train", name="trace", selection=None):
    """The files a read touches, from Meta alone: a list of dicts with ``path``, ``rank``,
    ``index``, ``run`` (the run id) and ``superseded_from`` (``TraceFileInfo``'s: None, or the
    gstep from which a later attempt of a restarted run superseded the file's records), in rank
    then index order. Files whose Meta proves they hold none of the selected gsteps are left
    out (and never opened). ``selection``: a ``Selection`` (its keys are not used here); the
    keywords gsteps, run (default "latest") and ranks stand for its fields. A directory of
    several runs read by default (no run named: the latest) warns, naming how to read them all:
    a sweep's frame of one run, silently, looked like the sweep's."""
    selection = _selection(selection, gsteps=gsteps, run=run, ranks=ranks)
    ranks = selection.ranks
    trace = _reader.open_trace(
        path,
        prefix=prefix,
        name=name,
        run=selection.run or DEFAULT_RUN,
        attempts=selection.attempts,
    )
    if selection.run is None and len(trace.runs) > 1:
        warnings.warn(
            f"xdl_trace.dask: {path} holds {len(trace.runs)} runs; reading the latest "
            f"({trace.run.id}): run='all' reads every run (a 'run' column tells them apart), "
            "run='<id>' one of them (xdl.runs lists them with their metadata)",
            UserWarning,
            stacklevel=3,
        )
    chosen = []
    for f in trace.files:
        if ranks is not None and f.rank not in ranks:
            continue
        begin, end, _ = selection.before(f.superseded_from).window()
        if not _may_hold(f.meta, begin, end):
            continue
        run_id = (f.meta or {}).get("run_id") or (trace.run.id if trace.run else "")
        chosen.append(
            {
                "path": f.path,
                "rank": f.rank,
                "index": f.index,
                "run": run_id,
                "superseded_from": f.superseded_from,
            }
        )
    return chosen


# Wire dtype of a column array: by numpy dtype, except bfloat16 (read as its uint16 bits),
# which the file's schema names.
_WIRE_BY_NUMPY = {}
for _value, _name, _size, _numpy in _core.dtype_table():
    _WIRE_BY_NUMPY.setdefault(np.dtype(_numpy), _value)
_BATCH = 256  # Records whose columns go to one C++ stats call.


# Summary columns whose values are no tensor's statistics (a checksum's halves, a histogram's
# edges and counts): no row of the DataFrame (``to_array`` reads them).
_NOT_STATISTICS = ("digest", "histogram")


def _stats_rows(entry, batch, bfloat16_keys, stats_keys, rows, left_out=()):
    """Appends the statistics rows of `batch` (records) to `rows`: computed in C++ in one call
    over every column, read in place (``_core.column_stats``, as the report's), except a
    built-in "stats" summary column (the Header says so), which is its own row, and the keys
    `left_out` (_NOT_STATISTICS), which have none."""
    arrays, dtypes, where, own = [], [], [], []
    for record in batch:
        for key, column in record.columns.items():
            if key in left_out:
                continue
            if key in stats_keys and column.size == len(STATS):
                own.append((record, key, column))
                continue
            if key in bfloat16_keys and column.dtype == np.uint16:
                dtypes.append(WIRE_DTYPE["bfloat16"])
            else:
                dtypes.append(_WIRE_BY_NUMPY[column.dtype])
            arrays.append(column)
            where.append((record, key))
    # One thread: Dask runs one task per worker thread, so the cores are already in use.
    stats = _core.column_stats(arrays, dtypes, None, 1)[0] if arrays else []
    computed = [(record, key, row) for (record, key), row in zip(where, stats)]
    for record, key, row in computed + own:
        rows["run"].append(entry["run"])
        rows["rank"].append(entry["rank"])
        rows["gstep"].append(record.gstep)
        rows["lstep"].append(record.lstep)
        rows["timestamp"].append(record.timestamp)
        rows["key"].append(key)
        for name, value in zip(STATS, row):
            rows[name].append(value)


def _file_frame(entry, selection):
    """The statistics rows of one data file (runs on a worker: opens the file by path)."""
    trace = _reader.open_trace(entry["path"])
    schema = trace.schema()
    bfloat16_keys = {k for k, column in schema.items() if column[0] == "bfloat16"}
    kinds = {k: getattr(column, "kind", None) for k, column in schema.items()}
    stats_keys = {k for k, kind in kinds.items() if kind == "stats"}
    left_out = {k for k, kind in kinds.items() if kind in _NOT_STATISTICS}
    rows = {name: [] for name in _COLUMNS}
    batch = []
    for record in trace.records(selection=selection.before(entry["superseded_from"])):
        batch.append(record)
        if len(batch) == _BATCH:
            _stats_rows(entry, batch, bfloat16_keys, stats_keys, rows, left_out)
            batch = []
    _stats_rows(entry, batch, bfloat16_keys, stats_keys, rows, left_out)
    return pd.DataFrame({name: np.asarray(rows[name], dtype=t) for name, t in _COLUMNS.items()})


def to_dataframe(
    path, keys=None, gsteps=None, run=None, ranks=None, prefix="train", name="trace", selection=None
):
    """A dask DataFrame with one row per (run, rank, gstep, lstep, key): ``timestamp`` and the
    column's statistics (``count, min, max, mean, std, l2, nan, inf`` over its elements, finite
    values for min..l2, as the built-in "stats" summary), computed in C++ on the workers; a
    column written with ``summary="stats"`` is taken as its own row. One partition per data
    file.

    ``selection``: a ``Selection``, or its fields as keywords: ``keys``: list of keys (default
    all); ``gsteps``: as ``Trace.records``; ``run``: "latest" (default), a run id or "all";
    ``ranks``: a list of ranks (default all)."""
    selection = _selection(selection, keys=keys, gsteps=gsteps, run=run, ranks=ranks)
    files = plan(path, prefix=prefix, name=name, selection=selection)
    if not files:
        return dd.from_pandas(_meta_frame(), npartitions=1)
    return dd.from_map(
        _file_frame,
        files,
        args=(_file_selection(selection),),
        meta=_meta_frame(),
        label="xdl-trace-stats",
        enforce_metadata=False,
    )


def _file_rows(path, key, gsteps, shape, dtype):
    """One key stacked over the steps of one data file (runs on a worker)."""
    values = _reader.open_trace(path).stack(key, gsteps=gsteps)
    if values.size == 0 and values.shape != (0,) + tuple(shape):
        return np.zeros((0,) + tuple(shape), dtype=dtype)
    return values


def to_array(
    path, key, rank=0, gsteps=None, run=None, prefix="train", name="trace", selection=None
):
    """One key of one rank stacked over gsteps as a dask array ``[steps, *shape]``, one chunk per
    data file. Chunk lengths are unknown until computed (Meta counts records, not the steps that
    hold this key): call ``.compute_chunk_sizes()`` before positional indexing. ``selection``: a
    ``Selection`` of gsteps and run (default "latest"), or those as keywords; `rank` is the
    rank."""
    selection = _selection(selection, gsteps=gsteps, run=run).replace(ranks=[rank])
    gsteps = selection.gsteps
    files = plan(path, prefix=prefix, name=name, selection=selection)
    if not files:
        raise KeyError(f"xdl_trace: no data file of rank {rank} holds gsteps {gsteps!r} at {path}")
    # dtype and row shape from the first planned file's first record (one file opened here).
    schema = _reader.open_trace(files[0]["path"]).schema()
    if key not in schema:
        raise KeyError(f"xdl_trace: key {key!r} is not in {files[0]['path']}: {sorted(schema)}")
    wire, shape = schema[key][0], schema[key][1]
    # The reader widens bfloat16 to float32 and reads byte columns as uint8.
    dtype = np.dtype(np.float32 if wire == "bfloat16" else np.uint8 if wire == "byte" else wire)
    chunks = [
        da.from_delayed(
            dask.delayed(_file_rows, pure=True)(
                f["path"], key, selection.before(f["superseded_from"]).gsteps, shape, dtype
            ),
            shape=(np.nan,) + tuple(shape),
            dtype=dtype,
        )
        for f in files
    ]
    return da.concatenate(chunks, axis=0, allow_unknown_chunksizes=True)


def _file_selection(selection):
    """What a worker reads of one planned data file: the keys and gsteps of `selection` (the
    file is of one run and rank already)."""
    keys = [selection.keys] if isinstance(selection.keys, str) else selection.keys
    return Selection(keys=None if keys is None else list(keys), gsteps=selection.gsteps)


def _file_records(entries, selection):
    """The records of the data files of one partition as dicts (runs on a worker)."""
    out = []
    for entry in entries:
        of_file = selection.before(entry["superseded_from"])
        for r in _reader.open_trace(entry["path"]).records(selection=of_file):
            out.append(
                {
                    "run": entry["run"],
                    "rank": r.rank,
                    "gstep": r.gstep,
                    "lstep": r.lstep,
                    "timestamp": r.timestamp,
                    # Copies: a record's arrays view the file's mapping on the worker.
                    "columns": {k: np.array(v) for k, v in r.columns.items()},
                }
            )
    return out


def records(
    path, keys=None, gsteps=None, run=None, ranks=None, prefix="train", name="trace", selection=None
):
    """A dask Bag of records (dicts: run, rank, gstep, lstep, timestamp, columns), one partition
    per data file, in file order within each partition. selection and keys, gsteps, run
    (default "latest"), ranks: as ``to_dataframe``."""
    selection = _selection(selection, keys=keys, gsteps=gsteps, run=run, ranks=ranks)
    files = plan(path, prefix=prefix, name=name, selection=selection)
    if not files:
        return db.from_sequence([], npartitions=1)
    bag = db.from_sequence(files, npartitions=len(files))
    return bag.map_partitions(_file_records, _file_selection(selection))
