"""The examples run to completion and the traces they write read back."""

import os
import subprocess
import sys

import pytest

from conftest import REPO


def run_example(name, out_dir):
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", name), str(out_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_quickstart(tmp_path, read_trace):
    out = run_example("quickstart.py", tmp_path / "qs")
    assert "traced 40 of 200 steps" in out
    assert "verify: ok" in out
    (trace,) = read_trace(tmp_path / "qs")
    assert trace.keys[:4] == ["w1", "b1", "w2", "b2"]
    assert trace.gsteps() == list(range(0, 200, 5))


def test_train_torch(tmp_path, read_trace):
    pytest.importorskip("torch")
    out = run_example("train_torch.py", tmp_path / "tt")
    assert "traced 10 of 100 steps" in out
    (trace,) = read_trace(tmp_path / "tt")
    assert "gradient/0.weight" in trace.keys and "loss" in trace.keys and "act1" in trace.keys
    losses = [float(v) for v in trace.column("loss")]
    assert losses[-1] < losses[0]  # It trains.
