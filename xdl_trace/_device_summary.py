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
0/1), so counts, min, max, lo, hi, edges and histogram counts equal the host's bit for bit; sums
(mean, std, l2) are summed in another order (a two-pass std here, a shifted one-pass on the host)
and agree to a relative 1e-12 (tests/python/test_device_capture.py).
"""

import math

_segments = {}  # (device, lengths) -> (lengths tensor, segment index per element): built once.


def _torch():
    import torch  # Only reached with torch tensors in hand.

    return torch


def _segment_tensors(device, lengths):
    key = (str(device), lengths)
    found = _segments.get(key)
    if found is None:
        torch = _torch()
        counts = torch.tensor(lengths, dtype=torch.int64)
        index = torch.repeat_interleave(torch.arange(len(lengths)), counts)
        found = (counts.to(device), index.to(device))
        if len(_segments) > 64:
            _segments.clear()
        _segments[key] = found
    return found


def _flat_float64(tensors):
    """The tensors' elements as one float64 vector: one flatten (a single call into torch when
    they share a dtype, as a model's parameters do), one conversion."""
    torch = _torch()
    if all(t.dtype == tensors[0].dtype for t in tensors):
        flatten = getattr(torch._C._nn, "flatten_dense_tensors", None)
        flat = flatten(tensors) if flatten else torch.cat([t.reshape(-1) for t in tensors])
        return flat.to(torch.float64)
    return torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])


def _reduce(values, how, counts):
    torch = _torch()
    if hasattr(torch, "segment_reduce"):
        return torch.segment_reduce(values, how, lengths=counts, unsafe=True)
    n = counts.shape[0]
    if how == "sum":
        return torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(
            0, _index_of(counts, values), values
        )
    fill = math.inf if how == "min" else -math.inf
    return torch.full((n,), fill, dtype=values.dtype, device=values.device).scatter_reduce(
        0, _index_of(counts, values), values, "amin" if how == "min" else "amax"
    )


def _index_of(counts, values):
    return _torch().repeat_interleave(
        _torch().arange(counts.shape[0], device=values.device), counts, output_size=values.shape[0]
    )


class _Pass:
    """Counts, finite min/max and sums of a group of tensors, one segment each."""

    def __init__(self, tensors):
        torch = _torch()
        device = tensors[0].device
        self.lengths = tuple(int(t.numel()) for t in tensors)
        self.counts, self.index = _segment_tensors(device, self.lengths)
        self.x = _flat_float64(tensors)
        self.finite = torch.isfinite(self.x)
        finite = self.finite.to(torch.float64)
        self.n_finite = _reduce(finite, "sum", self.counts)
        self.n_nan = _reduce(torch.isnan(self.x).to(torch.float64), "sum", self.counts)
        self.n_inf = self.counts.to(torch.float64) - self.n_finite - self.n_nan
        self.min = _reduce(torch.where(self.finite, self.x, math.inf), "min", self.counts)
        self.max = _reduce(torch.where(self.finite, self.x, -math.inf), "max", self.counts)
        self.none_finite = self.n_finite == 0


def stats_rows(tensors):
    """float64 (len(tensors), 8): the stats row of each tensor (all on one device)."""
    torch = _torch()
    p = _Pass(tensors)
    zero = torch.zeros((), dtype=torch.float64, device=p.x.device)
    xf = torch.where(p.finite, p.x, zero)
    total = _reduce(xf, "sum", p.counts)
    sum_sq = _reduce(xf * xf, "sum", p.counts)
    safe_n = torch.where(p.none_finite, torch.ones_like(p.n_finite), p.n_finite)
    mean = total / safe_n
    deviation = torch.where(p.finite, p.x - mean[p.index], zero)
    variance = _reduce(deviation * deviation, "sum", p.counts) / safe_n
    nan = torch.full_like(mean, math.nan)
    rows = torch.stack(
        [
            p.counts.to(torch.float64),
            torch.where(p.none_finite, nan, p.min),
            torch.where(p.none_finite, nan, p.max),
            torch.where(p.none_finite, nan, mean),
            torch.where(p.none_finite, nan, variance.sqrt()),
            sum_sq.sqrt(),
            p.n_nan,
            p.n_inf,
        ],
        dim=1,
    )
    return rows


def histogram_rows(tensors, bins):
    """float64 (len(tensors), 2 + 2 * bins): the histogram row of each tensor (one device)."""
    torch = _torch()
    p = _Pass(tensors)
    equal = p.min == p.max
    lo = torch.where(equal, p.min - 0.5, p.min)
    hi = torch.where(equal, p.max + 0.5, p.max)
    width = hi - lo
    steps = torch.arange(1, bins, dtype=torch.float64, device=p.x.device)
    edges = torch.cat([lo[:, None] + width[:, None] * steps[None, :] / bins, hi[:, None]], dim=1)
    scale = bins / width
    zero = torch.zeros((), dtype=torch.float64, device=p.x.device)
    offset = torch.where(p.finite, (p.x - lo[p.index]) * scale[p.index], zero)
    bucket = offset.to(torch.int64).clamp_(0, bins - 1)
    counts = torch.zeros(len(p.lengths) * bins, dtype=torch.float64, device=p.x.device)
    counts.index_add_(0, p.index * bins + bucket, p.finite.to(torch.float64))
    head = torch.cat([lo[:, None], hi[:, None], edges], dim=1)
    head = torch.where(p.none_finite[:, None], torch.full_like(head, math.nan), head)
    return torch.cat([head, counts.view(len(p.lengths), bins)], dim=1)
