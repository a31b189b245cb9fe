"""One streaming pass over a run for the report and find-nan: per-key stats over steps, log-bucket
histograms, first NaN/Inf, step times; memory bounded by downsampling as it goes.

The per-record work happens in C++ (``_core.RecordScan``, cpp/src/analysis/record_scan.h): one
walk over a data file's records returns, in chunks of many thousand records, columns of numpy
arrays: gstep, lstep, rank, timestamp; per key the stats rows (count, min, max, mean, std, l2, nan,
inf: computed from the mapped columns with the GIL released, or a stats summary's own row) and
log-bucket counts; the step host spans and the device traces. Python only routes those arrays into
per-series accumulators, with numpy, never per record:

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
import warnings

import numpy as np

from .. import _core, _names
from . import gpu_steps, host_ranges, trace_runs
from .device_events import DeviceDataWarning, bad_data_message
from .reader import STATS_FIELDS, TornTailWarning, UnknownDTypeWarning, open_trace
from .selection import Selection

__all__ = ["scan_run", "find_nan", "RunScan", "Series", "HistogramSeries", "STATS_FIELDS"]

# STATS_FIELDS: the stats layout's field names, from _core (via xdl_trace.read.reader).
COUNT, MIN, MAX, MEAN, STD, L2, NAN, INF = range(len(STATS_FIELDS))
LOG_BUCKET_EDGES = np.asarray(_core.LOG_BUCKET_EDGES)

# Bounds of one _core.RecordScan chunk (its arrays are what a scan holds besides the
# accumulators): records, record x key cells (64 bytes of stats each) and histogram rows (5 KB).
_CHUNK_RECORDS = 1 << 15
_CHUNK_CELLS = 1 << 17
_CHUNK_HISTOGRAM_ROWS = 1024


class Series:
    """A downsampled curve over gstep: per bucket of consecutive records, the mean, min and max
    of each of `width` fields (NaN values are skipped), and the first gstep of the bucket. The
    accumulation runs in C++ (``_core.curve_add``) on these arrays in place."""

    def __init__(self, width, capacity=512):
        if capacity < 2 or capacity % 2:
            raise ValueError("Series capacity must be an even number >= 2")
        self.width = width
        self.capacity = capacity
        # span (records per full bucket), used (buckets in use; the last one holds `fill`
        # records), fill, records: kept by _core.curve_add.
        self._state = np.array([1, 0, 0, 0], np.int64)
        self.gstep = np.zeros(capacity, np.int64)
        self.sum = np.zeros((capacity, width))
        self.valid = np.zeros((capacity, width))
        self.min = np.full((capacity, width), np.inf)
        self.max = np.full((capacity, width), -np.inf)

    span = property(lambda self: int(self._state[0]))
    used = property(lambda self: int(self._state[1]))
    fill = property(lambda self: int(self._state[2]))
    records = property(lambda self: int(self._state[3]))

    def add(self, gsteps, rows, skip_field=-1):
        """Appends records (gsteps ascending within the series) with their rows [n, width] (any
        strides: e.g. one key's view of a chunk's stats grid). skip_field >= 0: rows whose
        field `skip_field` is NaN are not records of this series and are left out."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2:
            rows = rows.reshape(len(gsteps), self.width)
        _core.curve_add(
            self._state,
            self.gstep,
            self.sum,
            self.valid,
            self.min,
            self.max,
            np.asarray(gsteps, dtype=np.int64),
            rows,
            skip_field,
        )

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
    records the summed counts and the min and max of the finite values. The accumulation runs
    in C++ (``_core.histogram_add``, the same downsampler as ``Series``) on these arrays in
    place."""

    def __init__(self, capacity=128):
        if capacity < 2 or capacity % 2:
            raise ValueError("HistogramSeries capacity must be an even number >= 2")
        self.capacity = capacity
        # span (records per full bucket), used (buckets in use; the last one holds `fill`
        # records), fill: kept by _core.histogram_add.
        self._state = np.array([1, 0, 0], np.int64)
        self.gstep = np.zeros(capacity, np.int64)
        # float32 (memory): exact up to 2^24 per bucket, then ~1e-7 relative, plenty for percentiles.
        self.counts = np.zeros((capacity, len(LOG_BUCKET_EDGES) - 1), np.float32)
        self.min = np.full(capacity, np.inf)
        self.max = np.full(capacity, -np.inf)

    span = property(lambda self: int(self._state[0]))
    used = property(lambda self: int(self._state[1]))
    fill = property(lambda self: int(self._state[2]))

    def add(self, gsteps, counts, low, high, records=None):
        """Appends records: gsteps [n] ascending, counts [n, buckets], their finite min and max
        [n] (NaN for a record without finite values). ``records`` [n]: how many consecutive
        records each row sums (default 1 each); a row of several goes whole into one bucket,
        which is full once it holds ``span`` records or more."""
        _core.histogram_add(
            self._state,
            self.gstep,
            self.counts,
            self.min,
            self.max,
            gsteps,
            counts,
            low,
            high,
            None if records is None else np.asarray(records, np.int64),
        )

    def percentiles(self, quantiles):
        """(gsteps, values [buckets, len(quantiles)]): the quantiles of each bucket's values,
        interpolated linearly inside a log bucket and clipped to the exact min and max."""
        n = self.used
        out = np.full((n, len(quantiles)), np.nan)
        counts = self.counts[:n]
        # Every bucket at once; the same float32/float64 operations per value as bucket by
        # bucket (each total is its own row's sum, as counts[b].sum() adds it).
        totals = np.array([row.sum() for row in counts], np.float32)
        filled = totals > 0
        if not filled.any():
            return self.gstep[:n].copy(), out
        counts, totals = counts[filled], totals[filled]
        cumulative = np.cumsum(counts, axis=1)
        targets = np.asarray(quantiles)[None, :] * totals[:, None]
        # searchsorted(side="left") in each row: how many cumulative counts lie below a target.
        idx = (cumulative[:, None, :] < targets[:, :, None]).sum(axis=2)
        idx = idx.clip(0, counts.shape[1] - 1)
        picked = np.take_along_axis(counts, idx, axis=1)
        before = np.take_along_axis(cumulative, idx, axis=1) - picked
        frac = np.where(picked > 0, (targets - before) / np.maximum(picked, 1), 0.5)
        lo_edges, hi_edges = LOG_BUCKET_EDGES[:-1][idx], LOG_BUCKET_EDGES[1:][idx]
        values = lo_edges + frac.clip(0, 1) * (hi_edges - lo_edges)
        out[filled] = values.clip(self.min[:n][filled, None], self.max[:n][filled, None])
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


def is_digest(schema):
    """Whether a key's schema (``Trace.schema()``'s entry) is a tensor digest column."""
    return getattr(schema, "kind", None) == "digest"


def _without_part(key, word):
    """`key` with its first "/"-separated part equal to `word` (not the last) removed; None when
    it has none."""
    parts = key.split("/")
    for i, part in enumerate(parts[:-1]):
        if part == word:
            return "/".join(parts[:i] + parts[i + 1 :])
    return None


def digested_key(key):
    """The key a companion digest key stands beside (``watch(..., digest=True)``):
    ``digest/<name>`` -> ``<name>``, ``<scope>/digest/<name>`` -> ``<scope>/<name>`` (the first
    "digest" part removed); None when the key has no such part."""
    return _without_part(key, _names.DIGEST_PART)


def frozen_variables(schema):
    """The variables (parameters) of a trace that traces gradients but none of theirs: what
    ``watch`` registers for a parameter with requires_grad=False (a frozen backbone), whose
    never changing is expected. Empty when the trace holds no gradient (``watch(gradients=
    False)``: nothing tells a frozen parameter from a stuck one)."""
    with_gradient = {gradient_variable(k) for k in schema} - {None}
    if not with_gradient:
        return set()
    return {
        k
        for k, column in schema.items()
        if getattr(column, "source", None) == "variable" and k not in with_gradient
    }


def gradient_variable(key):
    """The variable a gradient key differentiates, by trace_gradient's naming: ``gradient/<name>``
    (``<scope>/gradient/<name>`` in a scope) -> ``<name>`` (``<scope>/<name>``); else None."""
    return _without_part(key, _names.GRADIENT_PART)


def is_optimizer_setting(key):
    """Whether a key is an optimizer's setting by watch's naming (``optimizer/lr``,
    ``<scope>/optimizer/<i>/lr``): replicated on every rank, upstream of the step's tensors."""
    return _without_part(key, _names.OPTIMIZER_PART) is not None


