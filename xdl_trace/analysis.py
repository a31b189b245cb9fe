"""One streaming pass over a run for the report and find-nan: per-key stats over steps, log-bucket
histograms, first NaN/Inf, step times; memory bounded by downsampling as it goes.

Per-tensor work happens in C++ (``_core.column_stats``): a batch of records' columns, read in place
from the file mapping, goes in one call with the GIL released. Python only routes the returned
rows into per-series accumulators:

* ``Series``: a curve over gstep kept at most ``capacity`` buckets long. Consecutive records share
  a bucket; when every bucket is full, neighbours merge pairwise and a bucket spans twice as many
  records (so memory is fixed and the curve keeps min/max envelopes, like a per-pixel
  downsampling done while streaming).
* ``HistogramSeries``: the same over log-bucket histograms (``_core.LOG_BUCKET_EDGES``: fixed
  edges shared by every key and step, so no first pass is needed to choose them), from which the
  report draws TensorBoard-style percentile bands over steps.

Data files are opened one at a time and dropped when done, so the process maps at most one data
file (``max_file_m_size``, 300 MB by default) at once.

    scan = scan_run("/tmp/run")
    scan.first_bad           # {key: BadValue} (first NaN/Inf per key)
    find_nan("/tmp/run")     # [{"key", "rank", "gstep", "lstep", "nan", "inf"}, ...]
"""

import fnmatch
import os

import numpy as np

from . import _core
from .cli import command
from .reader import open_trace

__all__ = ["scan_run", "find_nan", "RunScan", "Series", "HistogramSeries", "STATS_FIELDS"]

STATS_FIELDS = tuple(_core.STATS_FIELDS)  # count, min, max, mean, std, l2, nan, inf
COUNT, MIN, MAX, MEAN, STD, L2, NAN, INF = range(len(STATS_FIELDS))
LOG_BUCKET_EDGES = np.asarray(_core.LOG_BUCKET_EDGES)

# Wire dtype values for the C++ kernels: by numpy dtype, plus the names numpy lacks.
_WIRE_BY_NAME = {name: value for value, name, _, _ in _core.dtype_table()}
_WIRE_BY_NUMPY = {}
for _value, _name, _size, _numpy in _core.dtype_table():
    _WIRE_BY_NUMPY.setdefault(np.dtype(_numpy), _value)

_BATCH_RECORDS = 256  # Records per C++ call (amortizes the call; arrays are views, no copy).
_BATCH_BYTES = 64 << 20  # ...or fewer, so a batch holds about this many column bytes.


