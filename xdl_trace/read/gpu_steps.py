"""The GPU's time step by step, from a run's device events and host step spans: busy %, the
compute / memcpy / memset / idle breakdown, idle attributed to its cause, kernels and host CUDA
API calls by total time, launch statistics. docs/report.md says how each number is computed.

The events come as columns (``_core.DeviceEventTable``: one C++ pass over the DeviceTrace
payloads); everything here is vectorized numpy over those columns, per rank. Holistic Trace
Analysis (HTA) on Kineto traces is the reference for the definitions:

* a step's window is from the previous step's ``Step()`` call to its own (the step time the
  report charts; a rank's first step has no previous call and no window);
* busy: the union of the kernel, memcpy and memset intervals of the rank's device(s) inside the
  window; the breakdown gives overlaps to compute first, then memcpy, then memset; idle is the rest;
* idle by cause, HTA's idle_time_breakdown categories over the gaps of the busy union
  (``_idle_by_cause``): host wait (the work that ends the gap was launched after it opened),
  kernel wait (a shorter gap than 30 us, the work queued), other; and the part of host wait
  in gaps that a blocking CUDA call of the host reaches into (a synchronize, or a call that
  returned only after the copy it issued finished): the host waited for the device, then
  launched late;
* communication: NCCL kernels (HTA's rule); overlapped while a compute kernel runs;
* a kernel (memcpy, memset) belongs to the step whose window holds its launch call's start
  (the CUDA correlation id links the two; its own start when no call is found), as Kineto and
  HTA assign kernels to ``ProfilerStep``.

    gpu = summarize(columns, {0: (gsteps, step_ends_ns)})
    gpu["steps"][0]       # (gsteps, rows [s, len(STEP_FIELDS)])
"""

import re

import numpy as np

from .. import _core
from .._proto import device_trace_pb2 as pb
from .device_events import API_CALLS, DEVICE_WORK

__all__ = [
    "summarize",
    "gpu_steps",
    "kernel_table",
    "in_windows",
    "api_table",
    "launch_stats",
    "demangle",
    "api_name",
    "STEP_FIELDS",
    "SHORT_KERNEL_NS",
    "KERNEL_WAIT_NS",
    "is_communication",
    "stragglers",
    "copy_table",
    "full_tables",
    "launching_ranges",
    "module_table",
]

KERNEL, MEMCPY, MEMSET = pb.DEVICE_EVENT_KERNEL, pb.DEVICE_EVENT_MEMCPY, pb.DEVICE_EVENT_MEMSET
# By role, from the one table of kinds (device_events.KINDS): the device work (busy time,
# windows, launches), its compute part (every work kind but copies and memsets) and the calls.
WORK_KINDS = DEVICE_WORK
COMPUTE_KINDS = tuple(k for k in DEVICE_WORK if k not in (MEMCPY, MEMSET))
API_KINDS = API_CALLS
SYNC_KIND = pb.DEVICE_EVENT_SYNCHRONIZATION
HOST_API_DEVICE = -1  # Device id of the host threads calling the CUDA API.
SHORT_KERNEL_NS = 10_000  # "Short" kernels: under 10 us (launch overhead dominates them).

# Calls that wait for the device by definition (the runtime's and the driver's names, without
# the CUPTI version suffix); any other call counts as blocking when it returned only after the
# copy or memset it issued had finished (a cudaMemcpyAsync to pageable memory does that).
SYNC_CALLS = frozenset(
    (
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cudaMemset",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpyDtoD",
    )
)
_VERSION_SUFFIX = re.compile(r"_v\d+$")

# Per step and rank, in this order (ns, except the counts).
STEP_FIELDS = (
    "window",
    "busy",
    "compute",
    "memcpy",
    "memset",
    "idle",
    "idle_host_wait",
    "idle_kernel_wait",
    "idle_other",
    "idle_blocking",
    "comm",
    "comm_overlap",
    "kernels",
    "kernel_time",
    "launches",
)


def demangle(names):
    """Kernel names as Kineto and Nsight show them (``_core.demangle``: C++'s
    abi::__cxa_demangle, cached); a name that is not mangled comes back unchanged."""
    return _core.demangle(list(names))


def api_name(name):
    """A CUDA API call's name as users know it: CUPTI's version suffix dropped
    (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``)."""
    return _VERSION_SUFFIX.sub("", name)


