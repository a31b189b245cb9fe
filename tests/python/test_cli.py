"""Tests of the xdl-trace command line (info, dump, verify, export) on protobuf-written files."""

import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import trace_file_maker as tm
import xdl_trace.read.reader
import xdl_trace as xdl
from xdl_trace import _core, cli

KEYS = ["w", "loss"]


@pytest.fixture
def trace_dir(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(0, 5)))
    tm.write_file(f"{d}/train.trace.0.2", KEYS, tm.simple_records(range(5, 8)))
    tm.write_file(f"{d}/train.trace.1.1", KEYS, tm.simple_records(range(0, 8, 2), seed=1))
    return d


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_text_and_json(trace_dir, capsys):
    code, out, _ = run(capsys, "info", trace_dir)
    assert code == 0
    assert "ranks: 0, 1" in out and "files: 3" in out
    assert "w  float32[2, 3]" in out and "loss  float64[]" in out
    assert "gsteps 5..7" in out and "train.trace.0.2" in out
    code, out, _ = run(capsys, "info", trace_dir, "--json")
    info = json.loads(out)
    assert info["ranks"] == [0, 1]
    assert [f["records"] for f in info["files"]] == [5, 3, 4]
    assert info["keys"][0] == {"key": "w", "dtype": "float32", "shape": [2, 3]}
    assert info["bytes"] == sum(os.path.getsize(f["path"]) for f in info["files"])


def test_dump_with_key_and_step_selection(trace_dir, capsys):
    code, out, _ = run(
        capsys, "dump", trace_dir, "--keys", "loss", "--gsteps", "3:5", "--ranks", "0"
    )
    assert code == 0
    lines = [l for l in out.splitlines() if l.startswith("rank")]
    assert [l.split()[3] for l in lines] == ["3", "4", "5"]
    assert "loss float64[]: 1.5" in out and " w " not in out
    code, out, _ = run(capsys, "dump", trace_dir, "--max-records", "2", "--summary")
    assert out.count("rank:") == 2 and "min=" in out


def test_verify_exit_codes(trace_dir, capsys):
    code, out, _ = run(capsys, "verify", trace_dir)
    assert code == 0 and "3 of 3 files verified" in out
    path = os.path.join(trace_dir, "train.trace.0.2")
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0x10
    open(path, "wb").write(bytes(data))
    code, out, _ = run(capsys, "verify", trace_dir)
    assert code == 1
    assert "FAIL  train.trace.0.2" in out and "crc32c" in out


