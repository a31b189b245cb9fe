"""Host time by range: the time the traced process's threads spent inside each named host range
(``xdl.watch``'s marks of a module's forward and backward and of the optimizer step,
``xdl.host_range`` blocks of the user's), in all and on its own (less the ranges nested in it on
its thread), a step: which layer or phase the host's time goes to, as torch.profiler's "CPU
total" and "Self CPU" columns say it of operators. Of the steps the hook saw (its ``Step()``
calls, docs/format.md "Host spans"); shares are of their summed wall time.

    rows = host_ranges.table(scan.device_events.columns(), steps)
"""

import numpy as np

__all__ = ["self_times", "table", "with_evaluation"]


def self_times(starts, ends):
    """Each interval's own time (one thread's ranges): the time in which it is the innermost of
    those open, the one begun last. Exact for nested ranges and for ranges that overlap without
    nesting (a leaf module's backward marks, which autograd's hooks may interleave): each
    moment goes to one range, so own times never exceed the time the ranges cover. Nested ranges
    (the common case) are done in numpy (``_nested_own``); others by a sweep in Python."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    own = np.zeros(len(starts), np.float64)
    lasting = np.flatnonzero(ends > starts)  # An instant owns no time.
    if len(lasting):
        nested = _nested_own(starts[lasting], ends[lasting])
        own[lasting] = nested if nested is not None else _swept_own(starts[lasting], ends[lasting])
    return own


def _nested_own(starts, ends):
    """Own times when the ranges nest (each one ends inside the one it began in: its parent,
    the innermost open at its start), as duration less the children's; None when they do not."""
    n = len(starts)
    order = np.lexsort((-ends, starts))  # By start; of two starting together, the outer first.
    s, e = starts[order], ends[order]
    # Open at each one's start: those begun before it less those ended by then (touching ranges
    # do not overlap), so the open ones form a chain of depth[i] and its parent is the latest
    # range before it one level up (any later one of that level would lie inside the parent).
    depth = np.arange(n) - np.searchsorted(np.sort(e), s, side="right")
    keys = depth * n + np.arange(n)  # Sorted by (depth, position): one searchsorted finds all.
    by_level = np.sort(keys)
    below = np.searchsorted(by_level, (depth - 1) * n + np.arange(n)) - 1
    found = (depth > 0) & (below >= 0)
    parent = np.where(found, by_level[below.clip(0)] % n, -1)
    found &= by_level[below.clip(0)] // n == depth - 1
    if not np.array_equal(found, depth > 0) or np.any(e[found] > e[parent[found]]):
        return None  # Ranges that overlap without nesting.
    duration = (e - s).astype(np.float64)
    children = np.bincount(parent[found], weights=duration[found], minlength=n)
    own = np.empty(n, np.float64)
    own[order] = duration - children
    return own


def _swept_own(starts, ends):
    """Own times by a sweep over the boundaries, the range begun last owning each moment."""
    n = len(starts)
    times = np.concatenate([ends, starts])
    is_start = np.repeat([0, 1], n)  # Ends first at one time: touching ranges do not overlap.
    index = np.tile(np.arange(n), 2)
    # Of starts at one time the outer (later end) opens first, so the inner is the innermost.
    later_end = np.concatenate([np.zeros(n, np.int64), -ends])
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
    # One (rank, OS thread) a lane: a rank is an int32, a thread id fits 32 bits.
    lane = (ranges["rank"].astype(np.int64) << 32) | (
        ranges["thread"].astype(np.int64) & 0xFFFFFFFF
    )
    lanes = np.unique(lane)
    for one in lanes.tolist():
        rows = np.flatnonzero(lane == one) if len(lanes) > 1 else np.arange(len(lane))
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
    # (name, category) as one code: categories are few, so the codes count into a small table.
    category = ranges["category"][inside].astype(np.int64)
    width = int(category.max()) + 1
    code = ranges["name"][inside].astype(np.int64) * width + category
    calls = np.bincount(code)
    keys = np.flatnonzero(calls)
    totals = np.bincount(code, weights=duration[inside])[keys]
    selfs = np.bincount(code, weights=own[inside])[keys]
    calls = calls[keys]
    out = [
        {
            "name": names[key // width],
            "category": names[key % width],
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


def with_evaluation(columns, evaluation):
    """`columns` (a training run's ``DeviceEventTable.columns()``) with the named ranges of its
    evaluation's records added (an eval forward's module marks, ``xdl.host_range`` blocks around
    eval batches: a range rides in the record of the hook that steps next), their phase
    "eval <phase>" ("eval" for none), so ``table`` counts the evaluation's time in the training
    steps it ran in, apart from training's. Only "ranges" and "names" are merged."""
    theirs = evaluation.get("ranges")
    if theirs is None or len(theirs["name"]) == 0:
        return columns
    names = list(columns["names"])
    index = {name: i for i, name in enumerate(names)}

    def code(name):
        if name not in index:
            index[name] = len(names)
            names.append(name)
        return index[name]

    their_names = evaluation["names"]
    name_codes = np.asarray([code(n) for n in their_names], np.int64)
    phase_codes = np.asarray([code(f"eval {n}" if n else "eval") for n in their_names], np.int64)
    ours = columns.get("ranges")
    added = {
        "name": name_codes[theirs["name"]],
        "category": phase_codes[theirs["category"]],
        **{field: theirs[field] for field in ("rank", "thread", "start_ns", "end_ns")},
    }
    merged = {f: v if ours is None else np.concatenate([ours[f], v]) for f, v in added.items()}
    merged["dropped"] = (0 if ours is None else ours["dropped"]) + theirs["dropped"]
    return dict(columns, ranges=merged, names=names)
