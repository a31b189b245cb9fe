"""Which records a read takes: one ``Selection`` value, and ``gstep_window`` for its gsteps.

``Selection(keys, gsteps, ranks, run, attempts)`` is the one value every reader of the package
accepts; ``gstep_window`` turns its gsteps into one window.

The library's readers (``Trace.records``, ``analysis.scan_run``/``find_nan``,
``report.build_report``/``write_report``, the ``timeline`` functions, ``dask``) take a
``selection=`` and, for their users, the same four keywords; each turns what it got into one
``Selection`` with ``Selection.of`` and hands that value on, never the keywords::

    sel = Selection(keys="loss,grad*", gsteps=(100, 200), ranks=[0])
    report.write_report(["/tmp/run"], "report.html", selection=sel)
    analysis.find_nan("/tmp/run", selection=sel.replace(run="latest"))

Fields (each None: everything):

* ``keys``: what each reader means by keys: ``Trace.records`` exact names (a string is one
  key), the report and find-nan glob patterns (a list, or one comma-separated string).
* ``gsteps``: ``(begin, end)`` inclusive (either may be None), a ``range``, a ``slice`` without
  a step, or a collection of steps (kept as a sorted list).
* ``ranks``: a collection of ranks (kept as a tuple of ints).
* ``run``: which run of a directory that holds several: "latest", a run id (or a unique prefix
  of one), a tuple of run ids or "all" (as ``open_trace``).
* ``attempts``: of a run that a restarted job wrote in several attempts, "latest" (None: each
  gstep from the attempt that wrote it last) or "all" (as ``open_trace``).
"""

import dataclasses
import operator

from ..errors import InvalidArgumentError

__all__ = ["ATTEMPTS", "Selection", "attempts_of", "gstep_window"]

ATTEMPTS = ("latest", "all")  # open_trace's attempts=, the CLI's --attempts.


def attempts_of(attempts):
    """`attempts` as read: "latest" for None; ValueError naming it when it is neither."""
    if attempts is None:
        return "latest"
    if attempts not in ATTEMPTS:
        raise ValueError(f"attempts must be 'latest' or 'all', got {attempts!r}")
    return attempts


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
        if any(g is not None and not hasattr(type(g), "__index__") for g in gsteps):
            raise InvalidArgumentError(f"gsteps={gsteps!r}: begin and end must be integers or None")
        return gsteps[0], gsteps[1], None
    steps = sorted(set(_integers("gsteps", gsteps)))
    if not steps:
        return 1, 0, steps
    return steps[0], steps[-1], steps


def _integers(field, values):
    """`values` as a list of ints. An InvalidArgumentError (a ValueError) naming `field` for a
    string (a CLI "A:B" handed to the library: each character was read as a step), a single
    number or a value that is no integer (1.5 was read as 1)."""
    what = "(begin, end), a range, a slice or a list of gsteps" if field == "gsteps" else "ranks"
    try:
        items = None if isinstance(values, (str, bytes)) else list(values)
    except TypeError:
        items = None
    if items is None:
        raise InvalidArgumentError(f"{field}={values!r}: give {what}, as integers")
    try:
        return [operator.index(v) for v in items]
    except TypeError:
        raise InvalidArgumentError(f"{field}={values!r}: each must be an integer") from None


_FIELDS = ("keys", "gsteps", "ranks", "run", "attempts")


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which records to read: keys, gsteps, ranks and run (module docstring). Validated when
    made: a gstep slice with a step, a step or rank that is no integer raise ValueError (or
    TypeError) here, before any file is opened."""

    keys: object = None
    gsteps: object = None
    ranks: object = None
    run: object = None
    attempts: object = None

    def __post_init__(self):
        gsteps = self.gsteps
        if gsteps is not None and not isinstance(gsteps, (range, slice, tuple)):
            gsteps = sorted(set(_integers("gsteps", gsteps)))  # A generator is read once, here.
        elif isinstance(gsteps, tuple) and len(gsteps) != 2:
            gsteps = sorted(set(_integers("gsteps", gsteps)))
        object.__setattr__(self, "gsteps", gsteps)
        gstep_window(gsteps)  # Validates.
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(_integers("ranks", self.ranks)))
        if self.attempts is not None:
            attempts_of(self.attempts)  # Validates.

    @classmethod
    def of(cls, selection=None, **fields):
        """The one place keywords become a Selection: `selection` (a Selection or None) with the
        fields given as keywords (keys, gsteps, ranks, run, attempts) that are not None in its
        place."""
        unknown = set(fields) - set(_FIELDS)
        if unknown:
            raise TypeError(f"Selection has no field {', '.join(sorted(unknown))}")
        given = {k: v for k, v in fields.items() if v is not None}
        if selection is None:
            return cls(**given)
        if not isinstance(selection, cls):
            raise TypeError(f"selection must be a Selection, not {type(selection).__name__}")
        return selection.replace(**given) if given else selection

    def replace(self, **fields):
        """A copy with `fields` (keys, gsteps, ranks, run, attempts) changed."""
        return dataclasses.replace(self, **fields)

    def window(self):
        """The gsteps as (begin, end, steps): ``gstep_window(self.gsteps)``."""
        return gstep_window(self.gsteps)

    def before(self, gstep):
        """This selection less the gsteps at or after `gstep` (None: itself): what is read of a
        file whose records from `gstep` on a later attempt superseded
        (``TraceFileInfo.superseded_from``)."""
        if gstep is None:
            return self
        begin, end, steps = self.window()
        if steps is not None:
            return self.replace(gsteps=[g for g in steps if g < gstep])
        return self.replace(gsteps=(begin, gstep - 1 if end is None else min(end, gstep - 1)))
