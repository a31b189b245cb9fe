"""Built-in summaries of many torch tensors at once, computed where the tensors live (a GPU).

One pass over a step's tensors: a fixed number of kernels per step, whatever the number of
tensors, and nothing waits for the device (no ``.item()``, no boolean indexing, no host-built
index per step, no division by a host number, which CUDA does as a reciprocal multiply). The
tensors are laid out in rows of TILE elements (fewer when every tensor is smaller), each tensor
starting a row and its last row padded with NaN (which every summary skips), so every reduction
is a row reduction: its work is spread evenly over the device whatever the tensors' sizes. Only
the rows' partial results (one per row) are combined per tensor, by segmented reductions.
(Reducing each tensor as one segment would give one tensor's elements to one thread block: a
590 k-element conv weight would keep one streaming multiprocessor busy while the others idle.)

The rows have the host's columns and definitions (cpp/include/xdl_trace/registry.h,
docs/format.md "Summaries"):

- stats, float64[8]: count, min, max, mean, std (population), l2, nan count, inf count; min, max,
  mean, std and l2 over finite values; with no finite value min, max, mean, std are NaN, l2 0.
- digest, float64[2]: the tensor digest's high and low 32 bits (cpp/src/summary/digest.h: the sum
  mod 2^64 of splitmix64's finalizer of each element's bits plus its 1-based index times
  0x9E3779B97F4A7C15), in int64 arithmetic that wraps as the host's uint64 does, so it equals the
  host's bit for bit (a sum of integers: any order gives the same). On CUDA each element's term
  is one fused kernel (_FUSED_MIX), proved against the host's digest before it is used.
- histogram, float64[2 + 2 * bins]: lo, hi (min and max of the finite values, or min - 0.5,
  max + 0.5 when equal), the bins' right edges ``lo + width * (k + 1) / bins`` (the last is hi),
  the counts of finite values in ``floor((x - lo) * (bins / width))`` clamped to the bins; no
  finite value: lo, hi and edges NaN, counts 0.

Values are widened to float64 exactly as the host does (float16/bfloat16 per element, bool as
0/1; floating tensors after their finite test, min and max, which widening leaves unchanged), so
counts, min, max, lo, hi, edges and histogram counts equal the host's bit for bit; sums (mean,
std, l2) are summed in another order (a two-pass std here, l2 from its deviations, a shifted
one-pass on the host) and agree to a relative 1e-12, a std of ~0 to 1e-15 of the mean (a
constant float64 tensor, whose mean is a step off; tests/python/test_device_capture.py).
"""

import contextlib
import functools
import math
import os
import threading
import time
import warnings

# Elements a row of a pass at most (every tensor pads its last row: at most TILE - 1 NaN each).
TILE = 2048
# Elements summarized in one pass: its temporaries take ~30 bytes an element (stats or
# histogram), so a pass holds at most ~500 MB of device memory for them (one tensor larger than
# this is a pass of its own).
_CHUNK_ELEMENTS = 1 << 24
_layouts_lock = threading.Lock()  # Passes run on several threads (hooks, autograd's).
_layouts = {}  # GUARDED_BY(_layouts_lock): (device, lengths) -> _Layout, made once per signature.


def _torch():
    import torch  # Only reached with torch tensors in hand.

    return torch


