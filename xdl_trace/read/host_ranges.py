"""Host time by range: the time the traced process's threads spent inside each named host range
(``xdl.watch``'s marks of a module's forward and backward and of the optimizer step,
``xdl.host_range`` blocks of the user's), in all and on its own (less the ranges nested in it on
its thread), a step: which layer or phase the host's time goes to, as torch.profiler's "CPU
total" and "Self CPU" columns say it of operators. Of the steps the hook saw (its ``Step()``
calls, docs/format.md "Host spans"); shares are of their summed wall time.

    rows = host_ranges.table(scan.device_events.columns(), steps)
"""

import numpy as np

__all__ = ["self_times", "table"]


def self_times(starts, ends):
    """Each interval's own time (one thread's ranges): the time in which it is the innermost of
    those open, the one begun last. Exact for nested ranges and for ranges that overlap without
    nesting (a leaf module's backward marks, which autograd's hooks may interleave): each
    moment goes to one range, so own times never exceed the time the ranges cover."""
    n = len(starts)
    times = np.concatenate([np.asarray(ends), np.asarray(starts)])
    is_start = np.repeat([0, 1], n)  # Ends first at one time: touching ranges do not overlap.
    index = np.tile(np.arange(n), 2)
    # Of starts at one time the outer (later end) opens first, so the inner is the innermost.
    later_end = np.concatenate([np.zeros(n), -np.asarray(ends, np.float64)])
    order = np.lexsort((later_end, is_start, times))
    own = np.zeros(n, np.float64)
    open_ranges, last = [], 0  # Begun and not ended, in the order begun.
    for t, opens, i in zip(times[order].tolist(), is_start[order].tolist(), index[order].tolist()):
        if open_ranges:
            own[open_ranges[-1]] += t - last
        last = t
        if opens:
            open_ranges.append(i)
        elif open_ranges[-1] == i:
            open_ranges.pop()
        else:
            open_ranges.remove(i)
    return own


def table(columns, steps):
    """Rows (dicts) of name, category (the range's: "forward", "backward", "optimizer", "" for
    the user's), calls, total_ns and self_ns (``self_times``; summed over the ranges that start
    inside the step windows: between a rank's first and last ``Step()`` call),
    per_step_total_ns, per_step_self_ns and share_total, share_self (of the windows' summed
    time; a nested range's total counts in its parent's too, one thread's self times do not
    overlap), by self time. `columns`: a ``DeviceEventTable``'s (its "ranges" and "names");
    `steps`: {rank: (gsteps, Step() call ns)}. [] without ranges or without two steps of a
    rank holding one."""
    ranges, names = columns.get("ranges"), columns["names"]
    if ranges is None or len(ranges["name"]) == 0:
        return []
    start, end = ranges["start_ns"], ranges["end_ns"]
    duration = (end - start).astype(np.float64)
    own = np.zeros(len(start), np.float64)
    pairs = np.stack([ranges["rank"], ranges["thread"]], axis=1)
    for rank, thread in np.unique(pairs, axis=0).tolist():
        rows = np.flatnonzero((ranges["rank"] == rank) & (ranges["thread"] == thread))
        own[rows] = self_times(start[rows], end[rows])
    inside = np.zeros(len(start), bool)
    window_ns, windows = 0, 0
    for rank, (_, calls) in steps.items():
        calls = np.sort(np.asarray(calls, np.int64))
        if len(calls) < 2:
            continue
        inside |= (ranges["rank"] == rank) & (start > calls[0]) & (start <= calls[-1])
        window_ns += int(calls[-1] - calls[0])
        windows += len(calls) - 1
    if not windows or not inside.any():
        return []
    pair = ranges["name"][inside].astype(np.int64) * len(names) + ranges["category"][inside]
    keys, inverse = np.unique(pair, return_inverse=True)
    calls = np.bincount(inverse, minlength=len(keys))
    totals = np.bincount(inverse, weights=duration[inside], minlength=len(keys))
    selfs = np.bincount(inverse, weights=own[inside], minlength=len(keys))
    out = [
        {
            "name": names[key // len(names)],
            "category": names[key % len(names)],
            "calls": int(count),
            "total_ns": float(total),
            "self_ns": float(alone),
            "per_step_total_ns": float(total / windows),
            "per_step_self_ns": float(alone / windows),
            "share_total": float(total / window_ns),
            "share_self": float(alone / window_ns),
        }
        for key, count, total, alone in zip(
            keys.tolist(), calls.tolist(), totals.tolist(), selfs.tolist()
        )
    ]
    out.sort(key=lambda row: -row["self_ns"])
    return out