class Series:
    """A downsampled curve over gstep: per bucket of consecutive records, the mean, min and max
    of each of `width` fields (NaN values are skipped), and the first gstep of the bucket."""

    def __init__(self, width, capacity=512):
        if capacity < 2 or capacity % 2:
            raise ValueError("Series capacity must be an even number >= 2")
        self.width = width
        self.capacity = capacity
        self.span = 1  # Records per full bucket.
        self.used = 0  # Buckets in use; the last one holds `fill` records.
        self.fill = 0
        self.records = 0
        self.gstep = np.zeros(capacity, np.int64)
        self.sum = np.zeros((capacity, width))
        self.valid = np.zeros((capacity, width))
        self.min = np.full((capacity, width), np.inf)
        self.max = np.full((capacity, width), -np.inf)

    def add(self, gsteps, rows):
        """Appends records (gsteps ascending within the series) with their rows [n, width]."""
        rows = np.asarray(rows, dtype=np.float64).reshape(len(gsteps), self.width)
        finite = ~np.isnan(rows)
        zeroed = np.where(finite, rows, 0.0)
        low = np.where(finite, rows, np.inf)
        high = np.where(finite, rows, -np.inf)
        i, n = 0, len(gsteps)
        self.records += n
        while i < n:
            if self.used == 0 or self.fill == self.span:
                if self.used == self.capacity:
                    self._halve()
                    continue
                self.gstep[self.used] = gsteps[i]
                self.used += 1
                self.fill = 0
            if self.fill == 0 and n - i >= 2 * self.span:
                # Whole buckets at once: as many as fit, each `span` consecutive rows.
                m = min((n - i) // self.span, self.capacity - self.used + 1)
                end = i + m * self.span
                shape = (m, self.span, self.width)
                b = slice(self.used - 1, self.used - 1 + m)
                self.gstep[b] = gsteps[i : end : self.span]
                self.sum[b] = zeroed[i:end].reshape(shape).sum(axis=1)
                self.valid[b] = finite[i:end].reshape(shape).sum(axis=1)
                self.min[b] = low[i:end].reshape(shape).min(axis=1)
                self.max[b] = high[i:end].reshape(shape).max(axis=1)
                self.used += m - 1
                self.fill = self.span
                i = end
                continue
            b = self.used - 1
            take = min(self.span - self.fill, n - i)
            part = slice(i, i + take)
            self.sum[b] += zeroed[part].sum(axis=0)
            self.valid[b] += finite[part].sum(axis=0)
            np.minimum(self.min[b], low[part].min(axis=0), out=self.min[b])
            np.maximum(self.max[b], high[part].max(axis=0), out=self.max[b])
            self.fill += take
            i += take

    def _halve(self):
        half = self.capacity // 2
        self.gstep[:half] = self.gstep[0::2]
        self.sum[:half] = self.sum[0::2] + self.sum[1::2]
        self.valid[:half] = self.valid[0::2] + self.valid[1::2]
        self.min[:half] = np.minimum(self.min[0::2], self.min[1::2])
        self.max[:half] = np.maximum(self.max[0::2], self.max[1::2])
        self.sum[half:] = 0
        self.valid[half:] = 0
        self.min[half:] = np.inf
        self.max[half:] = -np.inf
        self.used = half
        self.span *= 2
        self.fill = self.span

    def view(self):
        """(gsteps, mean, min, max) of the buckets in use; NaN where a field had no value."""
        n = self.used
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.sum[:n] / self.valid[:n]
        empty = self.valid[:n] == 0
        low = np.where(empty, np.nan, self.min[:n])
        high = np.where(empty, np.nan, self.max[:n])
        return self.gstep[:n].copy(), mean, low, high


class HistogramSeries:
    """Log-bucket histograms over gstep, downsampled as ``Series`` is: per bucket of consecutive
    records the summed counts and the min and max of the finite values."""

    def __init__(self, capacity=128):
        if capacity < 2 or capacity % 2:
            raise ValueError("HistogramSeries capacity must be an even number >= 2")
        self.capacity = capacity
        self.span = 1
        self.used = 0
        self.fill = 0
        self.gstep = np.zeros(capacity, np.int64)
        # float32 (memory): exact up to 2^24 per bucket, then ~1e-7 relative, plenty for percentiles.
        self.counts = np.zeros((capacity, len(LOG_BUCKET_EDGES) - 1), np.float32)
        self.min = np.full(capacity, np.inf)
        self.max = np.full(capacity, -np.inf)

    def add(self, gsteps, counts, low, high):
        """Appends records: gsteps [n] ascending, counts [n, buckets], their finite min and max
        [n] (NaN for a record without finite values)."""
        low = np.where(np.isnan(low), np.inf, low)
        high = np.where(np.isnan(high), -np.inf, high)
        i, n = 0, len(gsteps)
        while i < n:
            if self.used == 0 or self.fill == self.span:
                if self.used == self.capacity:
                    half = self.capacity // 2
                    self.gstep[:half] = self.gstep[0::2]
                    self.counts[:half] = self.counts[0::2] + self.counts[1::2]
                    self.min[:half] = np.minimum(self.min[0::2], self.min[1::2])
                    self.max[:half] = np.maximum(self.max[0::2], self.max[1::2])
                    self.counts[half:] = 0
                    self.min[half:] = np.inf
                    self.max[half:] = -np.inf
                    self.used, self.span, self.fill = half, self.span * 2, self.span * 2
                    continue
                self.gstep[self.used] = gsteps[i]
                self.used += 1
                self.fill = 0
            b = self.used - 1
            take = min(self.span - self.fill, n - i)
            part = slice(i, i + take)
            self.counts[b] += counts[part].sum(axis=0)
            self.min[b] = min(self.min[b], low[part].min())
            self.max[b] = max(self.max[b], high[part].max())
            self.fill += take
            i += take

    def percentiles(self, quantiles):
        """(gsteps, values [buckets, len(quantiles)]): the quantiles of each bucket's values,
        interpolated linearly inside a log bucket and clipped to the exact min and max."""
        n = self.used
        out = np.full((n, len(quantiles)), np.nan)
        lo_edges, hi_edges = LOG_BUCKET_EDGES[:-1], LOG_BUCKET_EDGES[1:]
        for b in range(n):
            counts = self.counts[b]
            total = counts.sum()
            if total <= 0:
                continue
            cumulative = np.cumsum(counts)
            targets = np.asarray(quantiles) * total
            idx = np.searchsorted(cumulative, targets, side="left").clip(0, len(counts) - 1)
            before = cumulative[idx] - counts[idx]
            frac = np.where(counts[idx] > 0, (targets - before) / np.maximum(counts[idx], 1), 0.5)
            values = lo_edges[idx] + frac.clip(0, 1) * (hi_edges[idx] - lo_edges[idx])
            out[b] = values.clip(self.min[b], self.max[b])
        return self.gstep[:n].copy(), out


class BadValue:
    """The first record of a key holding NaN or Inf, and how many records did."""

    __slots__ = ("key", "rank", "gstep", "lstep", "nan", "inf", "records")

    def __init__(self, key, rank, gstep, lstep, nan, inf):
        self.key, self.rank, self.gstep, self.lstep = key, rank, gstep, lstep
        self.nan, self.inf = nan, inf
        self.records = 0

    def as_dict(self):
        return {
            "key": self.key,
            "rank": self.rank,
            "gstep": self.gstep,
            "lstep": self.lstep,
            "nan": self.nan,
            "inf": self.inf,
        }


def gradient_variable(key):
    """The variable a gradient key differentiates, by trace_gradient's naming: ``gradient/<name>``
    (``<scope>/gradient/<name>`` in a scope) -> ``<name>`` (``<scope>/<name>``); else None."""
    parts = key.split("/")
    for i, part in enumerate(parts[:-1]):
        if part == "gradient":
            return "/".join(parts[:i] + parts[i + 1 :])
    return None


def _kind(scan, key):
    """What the Header says a column is ("value", "stats", ...), None for files without it."""
    return getattr(scan.schema.get(key), "kind", None)


def column_stats_batch(columns, dtypes, histogram):
    """Stats rows (float64 [n, 8], STATS_FIELDS) and log-bucket counts of the flagged columns,
    computed in C++ from the full tensors (a stats summary column's row is taken as is by the
    caller, _scan_batch)."""
    return _core.column_stats(columns, dtypes, histogram)


def _wire_dtype(array, schema_name):
    if schema_name == "bfloat16" and array.dtype.itemsize == 2:
        return _WIRE_BY_NAME["bfloat16"]
    return _WIRE_BY_NUMPY[array.dtype]


class RunScan:
    """What one pass over a run found. Fields (filled by ``scan_run``):

    label, path; ranks; files; bytes; keys (scanned, in file order); schema {key: (dtype, shape)};
    records {rank: n}; gstep_range (min, max) and time_range (ms) over the records read;
    dropped (records dropped while tracing, from Meta); stats {(key, rank): Series(8)};
    histograms {key: HistogramSeries} (first rank only); ratio {(variable, rank): Series(1)}
    (||gradient|| / ||variable||); step_time {rank: Series(2)} (ms per gstep, gsteps per s);
    first_bad {key: BadValue}; constant {key: bool} (stats identical in every record);
    elements {key: max elements seen}; rows {key: records with a non-empty column};
    device {(kind, name): [events, total ns]} from the device tracers' events (Record.extra),
    device_dropped (events the tracers lost).
    """

    def __init__(self, path, label):
        self.path = path
        self.label = label
        self.ranks = []
        self.files = 0
        self.bytes = 0
        self.keys = []
        self.schema = {}
        self.records = {}
        self.gstep_range = None
        self.time_range = None
        self.dropped = 0
        self.closed_cleanly = True
        self.stats = {}
        self.histograms = {}
        self.ratio = {}
        self.step_time = {}
        self.first_bad = {}
        self.constant = {}
        self.elements = {}
        self.rows = {}  # key -> records with a non-empty column.
        self.device = {}  # (kind, name) -> [events, total ns]: device time by kernel.
        self.device_dropped = 0
        self.capacity = 512  # Buckets per Series / HistogramSeries.
        self.histogram_capacity = 128
        self._first_rows = {}
        self._last_time = {}

    @property
    def total_records(self):
        return sum(self.records.values())


def select_keys(keys, patterns):
    """Keys matching any of the comma-separated glob `patterns` (None: all), in order."""
    if not patterns:
        return list(keys)
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p]
    return [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns)]


