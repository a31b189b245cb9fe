"""Built-in summaries of many torch tensors at once, computed where the tensors live (a GPU).

One pass over a step's tensors with segmented reductions: a fixed number of kernels per step,
whatever the number of tensors, and nothing waits for the device (no ``.item()``, no boolean
indexing, no host-built index per step). The rows have the host's columns and definitions
(cpp/include/xdl_trace/registry.h, docs/format.md "Summaries"):

- stats, float64[8]: count, min, max, mean, std (population), l2, nan count, inf count; min, max,
  mean, std and l2 over finite values; with no finite value min, max, mean, std are NaN, l2 0.
- histogram, float64[2 + 2 * bins]: lo, hi (min and max of the finite values, or min - 0.5,
  max + 0.5 when equal), the bins' right edges ``lo + width * (k + 1) / bins`` (the last is hi),
  the counts of finite values in ``floor((x - lo) * (bins / width))`` clamped to the bins; no
  finite value: lo, hi and edges NaN, counts 0.

Values are widened to float64 exactly as the host does (float16/bfloat16 per element, bool as
0/1; floating tensors after their finite test, min and max, which widening leaves unchanged), so
counts, min, max, lo, hi, edges and histogram counts equal the host's bit for bit; sums (mean,
std, l2) are summed in another order (a two-pass std here, l2 from its deviations, a shifted
one-pass on the host) and agree to a relative 1e-12 (tests/python/test_device_capture.py).
"""

import functools
import math

# Elements summarized in one pass: its temporaries take ~25 bytes an element (~42 for a
# histogram), so a pass holds at most ~420 MB (~700 MB) of device memory for them (one tensor
# larger than this is a pass of its own).
_CHUNK_ELEMENTS = 1 << 24
_counts = {}  # (device, lengths) -> the lengths as a device tensor: made once per signature.


def _torch():
    import torch  # Only reached with torch tensors in hand.

    return torch


def _counts_tensor(device, lengths):
    key = (str(device), lengths)
    found = _counts.get(key)
    if found is None:
        if len(_counts) >= 64:  # The oldest goes: those just made for a graph's capture stay.
            del _counts[next(iter(_counts))]
        torch = _torch()
        found = _counts[key] = torch.tensor(lengths, dtype=torch.int64).to(device)
    return found


def _chunks(tensors, limit=None):
    """`tensors` cut into runs of at most `limit` (_CHUNK_ELEMENTS) elements."""
    limit = limit or _CHUNK_ELEMENTS
    chunk, size = [], 0
    for t in tensors:
        n = t.numel()
        if chunk and size + n > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(t)
        size += n
    if chunk:
        yield chunk


def _flat(tensors):
    """The tensors' elements as one vector, in one flatten (a single call into torch when they
    share a dtype, as a model's parameters do): floating tensors of one dtype stay in it (their
    finite test, min and max are exact there, and every later widening reads 2-4 bytes an element
    instead of 8); anything else is widened to float64 as the host widens it (bool as 0/1)."""
    torch = _torch()
    dtype = tensors[0].dtype
    if all(t.dtype == dtype for t in tensors):
        flatten = getattr(torch._C._nn, "flatten_dense_tensors", None)
        flat = flatten(tensors) if flatten else torch.cat([t.reshape(-1) for t in tensors])
        return flat if dtype.is_floating_point else flat.to(torch.float64)
    return torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])


def _reduce(values, how, counts):
    """Per segment `how` ("sum", "min", "max") of the vector `values`."""
    return _torch().segment_reduce(values, how, lengths=counts, unsafe=True)


class _Pass:
    """Counts, finite min/max and the finite values widened, of a group of tensors, one segment
    each. On a GPU the pass is bound by memory traffic, so each step reads and writes as few
    bytes an element as it can (docs/design.md "Device tensors" counts them)."""

    def __init__(self, tensors):
        torch = _torch()
        f64 = torch.float64
        lengths = tuple(t.numel() for t in tensors)
        self.segments = len(lengths)
        self.counts = _counts_tensor(tensors[0].device, lengths)
        x = _flat(tensors)
        self.size = x.shape[0]
        # Counts are summed in float32 where every partial sum is an exact integer there.
        count_dtype = torch.float32 if max(lengths, default=0) <= 1 << 24 else f64
        self.finite = x.abs() < math.inf  # Two kernels; torch.isfinite takes four.
        self.n_finite = _reduce(self.finite.to(count_dtype), "sum", self.counts).to(f64)
        self.n_nan = _reduce(torch.ne(x, x).to(count_dtype), "sum", self.counts).to(f64)
        self.count = self.counts.to(f64)
        self.n_inf = self.count - self.n_finite - self.n_nan
        self.min = _reduce(torch.where(self.finite, x, math.inf), "min", self.counts).to(f64)
        self.max = _reduce(torch.where(self.finite, x, -math.inf), "max", self.counts).to(f64)
        self.none_finite = self.n_finite == 0
        self.xf = torch.where(self.finite, x, 0).to(f64)  # Finite values widened, 0 elsewhere.

    def spread(self, per_segment):
        """A per-segment value repeated over its segment's elements."""
        return per_segment.repeat_interleave(self.counts, output_size=self.size)