class RunScan:
    """What one pass over a run found. Fields (filled by ``scan_run``):

    label, path, prefix (which files: "train", or "test" for eval); selection (the Selection
    read); evaluates (set by the report on an eval scan: the RunScan of its training run);
    writers {(host, pid)}: the processes that wrote the runs read (``Run.writers``); ranks;
    files; bytes; keys (scanned, in file order); digests (the selected keys whose column
    is a tensor digest, ``summary="digest"``: checksums, not values, so they are not scanned: no
    curve, no statistics, no alert; ``xdl-trace diff`` compares them);
    schema {key: (dtype, shape)};
    records {rank: n}; gstep_range (min, max) and time_range (ms) over the records read;
    dropped (records dropped while tracing, from Meta); gaps [lines]: missing files and ranks
    (``Trace.gaps``); copies [lines]: copied or renamed files left out (``Trace.copies``); stats {(key, rank): Series(8)};
    histograms {key: HistogramSeries} (first rank only); ratio {(variable, rank): Series(1)}
    (||gradient|| / ||variable||); step_time {rank: Series(2)} (ms per step, steps per s) and
    step_source {rank: "host spans" or "timestamps"} (what it was measured from, see
    ``_add_step_spans`` and ``_add_step_times``); torn_tails {path: byte offset};
    end_offsets {data file path: byte offset past the last complete frame read}: where a later
    ``scan_file`` of that file, after it grew, goes on;
    first_bad {key: BadValue}; unchecked [keys]: "histogram" summary keys, which find no
    NaN/Inf (a histogram counts finite values only, docs/format.md "Summary columns": its own
    NaN edges say "no finite value", whether the tensor was empty or all NaN/Inf);
    constant {key: bool} (stats identical in every record); frozen {keys}: the trace's variables
    traced without their gradient (``frozen_variables``);
    elements {key: max elements seen}; rows {key: records with a non-empty column};
    summary_histograms {key: (gsteps, values [s, len(SUMMARY_QUANTILES)])}: the percentiles of
    each "histogram" summary key's own bins over steps (first rank; ``_add_summary_histograms``);
    summary_values {(key, rank): (gsteps, values [s, width])}: a user summary key's values (a
    callable's output of at most SUMMARY_VALUES_WIDTH elements, each its own curve;
    ``_add_summary_values``);
    device_events (``_core.DeviceEventTable``: the device tracers' events, Record field 5),
    device_dropped (events the tracers lost); host_ranges (``host_ranges.table``: host time by
    named range, a step); gpu: ``gpu_steps.summarize``'s dict (per-step
    GPU time, kernel and CUDA API tables, launch stats), None without device work.
    """

    def __init__(self, path, label, prefix, selection):
        self.path = path
        self.label = label
        self.prefix = prefix  # "train", or "test" for the eval files.
        self.selection = selection  # What scan_run read (its run: which runs).
        self.evaluates = None  # A report's eval scan: the RunScan of the run it evaluates.
        self.writers = set()  # (host, pid) of the processes that wrote the runs read.
        self.host_ranges = []  # host_ranges.table's rows: host time by named range.
        self.step_calls = {}  # rank -> (gsteps, Step() call ns): the windows of host_ranges.
        self.ranks = []
        self.files = 0
        self.bytes = 0
        self.keys = []
        self.digests = []  # Digest-kind keys: left out of keys (checksums are not values).
        self.schema = {}
        self.records = {}
        self.gstep_range = None
        self.time_range = None
        self.dropped = 0
        self.gaps = []
        self.copies = []
        self.closed_cleanly = True
        self.stats = {}
        self.histograms = {}
        self.ratio = {}
        self.step_time = {}
        self.step_source = {}
        self.torn_tails = {}
        self.first_bad = {}
        self.unchecked = []
        self._unchecked_index = np.zeros(0, np.intp)  # Their indices in keys.
        self.constant = {}
        self.elements = {}
        self.rows = {}  # key -> records with a non-empty column.
        # (key, rank) -> (gstep, value, "NaN"/"Inf"/None) of a one-element key's last record
        # read: the Runs table's last values (a sweep's runs by their final loss).
        self.last_values = {}
        self.frozen = set()  # Variables traced without their gradient: frozen (frozen_variables).
        self.summary_histograms = {}  # key -> (gsteps, quantiles [s, q]) of "histogram" keys.
        self.summary_values = {}  # (key, rank) -> (gsteps, values [s, width]) of user summaries.
        self.device_events = _core.DeviceEventTable()
        self.device_dropped = 0
        self.gpu = None
        self.capacity = 512  # Buckets per Series / HistogramSeries.
        self.series_budget = None  # Bytes its Series may hold (None: SERIES_BUDGET_BYTES).
        self.histogram_capacity = 128
        self.last_gstep = {}  # rank -> the largest gstep of its records read so far.
        self.end_offsets = {}  # data file path -> where its read ended (scan_file resumes).
        self._first_rows = {}
        self._last_time = {}  # rank -> (gstep, ms) of its last record.
        self._last_span = {}  # rank -> (lstep, end ns) of its last step span.
        self._timestamp_steps = {}  # rank -> Series(2) from record timestamps.
        self._span_steps = {}  # rank -> Series(2) from host spans.
        self._step_calls = {}  # rank -> [int64 [s, 2] gstep, Step() call ns]: GPU step windows.

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
SERIES_BUDGET_BYTES = 96 << 20  # A scan's, unless its caller gives it less (a page of runs).
HISTOGRAM_BUDGET_BYTES = 64 << 20
MIN_CAPACITY = 32