# What the accumulators of one scan may hold, whatever the number of keys and ranks: curves get
# fewer buckets (never under MIN_CAPACITY) when keys x ranks is large.
SERIES_BUDGET_BYTES = 96 << 20
HISTOGRAM_BUDGET_BYTES = 64 << 20
MIN_CAPACITY = 32


def _capacities(keys, ranks, capacity, histogram_capacity):
    """(series capacity, histogram capacity): the requested ones (powers of two), halved until
    the scan's Series ((keys + 1) x ranks of 8 fields x 4 arrays) and HistogramSeries (one per
    key) fit their budgets, but not below MIN_CAPACITY: past about 12,000 keys x ranks the
    curves keep 32 points and memory grows by ~8 KB per key and rank."""
    per_bucket = max(keys + 1, 1) * max(ranks, 1) * len(STATS_FIELDS) * 4 * 8
    while capacity > MIN_CAPACITY and capacity * per_bucket > SERIES_BUDGET_BYTES:
        capacity //= 2
    per_bucket = max(keys, 1) * (len(LOG_BUCKET_EDGES) - 1) * 4
    while (
        histogram_capacity > MIN_CAPACITY
        and histogram_capacity * per_bucket > HISTOGRAM_BUDGET_BYTES
    ):
        histogram_capacity //= 2
    return capacity, histogram_capacity


