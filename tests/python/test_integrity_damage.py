"""Damage no reader serves or dies of: a flipped bit in the Header or its length prefix, a
missing checksum in a format-1 file, a file cut while it is read, a frame longer than its file.
Issue 37 ("Integrity, third pass"); each test makes its own bit flip, named, and was written
before its fix."""

import glob
import os
import sys
import textwrap

import numpy as np
import pytest

import xdl_trace as xdl
from conftest import error_exit, run_python as run
from xdl_trace import errors
from xdl_trace.read.reader import open_trace

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
        assert result.returncode == error_exit(command), (command, result.stdout, result.stderr)
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
    # info lists the file (its Meta's facts), then fails naming the corruption: no torn tail.
    info = run("-m", "xdl_trace", "info", out)
    assert info.returncode == 1 and "torn" not in info.stdout + info.stderr, info
    assert "keys: not read: " in info.stdout and "(a damaged length prefix)" in info.stderr, info


# --- Item 3: a file cut while records() walks its mapping ---------------------------------------

CUT_WHILE_READ = textwrap.dedent(
    """
    import glob, os, sys
    import numpy as np
    import xdl_trace as xdl
    from xdl_trace import errors
    from xdl_trace.read.reader import open_trace

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


# --- Item 4: a missing checksum is damage -------------------------------------------------------


def wire_fields(buf):
    """(number, wire_type, tag_offset, value_offset) of each field of a serialized message."""

    def varint(pos):
        value = shift = 0
        while True:
            byte = buf[pos]
            value |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if byte < 0x80:
                return value, pos

    pos, fields = 0, []
    while pos < len(buf):
        tag, value_at = varint(pos)
        number, wire_type = tag >> 3, tag & 7
        fields.append((number, wire_type, pos, value_at))
        if wire_type == 0:
            _, pos = varint(value_at)
        elif wire_type == 2:
            length, start = varint(value_at)
            pos = start + length
        else:
            pos = value_at + (4 if wire_type == 5 else 8)
    return fields


def meta_field(content, number):
    """(tag offset, value offset) of field `number` in a serialized Meta."""
    (at,) = [(tag, value) for n, _, tag, value in wire_fields(content) if n == number]
    return at


def test_a_record_whose_checksum_tag_is_flipped_is_refused_not_served_unchecked(tmp_path):
    out = str(tmp_path)
    path = write_steps(out)
    data = open(path, "rb").read()
    first = 4 + int(np.frombuffer(data[:4], "<u4")[0])  # The first Record frame.
    end = first + 4 + int(np.frombuffer(data[first : first + 4], "<u4")[0])
    assert data[end - 6 : end - 4] == b"\x85\x01"  # Record.crc32c: field 16, fixed32.
    flip(path, end - 6, 0x08)  # 0x85 -> 0x8D: field 16 -> 17, an unknown field.
    one = data.index(np.float32(1.0).tobytes(), first)
    flip(path, one + 3, 0x40)  # 0x3F800000 (1.0) -> 0x7F800000 (+inf).
    value = np.frombuffer(open(path, "rb").read()[one : one + 4], "<f4")[0]
    assert np.isposinf(value)
    every_reader_refuses(
        out, f"{path}: corrupt at byte offset {first}: record without its checksum"
    )
    find_nan = run("-m", "xdl_trace", "find-nan", out)
    assert "inf" not in find_nan.stdout.lower(), find_nan.stdout


def write_gsteps(out, first=100, count=10):
    xdl.clear()
    xdl.trace_tensor("w", np.ones(4, np.float32))
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for gstep in range(first, first + count):
            hook.step(gstep=gstep)
    (path,) = glob.glob(os.path.join(out, "train.trace.0.*[0-9]"))
    return path


def test_a_meta_whose_checksum_tag_is_flipped_hides_no_gstep(tmp_path, pb):
    out = str(tmp_path)
    path = write_gsteps(out)
    meta_path = path + ".meta"
    content = open(meta_path, "rb").read()
    assert content[-6:-4] == b"\x8d\x01"  # meta_crc32c: field 17, fixed32, last.
    flip(meta_path, len(content) - 6, 0x08)  # 0x8D -> 0x85: field 17 -> 16 (a wrong wire type).
    _, gstep_end = meta_field(content, pb.Meta.DESCRIPTOR.fields_by_name["gstep_end"].number)
    assert content[gstep_end] == 109
    flip(meta_path, gstep_end, 0x04)  # gstep_end 109 -> 105: gsteps 106..109 "not in the file".
    assert pb.Meta.FromString(open(meta_path, "rb").read()).gstep_end == 105

    trace = open_trace(out)
    assert trace.files[0].meta is None
    assert "header_crc32c (field 18) but not its own checksum" in trace.files[0].meta_error
    assert [r.gstep for r in trace.records(gsteps=(106, 109))] == [106, 107, 108, 109]
    verified = run("-m", "xdl_trace", "verify", out)
    assert verified.returncode == 1 and "not its own checksum" in verified.stdout, verified.stdout
    printed = run(READ_TRACE, out)
    assert printed.returncode == 1 and "not its own checksum" in printed.stderr, printed.stderr


def reseal(pb, content, drop_header_crc):
    """The Meta re-serialized as the writer seals it, without field 18 when asked (an older
    writer's Meta, sealed but with no header_crc32c)."""
    sys.path.insert(0, os.path.dirname(READ_TRACE))
    import read_trace

    meta = pb.Meta.FromString(content)
    if drop_header_crc:
        meta.ClearField("header_crc32c")
    meta.ClearField("meta_crc32c")
    body = meta.SerializeToString()
    return body + b"\x8d\x01" + read_trace.crc32c(body).to_bytes(4, "little")


@pytest.mark.parametrize("older_meta", [False, True], ids=["meta", "meta_without_field_18"])
def test_a_meta_whose_format_version_tag_is_flipped_is_not_called_xdls(tmp_path, pb, older_meta):
    out = str(tmp_path)
    path = write_steps(out)
    meta_path = path + ".meta"
    content = reseal(pb, open(meta_path, "rb").read(), drop_header_crc=older_meta)
    open(meta_path, "wb").write(content)
    assert run("-m", "xdl_trace", "verify", out).returncode == 0
    flip(meta_path, len(content) - 6, 0x08)  # meta_crc32c's tag: field 17 -> 16.
    number = pb.Meta.DESCRIPTOR.fields_by_name["format_version"].number
    tag, _ = meta_field(content, number)
    assert content[tag] == number << 3  # 0x68: field 13, varint.
    flip(meta_path, tag, 0x08)  # 0x68 -> 0x60: field 12 (run_id, a string) as a varint.
    assert pb.Meta.FromString(open(meta_path, "rb").read()).format_version == 0

    verified = run("-m", "xdl_trace", "verify", out)
    assert verified.returncode == 1, verified.stdout
    assert "UNVERIFIABLE" not in verified.stdout, verified.stdout
    assert "XDL Meta, no checksum" not in verified.stdout, verified.stdout
    expected = "not its own checksum" if not older_meta else "no format_version but holds field"
    assert expected in verified.stdout, verified.stdout
    assert expected in open_trace(out).files[0].meta_error


# --- Item 7: a frame longer than the file, in a sparse file -------------------------------------

MAXRSS = textwrap.dedent(
    """
    import atexit, resource, runpy, sys
    def report():
        with open("/proc/self/io") as f:
            read = [line.split()[1] for line in f if line.startswith("rchar")][0]
        usage = resource.getrusage(resource.RUSAGE_SELF)
        sys.stderr.write(f"maxrss_kb={usage.ru_maxrss} rchar={read}\\n")
    atexit.register(report)
    target, sys.argv = sys.argv[1], sys.argv[1:]
    if target == "xdl_trace":
        runpy.run_module("xdl_trace", run_name="__main__")
    else:
        runpy.run_path(target, run_name="__main__")
    """
)
SPARSE_BYTES = 1 << 30


def measured(*args):
    """Runs a reader; (result, its peak RSS in bytes, bytes it read through read(2))."""
    result = run("-c", MAXRSS, *args, timeout=600)
    line = [ln for ln in result.stderr.splitlines() if ln.startswith("maxrss_kb=")][-1]
    fields = dict(item.split("=") for item in line.split())
    return result, int(fields["maxrss_kb"]) * 1024, int(fields["rchar"])


def test_a_frame_longer_than_its_sparse_file_is_known_without_reading_the_file(tmp_path):
    out = str(tmp_path)
    path = write_steps(out)
    at = os.path.getsize(path)
    with open(path, "ab") as f:  # One more frame, claiming 0xFFFFFFF0 bytes, then a hole.
        f.write(np.uint32(0xFFFFFFF0).tobytes() + b"\x08\x01")
    os.truncate(path, SPARSE_BYTES)
    assert os.stat(path).st_blocks * 512 < (1 << 20)  # Sparse: the GiB is not on disk.
    torn = f"{path}: torn tail at byte offset {at}: zero-filled"

    # Imported first: what the interpreter, numpy and the package take before reading anything.
    _, baseline, _ = measured("xdl_trace", "--help")
    for command in ("info", "find-nan", "dump"):
        result, rss, _ = measured("xdl_trace", command, out)
        assert result.returncode == 0, (command, result.stderr)
        if command != "info":  # info trusts a closed file's Meta: it walks no frame.
            assert torn in result.stderr, (command, result.stderr)
        assert rss - baseline < SPARSE_BYTES // 8, (command, rss, baseline)
    _, _, read_at_start = measured(READ_TRACE, "--help")  # Its imports' files.
    result, rss, read = measured(READ_TRACE, out)
    assert f"torn tail at byte offset {at}" in result.stderr, result.stderr
    assert read - read_at_start < (1 << 20), (read, read_at_start)  # The bytes before the hole.
    assert rss - baseline < SPARSE_BYTES // 8, (rss, baseline)