def test_verify_reports_corruption_in_the_frames(tmp_path, capsys):
    path = str(tmp_path / "train.trace.0.1")
    data = tm.write_file(path, KEYS, tm.simple_records(range(3)))
    broken = bytearray(data)
    broken[len(broken) // 2 : len(broken) // 2 + 8] = b"\xff" * 8
    open(path, "wb").write(bytes(broken))
    code, out, _ = run(capsys, "verify", path)
    assert code == 1
    assert "byte offset" in out and path in out


def test_export_npz(trace_dir, tmp_path, capsys):
    out_path = str(tmp_path / "out.npz")
    code, out, _ = run(capsys, "export", trace_dir, "-o", out_path, "--ranks", "0")
    assert code == 0
    z = np.load(out_path)
    np.testing.assert_array_equal(z["rank0/gstep"], np.arange(8))
    assert z["rank0/keys/w"].shape == (8, 2, 3)
    np.testing.assert_array_equal(z["rank0/keys/loss"], np.arange(8) * 0.5)
    code, _, _ = run(capsys, "export", trace_dir, "-o", out_path, "--keys", "loss")
    z = np.load(out_path)
    assert sorted(z.files) == sorted(
        ["ranks", "keys", "members"]
        + [f"rank{r}/{n}" for r in (0, 1) for n in ("gstep", "lstep", "timestamp", "keys/loss")]
    )
    np.testing.assert_array_equal(z["rank1/keys/loss"], np.arange(0, 8, 2) * 0.5 + 1)


def test_export_npz_of_a_key_whose_shape_changes_keeps_every_step(tmp_path, capsys):
    """An activation of a smaller last batch: its steps' values one after another, with their
    shapes beside them; the other keys as always. Before: the whole export failed ("stack
    needs one shape")."""
    batch = {"n": 4}
    xdl.clear()
    xdl.trace_tensor("act", lambda: np.arange(batch["n"] * 3, dtype=np.float32).reshape(-1, 3))
    xdl.trace_tensor("loss", lambda: np.float32(batch["n"]))
    xdl.trace_once("config", np.ones(2, np.float32))
    out = str(tmp_path / "run")
    with xdl.TraceHook(output_dir=out, on_error="raise", fsync=False) as hook:
        for step in range(5):
            batch["n"] = 4 if step < 4 else 1
            hook.step()
    xdl.clear()
    code, said, _ = run(capsys, "export", out, "-o", str(tmp_path / "x.npz"))
    assert code == 0, said
    z = np.load(str(tmp_path / "x.npz"))
    np.testing.assert_array_equal(z["rank0/shape_of/act"], [[4, 3]] * 4 + [[1, 3]])
    shapes = z["rank0/shape_of/act"]
    steps = np.split(z["rank0/keys/act"], np.cumsum(np.prod(shapes, axis=1))[:-1])
    want = [np.arange(n * 3, dtype=np.float32) for n in (4, 4, 4, 4, 1)]
    assert [s.tolist() for s in steps] == [w.tolist() for w in want]
    np.testing.assert_array_equal(z["rank0/keys/loss"], [4, 4, 4, 4, 1])
    assert "rank0/shape_of/loss" not in z.files and "rank0/shape_of/config" not in z.files


def test_export_csv_scalar_and_stats_columns(tmp_path, capsys):
    path = str(tmp_path / "train.trace.0.1")
    recs = []
    for g in range(3):
        x = np.arange(4.0) + g
        stats = np.array([4, x.min(), x.max(), x.mean(), x.std(), np.sqrt((x * x).sum()), 0, 0])
        recs.append(tm.record(g, [np.float32(g), stats, x.reshape(2, 2)]))
    tm.write_file(path, ["loss", "x/stats", "x"], recs)
    out_path = str(tmp_path / "out.csv")
    code, _, err = run(capsys, "export", path, "-o", out_path)
    assert code == 0 and "skipping non-scalar keys: x" in err
    rows = list(csv.reader(open(out_path)))
    assert rows[0][:6] == ["rank", "gstep", "lstep", "timestamp", "time_utc", "loss"]
    assert rows[0][6:] == [f"x/stats.{f}" for f in cli.STATS_FIELDS]
    assert len(rows) == 4
    assert float(rows[3][5]) == 2.0 and float(rows[3][8]) == 5.0  # loss, x/stats.max at gstep 2


def test_export_csv_writes_a_digest_as_its_hex_text(tmp_path, capsys):
    # A digest column (16 bytes: two float64 holding 64 bits) is one cell, 0x and 16 hex digits
    # as dump prints it; it was left out of CSV ("use npz") before.
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    xdl.trace_tensor("w", lambda: w, summary="digest")
    xdl.trace_tensor("loss", lambda: np.float32(w.sum()))
    with xdl.TraceHook({"output_dir": str(tmp_path / "run")}) as hook:
        for _ in range(2):
            hook.step()
            w[0, 0] += 1
    out_path = str(tmp_path / "out.csv")
    code, _, err = run(capsys, "export", str(tmp_path / "run"), "-o", out_path)
    assert code == 0 and "skipping" not in err
    rows = list(csv.reader(open(out_path)))
    assert rows[0][5:] == ["w", "loss"]
    expected = [np.arange(6, dtype=np.float32).reshape(2, 3) for _ in range(2)]
    expected[1][0, 0] += 1
    assert [row[5] for row in rows[1:]] == [f"0x{_core.digest(x, 4):016x}" for x in expected]
    assert rows[1][5] != rows[2][5]
    code, out, _ = run(capsys, "dump", str(tmp_path / "run"), "--keys", "w")
    assert f"digest {rows[1][5][2:]}" in out
    # npz: the same digests as uint64, one a step (were the raw float64[2] halves).
    npz = str(tmp_path / "out.npz")
    assert run(capsys, "export", str(tmp_path / "run"), "-o", npz)[0] == 0
    digests = np.load(npz)["rank0/keys/w"]
    assert digests.dtype == np.uint64 and [f"0x{d:016x}" for d in digests] == [
        row[5] for row in rows[1:]
    ]


def test_errors_are_one_line_and_non_zero(tmp_path, capsys):
    code, _, err = run(capsys, "info", str(tmp_path / "missing"))
    assert code == 1 and "no such file" in err
    tm.write_file(str(tmp_path / "train.trace.0.1"), KEYS, tm.simple_records([0]))
    code, _, err = run(capsys, "dump", str(tmp_path), "--keys", "nope")
    assert code == 1 and "nope" in err


@pytest.mark.parametrize(
    "argv, said",
    [
        (["dump", "{d}", "--gsteps", "10-20"], "dump: error: --gsteps '10-20': expected A:B"),
        (["dump", "{d}", "--ranks", "a"], "dump: error: --ranks 'a': expected ranks"),
        (["diff", "{d}", "--ranks", "0,x"], "diff: error: --ranks '0,x': expected ranks"),
        (
            ["export", "{d}", "-o", "{d}/w.xlsx"],
            "export: error: -o {d}/w.xlsx: export writes .npz or .csv",
        ),
        (
            ["export", "{d}", "-o", "{d}/w.csv", "--keys", "x"],
            "export: error: no key 'x' (keys: w, loss)",
        ),
        (
            ["timeline", "{d}", "-o", "{d}/no/t.json"],
            "timeline: error: cannot write {d}/no/t.json: no directory {d}/no",
        ),
        (
            ["report", "{d}", "-o", "{d}/no/r.html"],
            "report: error: cannot write {d}/no/r.html: no directory {d}/no",
        ),
        (["serve", "{d}", "--port", "99999"], "serve: error: argument --port: '99999' is no port"),
    ],
    ids=[
        "gsteps",
        "ranks",
        "diff-ranks",
        "export-format",
        "export-key",
        "timeline-dir",
        "report-dir",
        "port",
    ],
)
def test_a_mistyped_option_is_one_line_naming_it(trace_dir, capsys, argv, said):
    """Before: `invalid literal for int() with base 10: '10-20'` (which option?), out.xlsx written
    as out.xlsx.npz, a timeline's error naming its hidden .partial file, a report's missing
    directory found after the whole run was read, and serve's port a Python traceback."""
    argv = [a.format(d=trace_dir) for a in argv]
    try:
        code = cli.main(argv)
    except SystemExit as exit:  # argparse's usage errors.
        code = exit.code
    _, err = capsys.readouterr()
    assert code in (1, 2) and "xdl-trace " + said.format(d=trace_dir) in err, err
    assert not os.path.exists(os.path.join(trace_dir, "w.xlsx.npz"))


def test_no_command_lists_the_commands(capsys):
    """Before: "error: the following arguments are required: COMMAND", naming none."""
    code, out, err = run(capsys)
    assert code == 2 and out == ""
    assert all(f"    {c} " in err for c in ("info", "dump", "report", "diff", "serve")), err


def test_dump_of_a_selection_holding_no_record_says_so(trace_dir, capsys):
    code, out, err = run(capsys, "dump", trace_dir, "--gsteps", "100:")
    assert code == 0 and out == ""
    assert "no record in the selection (ranks: 0, 1; gsteps 0..7)" in err


def test_progress_bar_draws_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        with cli.Progress(1000, "verify", stream=stream) as p:
            p(400)
            p(600)
    assert "verify [" in tty.getvalue() and "100.0%" in tty.getvalue()
    assert pipe.getvalue() == ""


def test_python_dash_m_entry_point(trace_dir, tmp_path):
    package_root = os.path.dirname(os.path.dirname(xdl_trace.__file__))
    env = dict(os.environ, PYTHONPATH=package_root)
    result = subprocess.run(
        [sys.executable, "-m", "xdl_trace", "verify", trace_dir],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "3 of 3 files verified" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "xdl_trace", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=120,
    )
    for name in ("info", "dump", "verify", "export"):
        assert name in result.stdout


def test_dump_of_a_torn_file_warns_once_with_the_offset(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    recs = tm.simple_records(range(3))
    full = tm.write_file(path, KEYS, recs, meta=False)
    last = len(full) - len(tm.frame(recs[-1].SerializeToString()))
    open(path, "wb").write(full[: last + 2])
    package_root = os.path.dirname(os.path.dirname(xdl_trace.__file__))
    result = subprocess.run(
        [sys.executable, "-m", "xdl_trace", "dump", str(tmp_path), "--keys", "loss"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=package_root),
        cwd=str(tmp_path),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("rank: 0") == 2
    # No Meta says the file was closed: its writer may still be writing it (issue 13).
    assert result.stderr.count("still being written") == 1
    assert (
        f"xdl-trace: warning: {path}: still being written (or its writer stopped before closing "
        f"it); 2 complete records, then a partial frame at byte offset {last}" in result.stderr
    )


def test_gpu_of_a_run_without_device_events_says_how_to_get_them(trace_dir, capsys):
    code, out, err = run(capsys, "gpu", trace_dir)
    assert code == 1 and out == ""
    assert "has no device events" in err and "device_tracers=['cupti']" in err