def scan_run(
    path,
    label=None,
    keys=None,
    gsteps=None,
    ranks=None,
    prefix="train",
    name="trace",
    series=True,
    histograms=True,
    run=None,
    capacity=512,
    histogram_capacity=128,
    on_progress=None,
):
    """Reads a run once and returns a ``RunScan``.

    keys: glob patterns (a list or "a,b*"); gsteps: (begin, end) inclusive; ranks: a list.
    series/histograms False skip the curves (find-nan needs neither). capacity and
    histogram_capacity: buckets per curve and per distribution at most (even numbers); fewer
    when many keys x ranks would pass the memory budgets above.
    on_progress(n_bytes) is called as files are consumed. run: which run of a directory that
    holds several (as ``open_trace``).
    """
    trace = open_trace(path, prefix=prefix, name=name, run=run)
    scan = RunScan(trace.path, label or os.path.basename(os.path.normpath(trace.path)))
    scan.ranks = [r for r in trace.ranks if ranks is None or r in set(ranks)]
    files = [f for f in trace.files if f.rank in scan.ranks]
    scan.files = len(files)
    scan.bytes = sum(f.size for f in files)
    all_keys = trace.keys
    scan.keys = select_keys(all_keys, keys)
    if keys and not scan.keys:
        raise KeyError(f"{trace.path}: no key matches {keys!r} (keys: {', '.join(all_keys)})")
    scan.schema = {k: v for k, v in trace.schema().items() if k in set(scan.keys)}
    scan.capacity, scan.histogram_capacity = _capacities(
        len(scan.keys), len(scan.ranks), capacity, histogram_capacity
    )
    pairs = [
        (k, gradient_variable(k))
        for k in scan.keys
        if gradient_variable(k) in set(scan.keys) and gradient_variable(k) != k
    ]
    dropped = {}
    for f in files:
        if f.meta:
            dropped[f.rank] = max(dropped.get(f.rank, 0), f.meta.get("dropped_records", 0))
            scan.closed_cleanly &= bool(f.meta.get("closed_cleanly", True))
    scan.dropped = sum(dropped.values())
    histogram_rank = scan.ranks[0] if scan.ranks else None
    paths = [(f.rank, f.path, f.size) for f in files]
    del trace, files  # One data file mapped at a time from here on.
    for rank, file_path, size in paths:
        scan.records.setdefault(rank, 0)
        _scan_file(
            scan, rank, file_path, gsteps, pairs, series, histograms and rank == histogram_rank
        )
        if on_progress is not None:
            on_progress(size)
    return scan


