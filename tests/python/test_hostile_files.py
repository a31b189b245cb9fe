"""Hostile and unusual files through the package's readers: open_trace (the C++ reader) and the CLI.

Issue 9, items 7-12 and 14, for the reader read_trace.py's tests (test_read_trace.py) cover on
their own: the same inputs, the same rules (docs/format.md) and, where it makes sense, the same
wording. The CLI runs as a subprocess with a time limit (a FIFO must not hang it) and an
address-space limit (/dev/zero must not eat the machine).
"""

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import trace_file_maker as tm
import xdl_files as xf
import xdl_trace.read.reader
from test_read_trace import GOOD, HEADER, column_bytes, limit_memory, record_bytes, write
from xdl_trace import errors
from xdl_trace.read.reader import TornTailWarning, UnknownDTypeWarning, open_trace

KEYS = ["w", "loss"]
PACKAGE_ROOT = os.path.dirname(os.path.dirname(xdl_trace.__file__))


def cli(*args, timeout=60):
    """Runs `python -m xdl_trace ARGS` as a user would; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "xdl_trace", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=PACKAGE_ROOT),
        preexec_fn=limit_memory,
    )


def one_error_line(result, command):
    """The single error line of a failed CLI run (no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [l for l in result.stderr.splitlines() if "error:" in l]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"xdl-trace {command}: error: "), lines[0]
    return lines[0]


def records_of(path, **kwargs):
    return [r.gstep for r in open_trace(path).records(**kwargs)]


# --- Item 7: only regular files are read ------------------------------------------------------


@pytest.mark.parametrize("command", ["dump", "verify", "info"])
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_data_file_that_is_not_regular_is_refused_by_name(tmp_path, command, kind):
    path = str(tmp_path / "train.trace.0.1")
    if kind == "fifo":
        os.mkfifo(path)
        what = "a FIFO"
    else:
        os.symlink("/dev/zero", path)
        what = "a character device"
    result = cli(command, path)
    assert result.returncode == 1
    if command == "verify":  # A failing file among the others, not an abort.
        assert "FAIL  train.trace.0.1" in result.stdout, result.stdout
        assert f"      {path}: not a regular file ({what})" in result.stdout
        return
    line = one_error_line(result, command)
    assert line.endswith(f"{path}: not a regular file ({what})"), line


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
def test_a_meta_that_is_not_a_meta_file_is_refused_and_the_records_still_read(tmp_path, kind):
    path = str(tmp_path / "train.trace.0.1")
    tm.write_file(path, KEYS, tm.simple_records(range(3)), meta=False)
    meta = path + ".meta"
    if kind == "fifo":
        os.mkfifo(meta)
        what = f"{meta}: not a regular file (a FIFO)"
    elif kind == "dev_zero":
        os.symlink("/dev/zero", meta)
        what = f"{meta}: not a regular file (a character device)"
    else:
        with open(meta, "wb") as f:
            f.write(b"\x08\x01" * 40000)
        what = f"{meta}: 80000 bytes, more than a Meta can be (65536)"
    dumped = cli("dump", path)
    assert dumped.returncode == 0, dumped.stderr
    assert dumped.stdout.count("gstep:") == 3
    verified = cli("verify", path)
    assert verified.returncode == 1
    assert what in verified.stdout, verified.stdout
    trace = open_trace(path)
    assert trace.files[0].meta is None and what in trace.files[0].meta_error


def test_a_planted_entry_in_a_directory_is_reported_and_does_not_hang(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(2)))
    os.mkfifo(f"{d}/train.trace.0.2")
    result = cli("verify", d)
    assert result.returncode == 1
    assert "OK    train.trace.0.1" in result.stdout
    assert f"{d}/train.trace.0.2: not a regular file (a FIFO)" in result.stdout
    dumped = cli("dump", d)
    assert dumped.stdout.count("gstep:") == 2  # The records before the planted file.
    line = one_error_line(dumped, "dump")
    assert line.endswith(f"{d}/train.trace.0.2: not a regular file (a FIFO)")


# --- Item 8: shapes are checked against the data, with checked arithmetic ---------------------