def _merge(starts, ends):
    """The union of intervals [starts, ends) as sorted disjoint (starts, ends), and for each
    merged interval the index (into the inputs) of the interval that opens it."""
    if len(starts) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    opens = np.concatenate([[True], s[1:] > e[:-1]])
    closes = np.concatenate([opens[1:], [True]])
    return s[opens], e[closes], order[opens]


class _Coverage:
    """t -> the measure of a union of intervals up to t (piecewise linear, one np.interp)."""

    def __init__(self, starts, ends):
        s, e, _ = _merge(starts, ends)
        self.x = np.empty(2 * len(s), np.float64)
        self.x[0::2], self.x[1::2] = s, e
        lengths = (e - s).astype(np.float64)
        before = np.concatenate([[0.0], np.cumsum(lengths)])
        self.y = np.empty_like(self.x)
        self.y[0::2], self.y[1::2] = before[:-1], before[1:]

    def over(self, lo, hi):
        """The union's measure inside each [lo, hi)."""
        if len(self.x) == 0:
            return np.zeros(len(lo))
        return np.interp(hi, self.x, self.y) - np.interp(lo, self.x, self.y)


def _union(*pairs):
    return (np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))


def _launch_calls(columns, rank_mask, ops):
    """For each device op (indices `ops`): the index of the host call that launched it (same
    rank and correlation id), else -1; and per event whether it is a host call that waited for
    the memcpy/memset it issued."""
    api = np.flatnonzero(rank_mask & np.isin(columns["kind"], API_KINDS))
    corr = columns["correlation_id"]
    order = api[np.argsort(corr[api], kind="stable")]
    keys = corr[order]
    where = np.searchsorted(keys, corr[ops]).clip(0, max(len(keys) - 1, 0))
    found = keys[where] == corr[ops] if len(keys) else np.zeros(len(ops), bool)
    launch = np.full(len(ops), -1, np.int64)
    launch[found] = order[where[found]]
    # Blocking: a sync call, or a call that ended after the memcpy/memset it issued ended.
    waits = np.zeros(len(columns["kind"]), bool)
    copies = found & np.isin(columns["kind"][ops], (MEMCPY, MEMSET))
    calls = order[where[copies]]
    waits[calls] = columns["end_ns"][calls] >= columns["end_ns"][ops[copies]]
    return launch, waits


def blocking_calls(columns, names):
    """bool per event: a host call that waits for the device (module docstring)."""
    sync_ids = [i for i, n in enumerate(names) if api_name(n) in SYNC_CALLS]
    blocking = np.isin(columns["name"], sync_ids) & np.isin(columns["kind"], API_KINDS)
    blocking |= columns["kind"] == SYNC_KIND
    for rank in np.unique(columns["rank"]).tolist():
        mine = columns["rank"] == rank
        ops = np.flatnonzero(mine & np.isin(columns["kind"], WORK_KINDS))
        blocking |= _launch_calls(columns, mine, ops)[1]
    return blocking


