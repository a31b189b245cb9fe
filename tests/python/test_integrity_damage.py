"""Damage no reader serves or dies of: a flipped bit in the Header or its length prefix, a
missing checksum in a format-1 file, a file cut while it is read, a frame longer than its file.
Issue 37 ("Integrity, third pass"); each test makes its own bit flip, named, and was written
before its fix."""

import glob
import os
import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import errors
from xdl_trace.reader import open_trace

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READ_TRACE = os.path.join(REPO, "xdl_trace", "tools", "read_trace.py")
# Every CLI command that reads records, with the arguments it needs beyond the run folder.
READERS = {
    "dump": [],
    "info": [],
    "find-nan": [],
    "export": ["-o", "{out}/x.npz"],
    "timeline": ["-o", "{out}/t.json"],
}


def run(*args, timeout=120):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=REPO),
    )


def write_steps(out_dir, steps=5, key="layer0"):
    """Traces `key` (float32 [3, 4] of ones) for `steps` steps; returns the data file."""
    xdl.clear()
    xdl.trace_tensor(key, np.ones((3, 4), np.float32))
    with xdl.TraceHook({"output_dir": out_dir, "on_error": "raise"}) as hook:
        for step in range(steps):
            hook.step(gstep=step)
    (path,) = glob.glob(os.path.join(out_dir, "train.trace.0.*[0-9]"))
    return path


def flip(path, offset, mask):
    """XORs byte `offset` of `path` with `mask`: one flipped bit."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def every_reader_refuses(out, message):
    """open_trace, each CLI reader, verify and read_trace.py fail on run `out`, naming `message`."""
    with pytest.raises(errors.TraceIOError, match=message):
        list(open_trace(out).records())
    for command, extra in READERS.items():
        result = run("-m", "xdl_trace", command, out, *[a.format(out=out) for a in extra])
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert message in result.stderr, (command, result.stderr)
        assert "no NaN or Inf" not in result.stdout
    verified = run("-m", "xdl_trace", "verify", out)
    assert verified.returncode == 1, verified.stdout
    printed = run(READ_TRACE, out)
    assert printed.returncode == 1 and message in printed.stderr, printed.stderr


# --- Item 1: the Header's checksum, checked at open by every reader ---------------------------


def test_a_flipped_bit_in_a_header_key_is_refused_by_every_reader(tmp_path):
    out = str(tmp_path)
    path = write_steps(out)
    at = open(path, "rb").read().index(b"layer0") + 5
    flip(path, at, 0x01)  # '0' (0x30) -> '1' (0x31): the key now reads "layer1".
    assert b"layer1" in open(path, "rb").read()
    every_reader_refuses(out, "Header checksum mismatch")


def test_the_meta_carries_the_header_checksum_before_its_own(tmp_path, pb):
    path = write_steps(str(tmp_path))
    data = open(path, "rb").read()
    header_end = 4 + int(np.frombuffer(data[:4], "<u4")[0])
    content = open(path + ".meta", "rb").read()
    meta = pb.Meta.FromString(content)
    assert meta.HasField("header_crc32c")
    sys.path.insert(0, os.path.dirname(READ_TRACE))
    import read_trace

    assert meta.header_crc32c == read_trace.crc32c(data[:header_end])
    assert content[-6:-4] == b"\x8d\x01"  # meta_crc32c (field 17, fixed32) stays the last field.


# --- Item 2: a flipped bit in the Header's length prefix ----------------------------------------


def test_a_flipped_bit_in_the_header_length_prefix_is_corruption_not_a_torn_tail(tmp_path):
    out = str(tmp_path)
    path = write_steps(out)
    flip(path, 3, 0x01)  # Bit 24 of the Header's length: the frame now runs past the file.
    every_reader_refuses(out, "corrupt at byte offset 0")
    info = run("-m", "xdl_trace", "info", out)
    assert "closed cleanly" not in info.stdout and "torn" not in info.stderr, info


# --- Item 3: a file cut while records() walks its mapping ---------------------------------------

CUT_WHILE_READ = textwrap.dedent(
    """
    import glob, os, sys
    import numpy as np
    import xdl_trace as xdl
    from xdl_trace import errors
    from xdl_trace.reader import open_trace

    out = sys.argv[1]
    xdl.trace_tensor("w", np.ones((64, 64), np.float32))
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for step in range(200):
            hook.step(gstep=step)
    (path,) = glob.glob(os.path.join(out, "train.trace.0.*[0-9]"))
    walk = open_trace(out).records()
    first = next(walk)
    assert first.columns["w"].sum() == 64 * 64
    # Another process cuts the file to its first 3 pages, as rsync --inplace or a cleanup can.
    os.spawnlp(os.P_WAIT, "truncate", "truncate", "-s", "12288", path)
    try:
        for record in walk:
            record.columns["w"].sum()
    except errors.TraceIOError as e:
        print("refused:", e)
    print("first record after the cut:", first.columns["w"].sum())
    """
)


def test_a_file_cut_while_records_walks_it_is_an_error_naming_it_not_a_sigbus(tmp_path):
    out = str(tmp_path)
    result = run("-c", CUT_WHILE_READ, out)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    (path,) = glob.glob(os.path.join(out, "train.trace.0.*[0-9]"))
    assert f"refused: {path}: the file shrank while it was read" in result.stdout, result.stdout
