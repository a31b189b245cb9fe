"""find-nan and the C++ column stats it stands on: real traces written by TraceHook, read back."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import _core
from xdl_trace.read import analysis

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIRE = {name: value for value, name, _, _ in _core.dtype_table()}


def _write(out_dir, rank, steps, fill, gstep_offset=0):
    """Traces w (float32 [3, 4]), h (float16 [5]) and n (int32 [2]) for `steps` steps;
    fill(step, w, h) sets the values in place."""
    xdl.clear()
    w = np.zeros((3, 4), np.float32)
    h = np.zeros(5, np.float16)
    n = np.arange(2, dtype=np.int32)
    xdl.trace_tensor("w", w)
    xdl.trace_tensor("h", h)
    xdl.trace_tensor("n", n)
    with xdl.TraceHook({"output_dir": out_dir, "rank": rank, "on_error": "raise"}) as hook:
        for step in range(steps):
            w[:] = step
            h[:] = step
            fill(step, w, h)
            hook.step(gstep=gstep_offset + step)


def test_column_stats_match_numpy_for_each_dtype():
    rng = np.random.default_rng(1)
    arrays = [
        rng.normal(size=(7, 5)).astype(np.float32),
        rng.normal(size=33),
        rng.integers(-50, 50, size=9).astype(np.int64),
        rng.normal(size=11).astype(np.float16),
        np.array([True, False, True]),
        np.array([1.0, np.nan, -np.inf, np.inf, 3.0], np.float32),
    ]
    dtypes = [WIRE[a.dtype.name] for a in arrays]
    rows, buckets = _core.column_stats(arrays, dtypes, [True] * len(arrays))
    for a, row, counts in zip(arrays, rows, buckets):
        f = a.astype(np.float64).ravel()
        finite = f[np.isfinite(f)]
        expected = [
            f.size,
            finite.min(),
            finite.max(),
            finite.mean(),
            finite.std(),
            np.sqrt((finite**2).sum()),
            np.isnan(f).sum(),
            np.isinf(f).sum(),
        ]
        np.testing.assert_allclose(row, expected, rtol=1e-9, atol=1e-12)
        assert counts.sum() == finite.size
        # Each value is counted in the log bucket whose edges hold it.
        idx = np.nonzero(counts)[0]
        edges = analysis.LOG_BUCKET_EDGES
        lo, hi = edges[idx].min(), edges[idx + 1].max()
        assert lo <= finite.min() and finite.max() <= hi


def test_column_stats_read_unaligned_views_and_bfloat16_bits():
    values = np.array([1.5, -2.0, 0.25, np.nan], np.float32)
    raw = np.frombuffer(b"x" + values.tobytes(), np.uint8)[1:].view(np.float32)
    assert not raw.flags.aligned
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16 keeps the top half.
    rows, _ = _core.column_stats([raw, bits], [WIRE["float32"], WIRE["bfloat16"]])
    np.testing.assert_allclose(rows[0, 1:4], [-2.0, 1.5, -0.25 / 3])
    assert rows[0, analysis.NAN] == 1
    np.testing.assert_array_equal(rows[0], rows[1])


def test_column_stats_rejects_a_dtype_that_does_not_fit():
    with pytest.raises(ValueError, match="column 0: 4-byte elements do not fit wire dtype int64"):
        _core.column_stats([np.zeros(3, np.float32)], [WIRE["int64"]])
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.column_stats([np.zeros((4, 4), np.float32)[:, 1]], [WIRE["float32"]])


def test_find_nan_reports_the_first_bad_record_per_key(tmp_path):
    out = str(tmp_path / "run")

    def fill(step, w, h):
        if step == 7:
            w[1, 2] = np.nan
            w[0, 0] = np.inf
        if step >= 12:
            h[:2] = np.inf  # float16 overflow, from then on.

    _write(out, 0, 20, fill, gstep_offset=100)
    found = xdl.find_nan(out)
    assert found == [
        {"key": "w", "rank": 0, "gstep": 107, "lstep": 7, "nan": 1, "inf": 1, "eval": False},
        {"key": "h", "rank": 0, "gstep": 112, "lstep": 12, "nan": 0, "inf": 2, "eval": False},
    ]
    scan = analysis.scan_run(out, series=False, histograms=False)
    assert scan.first_bad["w"].records == 1
    assert scan.first_bad["h"].records == 8


def test_find_nan_takes_the_earliest_gstep_across_ranks(tmp_path):
    out = str(tmp_path / "run")
    _write(out, 0, 15, lambda s, w, h: w.__setitem__((0, 0), np.nan) if s == 9 else None)
    _write(out, 1, 15, lambda s, w, h: w.__setitem__((2, 3), np.nan) if s >= 4 else None)
    assert xdl.find_nan(out) == [
        {"key": "w", "rank": 1, "gstep": 4, "lstep": 4, "nan": 1, "inf": 0, "eval": False}
    ]
    assert xdl.find_nan(out, ranks=[0])[0]["gstep"] == 9
    assert xdl.find_nan(out, gsteps=(0, 3)) == []


def test_find_nan_command_exit_status_and_json(tmp_path):
    bad, clean = str(tmp_path / "bad"), str(tmp_path / "clean")
    _write(bad, 0, 6, lambda s, w, h: w.__setitem__((0, 1), np.nan) if s == 3 else None)
    _write(clean, 0, 6, lambda s, w, h: None)

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "xdl_trace", "find-nan", *args],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=REPO),
        )

    result = run(bad, "--json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout) == [
        {"key": "w", "rank": 0, "gstep": 3, "lstep": 3, "nan": 1, "inf": 0, "eval": False}
    ]
    text = run(bad)
    assert text.returncode == 1
    assert (
        "w: first at gstep 3 (rank 0, lstep 3): 1 NaN, 0 Inf; 1 record(s) affected" in text.stdout
    )
    result = run(clean, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    assert "no NaN or Inf in 3 keys over 6 records" in run(clean).stdout
    missing = run(str(tmp_path / "nowhere"))
    # An error exits 2: 1 says a NaN was found (before: 1 for both).
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    # A gstep range holding no record proves nothing: an error, not "no NaN ... over 0 records".
    empty = run(bad, "--gsteps", "100:200")
    assert empty.returncode == 2, empty.stdout
    assert "no record in the gsteps selected: (100, 200)" in empty.stderr
    with pytest.raises(ValueError, match="no record in the gsteps selected"):
        xdl.find_nan(bad, gsteps=(100, 200))
    assert run(bad, "--gsteps", "0:2").returncode == 0  # Before the NaN: clean, and read.


def test_find_nan_skips_empty_columns(tmp_path):
    out = str(tmp_path / "run")
    xdl.trace_once("config", np.array([np.nan, 1.0]))  # NaN at the first step only.
    xdl.trace_tensor("x", np.ones(3, np.float32))
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for _ in range(4):
            hook.step()
    assert xdl.find_nan(out) == [
        {"key": "config", "rank": 0, "gstep": 0, "lstep": 0, "nan": 1, "inf": 0, "eval": False}
    ]


def test_a_stats_summary_column_is_read_as_its_own_stats(tmp_path):
    """A stats summary column (the Header says so) is the tensor's stats: its NaN count is a
    finding, its count-0 rows (a watch(every=) gap) are no data, and the report's curve is
    the source tensor's mean, not the mean of the 8 stats values."""
    out = str(tmp_path / "run")
    w = np.zeros(6, np.float32)
    xdl.watch({"w": w}, summary="stats", every=2)
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for step in range(6):
            w[:] = np.arange(6) + step
            if step == 4:
                w[1] = np.nan
            hook.step()
    (bad,) = xdl.find_nan(out)
    assert (bad["key"], bad["gstep"], bad["nan"], bad["inf"]) == ("w", 4, 1, 0)
    scan = analysis.scan_run(out)
    series = scan.stats[("w", 0)]  # One record per bucket here: sums are the rows.
    assert series.gstep[: series.used].tolist() == [0, 2, 4]  # Count-0 rows left out.
    mean = series.sum[: series.used, analysis.MEAN]
    np.testing.assert_allclose(mean[:2], [2.5, 4.5])