def gpu_steps(columns, steps, blocking=None):
    """{rank: (gsteps int64 [s], rows float64 [s, len(STEP_FIELDS)])} for the ranks that have
    device work and steps. ``steps``: {rank: (gsteps, ends_ns)}, each step's ``Step()`` call
    time (the end of its host span); ``blocking``: ``blocking_calls``'s mask (computed when
    None)."""
    if blocking is None:
        blocking = blocking_calls(columns, columns["names"])
    kinds, start, end = columns["kind"], columns["start_ns"], columns["end_ns"]
    comm_ids = is_communication(columns["names"])
    out = {}
    for rank, (gsteps, ends) in steps.items():
        order = np.argsort(ends, kind="stable")
        gsteps, ends = np.asarray(gsteps)[order], np.asarray(ends)[order]
        mine = columns["rank"] == rank
        ops = np.flatnonzero(mine & np.isin(kinds, WORK_KINDS))
        if len(ends) < 2 or len(ops) == 0:
            continue
        origin = int(ends[0])  # Times relative to it, in float64: exact to the ns for days.

        def rel(t, origin=origin):
            return (np.asarray(t, np.int64) - origin).astype(np.float64)

        lo, hi = rel(ends[:-1]), rel(ends[1:])  # Window i: (ends[i], ends[i + 1]].
        s, e, k = rel(start[ops]), rel(end[ops]), kinds[ops]
        call, _ = _launch_calls(columns, mine, ops)
        launch = np.where(call >= 0, rel(start[call.clip(0)]), np.nan)

        def part(*which):
            m = np.isin(k, which)
            return s[m], e[m]

        kernel, memcpy, memset = part(*COMPUTE_KINDS), part(MEMCPY), part(MEMSET)
        # Communication: NCCL kernels; overlapped: while a compute kernel runs (HTA's rule).
        comm_mask = (k == KERNEL) & comm_ids[columns["name"][ops]]
        comp_mask = (k == KERNEL) & ~comm_mask
        c_comm = _Coverage(s[comm_mask], e[comm_mask]).over(lo, hi)
        c_comp = _Coverage(s[comp_mask], e[comp_mask]).over(lo, hi)
        c_k = _Coverage(*kernel).over(lo, hi)
        comm_overlap = c_comm + c_comp - c_k  # |comm ∩ compute| = |comm| + |comp| - |union|.
        c_km = _Coverage(*_union(kernel, memcpy)).over(lo, hi)
        busy_iv = _union(kernel, memcpy, memset)
        c_all = _Coverage(*busy_iv).over(lo, hi)
        window = hi - lo
        idle = window - c_all
        host_wait, kernel_wait, other, idle_blocking = _idle_by_cause(
            s, e, launch, (rel(start[mine & blocking]), rel(end[mine & blocking])), lo, hi
        )
        # Counts by launch time (own start when the call is unknown).
        when = np.where(np.isnan(launch), s, launch)
        step = np.searchsorted(hi, when, side="left")  # when in (lo[i], hi[i]] -> i.
        inside = (step < len(hi)) & (when > lo[step.clip(0, len(lo) - 1)])
        is_kernel = k == KERNEL
        counted = inside & is_kernel
        n = len(hi)
        kernels = np.bincount(step[counted], minlength=n)[:n]
        kernel_time = np.bincount(step[counted], weights=(e - s)[counted], minlength=n)[:n]
        launch_calls = np.flatnonzero(
            mine & np.isin(kinds, API_KINDS) & _is_launch(columns["name"], columns["names"])
        )
        t = rel(start[launch_calls])
        at = np.searchsorted(hi, t, side="left")
        ok = (at < n) & (t > lo[at.clip(0, n - 1)])
        launches = np.bincount(at[ok], minlength=n)[:n]
        rows = np.stack(
            [
                window,
                c_all,
                c_k,
                c_km - c_k,
                c_all - c_km,
                idle,
                host_wait,
                kernel_wait,
                other,
                idle_blocking,
                c_comm,
                comm_overlap,
                kernels,
                kernel_time,
                launches,
            ],
            axis=1,
        )
        out[rank] = (gsteps[1:], rows)
    return out


KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay (30, in its trace's microseconds).


def _idle_by_cause(s, e, launch, block_iv, lo, hi, kernel_wait_ns=KERNEL_WAIT_NS):
    """HTA's idle categories over the gaps of the device's busy union (the ops [s, e), in event
    order, launched at `launch`, NaN when unknown), per window [lo, hi): (host wait, kernel
    wait, other, host wait after a blocking call), each an array over the windows; the first
    three add up to the windows' idle time.

    A gap is closed by the op that opens the next busy interval: *host wait* when that op's
    launch call started after the gap opened (the host had not yet asked for the work; also the
    gaps before the first op and after the last); else *kernel wait* when the gap is shorter
    than `kernel_wait_ns`; else *other* (the work was queued and waited: a dependency, an event).
    *After a blocking call*: the host-wait gaps that a host call of `block_iv` (a synchronize,
    a copy that waited) reaches into: the host waited for the device, then launched late."""
    bs, be, opener = _merge(s, e)  # Event order: `opener` indexes `launch` too.
    gap_lo = np.concatenate([[min(lo[0], bs[0]) - 1.0], be])
    gap_hi = np.concatenate([bs, [max(hi[-1], be[-1]) + 1.0]])
    called = np.concatenate([[np.inf], launch[opener[1:]], [np.inf]])  # Edges: host wait.
    late = called > gap_lo  # NaN (no call found) compares False, as in HTA.
    short = (gap_hi - gap_lo < kernel_wait_ns) & ~late
    cats = [late, short, ~late & ~short]
    covered = [_Coverage(gap_lo[m], gap_hi[m]).over(lo, hi) for m in cats]
    # A call reaches into a gap when it ends at or after the gap's start and starts at or before
    # its end: the first merged call ending at or after the start decides.
    cs, ce, _ = _merge(*block_iv)
    reached = np.zeros(len(gap_lo), bool)
    if len(cs):
        j = np.searchsorted(ce, gap_lo, side="left")
        reached = (j < len(ce)) & (cs[j.clip(0, len(cs) - 1)] <= gap_hi)
    after_sync = late & reached
    return covered + [_Coverage(gap_lo[after_sync], gap_hi[after_sync]).over(lo, hi)]


_COMMUNICATION = re.compile(r"nccl", re.IGNORECASE)  # HTA: NCCL kernels are communication.


def is_communication(names):
    """bool per name id: a communication kernel's name (NCCL's, mangled or not: HTA's rule)."""
    return np.array([bool(_COMMUNICATION.search(n)) for n in names], bool)


def stragglers(per_step):
    """The straggler rank of each step: with several ranks, the one whose GPU computed longest
    (busy less communication not overlapped: the others wait for it in the next collective).
    Returns [{rank, steps (as straggler), of (steps seen on every rank), busy (its mean compute
    ns a step over those steps), median_busy (the median rank's), excess (busy - median_busy,
    over the median window)}], slowest first; [] with one rank."""
    if len(per_step) < 2:
        return []
    f = {name: i for i, name in enumerate(STEP_FIELDS)}
    common = None
    for gsteps, _ in per_step.values():
        common = set(gsteps.tolist()) if common is None else common & set(gsteps.tolist())
    common = np.array(sorted(common), np.int64)
    if len(common) == 0:
        return []
    ranks = sorted(per_step)
    work, window = [], []
    for r in ranks:
        gsteps, rows = per_step[r]
        at = np.searchsorted(gsteps, common)
        busy = rows[at, f["busy"]] - (rows[at, f["comm"]] - rows[at, f["comm_overlap"]])
        work.append(busy)
        window.append(rows[at, f["window"]])
    work, window = np.array(work), np.array(window)
    slowest = np.argmax(work, axis=0)
    median = np.median(work, axis=0)
    out = []
    for i, r in enumerate(ranks):
        mine = slowest == i
        if not mine.any():
            continue
        busy, med = float(work[i, mine].mean()), float(median[mine].mean())
        out.append(
            {
                "rank": r,
                "steps": int(mine.sum()),
                "of": int(len(common)),
                "busy": busy,
                "median_busy": med,
                "excess": (busy - med) / float(np.median(window[:, mine])),
            }
        )
    return sorted(out, key=lambda s: -s["steps"])


def _is_launch(name_ids, names):
    launch_ids = [i for i, n in enumerate(names) if "Launch" in n]
    return np.isin(name_ids, launch_ids)


def in_windows(columns, steps):
    """bool per event: it belongs to a step window of its rank (``steps`` as ``gpu_steps``'s):
    a kernel, memcpy or memset by the start of its launch call (its own start when no call is
    found), any other event by its own start. The events a share of the windows may count."""
    kinds, start = columns["kind"], columns["start_ns"]
    inside = np.zeros(len(kinds), bool)
    for rank, (_, ends) in steps.items():
        ends = np.sort(np.asarray(ends, np.int64))
        mine = columns["rank"] == rank
        if len(ends) < 2 or not mine.any():
            continue
        when = start.copy()
        ops = np.flatnonzero(mine & np.isin(kinds, WORK_KINDS))
        call, _ = _launch_calls(columns, mine, ops)
        when[ops] = np.where(call >= 0, start[call.clip(0)], start[ops])
        # Window i is (ends[i], ends[i + 1]].
        inside |= mine & (when > ends[0]) & (when <= ends[-1])
    return inside


def _innermost(starts, ends, at):
    """For each time of `at`: the index of the innermost of the intervals [starts, ends] (nested
    or disjoint, one thread's ranges) holding it, else -1."""
    if len(starts) == 0:
        return np.full(len(at), -1, np.int64)
    order = np.lexsort((-ends, starts))  # By start; of two starting together, the outer first.
    s, e = starts[order], ends[order]
    parent = np.full(len(s), -1, np.int64)  # The range holding each one's start.
    stack = []
    for i, lo in enumerate(s.tolist()):
        while stack and e[stack[-1]] < lo:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    j = np.searchsorted(s, at, side="right") - 1  # The last range starting at or before.
    while True:
        outside = (j >= 0) & (e[j.clip(0)] < at)
        if not outside.any():
            break
        j[outside] = parent[j[outside]]
    return np.where(j >= 0, order[j.clip(0)], -1)


def launching_ranges(columns, ops):
    """For each device op of `ops` (indices): the index (into ``columns["ranges"]``) of the
    innermost host range that launched it: on the rank and OS thread of its launch call, holding
    the call's start; -1 when no call or no range is found."""
    out = np.full(len(ops), -1, np.int64)
    ranges = columns.get("ranges")
    if ranges is None or len(ranges["name"]) == 0 or len(ops) == 0:
        return out
    start = columns["start_ns"]
    for rank in np.unique(columns["rank"][ops]).tolist():
        mine = columns["rank"] == rank
        here = np.flatnonzero(columns["rank"][ops] == rank)
        call, _ = _launch_calls(columns, mine, ops[here])
        has_call = call >= 0
        threads = columns["line"][call.clip(0)]
        for thread in np.unique(threads[has_call]).tolist():
            pick = np.flatnonzero(has_call & (threads == thread))
            rows = np.flatnonzero((ranges["rank"] == rank) & (ranges["thread"] == thread))
            if len(rows) == 0:
                continue
            found = _innermost(ranges["start_ns"][rows], ranges["end_ns"][rows], start[call[pick]])
            out[here[pick]] = np.where(found >= 0, rows[found.clip(0)], -1)
    return out


def module_table(columns, step_ns, counted=None, steps=1):
    """Device time by the host range that launched it (``launching_ranges``: a module's
    forward or backward, the optimizer step, a range of the user's): dicts of module (the
    range's name; None for work no range launched), phase (its category), kernels (ops: kernels,
    copies, memsets), time_ns (their summed device time in the step windows: ``counted``, an
    ``in_windows`` mask, every op when None), per_step_ns (over `steps` windows) and share (of
    ``step_ns``, the summed windows), by time_ns; [] when the run has no ranges."""
    ranges = columns.get("ranges")
    if ranges is None or len(ranges["name"]) == 0:
        return []
    ops = np.flatnonzero(np.isin(columns["kind"], WORK_KINDS))
    if counted is not None:
        ops = ops[counted[ops]]
    owner = launching_ranges(columns, ops)
    durations = (columns["end_ns"] - columns["start_ns"])[ops].astype(np.float64)
    names = columns["names"]
    # One row per (name, category) pair; -1 for the unattributed ops.
    pair = np.where(
        owner >= 0,
        ranges["name"][owner.clip(0)].astype(np.int64) * len(names)
        + ranges["category"][owner.clip(0)],
        -1,
    )
    keys, inverse = np.unique(pair, return_inverse=True)
    counts = np.bincount(inverse, minlength=len(keys))
    totals = np.bincount(inverse, weights=durations, minlength=len(keys))
    rows = []
    for key, count, total in zip(keys.tolist(), counts.tolist(), totals.tolist()):
        rows.append(
            {
                "module": None if key < 0 else names[key // len(names)],
                "phase": None if key < 0 else names[key % len(names)],
                "kernels": int(count),
                "time_ns": float(total),
                "per_step_ns": float(total / max(steps, 1)),
                "share": float(total / step_ns) if step_ns else None,
            }
        )
    rows.sort(key=lambda row: -row["time_ns"])
    return rows


def kernel_table(columns, step_ns, top=None, counted=None):
    """Kernels by total device time: dicts of name (demangled), mangled, count, total_ns,
    mean_ns (over the whole trace), share (their time in the step windows, ``counted``: an
    ``in_windows`` mask, every event when None, over ``step_ns``, the summed windows; None when
    0), and the launch configuration (``launch_configs``) where the tracer recorded one."""
    kinds = columns["kind"]
    mask = kinds == KERNEL
    rows = _by_name(columns, mask, step_ns, top, demangled=True, counted=counted)
    configs = launch_configs(columns)
    for row in rows:
        row.update(configs.get(row["mangled"], NO_LAUNCH_CONFIG))
    return rows


# A kernel without a recorded launch configuration (a tracer that records none).
NO_LAUNCH_CONFIG = {
    "grid": None,
    "block": None,
    "registers": None,
    "shared_memory": None,
    "configs": 0,
    "occupancy": None,
    "est_occupancy": None,
}


def _dims_product(text):
    """The product of the numbers of a "128x8x1" text (1024); 0 for anything else."""
    parts = text.split("x") if text else []
    return int(np.prod([int(p) for p in parts])) if parts and all(map(str.isdigit, parts)) else 0


def _occupancy(columns, rows):
    """Per launch: (theoretical, estimated) occupancy as fractions, NaN where not known. The
    theoretical one is the calculator's active blocks per SM (the CUPTI tracer's
    "active_blocks_per_sm") x block threads / the device's max threads per SM; the estimated one
    (Kineto's "est. achieved occupancy") caps the blocks by what the grid gives each SM, grid
    blocks / SMs (a grid of 7 blocks leaves most of 132 SMs empty)."""
    launches, names = columns["launches"], columns["names"]
    sms, threads_per_sm = np.zeros(len(rows)), np.zeros(len(rows))
    ranks, devices = columns["rank"][rows], columns["device"][rows]
    for d in columns.get("devices", []):
        on = (ranks == d["rank"]) & (devices == d["device"])
        sms[on] = d["stats"].get("sm_count", 0)
        threads_per_sm[on] = d["stats"].get("max_threads_per_sm", 0)

    def products(ids):  # Of the dims each launch's name id names, computed once per id.
        distinct, which = np.unique(ids, return_inverse=True)
        return np.array([_dims_product(names[i]) for i in distinct.tolist()], float)[which]

    threads, blocks = products(launches["block"]), products(launches["grid"])
    active = launches["active_blocks"].astype(np.float64)
    known = (active >= 0) & (sms > 0) & (threads_per_sm > 0) & (threads > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        theoretical = np.where(known, active * threads / threads_per_sm, np.nan)
        estimated = np.where(
            known, np.minimum(active, blocks / sms) * threads / threads_per_sm, np.nan
        )
    return theoretical, estimated


def launch_configs(columns):
    """Per kernel name (as recorded): the launch configuration it spent the most device time in,
    as CUPTI reports it: grid and block ("128x1x1"), registers per thread and shared memory bytes
    (static plus dynamic; None where not recorded), ``configs``, how many distinct ones it ran
    with, and its occupancy (``_occupancy``: theoretical and estimated, each a mean over its
    launches weighted by their device time; None where the tracer recorded no device limits)."""
    launches = columns.get("launches")
    if launches is None or len(launches["row"]) == 0:
        return {}
    names, rows = columns["names"], launches["row"]
    name_ids = columns["name"][rows].astype(np.int64)
    table = np.stack(
        [
            name_ids,
            launches["grid"].astype(np.int64),
            launches["block"].astype(np.int64),
            launches["registers"],
            launches["shared_memory"],
        ],
        axis=1,
    )
    distinct, which = np.unique(table, axis=0, return_inverse=True)
    which = which.reshape(-1)
    durations = (columns["end_ns"] - columns["start_ns"])[rows].astype(np.float64)
    time = np.bincount(which, weights=durations, minlength=len(distinct))
    out = {}
    for (name, grid, block, registers, shared), ns in zip(distinct.tolist(), time.tolist()):
        row = out.get(names[name])
        if row is None or ns > row["_ns"]:
            configs = row["configs"] if row else 0
            row = out[names[name]] = {
                "grid": names[grid] or None,
                "block": names[block] or None,
                "registers": registers if registers >= 0 else None,
                "shared_memory": shared if shared >= 0 else None,
                "configs": configs,
                "_ns": ns,
            }
        row["configs"] += 1
    for key, per_launch in zip(("occupancy", "est_occupancy"), _occupancy(columns, rows)):
        known = np.isfinite(per_launch)
        weight = np.bincount(name_ids[known], weights=durations[known], minlength=len(names))
        total = np.bincount(
            name_ids[known], weights=durations[known] * per_launch[known], minlength=len(names)
        )
        for name_id in np.unique(name_ids).tolist():
            has = weight[name_id] > 0
            out[names[name_id]][key] = float(total[name_id] / weight[name_id]) if has else None
    for row in out.values():
        del row["_ns"]
    return out


def _by_name(columns, mask, step_ns, top, demangled, counted=None):
    names = columns["names"]
    ids = columns["name"][mask]
    durations = (columns["end_ns"] - columns["start_ns"])[mask].astype(np.float64)
    if len(ids) == 0:
        return []
    counts = np.bincount(ids, minlength=len(names))
    totals = np.bincount(ids, weights=durations, minlength=len(names))
    if counted is None:
        in_steps = totals
    else:
        inside = counted[mask]
        in_steps = np.bincount(ids[inside], weights=durations[inside], minlength=len(names))
    used = np.flatnonzero(counts)
    used = used[np.argsort(-totals[used], kind="stable")]
    if top is not None:
        used = used[:top]
    shown = demangle([names[i] for i in used]) if demangled else [names[i] for i in used]
    return [
        {
            "name": shown[j],
            "mangled": names[i],
            "count": int(counts[i]),
            "total_ns": float(totals[i]),
            "mean_ns": float(totals[i] / counts[i]),
            "share": float(in_steps[i] / step_ns) if step_ns else None,
        }
        for j, i in enumerate(used.tolist())
    ]


def api_table(columns, blocking, step_ns, top=None, counted=None):
    """Host CUDA API calls by total host time: dicts of name (no version suffix), calls,
    total_ns, mean_ns, share (as ``kernel_table``'s), blocking (how many calls waited)."""
    mask = (columns["device"] == HOST_API_DEVICE) & np.isin(
        columns["kind"], API_KINDS + (SYNC_KIND,)
    )
    rows = _by_name(columns, mask, step_ns, top, demangled=False, counted=counted)
    waited = np.bincount(columns["name"][mask & blocking], minlength=len(columns["names"])).tolist()
    by_id = {n: i for i, n in enumerate(columns["names"])}
    for row in rows:
        row["blocking"] = int(waited[by_id[row["mangled"]]])
        row["calls"] = row.pop("count")
        row["name"] = api_name(row.pop("mangled"))
    return rows


def launch_stats(columns, per_step):
    """Launches a step (median over the steps of every rank), kernels shorter than
    SHORT_KERNEL_NS (count, share of kernels) and the launch delay, from a launch call's end to
    its kernel's start (HTA's definition; median and p99, ns)."""
    kinds = columns["kind"]
    kernels = np.flatnonzero(kinds == KERNEL)
    durations = (columns["end_ns"] - columns["start_ns"])[kernels]
    delays = []
    for rank in np.unique(columns["rank"][kernels]).tolist():
        mine = columns["rank"] == rank
        ops = np.flatnonzero(mine & (kinds == KERNEL))
        api = np.flatnonzero(mine & np.isin(kinds, API_KINDS))
        corr = columns["correlation_id"]
        order = api[np.argsort(corr[api], kind="stable")]
        if len(order) == 0:
            continue
        where = np.searchsorted(corr[order], corr[ops]).clip(0, len(order) - 1)
        found = corr[order][where] == corr[ops]
        delays.append(columns["start_ns"][ops[found]] - columns["end_ns"][order[where[found]]])
    delays = np.concatenate(delays) if delays else np.zeros(0, np.int64)
    launches = [rows[:, STEP_FIELDS.index("launches")] for _, rows in per_step.values()]
    launches = np.concatenate(launches) if launches else np.zeros(0)
    short = int((durations < SHORT_KERNEL_NS).sum())
    return {
        "kernels": int(len(kernels)),
        "launches_per_step": float(np.median(launches)) if launches.size else None,
        "short_kernels": short,
        "short_share": short / len(kernels) if len(kernels) else None,
        "delay_median_ns": float(np.median(delays)) if delays.size else None,
        "delay_p99_ns": float(np.percentile(delays, 99)) if delays.size else None,
        "delays": int(delays.size),
    }


def copy_table(columns):
    """Copies and memsets by name ("Memcpy HtoD", "Memset"...): dicts of name, count, bytes,
    total_ns and bandwidth (bytes over their summed durations, GB/s; None without bytes or
    time), by total time. The bytes are each event's "bytes" stat (0 when it has none)."""
    mask = np.isin(columns["kind"], (MEMCPY, MEMSET))
    rows = _by_name(columns, mask, None, None, demangled=False)
    if not rows:
        return rows
    sizes = columns.get("bytes")
    ids = columns["name"][mask]
    moved = np.bincount(
        ids,
        weights=(sizes[mask] if sizes is not None else np.zeros(len(ids))).astype(np.float64),
        minlength=len(columns["names"]),
    )
    by_id = {n: i for i, n in enumerate(columns["names"])}
    out = []
    for row in rows:
        size = float(moved[by_id[row["mangled"]]])
        total = row["total_ns"]
        out.append(
            {
                "name": row["name"],
                "count": row["count"],
                "bytes": size,
                "total_ns": total,
                "bandwidth_gbs": size / total if size and total else None,  # B/ns = GB/s.
            }
        )
    return out


def full_tables(gpu, columns, grep=None):
    """Every row of a run's tables (``xdl-trace gpu --csv``): kernels and api (``kernel_table``
    and ``api_table``, all rows, shares of the step windows), copies (``copy_table``) and steps
    (one row per rank and step: rank, gstep and STEP_FIELDS); grep: keep only the kernels and
    calls whose name holds it (case-insensitive)."""
    step_ns = gpu["totals"]["window"]
    counted = gpu.get("counted")
    kernels = kernel_table(columns, step_ns, None, counted)
    api = api_table(columns, blocking_calls(columns, columns["names"]), step_ns, None, counted)
    if grep:
        needle = grep.lower()
        kernels = [k for k in kernels if needle in k["name"].lower()]
        api = [a for a in api if needle in a["name"].lower()]
    per_step = [
        {"rank": rank, "gstep": int(g), **dict(zip(STEP_FIELDS, row.tolist()))}
        for rank, (gsteps, rows) in sorted(gpu["steps"].items())
        for g, row in zip(gsteps.tolist(), rows)
    ]
    windows = sum(len(gsteps) for gsteps, _ in gpu["steps"].values())
    modules = module_table(columns, step_ns, counted, windows)
    return {
        "kernels": kernels,
        "api": api,
        "copies": copy_table(columns),
        "steps": per_step,
        "modules": modules,
    }


# Rows of the kernel and CUDA API tables on the page (each sortable and searchable there);
# `xdl-trace gpu --csv` writes every one.
TABLE_TOP = 500


def summarize(columns, steps, top=TABLE_TOP):
    """What the report shows of a run's device work: steps ({rank: (gsteps, rows)}, see
    ``gpu_steps``), totals (STEP_FIELDS summed over every step and rank), kernels and api (the
    ``top`` rows of ``kernel_table`` and ``api_table``, with kernel_names and api_names: how many
    distinct names), launch (``launch_stats``), copies (``copy_table``), counted (the
    ``in_windows`` mask), modules (``module_table``: device time by the layer and phase that
    launched it), events and dropped (events the tracers lost)."""
    blocking = blocking_calls(columns, columns["names"])
    per_step = gpu_steps(columns, steps, blocking)
    totals = np.zeros(len(STEP_FIELDS))
    for _, rows in per_step.values():
        totals += rows.sum(axis=0)
    step_ns = float(totals[0])
    counted = in_windows(columns, steps)  # A share's numerator covers what its denominator does.
    kinds = columns["kind"]
    api_mask = (columns["device"] == HOST_API_DEVICE) & np.isin(kinds, API_KINDS + (SYNC_KIND,))
    windows = sum(len(gsteps) for gsteps, _ in per_step.values())
    return {
        "steps": per_step,
        "modules": module_table(columns, step_ns, counted, windows),
        "totals": dict(zip(STEP_FIELDS, totals.tolist())),
        "kernels": kernel_table(columns, step_ns, top, counted),
        "kernel_names": int(len(np.unique(columns["name"][kinds == KERNEL]))),
        "api": api_table(columns, blocking, step_ns, top, counted),
        "api_names": int(len(np.unique(columns["name"][api_mask]))),
        "launch": launch_stats(columns, per_step),
        "copies": copy_table(columns),
        "counted": counted,
        "events": int(len(kinds)),
        "dropped": int(columns["dropped_events"]),
        "dropped_buffers": int(columns["dropped_buffers"]),
    }
