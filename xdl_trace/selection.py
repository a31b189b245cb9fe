"""Which records a read takes: the gstep selection every reader of the package accepts (None, a
``(begin, end)`` pair, a range, a slice or a list of steps), turned into one window."""

__all__ = ["gstep_window"]


def gstep_window(gsteps):
    """Turns a gstep selection into (begin, end, steps): an inclusive range
    (None = open) and an optional list of the exact steps inside it."""
    if gsteps is None:
        return None, None, None
    if isinstance(gsteps, range):
        if len(gsteps) == 0:
            return 1, 0, []
        lo, hi = min(gsteps[0], gsteps[-1]), max(gsteps[0], gsteps[-1])
        return lo, hi, (None if abs(gsteps.step) == 1 else list(gsteps))
    if isinstance(gsteps, slice):
        if gsteps.step not in (None, 1):
            raise ValueError("a gstep slice cannot have a step; use range(begin, end, step)")
        stop = None if gsteps.stop is None else gsteps.stop - 1
        return gsteps.start, stop, None
    if isinstance(gsteps, tuple) and len(gsteps) == 2:
        return gsteps[0], gsteps[1], None
    steps = sorted({int(g) for g in gsteps})
    if not steps:
        return 1, 0, steps
    return steps[0], steps[-1], steps