def _capacities(keys, ranks, capacity, histogram_capacity, series_budget=None):
    """(series capacity, histogram capacity): the requested ones (powers of two), halved until
    the scan's Series ((keys + 1) x ranks of 8 fields x 4 arrays) and HistogramSeries (one per
    key) fit their budgets (`series_budget` bytes for the Series, default SERIES_BUDGET_BYTES),
    but not below MIN_CAPACITY: past about 12,000 keys x ranks the curves keep 32 points and
    memory grows by ~8 KB per key and rank."""
    if series_budget is None:
        series_budget = SERIES_BUDGET_BYTES
    per_bucket = max(keys + 1, 1) * max(ranks, 1) * len(STATS_FIELDS) * 4 * 8
    while capacity > MIN_CAPACITY and capacity * per_bucket > series_budget:
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
    selection=None,
    must_match=True,
    series_budget=None,
):
    """Reads a run once and returns a ``RunScan``.

    selection: a ``Selection`` (xdl_trace/read/selection.py) of keys (glob patterns: a list or
    "a,b*"), gsteps, ranks and run (which run of a directory that holds several, as
    ``open_trace``); the keywords keys, gsteps, ranks and run stand for its fields.
    series/histograms False skip the curves (find-nan needs neither). capacity and
    histogram_capacity: buckets per curve and per distribution at most (even numbers); fewer
    when many keys x ranks would pass the memory budgets above.
    series_budget: the bytes the curves may hold (default SERIES_BUDGET_BYTES; a page of many
    runs gives each a share).
    on_progress(n_bytes) is called as files are consumed. must_match=False: ranks or key
    patterns that match none give an empty scan (a report's training run whose selected keys are
    its evaluation's), not an error.
    """
    selection = Selection.of(selection, keys=keys, gsteps=gsteps, ranks=ranks, run=run)
    trace = open_trace(
        path, prefix=prefix, name=name, run=selection.run, attempts=selection.attempts
    )
    label = label or os.path.basename(os.path.normpath(trace.path))
    scan = RunScan(trace.path, label, prefix, selection)
    scan.series_budget = series_budget
    begin_scan(scan, trace, selection, capacity, histogram_capacity, must_match)
    scan.gaps = trace.gaps()  # What `verify` fails besides damage (issue 37 #6).
    scan.copies = [f"{os.path.basename(c.path)}: {c.why}" for c in trace.copies]
    files = [f for f in trace.files if f.rank in scan.ranks]
    scan.files = len(files)
    scan.bytes = sum(f.size for f in files)
    pairs = scan_pairs(scan)
    read_meta(scan, files)
    histogram_rank = scan.ranks[0] if scan.ranks else None
    group = _histogram_group(
        [f for f in files if f.rank == histogram_rank], selection, scan.histogram_capacity
    )
    # Each file's share of the selection: less what a later attempt superseded.
    paths = [(f.rank, f.path, f.size, selection.before(f.superseded_from)) for f in files]
    del trace, files  # At most two data files mapped from here on: this one and the next.

    def open_scan(i):  # Its walker threads start reading now.
        rank, file_path, _, of_file = paths[i]
        return _open_scan(
            scan, file_path, of_file, histograms and rank == histogram_rank, group, series
        )

    upcoming = [open_scan(0)] if paths else []
    for i, (rank, file_path, size, of_file) in enumerate(paths):
        scan.records.setdefault(rank, 0)
        cursor = upcoming.pop()

        def open_next(i=i):
            if i + 1 < len(paths):
                upcoming.append(open_scan(i + 1))

        _scan_file(
            scan,
            rank,
            file_path,
            cursor,
            of_file,
            pairs,
            series,
            histograms and rank == histogram_rank,
            open_next,
        )
        # Held until the next file is scanned: its walkers unmap the file meanwhile, so its
        # destructor (joining them) does not wait for that.
        finished = cursor  # noqa: F841
        if on_progress is not None:
            on_progress(size)
    finish_scan(scan, path, prefix, name, selection, series)
    return scan


