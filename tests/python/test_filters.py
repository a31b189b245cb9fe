"""Filters: every N, ranges and lists, seeded sampling, composition, and use in a hook."""

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace.write import filters


def selected(f, n=30):
    f = filters.as_filter(f)
    return [s for s in range(n) if f(s)]


def test_every():
    assert selected(xdl.Every(10)) == [0, 10, 20]
    assert selected(xdl.Every(10, offset=3)) == [3, 13, 23]
    assert selected(7) == [0, 7, 14, 21, 28]  # An int means every N.
    with pytest.raises(ValueError):
        xdl.Every(0)


def test_steps_and_ranges():
    assert selected(xdl.Steps(1, range(10, 13), [20, 25])) == [1, 10, 11, 12, 20, 25]
    assert selected([3, 4]) == [3, 4]
    assert selected(range(5, 8)) == [5, 6, 7]
    assert selected(xdl.Range(5, 15, 5)) == [5, 10]
    assert selected(xdl.Range(25)) == [25, 26, 27, 28, 29]
    with pytest.raises(TypeError):
        xdl.Steps("abc" if False else 1.5)


def test_sample_is_seeded_reproducible_and_near_ratio():
    a = selected(xdl.Sample(0.25, seed=1), 4000)
    b = selected(xdl.Sample(0.25, seed=1), 4000)
    c = selected(xdl.Sample(0.25, seed=2), 4000)
    assert a == b and a != c
    assert 800 < len(a) < 1200
    assert selected(xdl.Sample(0.0)) == []
    assert selected(xdl.Sample(1.0)) == list(range(30))
    with pytest.raises(ValueError):
        xdl.Sample(1.5)


def test_composition():
    f = (xdl.Every(2) & xdl.Range(10, 20)) | xdl.Steps(3)
    assert selected(f) == [3, 10, 12, 14, 16, 18]
    assert selected(~xdl.Every(3), 7) == [1, 2, 4, 5]
    assert selected(filters.AnyOf(xdl.Steps(1), lambda s: s > 27)) == [1, 28, 29]
    assert selected(xdl.Every(5) & (lambda s: s % 2 == 1)) == [5, 15, 25]


def test_hook_applies_filter_to_gstep(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    with xdl.TraceHook(cfg, filter=xdl.Every(3) | xdl.Steps(100)) as hook:
        for gstep in list(range(10)) + [100]:
            hook.step(gstep)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 3, 6, 9, 100]
    assert hook.stats()["steps_skipped"] == 6