@pytest.mark.parametrize(
    "dtype, shape, message",
    [
        (
            0,
            [2**30, 2**30, 16],
            "shape [1073741824, 1073741824, 16] has more than 9223372036854775807 elements",
        ),
        (
            4,
            [2**30, 2**30, 4],
            "column data has 0 bytes but its shape [1073741824, 1073741824, 4] and float32 dtype need 18446744073709551616",
        ),
        (4, [2, -3], "negative dimension -3"),
    ],
)
def test_impossible_shapes_are_corruption_naming_file_offset_and_column(
    tmp_path, dtype, shape, message
):
    col = column_bytes(dtype, shape, b"")
    path = write(str(tmp_path), HEADER + tm.frame(GOOD) + tm.frame(record_bytes([col])))
    with pytest.raises(errors.TraceIOError) as raised:
        records_of(path)
    text = str(raised.value)
    assert re.match(
        re.escape(path) + r": corrupt at byte offset \d+: column 0 \('w'\): ", text
    ), text
    assert text.endswith(message), text


# --- Item 9: an unknown dtype is opaque bytes ---------------------------------------------------


def test_an_unknown_dtype_reads_as_raw_bytes_with_one_warning(tmp_path):
    col = column_bytes(14, [2, 3], b"abcdef")
    data = HEADER + tm.frame(record_bytes([col], gstep=1)) + tm.frame(record_bytes([col], gstep=2))
    path = write(str(tmp_path), data)
    trace = open_trace(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = list(trace.records())
        stacked = trace.stack("w")
    assert [r.gstep for r in records] == [1, 2]
    for r in records:
        assert r["w"].dtype == np.uint8 and r["w"].tobytes() == b"abcdef"
        assert r["loss"] == 0.5
    assert stacked.dtype == np.uint8 and stacked.shape == (2, 6)
    unknown = [w for w in caught if issubclass(w.category, UnknownDTypeWarning)]
    assert len(unknown) == 1, [str(w.message) for w in caught]
    assert str(unknown[0].message) == (
        f"{path}: dtype 14 is unknown to this reader: its columns are read as raw bytes"
    )
    assert trace.schema()["w"][0] == "unknown(14)"
    dumped = cli("dump", path)
    assert dumped.returncode == 0, dumped.stderr
    assert dumped.stderr.count("dtype 14 is unknown") == 1


# --- Item 10: a zero-filled tail is a torn tail -------------------------------------------------


def test_a_zero_filled_tail_returns_every_record_and_warns_with_the_offset(tmp_path):
    data = HEADER + tm.frame(GOOD) + tm.frame(GOOD)
    path = write(str(tmp_path), data + b"\0" * 4096)
    with pytest.warns(TornTailWarning) as caught:
        gsteps = records_of(path)
    assert gsteps == [7, 7]
    (warning,) = caught
    assert str(warning.message) == (
        f"{path}: torn tail at byte offset {len(data)}: zero-filled from byte offset {len(data)}"
        " to the end (4096 bytes), as a power loss leaves unsynced data"
    )
    dumped = cli("dump", path)
    assert dumped.returncode == 0 and dumped.stdout.count("gstep:") == 2, dumped.stderr
    assert f"torn tail at byte offset {len(data)}" in dumped.stderr
    with pytest.warns(TornTailWarning):
        assert open_trace(path).stack("loss").tolist() == [3.5, 3.5]


def test_a_zero_fill_inside_a_frame_and_inside_the_meta_are_torn_tails_too(tmp_path):
    d = str(tmp_path)
    data = HEADER + tm.frame(GOOD)
    partial = tm.frame(GOOD)[:26]
    inside = write(d, data + partial + b"\0" * 4000, name="train.trace.0.1")
    with pytest.warns(TornTailWarning, match=f"zero-filled from byte offset {len(data) + 26}"):
        assert records_of(inside) == [7]
    meta = {"data_bytes": len(data) + 100, "record_count": 2, "gstep_begin": 7, "gstep_end": 7}
    covered = write(d, data + b"\0" * 100, name="train.trace.1.1", meta=meta)
    with pytest.warns(TornTailWarning, match="so records it counted were lost"):
        assert records_of(covered) == [7]
    middle = write(d, data + tm.frame(b"\0" * 10) + tm.frame(GOOD), name="train.trace.2.1")
    with pytest.raises(errors.TraceIOError, match="invalid field number"):
        records_of(middle)


# --- Item 11: a header-only file without Meta lost nothing --------------------------------------


def test_a_crash_before_the_first_meta_is_unverifiable_not_a_failure(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(3)))
    tm.write_file(f"{d}/train.trace.0.2", KEYS, [], meta=False)  # Header, then the crash.
    result = cli("verify", d)
    assert result.returncode == 0, result.stdout
    assert re.search(
        r"UNVERIFIABLE train\.trace\.0\.2: .*no data lost", result.stdout
    ), result.stdout
    (report,) = [r for r in open_trace(d).verify() if r["path"].endswith(".2")]
    assert report["ok"] and report["unverifiable"] and "no data lost" in report["note"]
    with_records = f"{d}/train.trace.1.1"
    tm.write_file(with_records, KEYS, tm.simple_records(range(2)), meta=False)
    assert cli("verify", with_records).returncode == 1  # Records no Meta vouches for: a failure.