def begin_scan(scan, trace, selection, capacity=512, histogram_capacity=128, must_match=True):
    """Fills what a scan knows before reading records: its ranks, keys, schema and accumulator
    capacities. must_match: ranks none of which the trace holds are a ValueError, key patterns
    that match none a KeyError (else an empty scan)."""
    keys, ranks = selection.keys, selection.ranks
    scan.writers = trace.writers()
    scan.ranks = [r for r in trace.ranks if ranks is None or r in set(ranks)]
    if ranks is not None and not scan.ranks and must_match:
        raise ValueError(
            f"{trace.path}: no rank {', '.join(map(str, ranks))} "
            f"(ranks: {', '.join(map(str, trace.ranks))})"
        )
    all_keys = trace.keys
    scan.keys = select_keys(all_keys, keys)
    if keys and not scan.keys and must_match:
        raise KeyError(f"{trace.path}: no key matches {keys!r} (keys: {', '.join(all_keys)})")
    selected = set(scan.keys)  # Built once: membership per key stays O(1) (issue 24 row 2).
    schema = trace.schema()
    scan.schema = {k: v for k, v in schema.items() if k in selected}
    scan.frozen = frozen_variables(schema)
    # A digest's two float64 halves (up to 2^32) read as numbers would make every
    # digest/gradient/* an "exploding gradient": digests stay out of the value scan.
    scan.digests = [k for k in scan.keys if is_digest(scan.schema.get(k))]
    if scan.digests:
        digests = set(scan.digests)
        scan.keys = [k for k in scan.keys if k not in digests]
    unchecked = [
        (i, k)
        for i, k in enumerate(scan.keys)
        if getattr(scan.schema.get(k), "kind", None) == "histogram"
    ]
    scan.unchecked = [k for _, k in unchecked]
    scan._unchecked_index = np.array([i for i, _ in unchecked], dtype=np.intp)
    scan.capacity, scan.histogram_capacity = _capacities(
        len(scan.keys), len(scan.ranks), capacity, histogram_capacity, scan.series_budget
    )


def scan_pairs(scan):
    """(gradient key, variable key) of the scanned keys, for the norm ratio."""
    selected = set(scan.keys)
    return [
        (k, variable)
        for k, variable in ((k, gradient_variable(k)) for k in scan.keys)
        if variable in selected and variable != k
    ]


def read_meta(scan, files):
    """Dropped records and whether every file was closed cleanly, from the files' Meta."""
    dropped = {}
    scan.closed_cleanly = True
    for f in files:
        if f.meta:
            dropped[f.rank] = max(dropped.get(f.rank, 0), f.meta.get("dropped_records", 0))
            scan.closed_cleanly &= bool(f.meta.get("closed_cleanly", True))
    scan.dropped = sum(dropped.values())


def scan_file(scan, rank, file_path, selection, pairs, series=True, histograms=True):
    """Adds the records of one data file in the selection to `scan`: a file read before (by
    this scan's ``scan_run`` or ``scan_file``) is read on from where that read ended (its frames
    before are not walked again), so a file being written costs what it gained."""
    scan.records.setdefault(rank, 0)
    start = scan.end_offsets.get(file_path)
    cursor = _open_scan(scan, file_path, selection, histograms, 1, series, start_offset=start)
    _scan_file(scan, rank, file_path, cursor, selection, pairs, series, histograms, lambda: None)


def finish_scan(scan, path, prefix, name, selection, series=True):
    """What a scan derives once its records are read: the step time source per rank, the
    "histogram" summary keys' distributions, the host time by range and the GPU summary."""
    for rank in scan.ranks:  # Host spans where a rank has them, else record timestamps.
        for source, found in (
            ("host spans", scan._span_steps),
            ("timestamps", scan._timestamp_steps),
        ):
            if rank in found and found[rank].used:
                scan.step_time[rank], scan.step_source[rank] = found[rank], source
                break
    if not series:
        return
    _add_summary_histograms(scan, path, prefix, name, selection)
    _add_summary_values(scan, path, prefix, name, selection)
    steps = {}
    for rank, parts in scan._step_calls.items():
        calls = np.concatenate(parts)
        steps[rank] = (calls[:, 0], calls[:, 1])
    columns = scan.device_events.columns()
    scan.step_calls = steps
    scan.host_ranges = host_ranges.table(columns, steps)
    if len(scan.device_events):
        scan.device_dropped = columns["dropped_events"]
        scan.gpu = gpu_steps.summarize(columns, steps)
        message = bad_data_message(scan.device_events.replaced_strings)
        if message:  # Issue 24 #5: read with U+FFFD, and said so.
            warnings.warn(f"{scan.path}: {message}", DeviceDataWarning, stacklevel=2)