def _scan_file(scan, rank, path, gsteps, pairs, series, histograms):
    """Scans one data file; its mapping is released when this returns (nothing here outlives
    the call), so the next file is mapped only after this one is gone."""
    batch, limit, device = [], _BATCH_RECORDS, False
    for record in open_trace(path).records(keys=scan.keys, gsteps=gsteps):
        if not batch:  # Records of a file are alike: size the batch from its first record.
            size = sum(a.nbytes for a in record.columns.values())
            limit = max(1, min(_BATCH_RECORDS, _BATCH_BYTES // max(size, 1)))
        device = device or record.extra is not None
        batch.append(record)
        if len(batch) >= limit:
            _scan_batch(scan, rank, batch, pairs, series, histograms)
            batch = []
    if batch:
        _scan_batch(scan, rank, batch, pairs, series, histograms)
    if series and device:
        # Device events ride in Record fields above 4, also in the closing device-only record
        # that key reads skip (docs/format.md): a read of no key returns every record's.
        for record in open_trace(path).records(keys=[], gsteps=gsteps):
            if record.extra:
                _add_device_time(scan, record.extra)


def _scan_batch(scan, rank, batch, pairs, series, histograms):
    n = len(batch)
    scan.records[rank] += n
    gsteps = np.fromiter((r.gstep for r in batch), np.int64, n)
    times = np.fromiter((r.timestamp for r in batch), np.float64, n)
    lo, hi = int(gsteps.min()), int(gsteps.max())
    g = scan.gstep_range
    scan.gstep_range = (lo, hi) if g is None else (min(g[0], lo), max(g[1], hi))
    t = scan.time_range
    t_lo, t_hi = float(times.min()), float(times.max())
    scan.time_range = (t_lo, t_hi) if t is None else (min(t[0], t_lo), max(t[1], t_hi))
    if series:
        _add_step_times(scan, rank, gsteps, times)

    # Every record of a file has the same keys in the same order: a dense [record, key] grid.
    keys = list(batch[0].columns)
    if not keys:
        return
    arrays = [a for r in batch for a in r.columns.values()]
    sizes = np.fromiter((a.size for a in arrays), np.int64, len(arrays)).reshape(n, len(keys))
    present = sizes > 0  # Empty: trace_once after its first step, a watch(every=) gap.
    # A stats summary column is its own row (the Header says so); one with count 0 summarizes
    # nothing (a watch(every=) gap) and is left out like an empty column.
    own_rows = [k for k, key in enumerate(keys) if _kind(scan, key) == "stats"]
    for k in own_rows:
        for i in range(n):
            a = arrays[i * len(keys) + k]
            present[i, k] = a.size == len(STATS_FIELDS) and a[COUNT] > 0
    where = np.flatnonzero(present.ravel())
    if where.size == 0:
        return
    columns = [arrays[i] for i in where.tolist()]
    wire = _WIRE_BY_NUMPY
    dtypes = [wire[a.dtype] for a in columns]
    for k, key in enumerate(keys):  # bfloat16 reads as its uint16 bits; the schema knows.
        if scan.schema.get(key, ("",))[0] == "bfloat16":
            for j in np.flatnonzero(where % len(keys) == k).tolist():
                dtypes[j] = _wire_dtype(columns[j], "bfloat16")
    flags = (sizes.ravel()[where] > 1) & histograms & ~np.isin(where % len(keys), own_rows)
    rows, buckets = column_stats_batch(columns, dtypes, flags.tolist())
    grid = np.full((n * len(keys), len(STATS_FIELDS)), np.nan)
    grid[where] = rows
    for j in np.flatnonzero(np.isin(where % len(keys), own_rows)).tolist():
        grid[where[j]] = columns[j]
    grid = grid.reshape(n, len(keys), len(STATS_FIELDS))
    hist_grid = np.full(n * len(keys), -1, np.int64)
    hist_grid[where[flags]] = np.arange(int(flags.sum()))
    hist_grid = hist_grid.reshape(n, len(keys))

    for k, key in enumerate(keys):
        record_index = np.flatnonzero(present[:, k])
        if record_index.size == 0:
            continue
        key_rows = grid[record_index, k]
        scan.elements[key] = max(scan.elements.get(key, 0), int(key_rows[:, COUNT].max()))
        _check_bad(scan, key, rank, batch, record_index, key_rows)
        _check_constant(scan, key, key_rows)
        if series:
            acc = scan.stats.get((key, rank))
            if acc is None:
                acc = scan.stats[(key, rank)] = Series(len(STATS_FIELDS), scan.capacity)
            acc.add(gsteps[record_index], key_rows)
        with_histogram = hist_grid[:, k] >= 0
        if histograms and with_histogram.any():
            acc = scan.histograms.get(key)
            if acc is None:
                acc = scan.histograms[key] = HistogramSeries(scan.histogram_capacity)
            acc.add(
                gsteps[with_histogram],
                buckets[hist_grid[with_histogram, k]],
                grid[with_histogram, k, MIN],
                grid[with_histogram, k, MAX],
            )
    if series and pairs:
        index = {key: k for k, key in enumerate(keys)}
        for grad, var in pairs:
            if grad in index and var in index:
                _add_ratio(
                    scan, rank, gsteps, grid[:, index[grad], L2], grid[:, index[var], L2], var
                )


def _check_bad(scan, key, rank, batch, record_index, key_rows):
    bad = (key_rows[:, NAN] > 0) | (key_rows[:, INF] > 0)
    if not bad.any():
        return
    first = int(np.argmax(bad))
    record = batch[record_index[first]]
    current = scan.first_bad.get(key)
    candidate = BadValue(
        key,
        rank,
        record.gstep,
        record.lstep,
        int(key_rows[first, NAN]),
        int(key_rows[first, INF]),
    )
    if current is None or (candidate.gstep, candidate.rank) < (current.gstep, current.rank):
        if current is not None:
            candidate.records = current.records
        scan.first_bad[key] = candidate
    scan.first_bad[key].records += int(bad.sum())


def _check_constant(scan, key, key_rows):
    scan.rows[key] = scan.rows.get(key, 0) + len(key_rows)
    if scan.constant.get(key) is False:
        return
    first = scan._first_rows.get(key)
    if first is None:
        first = scan._first_rows[key] = key_rows[0].copy()
    same = np.all((key_rows == first) | (np.isnan(key_rows) & np.isnan(first)), axis=1)
    scan.constant[key] = bool(same.all())


def _add_step_times(scan, rank, gsteps, times):
    previous = scan._last_time.get(rank)
    if previous is not None:
        gsteps = np.concatenate([[previous[0]], gsteps])
        times = np.concatenate([[previous[1]], times])
    scan._last_time[rank] = (int(gsteps[-1]), float(times[-1]))
    if len(gsteps) < 2:
        return
    d_step = np.diff(gsteps).astype(np.float64)
    d_time = np.diff(times)
    keep = d_step > 0
    if not keep.any():
        return
    d_step, d_time = d_step[keep], d_time[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        ms_per_step = d_time / d_step
        per_second = np.where(d_time > 0, d_step * 1000.0 / d_time, np.nan)
    acc = scan.step_time.get(rank)
    if acc is None:
        acc = scan.step_time[rank] = Series(2, scan.capacity)
    acc.add(gsteps[1:][keep], np.stack([ms_per_step, per_second], axis=1))


def _add_ratio(scan, rank, gsteps, grad_l2, var_l2, var):
    """||gradient|| / ||variable|| of the records holding both (NaN where either is empty)."""
    both = ~np.isnan(grad_l2) & ~np.isnan(var_l2)
    if not both.any():
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(var_l2[both] > 0, grad_l2[both] / var_l2[both], np.nan)
    acc = scan.ratio.get((var, rank))
    if acc is None:
        acc = scan.ratio[(var, rank)] = Series(1, scan.capacity)
    acc.add(gsteps[both], ratio[:, None])


def _add_device_time(scan, extra):
    from .timeline import _EVENT_CATEGORY, _LENGTH_DELIMITED, DEVICE_TRACE_FIELD, DeviceTrace

    for number, wire_type, payload in extra:
        if number != DEVICE_TRACE_FIELD or wire_type != _LENGTH_DELIMITED:
            continue
        message = DeviceTrace()
        message.ParseFromString(payload)
        scan.device_dropped += message.dropped_events
        for device in message.device:
            for line in device.line:
                for event in line.event:
                    kind = _EVENT_CATEGORY.get(event.kind, "device")
                    name = (
                        message.name[event.name_index]
                        if event.name_index < len(message.name)
                        else ""
                    )
                    entry = scan.device.setdefault((kind, name), [0, 0])
                    entry[0] += 1
                    entry[1] += max(event.end_ns - event.start_ns, 0)


def find_nan(path, prefix="train", name="trace", keys=None, gsteps=None, ranks=None, run=None):
    """The first NaN/Inf of each key, from full tensors: a list of dicts with ``key``, ``rank``,
    ``gstep``, ``lstep`` (of the first record holding one; earliest gstep, then lowest rank) and
    ``nan``, ``inf`` (how many elements of that record), ordered by gstep then key. Empty when
    the run is clean."""
    scan = scan_run(
        path,
        keys=keys,
        gsteps=gsteps,
        ranks=ranks,
        prefix=prefix,
        name=name,
        series=False,
        histograms=False,
        run=run,
    )
    return [b.as_dict() for b in sorted(scan.first_bad.values(), key=_bad_order)]


def _bad_order(bad):
    return (bad.gstep, bad.rank, bad.key)


# --- the `xdl-trace find-nan` subcommand (registered with xdl_trace.cli) -------


def _configure(parser):
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    parser.add_argument("--keys", help="comma-separated key globs (default: all)")
    parser.add_argument("--gsteps", help="gstep range A:B, inclusive (A: or :B open-ended)")


def _run(args):
    import json

    from .cli import Progress, _parse_gsteps

    trace = open_trace(args.path, prefix=args.prefix, name=args.name, run=args.run)
    with Progress(trace.nbytes, "find-nan") as progress:
        scan = scan_run(
            args.path,
            run=args.run,
            keys=args.keys,
            gsteps=_parse_gsteps(args.gsteps),
            prefix=args.prefix,
            name=args.name,
            series=False,
            histograms=False,
            on_progress=progress,
        )
    found = sorted(scan.first_bad.values(), key=_bad_order)
    if args.json:
        print(json.dumps([b.as_dict() for b in found], indent=2))
    elif not found:
        print(f"no NaN or Inf in {len(scan.keys)} keys over {scan.total_records} records")
    else:
        for b in found:
            print(
                f"{b.key}: first at gstep {b.gstep} (rank {b.rank}, lstep {b.lstep}): "
                f"{b.nan} NaN, {b.inf} Inf; {b.records} record(s) affected"
            )
    return 1 if found else 0


# The `xdl-trace` subcommand (cli.py imports this module when it starts).
command(
    "find-nan",
    "first NaN/Inf per key (rank, gstep, lstep, count); exit 1 when any is found",
    _configure,
)(_run)