# --- Item 12: verify checks what the Meta says about the records --------------------------------


@pytest.mark.parametrize(
    "field, lie, actual",
    [
        ("gstep_begin", 3, 0),
        ("gstep_end", 99, 4),
        ("lstep_begin", -5, 0),
        ("timestamp_end", 1700000000003, 1700000000004),  # An impossible one: its own test.
    ],
)
def test_a_meta_that_lies_about_its_records_fails_verify(tmp_path, field, lie, actual):
    path = str(tmp_path / "train.trace.0.1")
    tm.write_file(path, KEYS, tm.simple_records(range(5)), meta_overrides={field: lie})
    result = cli("verify", path)
    assert result.returncode == 1
    assert f"the Meta says {field} {lie}, the records say {actual}" in result.stdout, result.stdout


# --- Item 14: XDL's own files -------------------------------------------------------------------


@pytest.fixture
def xdl_dir(tmp_path):
    d = str(tmp_path / "xdl")
    os.mkdir(d)
    xf.write_xdl_run(d, KEYS, xf.xdl_steps(7), max_file_m_size=150e-6)  # 3 files, -1 markers.
    return d


def test_every_reader_path_returns_every_selected_record_of_xdl_files(xdl_dir, tmp_path):
    trace = open_trace(xdl_dir)
    assert [r.gstep for r in trace.records()] == list(range(100, 107))
    assert [r.lstep for r in trace.records()] == list(range(1, 8))
    for selection, want in [
        ((100, 106), range(100, 107)),
        ((106, 106), [106]),
        ((103, None), range(103, 107)),
        ([101, 106], [101, 106]),
    ]:
        assert [r.gstep for r in trace.records(gsteps=selection)] == list(want)
        steps, values = trace.stack("loss", gsteps=selection, return_gsteps=True)
        assert steps.tolist() == list(want)
    dumped = cli("dump", xdl_dir, "--gsteps", "105:106")
    assert dumped.returncode == 0 and dumped.stdout.count("gstep:") == 2, dumped.stderr
    out = str(tmp_path / "x.npz")
    exported = cli("export", xdl_dir, "--gsteps", "100:106", "-o", out)
    assert exported.returncode == 0, exported.stderr
    assert np.load(out)["rank0/gstep"].tolist() == list(range(100, 107))


def test_info_does_not_call_an_xdl_file_empty(xdl_dir):
    result = cli("info", xdl_dir)
    assert result.returncode == 0, result.stderr
    # No line claims an XDL file holds 0 records ("0 records dropped" is the rank's drop count).
    assert not re.search(r" 0 (complete )?records(?! dropped)", result.stdout), result.stdout
    assert result.stdout.count("records unknown (XDL Meta)") == 3, result.stdout
    # The scan counts what each file really holds: 3, 3 and 1 records.
    found = re.findall(r"scanning found (\d+) complete records", result.stdout)
    assert sum(map(int, found)) == 7, result.stdout


def test_verify_marks_xdl_files_unverifiable_and_exits_0(xdl_dir, tmp_path):
    result = cli("verify", xdl_dir)
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("UNVERIFIABLE") == 3
    assert "(XDL Meta, no checksum)" in result.stdout and "FAIL" not in result.stdout
    killed = str(tmp_path / "killed")
    os.mkdir(killed)
    xf.write_xdl_run(killed, KEYS, xf.xdl_steps(2), finish=False)  # An empty .meta.
    result = cli("verify", killed)
    assert result.returncode == 0 and "UNVERIFIABLE" in result.stdout, result.stdout


@pytest.mark.parametrize(
    "version, what",
    [(2, "is newer than this reader knows (1)"), (-1, "is not one this reader knows")],
)
def test_a_meta_of_an_unknown_format_version_is_refused(tmp_path, version, what):
    path = str(tmp_path / "train.trace.0.1")
    tm.write_file(
        path, KEYS, tm.simple_records(range(2)), meta_overrides={"format_version": version}
    )
    message = f"{path}.meta: format_version {version} {what}: not reading {path}"
    result = cli("verify", path)
    assert result.returncode == 1 and message in result.stdout, result.stdout
    with pytest.raises(errors.TraceError, match=re.escape(message)):
        records_of(path)