# Percentiles drawn of a "histogram" summary key (TensorBoard's distribution view).
SUMMARY_QUANTILES = (0.0, 0.0668, 0.1587, 0.3085, 0.5, 0.6915, 0.8413, 0.9332, 1.0)
SUMMARY_HISTOGRAM_STEPS = 512  # Records of such a key read at most (evenly spaced gsteps).


def histogram_percentiles(edges, counts, quantiles):
    """The quantiles of binned values, per row: edges [s, bins + 1], counts [s, bins] ->
    [s, len(quantiles)], interpolated linearly inside a bin (NaN for a row without counts)."""
    counts = np.asarray(counts, np.float64)
    edges = np.asarray(edges, np.float64)
    totals = counts.sum(axis=1)
    cumulative = np.cumsum(counts, axis=1)
    targets = np.asarray(quantiles)[None, :] * totals[:, None]
    idx = (cumulative[:, None, :] < targets[:, :, None]).sum(axis=2).clip(0, counts.shape[1] - 1)
    # The lowest quantile starts at the first bin holding a value, not at the range's lo.
    first = (cumulative > 0).argmax(axis=1)
    idx = np.maximum(idx, first[:, None])
    picked = np.take_along_axis(counts, idx, axis=1)
    before = np.take_along_axis(cumulative, idx, axis=1) - picked
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(picked > 0, (targets - before) / picked, 0.5).clip(0, 1)
    lo = np.take_along_axis(edges[:, :-1], idx, axis=1)
    hi = np.take_along_axis(edges[:, 1:], idx, axis=1)
    out = lo + frac * (hi - lo)
    # A constant tensor's row: the writer widens its range to value ± 0.5 (docs/format.md), so
    # the one bin holding every value starts at the value and interpolating inside it moves every
    # percentile up to 1/bins away (a bias of -0.00482 read as +0.0118): the value is the middle
    # of the range, exactly.
    range_lo, range_hi = edges[:, 0], edges[:, -1]
    constant = ((counts > 0).sum(axis=1) == 1) & (range_hi - range_lo == 1.0)
    out[constant] = ((range_lo + range_hi) / 2)[constant, None]
    out[totals == 0] = np.nan
    return out


def _add_summary_histograms(scan, path, prefix, name, selection):
    """The distribution over steps of each "histogram" summary key, from its own bins (its
    stats and log buckets describe the encoding, not the tensor): at most
    SUMMARY_HISTOGRAM_STEPS records of the first rank, evenly spaced over the selected gsteps."""
    keys = [k for k in scan.keys if getattr(scan.schema.get(k), "kind", None) == "histogram"]
    if not keys or not scan.ranks or scan.gstep_range is None:
        return
    trace = open_trace(
        path, prefix=prefix, name=name, run=selection.run, attempts=selection.attempts
    )
    rank = scan.ranks[0]
    for key in keys:
        gsteps = _evenly_spaced(scan, key, selection)
        found, hist = trace.stack_summary(key, gsteps=gsteps, rank=rank)
        if len(found) == 0:
            continue
        values = histogram_percentiles(hist.edges, hist.counts, SUMMARY_QUANTILES)
        scan.summary_histograms[key] = (np.asarray(found), values)


def _evenly_spaced(scan, key, selection):
    """The gsteps of `key` to read again: the selection's, or SUMMARY_HISTOGRAM_STEPS of them
    evenly spaced when the key has more records."""
    if scan.rows.get(key, 0) <= SUMMARY_HISTOGRAM_STEPS:
        return selection.gsteps
    lo, hi = scan.gstep_range
    picks = np.unique(np.linspace(lo, hi, SUMMARY_HISTOGRAM_STEPS).round().astype(int))
    return [int(g) for g in picks]


# A user summary (a callable's output) of at most this many elements is drawn as one curve per
# element (quantiles, a few norms); a wider one as a tensor of its values.
SUMMARY_VALUES_WIDTH = 8


def _add_summary_values(scan, path, prefix, name, selection):
    """The values of each user summary key of 1 < elements <= SUMMARY_VALUES_WIDTH, per rank:
    at most SUMMARY_HISTOGRAM_STEPS records, evenly spaced over the selected gsteps (its stats
    rows are of the summary's values taken together: their mean is no field of it). A key whose
    width changes between steps is left as it is."""
    keys = [
        k
        for k in scan.keys
        if getattr(scan.schema.get(k), "kind", None) == "user_summary"
        and 1 < scan.elements.get(k, 0) <= SUMMARY_VALUES_WIDTH
    ]
    if not keys or scan.gstep_range is None:
        return
    trace = open_trace(
        path, prefix=prefix, name=name, run=selection.run, attempts=selection.attempts
    )
    for key in keys:
        gsteps = _evenly_spaced(scan, key, selection)
        for rank in scan.ranks:
            found, values, shapes = trace.stack_many([key], gsteps=gsteps, rank=rank, ragged=True)[
                key
            ]
            if len(found) and shapes is None:
                scan.summary_values[(key, rank)] = (
                    np.asarray(found),
                    np.asarray(values, np.float64).reshape(len(found), -1),
                )