class _Layout:
    """Where tensors of `lengths` elements lie in a pass's rows, as device constants: made once
    per signature (one host-to-device copy), read by every pass over it."""

    def __init__(self, device, lengths):
        torch = _torch()
        # Rows of TILE, or of the largest tensor's size rounded up to a power of 2 where that is
        # less: a pass over small tensors (biases alone) pads little.
        self.tile = min(TILE, 1 << max(4, (max(lengths, default=1) - 1).bit_length()))
        rows = [max(1, -(-n // self.tile)) for n in lengths]  # An empty tensor: a row of NaN.
        self.pads = [r * self.tile - n for r, n in zip(rows, lengths)]  # NaN after each tensor.
        self.rows = sum(rows)
        owner = [i for i, r in enumerate(rows) for _ in range(r)]
        # Each row's first element's 0-based position in its tensor, and how many of its elements
        # are the tensor's (the rest is padding): the positions a digest mixes in.
        starts = [k * self.tile for r in rows for k in range(r)]
        real = [max(0, min(self.tile, lengths[i] - s)) for i, s in zip(owner, starts)]
        packed = torch.tensor(owner + rows + list(lengths) + starts + real, dtype=torch.int64)
        packed = packed.to(device)
        r, t = self.rows, len(rows)
        self.owner = packed[:r]  # Each row's tensor.
        self.per_tensor = packed[r : r + t]  # Each tensor's rows.
        self.count = packed[r + t : r + 2 * t].to(torch.float64)  # Each tensor's elements.
        self.row_start = packed[r + 2 * t : 2 * r + 2 * t][:, None]  # (rows, 1)
        self.row_length = packed[2 * r + 2 * t :][:, None]  # (rows, 1)
        # Each column's 1-based position in its row: (1, tile).
        self.column = torch.arange(1, self.tile + 1, device=device)[None, :]
        self._device = device
        self._padding = {}  # dtype -> each tensor's padding: a view of _nan_row, or None.

    def constants(self):
        return [
            self.owner,
            self.per_tensor,
            self.count,
            self.row_start,
            self.row_length,
            self.column,
        ]

    def padding(self, dtype):
        found = self._padding.get(dtype)
        if found is None:
            nan = _nan_row(self._device, dtype)
            found = self._padding[dtype] = [nan[:pad] if pad else None for pad in self.pads]
        return found


def _layout(device, lengths):
    key = (str(device), lengths)
    with _layouts_lock:
        found = _layouts.get(key)
        if found is None:
            if len(_layouts) >= 64:  # The oldest goes: those just made for a capture stay.
                del _layouts[next(iter(_layouts))]
            found = _layouts[key] = _Layout(device, lengths)
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


def _pass_dtype(tensors):
    """Floating tensors of one dtype stay in it (their finite test, min and max are exact there,
    and the sums widen as they read: 2-4 bytes an element instead of 8); anything else is widened
    to float64 as the host widens it (bool as 0/1)."""
    torch = _torch()
    dtype = tensors[0].dtype
    if dtype.is_floating_point and all(t.dtype == dtype for t in tensors):
        return dtype
    return torch.float64


@functools.lru_cache(maxsize=16)
def _nan_row(device, dtype):
    """A row of NaN: the padding every tensor's last row takes its slice of."""
    torch = _torch()
    return torch.full((TILE,), math.nan, dtype=dtype, device=device)


def _tiled(tensors, layout, dtype):
    """The tensors' elements in `layout`'s rows: (rows, tile) of `dtype`, one concatenation (one
    call into torch, which flattens them too)."""
    torch = _torch()
    pieces = []
    for t, pad in zip(tensors, layout.padding(dtype)):
        pieces.append(t if t.dtype == dtype else t.to(dtype))
        if pad is not None:
            pieces.append(pad)
    flatten = getattr(torch._C._nn, "flatten_dense_tensors", None)
    flat = flatten(pieces) if flatten else torch.cat([p.reshape(-1) for p in pieces])
    return flat.view(layout.rows, layout.tile)


class _Pass:
    """Counts, finite sums, min and max of a group of tensors, per tensor, from their rows. On a
    GPU the pass is bound by memory traffic, so each step reads and writes as few bytes an
    element as it can (docs/device-path.md "Device summaries" counts them)."""

    def __init__(self, tensors):
        torch = _torch()
        self.layout = _layout(tensors[0].device, tuple(t.numel() for t in tensors))
        x = _tiled(tensors, self.layout, _pass_dtype(tensors))
        magnitude = x.abs()
        self.finite = magnitude < math.inf  # Two kernels; torch.isfinite takes four.
        self.count = self.layout.count
        self.n_finite = self.per_tensor(self.finite.sum(1), "sum")
        self.n_inf = self.per_tensor((magnitude == math.inf).sum(1), "sum")
        del magnitude
        self.n_nan = self.count - self.n_finite - self.n_inf  # The padding is neither.
        self.none_finite = self.n_finite == 0
        self.finite_x = torch.where(self.finite, x, 0)  # In x's dtype: widened as it is read.
        self.sum = self.per_tensor(self.finite_x.sum(1, dtype=torch.float64), "sum")
        self.divisor = torch.where(self.none_finite, 1.0, self.n_finite)  # Never 0.
        self.mean = self.sum / self.divisor
        if x.dtype == torch.float64:  # Min and max of the finite values.
            low = torch.where(self.finite, x, math.inf)
            high = torch.where(self.finite, x, -math.inf)
        else:
            # One where, not two: the non-finite values replaced by their tensor's mean rounded
            # to x's dtype. The mean lies between min and max and, summed in float64, is off by
            # far less than half a float32 step, so rounded it still does (rounding is
            # monotonic). In float64 itself it can fall a step outside: the mean of [0.1] * 3
            # is 0.10000000000000002.
            low = high = torch.where(self.finite, x, self.per_row(self.mean).to(x.dtype))
        self.min = self.per_tensor(low.amin(1), "min")
        self.max = self.per_tensor(high.amax(1), "max")

    def per_tensor(self, per_row, how):
        """Each tensor's `how` ("sum", "min", "max") of its rows' `per_row` values (float64)."""
        torch = _torch()
        values = per_row.to(torch.float64)
        return torch.segment_reduce(values, how, lengths=self.layout.per_tensor, unsafe=True)

    def per_row(self, per_tensor):
        """A per-tensor value for each row, as a column (broadcast over the row's elements)."""
        return per_tensor.index_select(0, self.layout.owner)[:, None]


def rows(kind, bins, tensors, chunk=None):
    """The `kind` ("stats", "histogram" or "digest") rows of `tensors` (all on one device), in
    passes of at most `chunk` (_CHUNK_ELEMENTS) elements."""
    if kind == "stats":
        return stats_rows(tensors, chunk)
    if kind == "digest":
        return digest_rows(tensors, chunk)
    return histogram_rows(tensors, bins, chunk)


def static_inputs(tensors, chunk=None):
    """The device constants the passes over `tensors` read that were made outside them (made
    now when missing, then cached): a graph of the passes keeps these alive and replays with no
    host-to-device copy of its own."""
    device = tensors[0].device
    out = [_nan_columns(device)]
    for part in _chunks(tensors, chunk):
        out += _layout(device, tuple(t.numel() for t in part)).constants()
        out.append(_nan_row(device, _pass_dtype(part)))
    return out


def stats_rows(tensors, chunk=None):
    """float64 (len(tensors), 8): the stats row of each tensor (all on one device)."""
    parts = [_stats_rows(part) for part in _chunks(tensors, chunk)]
    return parts[0] if len(parts) == 1 else _torch().cat(parts)


def _stats_rows(tensors):
    torch = _torch()
    p = _Pass(tensors)
    # The finite values' deviations from their tensor's mean (0 elsewhere), in one kernel.
    deviations = torch.addcmul(p.finite_x, p.finite, p.per_row(p.mean), value=-1)
    row_norms = torch.linalg.vector_norm(deviations, dim=1)
    squared_deviations = p.per_tensor(row_norms.square(), "sum")
    # The sum of squares from the deviations' (two non-negative terms: no cancellation).
    sum_sq = squared_deviations + p.n_finite * p.mean * p.mean
    rows = torch.stack(
        [
            p.count,
            p.min,
            p.max,
            p.mean,
            (squared_deviations / p.divisor).sqrt(),
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
    segments = len(tensors)
    device = p.finite.device
    equal = p.min == p.max
    lo = torch.where(equal, p.min - 0.5, p.min)
    hi = torch.where(equal, p.max + 0.5, p.max)
    width = hi - lo
    # Divisions by a device tensor, as the host divides: CUDA divides by a host number as a
    # multiply by its reciprocal, and `number / tensor` is one everywhere (a bit off, either).
    bins_ = torch.full_like(width, bins)
    steps = torch.arange(1, bins, dtype=torch.float64, device=device)
    edges = lo[:, None] + width[:, None] * steps[None, :] / bins_[:, None]
    edges = torch.cat([edges, hi[:, None]], dim=1)
    # Tensors with no finite value have NaN bounds: 0 keeps their (uncounted) offsets finite.
    scale = torch.where(p.none_finite, 0.0, bins_ / width)
    start = torch.where(p.none_finite, 0.0, lo)
    offset = torch.mul(p.finite_x - p.per_row(start), p.per_row(scale))
    bucket = offset.to(torch.int64).clamp_(0, bins - 1)
    bucket.add_(p.per_row(torch.arange(0, segments * bins, bins, device=device)))
    counts = torch.zeros(segments * bins, dtype=torch.float64, device=device)
    counts.index_add_(0, bucket.view(-1), p.finite.view(-1).to(torch.float64))
    head = torch.cat([lo[:, None], hi[:, None], edges], dim=1)
    head = torch.where(p.none_finite[:, None], math.nan, head)
    return torch.cat([head, counts.view(segments, bins)], dim=1)


# The digest's constants (summary/digest.h) as int64 (two's complement of the uint64 values).
_DIGEST_STEP = 0x9E3779B97F4A7C15 - (1 << 64)
_DIGEST_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_DIGEST_MIX2 = 0x94D049BB133111EB - (1 << 64)
# Integer dtypes of each element size: a tensor's bits are read through them; and the mask that
# keeps an element's own bits of its int64 promotion (which sign-extends int8/16/32).
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
_MASKS = {1: 0xFF, 2: 0xFFFF, 4: 0xFFFFFFFF, 8: -1}

# The digest's per-element work (torch_mix below) as one CUDA kernel, compiled at run time by
# torch's jiterator (NVRTC): it reads each element once and writes its term, 12 bytes an element
# for float32 where torch_mix's ~14 kernels move ~300. Its inputs reach it promoted to int64, as
# torch promotes; unsigned arithmetic wraps as the host's uint64 does. No '>' but in the shifts:
# jiterator finds the function's name with a regular expression.
_FUSED_MIX = """
template <typename T>
T xdl_digest_mix(T bits, T row_start, T row_length, T column, long long mask) {
  if (row_length < column) return 0; /* Padding: adds nothing. */
  unsigned long long x = ((unsigned long long)bits & (unsigned long long)mask) +
                         (unsigned long long)(row_start + column) * 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return (T)(x ^ (x >> 31));
}
"""
_fused_lock = threading.Lock()
_fused = {}  # GUARDED_BY(_fused_lock): str(device) -> the proved kernel, or why there is none
# The proof's bound, as device_fence_timeout_s's default: a healthy GPU never reaches it; past
# it (a hung device) the digests take torch's ops rather than the step waiting on.
PROOF_TIMEOUT_S = 60.0
_abandoned = []  # GUARDED_BY(_fused_lock): probes past their bound, kept (the device may write)


def digest_rows(tensors, chunk=None, mix=None):
    """float64 (len(tensors), 2): the digest of each tensor (all on one device), high and low 32
    bits. A pass reads one dtype: consecutive tensors of a dtype share one. Each element's term
    comes from `mix`; None: the fused kernel where the device has one (_fused_mix), else
    torch_mix."""
    torch = _torch()
    mix = mix or _fused_mix(tensors[0].device) or torch_mix
    parts, run = [], []
    for t in tensors:
        if run and t.dtype != run[0].dtype:
            parts += [_digest_rows(part, mix) for part in _chunks(run, chunk)]
            run = []
        run.append(t)
    parts += [_digest_rows(part, mix) for part in _chunks(run, chunk)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _shift_right(x, bits):
    """x >> bits as uint64 does it (torch shifts int64 arithmetically)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _digest_rows(tensors, mix):
    torch = _torch()
    layout = _layout(tensors[0].device, tuple(t.numel() for t in tensors))
    device, size = layout.owner.device, tensors[0].element_size()
    pieces = []
    for t, pad in zip(tensors, layout.pads):
        pieces.append(t.reshape(-1))
        if pad:  # Any bits: the mix leaves the padding out.
            pieces.append(_zero_row(device, t.dtype)[:pad])
    flat = torch.cat(pieces).view(getattr(torch, _BITS[size])).view(layout.rows, layout.tile)
    mixed = mix(flat, layout.row_start, layout.row_length, layout.column, mask=_MASKS[size])
    sums = torch.zeros(len(tensors), dtype=torch.int64, device=device)
    sums.index_add_(0, layout.owner, mixed.sum(1))  # Integer sums: the same in any order.
    return torch.stack([_shift_right(sums, 32), sums & 0xFFFFFFFF], dim=1).to(torch.float64)


def torch_mix(bits, row_start, row_length, column, mask):
    """Each element's term of its tensor's digest, in int64 torch ops (any device): splitmix64's
    finalizer of its bits (zero-extended) plus its 1-based position times the step; 0 for the
    padding (a column past its row's length). _FUSED_MIX is the same in one kernel."""
    torch = _torch()
    x = bits.to(torch.int64)
    if mask != -1:  # out=: torch 1.13's `&=` of a large int fails under a dispatch mode.
        torch.bitwise_and(x, mask, out=x)
    x = torch.add(x, row_start + column, alpha=_DIGEST_STEP)
    x = (x ^ _shift_right(x, 30)) * _DIGEST_MIX1
    x = (x ^ _shift_right(x, 27)) * _DIGEST_MIX2
    x = x ^ _shift_right(x, 31)
    return torch.where(column <= row_length, x, 0)


def _fused_mix(device):
    """The fused mix for `device` (a CUDA one), or None where there is none (then torch_mix):
    made and proved at the first digest pass on the device, outside a graph's capture (proving it
    reads a result back), then kept for the process. ``XDL_TRACE_FUSED_DIGEST=0`` turns it off."""
    if device.type != "cuda" or os.environ.get("XDL_TRACE_FUSED_DIGEST", "1") == "0":
        return None
    key = str(device)
    with _fused_lock:
        found = _fused.get(key)
        if found is None and not _torch().cuda.is_current_stream_capturing():
            found = _fused[key] = prove_mix(device, _jiterator_mix)
    return found if callable(found) else None


def _jiterator_mix():
    torch = _torch()
    return torch.cuda.jiterator._create_jit_fn(_FUSED_MIX, mask=0)


def fused_digest_status():
    """{device: "on" or why the fused digest kernel is off} for the devices a digest pass met."""
    with _fused_lock:
        return {key: "on" if callable(v) else v for key, v in _fused.items()}


def prove_mix(device, make, timeout_s=PROOF_TIMEOUT_S):
    """The mix `make()` returns if, on `device`, it gives the host's digests (_core.digest) of
    probe tensors of every element size (several rows, padding; on a side stream of its own, so
    only the probe is waited for, `timeout_s` at most), else why not, warned once."""
    from .. import _core
    from .._names import WIRE_DTYPE as wire

    torch = _torch()
    g = torch.Generator().manual_seed(0)
    probe = [
        torch.randint(-(2**31), 2**31 - 1, (3 * TILE + 5,), generator=g, dtype=torch.int32),
        torch.randint(-128, 127, (300,), generator=g, dtype=torch.int8),
        torch.randint(0, 255, (5,), generator=g, dtype=torch.uint8),
        torch.randint(-(2**15), 2**15 - 1, (70,), generator=g, dtype=torch.int16),
        torch.randint(-(2**62), 2**62, (TILE + 1,), generator=g, dtype=torch.int64),
    ]
    cuda = device.type == "cuda"
    try:
        mix = make()
        with torch.cuda.stream(torch.cuda.Stream(device)) if cuda else contextlib.nullcontext():
            rows = torch.cat([_digest_rows([t.to(device)], mix) for t in probe])
            if cuda:  # Read back without a wait past its bound (a hung device).
                host = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=True)
                host.copy_(rows, non_blocking=True)
                done = torch.cuda.Event()
                done.record()
        with _layouts_lock:  # Made on the probe's stream: no pass reuses them.
            for t in probe:
                _layouts.pop((str(device), (t.numel(),)), None)
        if cuda:
            try:
                _wait(done.query, timeout_s)
            except TimeoutError:
                _abandoned.append((rows, host))  # The device may write them yet.
                raise
            rows = host
        rows = rows.tolist()
        wrong = [
            str(t.dtype)
            for t, (high, low) in zip(probe, rows)
            if (int(high) << 32) | int(low) != _core.digest(t.numpy(), wire[t.numpy().dtype.name])
        ]
        if not wrong:
            return mix
        why = f"its digests of {', '.join(wrong)} probe tensors are not the host's"
    except Exception as e:  # noqa: BLE001  (any failure: torch's ops, and said so)
        why = f"{type(e).__name__}: {e}"
    warnings.warn(
        f"xdl_trace: the fused digest kernel is off on {device} ({why}); digests are computed "
        "by torch's ops (about 10 times the memory traffic)",
        RuntimeWarning,
        stacklevel=3,
    )
    return why


def _wait(done, timeout_s):
    """Polls done() until it is true; TimeoutError past `timeout_s` (Ctrl-C ends it too)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the probe did not complete within {timeout_s:g} s")
        time.sleep(0.001)


@functools.lru_cache(maxsize=16)
def _zero_row(device, dtype):
    """A row of zeros: the padding of a digest pass (masked out; a NaN row has no int dtype)."""
    return _torch().zeros((TILE,), dtype=dtype, device=device)


@functools.lru_cache(maxsize=8)
def _nan_columns(device):
    """The columns of a stats row that are NaN when no value is finite: min, max, mean, std."""
    from .. import _core

    nan = [field in ("min", "max", "mean", "std") for field in _core.STATS_FIELDS]
    return _torch().tensor(nan, device=device)
