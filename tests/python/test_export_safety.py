"""`export` against hostile key names (issue 37 #5) and its one npz layout (issue 34 #11): keys
named like the index arrays, like np.savez's own argument, with "..", over 64 KB; CSV formula
cells and a readable time column; no partial file when writing fails; the writer's warnings
print key names escaped."""

import csv
import datetime
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_keys(out_dir, keys, steps=3, rank=0):
    """Traces each of `keys` (float64[1]: the step + its position / 10) for `steps` steps."""
    xdl.clear()
    values = {key: np.zeros(1, np.float64) for key in keys}
    for key, value in values.items():
        xdl.trace_tensor(key, value)
    config = {"output_dir": out_dir, "on_error": "raise", "fsync": False, "rank": rank}
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            for i, value in enumerate(values.values()):
                value[...] = step + i / 10
            hook.step(gstep=100 + step)


def export(capsys, *args):
    code = cli.main(["export", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_keys_named_like_the_index_arrays_or_savez_arguments_keep_their_values(
    out_dir, tmp_path, capsys
):
    keys = ["file", "gstep", "lstep", "timestamp", "allow_pickle", "keys", "ranks"]
    write_keys(out_dir, keys)
    output = tmp_path / "x.npz"
    code, _, err = export(capsys, out_dir, "-o", output)
    assert code == 0, err
    with np.load(output) as z:
        assert z["rank0/gstep"].tolist() == [100, 101, 102]  # Not overwritten by a key.
        for i, key in enumerate(keys):
            np.testing.assert_allclose(
                z[f"rank0/keys/{key}"][:, 0], [i / 10, 1 + i / 10, 2 + i / 10]
            )
        assert z["keys"].tolist() == keys and z["members"].tolist() == keys
        assert z["ranks"].tolist() == [0]


def test_one_layout_for_one_rank_or_many(tmp_path, capsys):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    write_keys(one, ["loss"])
    write_keys(two, ["loss"], rank=0)
    write_keys(two, ["loss"], rank=1)
    names = {}
    for label, directory in (("one", one), ("two", two)):
        output = tmp_path / f"{label}.npz"
        assert export(capsys, directory, "-o", output)[0] == 0
        with np.load(output) as z:
            names[label] = set(z.files)
    rank0 = {"rank0/gstep", "rank0/lstep", "rank0/timestamp", "rank0/keys/loss"}
    assert names["one"] == {"ranks", "keys", "members"} | rank0
    assert names["two"] == names["one"] | {n.replace("rank0", "rank1") for n in rank0}


def test_a_key_with_dots_and_slashes_never_leaves_its_folder(out_dir, tmp_path, capsys):
    keys = ["../x", "../../etc/passwd", "/abs", "..", ".", "a/b", "tilde~1"]
    write_keys(out_dir, keys)
    output = tmp_path / "x.npz"
    assert export(capsys, out_dir, "-o", output)[0] == 0
    with zipfile.ZipFile(output) as archive:
        members = archive.namelist()
    for name in members:
        parts = name.split("/")
        assert ".." not in parts and not name.startswith("/"), name
    with np.load(output) as z:
        for key, member in zip(z["keys"], z["members"]):
            assert "/" not in member and member not in (".", "..")
            assert z[f"rank0/keys/{member}"].shape == (3, 1), key
        assert z["members"].tolist()[:2] == ["..%2Fx", "..%2F..%2Fetc%2Fpasswd"]
        assert z["members"].tolist()[3:5] == ["%2E%2E", "%2E"]
        assert "tilde%7E1" in z["members"].tolist()


def test_a_key_over_64_kb_is_exported_under_a_short_hashed_name(out_dir, tmp_path, capsys):
    long_key = "k" * 70_000
    write_keys(out_dir, [long_key, "loss"])
    output = tmp_path / "x.npz"
    code, out, err = export(capsys, out_dir, "-o", output)
    assert code == 0, err
    with np.load(output) as z:
        (member,) = [m for k, m in zip(z["keys"], z["members"]) if k == long_key]
        assert len(member) <= 200 and "~" in member
        np.testing.assert_allclose(z[f"rank0/keys/{member}"][:, 0], [0, 1, 2])
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []


def test_a_failed_export_leaves_no_partial_file_and_keeps_an_older_one(
    out_dir, tmp_path, capsys, monkeypatch
):
    write_keys(out_dir, ["loss"])
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    output = outputs / "x.npz"
    output.write_bytes(b"older")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", fail)
    code, _, err = export(capsys, out_dir, "-o", output)
    assert code == 1 and "No space left" in err
    assert os.listdir(outputs) == ["x.npz"] and output.read_bytes() == b"older"
    monkeypatch.undo()
    csv_output = outputs / "x.csv"
    monkeypatch.setattr(cli, "_iso_utc", fail)
    code, _, err = export(capsys, out_dir, "-o", csv_output)
    assert code == 1 and not csv_output.exists()
    assert os.listdir(outputs) == ["x.npz"]


def test_csv_neutralises_formula_keys_and_adds_an_iso_time_column(out_dir, tmp_path, capsys):
    keys = ['=HYPERLINK("http://x","y")', "+1", "-a", "@SUM(A1)", "\tTAB", "plain"]
    write_keys(out_dir, keys)
    output = tmp_path / "x.csv"
    code, _, err = export(capsys, out_dir, "-o", output)
    assert code == 0, err
    rows = list(csv.reader(open(output, newline="")))
    assert rows[0][:5] == ["rank", "gstep", "lstep", "timestamp", "time_utc"]
    assert rows[0][5:] == ["'" + k for k in keys[:-1]] + ["plain"]
    ms = int(rows[1][3])
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    assert rows[1][4] == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    assert float(rows[1][5]) == 0.0 and float(rows[3][6]) == 2.1  # Values stay numbers.


def test_csv_skipping_line_escapes_control_characters(out_dir, tmp_path, capsys):
    xdl.clear()
    xdl.trace_tensor("\x1b[31mred", np.zeros(3))
    xdl.trace_tensor("loss", np.zeros(()))
    with xdl.TraceHook({"output_dir": out_dir, "on_error": "raise"}) as hook:
        hook.step()
    code, _, err = export(capsys, out_dir, "-o", tmp_path / "x.csv")
    assert code == 0
    assert "\x1b" not in err and "\\x1b[31mred" in err


def test_the_writers_warnings_escape_key_names(out_dir):
    script = f"""
import warnings, numpy as np, xdl_trace as xdl
xdl.trace_tensor("loss\\x1b[2J\\nFAKE", np.float32(1.0))
with xdl.TraceHook({{"output_dir": {out_dir!r}, "on_error": "warn"}}) as hook:
    hook.step()
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "0-d value" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr and "\nFAKE" not in done.stderr, done.stderr
    assert "loss\\x1b[2J\\x0aFAKE" in done.stderr
