"""The readers and the report say what `verify` says (issue 37 #6): a copied data file is left
out of reading (never counted twice, never a phantom rank) and named; a missing file or rank and
a copy are alerts in the report."""

import glob
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace.read import alerts, analysis
from xdl_trace.read.reader import open_trace
from xdl_trace.read import trace_runs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "xdl_trace", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO),
    )


def write_rolled(out_dir, steps=12):
    """Traces w (float32 [3, 4]) for `steps` steps rolling over every few records, as rank 0;
    returns the data files in index order."""
    xdl.clear()
    xdl.trace_tensor("w", np.ones((3, 4), np.float32))
    config = {"output_dir": out_dir, "rank": 0, "fsync": False, "max_file_m_size": 0.0002}
    with xdl.TraceHook(dict(config, on_error="raise")) as hook:
        for step in range(steps):
            hook.step(gstep=step)
    return sorted(
        glob.glob(os.path.join(out_dir, "train.trace.0.*[0-9]")),
        key=lambda p: int(p.rsplit(".", 1)[1]),
    )


def copy(files, i, out_dir, to):
    shutil.copy(files[i], os.path.join(out_dir, to))
    shutil.copy(files[i] + ".meta", os.path.join(out_dir, to + ".meta"))


@pytest.mark.parametrize("copy_to", ["train.trace.3.1", "train.trace.0.9"])
def test_a_copied_file_is_left_out_of_reading_and_named(tmp_path, copy_to):
    out = str(tmp_path)
    files = write_rolled(out, steps=6)
    before = [r.gstep for r in open_trace(out).records()]
    copy(files, 0, out, copy_to)
    with pytest.warns(
        trace_runs.CopiedFileWarning, match=f"{copy_to}: its Meta says rank 0 file_index 1"
    ):
        trace = open_trace(out)
    assert trace.ranks == [0]  # No phantom rank 3.
    assert [r.gstep for r in trace.records()] == before  # Each record once.
    assert [c.path for c in trace.copies] == [os.path.join(out, copy_to)]
    (run,) = xdl.runs(out)
    assert run.ranks == [0] and run.records == len(before)
    verified = cli("verify", out)  # verify still checks (and fails) the copy.
    assert verified.returncode == 1 and f"FAIL  {copy_to}" in verified.stdout, verified.stdout
    info = cli("info", out)
    assert f"left out: {copy_to}: its Meta says rank 0" in info.stdout, info.stdout
    assert "  rank 3:" not in info.stdout and "rank 3 #" not in info.stdout
    found = cli("find-nan", out)
    assert f"over {len(before)} records" in found.stdout, found.stdout


def test_a_data_file_opened_by_its_own_path_is_read_even_when_misnamed(tmp_path):
    out = str(tmp_path)
    files = write_rolled(out, steps=6)
    copy(files, 0, out, "train.trace.3.1")
    with pytest.warns(trace_runs.CopiedFileWarning, match="reading anyway"):
        trace = open_trace(os.path.join(out, "train.trace.3.1"))
    assert len(list(trace.records())) > 0


def alert_kinds(out):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scan = analysis.scan_run(out, series=False, histograms=False)
    kinds = ("missing file", "copied file left out")
    return [(a["kind"], a["detail"]) for a in alerts.find_alerts([scan]) if a["kind"] in kinds]


def test_the_report_alerts_on_missing_files_ranks_and_copies(tmp_path, monkeypatch):
    missing = str(tmp_path / "missing")
    files = write_rolled(missing)
    assert alert_kinds(missing) == []
    os.remove(files[2])
    os.remove(files[2] + ".meta")
    ((kind, detail),) = alert_kinds(missing)
    assert kind == "missing file" and "rank 0: no file #3" in detail

    absent = str(tmp_path / "absent")
    monkeypatch.setenv("WORLD_SIZE", "4")
    write_rolled(absent, steps=2)
    monkeypatch.delenv("WORLD_SIZE")
    ((kind, detail),) = alert_kinds(absent)
    assert kind == "missing file" and "world size 4 but no file of rank 1, 2, 3" in detail

    copied = str(tmp_path / "copied")
    files = write_rolled(copied, steps=6)
    copy(files, 0, copied, "train.trace.3.1")
    ((kind, detail),) = alert_kinds(copied)
    assert kind == "copied file left out" and detail.startswith("train.trace.3.1: its Meta says")
    page = cli("report", copied, "-o", str(tmp_path / "r.html"))
    assert page.returncode == 0, page.stderr
    assert "copied file left out" in open(tmp_path / "r.html").read()


def test_diff_leaves_a_copied_file_out_as_the_reader_does(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_rolled(a, steps=6)
    files = write_rolled(b, steps=6)
    assert cli("diff", a, b).returncode == 0
    copy(files, 0, b, "train.trace.0.9")  # Rank 0's gstep 0 once more, after its last file.
    result = cli("diff", a, b)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "train.trace.0.9: its Meta says rank 0 file_index 1" in result.stderr