def rows(kind, bins, tensors, chunk=None):
    """The `kind` ("stats" or "histogram") rows of `tensors` (all on one device), in passes of
    at most `chunk` (_CHUNK_ELEMENTS) elements."""
    if kind == "stats":
        return stats_rows(tensors, chunk)
    return histogram_rows(tensors, bins, chunk)


def static_inputs(tensors, chunk=None):
    """The device constants the passes over `tensors` read that were made outside them (made
    now when missing, then cached): a graph of the passes keeps these alive and replays with no
    host-to-device copy of its own."""
    device = tensors[0].device
    counts = [
        _counts_tensor(device, tuple(t.numel() for t in part)) for part in _chunks(tensors, chunk)
    ]
    return counts + [_nan_columns(device)]


def stats_rows(tensors, chunk=None):
    """float64 (len(tensors), 8): the stats row of each tensor (all on one device)."""
    parts = [_stats_rows(part) for part in _chunks(tensors, chunk)]
    return parts[0] if len(parts) == 1 else _torch().cat(parts)


def _stats_rows(tensors):
    torch = _torch()
    p = _Pass(tensors)
    safe_n = torch.where(p.none_finite, 1.0, p.n_finite)
    mean = _reduce(p.xf, "sum", p.counts) / safe_n
    deviation = p.spread(mean)  # Becomes the finite values' squared deviations, in place.
    torch.sub(p.xf, deviation, out=deviation)
    deviation.mul_(p.finite).square_()
    squared_deviations = _reduce(deviation, "sum", p.counts)
    # The sum of squares from the deviations' (two non-negative terms: no cancellation).
    sum_sq = squared_deviations + p.n_finite * mean * mean
    rows = torch.stack(
        [
            p.count,
            p.min,
            p.max,
            mean,
            (squared_deviations / safe_n).sqrt(),
            sum_sq.sqrt(),
            p.n_nan,
            p.n_inf,
        ],
        dim=1,
    )
    # No finite value: min, max, mean and std are NaN (l2 stays 0).
    unset = p.none_finite[:, None] & _nan_columns(rows.device)[None, :]
    return torch.where(unset, math.nan, rows)


def histogram_rows(tensors, bins, chunk=None):
    """float64 (len(tensors), 2 + 2 * bins): the histogram row of each tensor (one device)."""
    parts = [_histogram_rows(part, bins) for part in _chunks(tensors, chunk)]
    return parts[0] if len(parts) == 1 else _torch().cat(parts)


def _histogram_rows(tensors, bins):
    torch = _torch()
    p = _Pass(tensors)
    equal = p.min == p.max
    lo = torch.where(equal, p.min - 0.5, p.min)
    hi = torch.where(equal, p.max + 0.5, p.max)
    width = hi - lo
    steps = torch.arange(1, bins, dtype=torch.float64, device=p.xf.device)
    edges = torch.cat([lo[:, None] + width[:, None] * steps[None, :] / bins, hi[:, None]], dim=1)
    scale = bins / width
    offset = torch.where(p.finite, (p.xf - p.spread(lo)) * p.spread(scale), 0.0)
    bucket = offset.to(torch.int64).clamp_(0, bins - 1)
    first_bucket = torch.arange(0, p.segments * bins, bins, device=p.xf.device)
    counts = torch.zeros(p.segments * bins, dtype=torch.float64, device=p.xf.device)
    counts.index_add_(0, p.spread(first_bucket) + bucket, p.finite.to(torch.float64))
    head = torch.cat([lo[:, None], hi[:, None], edges], dim=1)
    head = torch.where(p.none_finite[:, None], math.nan, head)
    return torch.cat([head, counts.view(p.segments, bins)], dim=1)


@functools.lru_cache(maxsize=8)
def _nan_columns(device):
    """The columns of a stats row that are NaN when no value is finite: min, max, mean, std."""
    from . import _core

    nan = [field in ("min", "max", "mean", "std") for field in _core.STATS_FIELDS]
    return _torch().tensor(nan, device=device)
