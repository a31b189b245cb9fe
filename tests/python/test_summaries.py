"""Summaries: built-in C++ stats/histogram columns and Python callables, checked against numpy."""

import numpy as np
import pytest

import xdl_trace as xdl


def one_record(cfg, read_trace):
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    return trace


def test_stats_layout_matches_numpy(cfg, read_trace):
    x = np.array([1.0, -2.0, 3.5, np.nan, np.inf, 0.25], dtype=np.float32)
    xdl.trace_tensor("x", x, summary="stats")
    trace = one_record(cfg, read_trace)
    stats = trace.column("x")[0]
    finite = x[np.isfinite(x)].astype(np.float64)
    assert stats.dtype == np.float64 and stats.shape == (8,)
    assert stats[0] == x.size
    assert stats[1] == finite.min() and stats[2] == finite.max()
    assert stats[3] == pytest.approx(finite.mean())
    assert stats[4] == pytest.approx(finite.std(), rel=1e-6)
    assert stats[5] == pytest.approx(np.sqrt((finite**2).sum()))
    assert stats[6] == 1 and stats[7] == 1


def test_histogram_layout(cfg, read_trace):
    x = np.arange(100, dtype=np.float64)
    xdl.trace_tensor("h", x, summary="histogram")
    trace = one_record(cfg, read_trace)
    col = trace.column("h")[0]
    bins = (col.size - 2) // 2
    assert col.size == 2 + 2 * bins and bins == 30
    assert col[0] == 0 and col[1] == 99
    counts = col[2 + bins :]
    assert counts.sum() == 100
    assert col[2 + bins - 1] == pytest.approx(99)  # Last right edge is the max.


def test_python_summary_gets_a_numpy_copy_and_its_result_is_written(cfg, read_trace):
    seen = []

    def norm(a):
        seen.append(a)
        return np.array([np.linalg.norm(a)], np.float32)

    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    xdl.trace_variable("w", x, summary=norm)
    trace = one_record(cfg, read_trace)
    assert trace.column("w")[0][0] == pytest.approx(np.linalg.norm(x))
    assert seen[0].shape == (2, 2) and seen[0].dtype == np.float32
    seen[0][...] = 0  # A copy: writing to it never touches the traced tensor.
    assert x[1, 1] == 3


def test_summary_on_gradient_and_callback_values(cfg, read_trace):
    xdl.trace_gradient("w", summary=lambda g: g.mean(keepdims=True))
    xdl.trace_tensor("cb", lambda: np.arange(5.0), summary="stats")
    xdl.send_gradient("w", np.array([1.0, 3.0]))
    trace = one_record(cfg, read_trace)
    np.testing.assert_array_equal(trace.column("gradient/w")[0], [2.0])
    assert trace.column("cb")[0][2] == 4.0


def test_summary_of_integer_tensor(cfg, read_trace):
    xdl.trace_tensor("i", np.array([1, 2, 3], np.int32), summary="stats")
    trace = one_record(cfg, read_trace)
    assert trace.column("i")[0][3] == pytest.approx(2.0)