def _histogram_group(files, selection, capacity):
    """Records per histogram row the C++ scan may sum: the largest power of two that is at most
    the span a distribution's buckets will have (records / capacity, from the Meta's record
    counts and gstep ranges), so the buckets are the same as with a row per record. 1 when a
    file's count is unknown (XDL's Meta, no Meta)."""
    metas = [f.meta or {} for f in files]
    if any(m.get("record_count") is None or m.get("format_version", 0) == 0 for m in metas):
        return 1
    begin, end, steps = selection.window()
    records = 0
    for m in metas:
        # A selection's share of a file, as if its records were evenly spread over its gsteps.
        lo, hi, count = m.get("gstep_begin", 0), m.get("gstep_end", 0), m["record_count"]
        if steps is not None:
            inside = sum(1 for g in steps if lo <= g <= hi)
        else:
            inside = (
                min(hi, hi if end is None else end) - max(lo, lo if begin is None else begin) + 1
            )
        records += min(count, count * max(inside, 0) // max(hi - lo + 1, 1))
    group = 1
    while group * 2 * capacity <= records:
        group *= 2
    return group


def _open_scan(scan, path, selection, histograms, histogram_group, series, start_offset=None):
    """A ``_core.RecordScan`` of one data file: one columnar pass (the records' steps and times,
    each key's stats rows and log-bucket counts, the step spans; with `series`, the device
    traces parsed into ``scan.device_events`` as chunks are taken) whose walker threads start
    reading at once. histogram_group: consecutive records of a key summed into one histogram row
    in C++; start_offset: where the pass starts (a frame boundary, ``scan.end_offsets``)."""
    begin, end, steps = selection.window()
    keys = scan.keys
    return _core.RecordScan(
        path,
        keys,
        begin,
        end,
        steps,
        [bool(histograms)] * len(keys),
        histogram_group,
        device_events=scan.device_events if series else None,
        start_offset=start_offset,
    )


def _scan_file(scan, rank, path, cursor, selection, pairs, series, histograms, on_last_chunk):
    """Takes the scan (``_open_scan``) of data file `path` chunk by chunk, each small.
    on_last_chunk() is called when the last chunk arrives, before it is added (scan_run opens the
    next file then, so its walker reads while this file's last chunk is added). The scan drops
    its mapping once the last chunk is taken; where it ended goes to ``scan.end_offsets``."""
    begin, end, steps = selection.window()
    keys = scan.keys
    # Per-record cells of a chunk: about _CHUNK_CELLS x 64 bytes of stats whatever the keys.
    max_records = max(64, min(_CHUNK_RECORDS, _CHUNK_CELLS // max(len(keys), 1)))
    while True:
        chunk = cursor.next(max_records, _CHUNK_HISTOGRAM_ROWS)
        if chunk["done"]:
            on_last_chunk()
            scan.end_offsets[path] = chunk["end_offset"]
        for torn in chunk["torn_tails"]:
            if torn.path not in scan.torn_tails:
                scan.torn_tails[torn.path] = torn.offset
                warnings.warn(str(torn), TornTailWarning, stacklevel=4)
        for file_path, dtype in chunk["unknown_dtypes"]:
            warnings.warn(
                f"{file_path}: dtype {dtype} is unknown to this reader: its columns are read as "
                "raw bytes",
                UnknownDTypeWarning,
                stacklevel=4,
            )
        if len(chunk["gstep"]):
            _add_records(scan, rank, chunk, pairs, series, histograms)
        if len(chunk["histogram_key"]):
            _add_histograms(scan, chunk)
        if series:
            _add_step_spans(scan, rank, chunk["spans"], begin, end, steps)
        if chunk["done"]:
            return


def _add_records(scan, rank, chunk, pairs, series, histograms):
    gsteps, times = chunk["gstep"], chunk["timestamp"].astype(np.float64)
    n = len(gsteps)
    scan.records[rank] += n
    lo, hi = int(gsteps.min()), int(gsteps.max())
    scan.last_gstep[rank] = max(scan.last_gstep.get(rank, hi), hi)
    g = scan.gstep_range
    scan.gstep_range = (lo, hi) if g is None else (min(g[0], lo), max(g[1], hi))
    t = scan.time_range
    t_lo, t_hi = float(times.min()), float(times.max())
    scan.time_range = (t_lo, t_hi) if t is None else (min(t[0], t_lo), max(t[1], t_hi))
    if series:
        _add_step_times(scan, rank, gsteps, times)

    grid = chunk["stats"]  # [n, keys, 8]; NaN where a record's column holds no value.
    # Per key, from one C++ pass over the grid: records holding a value, the largest count,
    # records with NaN/Inf, whether every row equals the chunk's first one (and that row).
    held, bad = chunk["key_records"], chunk["key_bad"]
    # A histogram's stats row describes its encoding (NaN edges: no finite value), not the
    # tensor: never a NaN/Inf of the key (issue 24 #11).
    bad[scan._unchecked_index] = 0
    for k, key in enumerate(scan.keys):
        if held[k] == 0:
            continue
        scan.elements[key] = max(scan.elements.get(key, 0), int(chunk["key_elements"][k]))
        if scan.elements[key] <= 1:
            _note_last_value(scan, key, rank, gsteps, grid[:, k])
        if bad[k]:
            record_index = np.flatnonzero(~np.isnan(grid[:, k, COUNT]))
            _check_bad(scan, key, rank, chunk, record_index, grid[record_index, k])
            # A record holding NaN or Inf gives no number: its min..l2 become NaN (a gap in
            # every curve, and no alert computed from it), its count, nan and inf stay.
            rows = grid[:, k]
            nonfinite = (rows[:, NAN] > 0) | (rows[:, INF] > 0)
            rows[nonfinite, MIN : L2 + 1] = np.nan
        _check_constant(scan, key, int(held[k]), chunk["key_constant"][k], chunk["key_first"][k])
        if series:
            acc = scan.stats.get((key, rank))
            if acc is None:
                acc = scan.stats[(key, rank)] = Series(len(STATS_FIELDS), scan.capacity)
            acc.add(gsteps, grid[:, k], skip_field=COUNT)  # A view: the records holding k.
    if series and pairs:
        index = {key: k for k, key in enumerate(scan.keys)}
        for grad, var in pairs:
            g, v = index[grad], index[var]
            _add_ratio(
                scan,
                rank,
                gsteps,
                grid[:, g, L2],
                grid[:, v, L2],
                grid[:, g, COUNT],
                grid[:, v, COUNT],
                var,
            )


def _note_last_value(scan, key, rank, gsteps, rows):
    """Keeps the value of a one-element key's last record of the chunk holding it (file order:
    the latest written) when it is at or past the last one kept."""
    (held,) = np.nonzero(~np.isnan(rows[:, COUNT]))
    if not len(held):
        return
    i = held[-1]
    kept = scan.last_values.get((key, rank))
    if kept is not None and kept[0] > gsteps[i]:
        return
    row = rows[i]
    bad = "NaN" if row[NAN] > 0 else "Inf" if row[INF] > 0 else None
    scan.last_values[(key, rank)] = (int(gsteps[i]), float(row[MEAN]), bad)


def _add_histograms(scan, chunk):
    """Adds a chunk's histogram rows (each the summed counts of consecutive records of a key)."""
    rows = chunk["histogram_key"]
    for k in np.unique(rows).tolist():
        mine = rows == k
        key = scan.keys[k]
        acc = scan.histograms.get(key)
        if acc is None:
            acc = scan.histograms[key] = HistogramSeries(scan.histogram_capacity)
        acc.add(
            chunk["histogram_gstep"][mine],
            chunk["buckets"][mine],
            chunk["histogram_min"][mine],
            chunk["histogram_max"][mine],
            chunk["histogram_records"][mine],
        )


def _check_bad(scan, key, rank, chunk, record_index, key_rows):
    bad = (key_rows[:, NAN] > 0) | (key_rows[:, INF] > 0)
    if not bad.any():
        return
    first = int(np.argmax(bad))
    record = int(record_index[first])
    current = scan.first_bad.get(key)
    candidate = BadValue(
        key,
        rank,
        int(chunk["gstep"][record]),
        int(chunk["lstep"][record]),
        int(key_rows[first, NAN]),
        int(key_rows[first, INF]),
    )
    if current is None or (candidate.gstep, candidate.rank) < (current.gstep, current.rank):
        if current is not None:
            candidate.records = current.records
        scan.first_bad[key] = candidate
    scan.first_bad[key].records += int(bad.sum())


def _check_constant(scan, key, held, constant, first):
    """A chunk's `held` records of the key: `constant` when their rows all equal `first`, the
    first of them. The key never changes when that holds in every chunk, with the same row."""
    scan.rows[key] = scan.rows.get(key, 0) + held
    if scan.constant.get(key) is False:
        return
    seen = scan._first_rows.setdefault(key, first.copy())
    same = bool(np.all((first == seen) | (np.isnan(first) & np.isnan(seen))))
    scan.constant[key] = bool(constant) and same


def _add_step_times(scan, rank, gsteps, times):
    """Step time from record timestamps (ms): per gstep between consecutive records of a rank.
    What files without host spans (XDL's, older ones) have."""
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
    if keep.all():
        keep = slice(None)  # The usual case: a view, no copy.
    elif not keep.any():
        return
    d_step, d_time = d_step[keep], d_time[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        ms_per_step = d_time / d_step
        per_second = np.where(d_time > 0, d_step * 1000.0 / d_time, np.nan)
    acc = scan._timestamp_steps.get(rank)
    if acc is None:
        acc = scan._timestamp_steps[rank] = Series(2, scan.capacity)
    acc.add(gsteps[1:][keep], np.stack([ms_per_step, per_second], axis=1))


def _add_step_spans(scan, rank, spans, begin, end, steps):
    """Step time from the host spans of every step the hook saw (STEP and STEP_NOT_TRACED, ns):
    a step's time is from the previous step's ``Step()`` call to its own (the end of its span),
    per step by lstep when spans between two were dropped. A rank's first step has no previous
    step (its span runs from the tracer's start, setup included): it gives no point.
    ``spans``: int64 [s, 6] rank, gstep, lstep, start_ns, end_ns, traced."""
    if len(spans) == 0:
        return
    scan._step_calls.setdefault(rank, []).append(spans[:, [1, 4]])
    if np.any(spans[1:, 4] < spans[:-1, 4]):  # Mostly in order already: then no copy.
        spans = spans[np.argsort(spans[:, 4], kind="stable")]
    gsteps, lsteps, ends = spans[:, 1], spans[:, 2], spans[:, 4]
    previous = scan._last_span.get(rank)
    scan._last_span[rank] = (int(lsteps[-1]), int(ends[-1]))
    before_end = np.concatenate([[ends[0] if previous is None else previous[1]], ends[:-1]])
    before_lstep = np.concatenate(
        [[lsteps[0] - 1 if previous is None else previous[0]], lsteps[:-1]]
    )
    d_ns = (ends - before_end).astype(np.float64)
    d_steps = (lsteps - before_lstep).astype(np.float64)
    d_steps[d_steps <= 0] = 1  # lstep not counting steps (a C++ caller's choice): one each.
    # A step period needs a previous step; then the gstep selection.
    if begin is None and end is None and steps is None:
        keep = slice(0 if previous is not None else 1, None)  # A view, no copy.
        if len(spans) == keep.start:
            return
    else:
        keep = np.ones(len(spans), bool)
        keep[0] = previous is not None
        if begin is not None:
            keep &= gsteps >= begin
        if end is not None:
            keep &= gsteps <= end
        if steps is not None:
            keep &= np.isin(gsteps, steps)
        if not keep.any():
            return
    d_ns, d_steps = d_ns[keep], d_steps[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        ms_per_step = d_ns / d_steps / 1e6
        per_second = np.where(d_ns > 0, d_steps * 1e9 / d_ns, np.nan)
    acc = scan._span_steps.get(rank)
    if acc is None:
        acc = scan._span_steps[rank] = Series(2, scan.capacity)
    acc.add(gsteps[keep], np.stack([ms_per_step, per_second], axis=1))


def _add_ratio(scan, rank, gsteps, grad_l2, var_l2, grad_count, var_count, var):
    """||gradient|| / ||variable|| of the records holding both (a record where either column is
    empty is not a point); NaN where either norm is not finite, so the curve has a gap there
    rather than ending early (issue 32 #3)."""
    # Columns of the chunk's stats grid, a cache line apart: read once each.
    grad_l2, var_l2 = np.ascontiguousarray(grad_l2), np.ascontiguousarray(var_l2)
    both = ~(np.isnan(np.asarray(grad_count)) | np.isnan(np.asarray(var_count)))
    if both.all():
        both = slice(None)  # The usual case: views, no copies.
    elif not both.any():
        return
    grad_l2, var_l2 = grad_l2[both], var_l2[both]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(var_l2 > 0, grad_l2 / var_l2, np.nan)
    ratio[~(np.isfinite(grad_l2) & np.isfinite(var_l2))] = np.nan
    acc = scan.ratio.get((var, rank))
    if acc is None:
        acc = scan.ratio[(var, rank)] = Series(1, scan.capacity)
    acc.add(gsteps[both], ratio[:, None])


def find_nan(
    path, prefix="train", name="trace", keys=None, gsteps=None, ranks=None, run=None, selection=None
):
    """The first NaN/Inf of each key, from full tensors: a list of dicts with ``key``, ``rank``,
    ``gstep``, ``lstep`` (of the first record holding one; earliest gstep, then lowest rank),
    ``nan``, ``inf`` (how many elements of that record) and ``eval`` (a key of the run's
    evaluation, read with a training run: ``nan_scans``), ordered by gstep then key. Empty when
    the run is clean. selection and keys, gsteps, ranks, run: as ``scan_run``."""
    selection = Selection.of(selection, keys=keys, gsteps=gsteps, ranks=ranks, run=run)
    scans = nan_scans(path, prefix, name, selection)
    return [
        dict(b.as_dict(), eval=evaluated) for b, evaluated in first_bad_values(*scans, selection)
    ]


def nan_scans(path, prefix, name, selection, on_progress=None):
    """(scan, its evaluation's scan or None): what find-nan reads, without curves: the run and,
    for a training run, its evaluation (``scan_evaluation``: a NaN in the eval loss is a NaN of
    the run). Key patterns must match a key of either."""
    trace = open_trace(
        path, prefix=prefix, name=name, run=selection.run, attempts=selection.attempts
    )
    evaluation = None
    if prefix == "train":
        found = scan_evaluation(
            path, trace.runs_read, name, selection, series=False, histograms=False
        )
        evaluation = None if found is None else found[0]
    scan = scan_run(
        path,
        prefix=prefix,
        name=name,
        series=False,
        histograms=False,
        on_progress=on_progress,
        selection=selection,
        must_match=evaluation is None,  # --keys 'eval/*' selects its evaluation's.
    )
    return scan, evaluation


def first_bad_values(scan, evaluation, selection=None):
    """[(BadValue, whether of the evaluation)] of ``nan_scans``, by gstep, then rank, the run's
    before its evaluation's, then key."""
    found = [(b, False) for b in bad_values(scan, selection)]
    if evaluation is not None:
        found += [(b, True) for b in bad_values(evaluation)]
    return sorted(found, key=lambda pair: (pair[0].gstep, pair[0].rank, pair[1], pair[0].key))


def scan_evaluation(path, run, name, selection, label=None, **options):
    """(RunScan, Run or None) of the eval records beside the train Run `run` (or a list of
    Runs: their evaluations together; ``trace_runs.evaluation_of``), read with `selection`'s
    keys, gsteps and ranks and ``scan_run``'s `options`; None when there are none, or when the
    selection takes none of them."""
    evaluation = trace_runs.evaluation_of(path, run, name)
    if evaluation is None:
        return None
    which, chosen = evaluation
    scan = scan_run(
        path,
        label=label,
        prefix="test",
        name=name,
        selection=selection.replace(run=which),
        must_match=False,
        **options,
    )
    return (scan, chosen) if scan.ranks and (scan.keys or scan.digests) else None


def add_evaluation_ranges(scan, evaluation):
    """A training scan's host time by range with the named ranges its evaluation's records carry
    (``host_ranges.with_evaluation``: phase "eval <phase>") counted in its step windows, where
    the evaluation ran: the time a step spends evaluating is on the table, apart from training's.
    Both scans read with series (their device events). An eval job of its own (no process of
    the training's) ran in no training step: its ranges are not counted there."""
    if not scan.writers & evaluation.writers:
        return
    theirs = evaluation.device_events.columns()  # Small: an evaluation's few records.
    if len(theirs["ranges"]["name"]):  # Else the training's own table stands.
        columns = host_ranges.with_evaluation(scan.device_events.columns(), theirs)
        scan.host_ranges = host_ranges.table(columns, scan.step_calls)


def bad_values(scan, selection=None):
    """The first NaN/Inf of each key of a RunScan (BadValue), by gstep, then rank, then key.
    ValueError when `selection`'s gsteps held no record: no NaN found there proves nothing."""
    if selection is not None and selection.gsteps is not None and not scan.total_records:
        raise ValueError(f"{scan.path}: no record in the gsteps selected: {selection.gsteps!r}")
    return sorted(scan.first_bad.values(), key=lambda bad: (bad.gstep, bad.rank, bad.key))
