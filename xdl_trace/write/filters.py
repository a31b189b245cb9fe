"""Which steps a hook traces: every N steps, step ranges and lists, seeded sampling; composable.

A filter is called with the step number (the global step; the local step when the hook
stamps a fixed gstep) and returns True to trace that step. Combine with ``&``, ``|`` and
``~``; a plain callable, an int (every N), a range or a list of steps are accepted
wherever a filter is.
"""

import numbers

__all__ = ["Filter", "Every", "Steps", "Range", "Sample", "AllOf", "AnyOf", "Not", "as_filter"]


class Filter:
    """Base class: subclasses implement __call__(step) -> bool."""

    def __call__(self, step):  # pragma: no cover - abstract
        raise NotImplementedError

    def __and__(self, other):
        return AllOf(self, as_filter(other))

    def __rand__(self, other):
        return AllOf(as_filter(other), self)

    def __or__(self, other):
        return AnyOf(self, as_filter(other))

    def __ror__(self, other):
        return AnyOf(as_filter(other), self)

    def __invert__(self):
        return Not(self)


class Every(Filter):
    """Steps where ``step % n == offset`` (every n-th step)."""

    def __init__(self, n, offset=0):
        if not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"xdl_trace: Every(n): n must be an integer >= 1, got {n!r}")
        self.n = int(n)
        self.offset = int(offset) % self.n

    def __call__(self, step):
        return step % self.n == self.offset

    def __repr__(self):
        return f"Every({self.n}, offset={self.offset})"


class Steps(Filter):
    """Steps listed explicitly: ints, ``range`` objects, and iterables of those.

    ``Steps(0, range(100, 200), [500, 1000])``."""

    def __init__(self, *items):
        self._ranges = []
        self._steps = set()
        self._add(items)

    def _add(self, items):
        for item in items:
            if isinstance(item, range):
                self._ranges.append(item)
            elif isinstance(item, numbers.Integral):
                self._steps.add(int(item))
            else:
                try:
                    self._add(list(item))
                except TypeError:
                    raise TypeError(
                        f"xdl_trace: Steps: expected ints or ranges, got {type(item).__name__}"
                    ) from None

    def __call__(self, step):
        return step in self._steps or any(step in r for r in self._ranges)

    def __repr__(self):
        return f"Steps({sorted(self._steps)}, {self._ranges})"


def Range(begin, end=None, step=1):
    """Steps in [begin, end) (end None: no upper bound), every `step`-th one."""
    if end is None:
        return AllOf(_AtLeast(begin), Every(step, begin))
    return Steps(range(begin, end, step))


class _AtLeast(Filter):
    def __init__(self, begin):
        self.begin = begin

    def __call__(self, step):
        return step >= self.begin


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


class Sample(Filter):
    """A pseudo-random fraction `ratio` of steps. The decision is a hash of (seed, step), so
    it is reproducible, independent of call order, and the same on every rank."""

    def __init__(self, ratio, seed=0):
        if not 0.0 <= float(ratio) <= 1.0:
            raise ValueError(f"xdl_trace: Sample(ratio): ratio must be in [0, 1], got {ratio!r}")
        self.ratio = float(ratio)
        self.seed = int(seed)
        self._threshold = int(self.ratio * (1 << 53))

    def __call__(self, step):
        h = _splitmix64((self.seed * 0x9E3779B97F4A7C15 + int(step)) & 0xFFFFFFFFFFFFFFFF)
        return (h >> 11) < self._threshold

    def __repr__(self):
        return f"Sample({self.ratio}, seed={self.seed})"


class AllOf(Filter):
    def __init__(self, *filters):
        self.filters = [as_filter(f) for f in filters]

    def __call__(self, step):
        return all(f(step) for f in self.filters)


class AnyOf(Filter):
    def __init__(self, *filters):
        self.filters = [as_filter(f) for f in filters]

    def __call__(self, step):
        return any(f(step) for f in self.filters)


class Not(Filter):
    def __init__(self, inner):
        self.inner = as_filter(inner)

    def __call__(self, step):
        return not self.inner(step)


class _Callable(Filter):
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, step):
        return bool(self.fn(step))


def as_filter(obj):
    """None (every step) stays None; an int n means Every(n); a range or an iterable of steps
    means Steps(...); any callable(step) -> bool is used as is."""
    if obj is None or isinstance(obj, Filter):
        return obj
    if isinstance(obj, bool):
        raise TypeError("xdl_trace: a filter cannot be a bool")
    if isinstance(obj, numbers.Integral):
        return Every(obj)
    if callable(obj):
        return _Callable(obj)
    if isinstance(obj, (range, list, tuple, set, frozenset)):
        return Steps(obj)
    raise TypeError(f"xdl_trace: unsupported filter {obj!r}")
