"""Tests of the bundled stand-alone reader script xdl_trace/tools/read_trace.py."""

import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import trace_file_maker as tm
import xdl_files as xf

SCRIPT = os.path.join(tm.REPO, "xdl_trace", "tools", "read_trace.py")
KEYS = ["w", "loss"]


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("read_trace_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_messages_match_the_real_proto():
    script, real = load_script(), tm.pb2()
    for name in ("Header", "Column", "Record", "Meta"):
        mine = getattr(script, name).DESCRIPTOR
        theirs = getattr(real, name).DESCRIPTOR
        assert mine.full_name == theirs.full_name
        for field in mine.fields:
            other = theirs.fields_by_number[field.number]
            assert (field.name, field.type, field.label) == (other.name, other.type, other.label)
        if name != "Record":  # Record's device-tracing fields stay unknown to the script.
            assert {f.number for f in theirs.fields} == {f.number for f in mine.fields}
        else:
            assert {f.number for f in theirs.fields if f.number <= 4} == {1, 2, 3, 4}
    theirs_enum = real.DESCRIPTOR.enum_types_by_name["Type"]
    assert [(v.name, v.number) for v in theirs_enum.values] == [
        (n, i) for i, (n, _) in enumerate(script.DTYPES)
    ]


def test_script_parses_real_serializations_and_keeps_unknown_fields():
    script = load_script()
    rec = tm.simple_records([3])[0]
    rec.host_span.add().gstep = 3
    body = rec.SerializeToString()
    parsed = script.Record()
    parsed.ParseFromString(body)
    assert (parsed.gstep, parsed.lstep, parsed.timestamp) == (3, 3, rec.timestamp)
    np.testing.assert_array_equal(
        script.column_to_array(parsed.column[0]),
        (np.arange(6, dtype=np.float32) + 30).reshape(2, 3),
    )
    assert script.column_to_array(parsed.column[1]) == 1.5
    assert parsed.SerializeToString() == body  # Unknown fields survive a round trip.


def test_script_runs_stand_alone_and_prints_like_the_xdl_reader(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(3)))
    recs = tm.simple_records(range(3, 5))
    torn = tm.frame(recs[-1].SerializeToString())[:7]
    tm.write_file(f"{d}/train.trace.0.2", KEYS, recs[:1], tail=torn, closed=False)
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['read_trace.py', {d!r}]\n"
        "try:\n"
        f"    runpy.run_path({SCRIPT!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('xdl_trace'))\n"
        "print('LOADED', loaded)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "LOADED []" in out  # Neither the package nor its compiled extension.
    assert out.count("keys: ['w', 'loss']") == 2
    assert "gstep: 0 lstep: 0 timestamp: 1700000000000" in out
    assert "  loss Double[]: 1." in out and "w Float[2, 3]:" in out
    assert "gstep: 3 lstep: 3" in out and "gstep: 4" not in out
    assert "torn final frame at byte offset" in out
    # Its Meta says the file was never closed: no claim that its writer crashed.
    assert "(still being written, or its writer stopped before closing it)" in out
    assert "record_count=3" in out and "closed_cleanly=True" in out
    assert "record_count=1" in out and "closed_cleanly=False" in out
    assert out.index("train.trace.0.1") < out.index("train.trace.0.2")


def test_script_runs_anywhere_with_its_descriptor_set_and_says_when_it_is_missing(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(2)))
    tool = tmp_path / "tool"
    tool.mkdir()
    shutil.copy(SCRIPT, tool)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XDL_TRACE_PROTOSET")}

    def run():
        return subprocess.run(
            [sys.executable, str(tool / "read_trace.py"), str(d)],
            capture_output=True,
            text=True,
            cwd=str(tmp_path),
            env=env,
            timeout=120,
        )

    alone = run()
    assert alone.returncode == 1 and "Traceback" not in alone.stderr, alone.stderr
    assert alone.stderr.startswith("read_trace.py: error: cannot read the schema ")
    assert "xdl_trace.protoset" in alone.stderr
    shutil.copy(os.path.join(os.path.dirname(SCRIPT), "xdl_trace.protoset"), tool)
    together = run()
    assert together.returncode == 0, together.stderr
    assert "keys: ['w', 'loss']" in together.stdout and "gstep: 1 lstep: 1" in together.stdout


def test_script_options(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    tm.write_file(path, KEYS, tm.simple_records(range(4)), meta=False)
    result = subprocess.run(
        [sys.executable, SCRIPT, path, "--keys", "loss", "--max-records", "2", "--summary"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "meta: (none)" in result.stdout
    assert result.stdout.count("gstep:") == 2
    assert "loss Double[]: min=0.5" in result.stdout and " w " not in result.stdout


# --- Hostile and corrupt input (issue 9: items 7-10 and 13) ------------------------------------

# Everything below runs the script as a program, as a user would: a subprocess with a time limit
# (a FIFO must not hang it) and an address-space limit (/dev/zero must not eat the machine).
HEADER = tm.frame(b"".join(b"\x0a" + bytes([len(k)]) + k.encode() for k in KEYS))
GOOD = tm.simple_records([7])[0].SerializeToString()
INT64_MAX = 2**63 - 1


def varint(value):
    value &= 2**64 - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, wire_type, payload=b""):
    """One field: varint payloads are passed as ints, length-delimited ones as bytes."""
    tag = varint(number << 3 | wire_type)
    if wire_type == 0:
        return tag + varint(payload)
    if wire_type == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload


def column_bytes(dtype, shape, data, packed=True):
    body = field(1, 0, dtype) if dtype else b""
    if shape:
        if packed:
            body += field(2, 2, b"".join(varint(d) for d in shape))
        else:
            body += b"".join(field(2, 0, d) for d in shape)
    return body + field(3, 2, data)


def record_bytes(columns, gstep=7):
    loss = column_bytes(5, [], np.float64(0.5).tobytes())
    body = field(1, 0, gstep) + field(2, 0, gstep)
    return body + b"".join(field(3, 2, c) for c in columns + [loss]) + field(4, 0, 1700000000007)


def limit_memory():
    """Caps a subprocess's address space at 2 GiB, so a reader that reads a FIFO or /dev/zero
    to the end fails fast. Not under AddressSanitizer (make sanitize): its shadow memory
    reserves terabytes of address space, and the sanitizer watches memory itself."""
    import resource

    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def run_script(*args, timeout=60):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        preexec_fn=limit_memory,
    )


def write(d, data, name="train.trace.0.1", meta=None):
    """Writes data file `name` in `d`; `meta` is the .meta's bytes, or a dict of Meta fields."""
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    if isinstance(meta, dict):
        m = tm.pb2().Meta(**{"format_version": 1, **meta})
        meta = m.SerializeToString()
    if meta is not None:
        with open(path + ".meta", "wb") as f:
            f.write(meta)
    return path


def after(*frames):
    """Byte offset just past `frames` (raw frame bytes)."""
    return sum(len(f) for f in frames)


CASES = {}


def case(build):
    """Registers a hostile input: build(dir) -> (path, exit code, stderr lines, stdout parts[,
    the script's argument when not `path`]).

    Stderr lines are regexes ("{path}" stands for the path) that must match the lines of
    stderr one for one; stdout parts must all appear in stdout."""
    CASES[build.__name__] = build
    return build


ERR = "read_trace.py: error: "
WARN = "read_trace.py: warning: "


@case
def empty_file(d):
    path = write(d, b"")
    return (
        path,
        0,
        [WARN + "{path}: empty file, no Header frame"],
        ["torn final frame at byte offset 0"],
    )


@case
def header_only_file(d):
    path = write(d, HEADER, meta={"data_bytes": len(HEADER)})
    return path, 0, [], ["keys: ['w', 'loss']"]


@case
def garbage_header(d):
    path = write(d, tm.frame(b"\xff\xff\xff") + tm.frame(GOOD))
    return (
        path,
        1,
        [
            ERR
            + "{path}: corrupt at byte offset 4: bad varint in field tag \\(in the Header frame\\)"
        ],
        [],
    )


@case
def header_key_not_length_delimited(d):
    path = write(d, tm.frame(field(1, 0, 3)) + tm.frame(GOOD))
    return (
        path,
        1,
        [ERR + "{path}: corrupt at byte offset 4: Header.key is not length-delimited"],
        [],
    )


@case
def header_key_not_utf8(d):
    path = write(d, tm.frame(field(1, 2, b"ok") + field(1, 2, b"\xff\xfe")) + tm.frame(GOOD))
    return path, 1, [ERR + "{path}: corrupt at byte offset 8: Header.key 1 is not valid UTF-8"], []


@case
def truncated_varint_in_record(d):
    good = tm.frame(GOOD)
    path = write(d, HEADER + good + tm.frame(b"\x08\x80\x80"))
    at = after(HEADER, good) + 4 + 1
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: bad varint$"], ["gstep: 7 "]


@case
def truncated_varint_in_tag(d):
    path = write(d, HEADER + tm.frame(field(1, 0, 7) + b"\x80"))
    at = after(HEADER) + 4 + 2
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: bad varint in field tag"], []


@case
def invalid_field_number_zero(d):
    path = write(d, HEADER + tm.frame(field(1, 0, 7) + b"\x00\x01"))
    at = after(HEADER) + 4 + 2
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: invalid field number"], []


@case
def unsupported_wire_type(d):
    path = write(d, HEADER + tm.frame(field(1, 0, 7) + b"\x0f\x01\x02"))
    at = after(HEADER) + 4 + 2
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: unsupported wire type"], []


@case
def fixed64_past_end_of_message(d):
    path = write(d, HEADER + tm.frame(field(1, 0, 7) + field(9, 1, b"\x01\x02")))
    at = after(HEADER) + 4 + 2
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: fixed64 field overruns its message"],
        [],
    )


@case
def gstep_not_a_varint(d):
    path = write(d, HEADER + tm.frame(field(1, 2, b"\x07") + GOOD))
    at = after(HEADER) + 4
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: Record field 1 is not a varint"],
        [],
    )


@case
def column_not_length_delimited(d):
    path = write(d, HEADER + tm.frame(GOOD + field(3, 0, 1)))
    at = after(HEADER) + 4 + len(GOOD)
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: Record.column is not length-delimited"],
        [],
    )


@case
def dtype_not_a_varint(d):
    col = field(1, 2, b"\x04") + field(3, 2, b"")
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2  # gstep, lstep, then the column's tag and length.
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: Column.dtype is not a varint"],
        [],
    )


@case
def shape_wrong_wire_type(d):
    col = field(1, 0, 4) + field(2, 5, b"\x02\x00\x00\x00") + field(3, 2, b"\0" * 8)
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2 + 2
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: Column.shape has a wrong wire type"],
        [],
    )


@case
def bad_varint_in_packed_shape(d):
    col = field(1, 0, 4) + field(2, 2, b"\x02\x80") + field(3, 2, b"\0" * 8)
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2 + 2
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: bad varint in packed Column.shape"],
        [],
    )


@case
def column_length_past_end_of_record(d):
    body = field(1, 0, 7) + field(2, 0, 7) + b"\x1a\x7f" + b"\x08\x04"
    path = write(d, HEADER + tm.frame(body))
    at = after(HEADER) + 4 + 4
    return (
        path,
        1,
        [
            ERR
            + f"{{path}}: corrupt at byte offset {at}: length-delimited field overruns its message"
        ],
        [],
    )


@case
def negative_dimension(d):
    col = column_bytes(4, [2, -3], b"\0" * 24)
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2 + 2  # The shape field, after the dtype field.
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: column 0 \\('w'\\): negative dimension -3"],
        [],
    )


@case
def negative_dimension_unpacked(d):
    col = column_bytes(4, [2, -3], b"\0" * 24, packed=False)
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2 + 2 + 2  # The second shape field.
    return (
        path,
        1,
        [ERR + f"{{path}}: corrupt at byte offset {at}: column 0 \\('w'\\): negative dimension -3"],
        [],
    )


@case
def shape_product_overflows_int64(d):
    col = column_bytes(0, [2**30, 2**30, 16], b"")
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2
    msg = f"column 0 \\('w'\\): shape \\[1073741824, 1073741824, 16\\] has more than {INT64_MAX} elements"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: {msg}"], []


@case
def shape_product_times_dtype_size_overflows(d):
    col = column_bytes(4, [2**30, 2**30, 4], b"")
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2
    msg = "column 0 \\('w'\\): column data has 0 bytes but its shape \\[1073741824, 1073741824, 4\\] and Float dtype need 18446744073709551616"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: {msg}"], []


@case
def data_length_not_shape_times_size(d):
    col = column_bytes(4, [2, 3], b"\0" * 20)
    path = write(d, HEADER + tm.frame(GOOD) + tm.frame(record_bytes([col])))
    at = after(HEADER, tm.frame(GOOD)) + 4 + 4 + 2
    msg = "column 0 \\('w'\\): column data has 20 bytes but its shape \\[2, 3\\] and Float dtype need 24"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: {msg}"], ["gstep: 7 "]


@case
def scalar_without_data(d):
    col = column_bytes(3, [], b"\0" * 4)
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    at = after(HEADER) + 4 + 4 + 2
    msg = "column 0 \\('w'\\): column data has 4 bytes but its shape \\[\\] and Int64 dtype need 8"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: {msg}"], []


@case
def fewer_columns_than_keys(d):
    body = field(1, 0, 7) + field(2, 0, 7) + field(3, 2, column_bytes(4, [1], b"\0" * 4))
    path = write(d, HEADER + tm.frame(GOOD) + tm.frame(body))
    at = after(HEADER, tm.frame(GOOD))
    msg = "record has 1 columns but the header has 2 keys"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: {msg}"], ["gstep: 7 "]


@case
def more_columns_than_keys(d):
    path = write(d, HEADER + tm.frame(GOOD + field(3, 2, column_bytes(4, [1], b"\0" * 4))))
    msg = "record has 3 columns but the header has 2 keys"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {after(HEADER)}: {msg}"], []


@case
def frame_length_past_end_inside_meta(d):
    data = HEADER + tm.frame(GOOD)
    path = write(d, data[:-5], meta={"data_bytes": len(data), "record_count": 1})
    at = after(HEADER)
    msg = f"frame length {len(GOOD)} runs past the end of the file \\({len(data) - 5} bytes\\) inside the {len(data)} bytes the Meta covers"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: {msg}"], []


@case
def length_prefix_cut_short_inside_meta(d):
    data = HEADER + tm.frame(GOOD)
    path = write(d, data[: len(HEADER) + 2], meta={"data_bytes": len(data), "record_count": 1})
    msg = f"length prefix cut short but the Meta covers {len(data)} bytes"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {len(HEADER)}: {msg}"], []


@case
def file_shorter_than_meta_at_a_frame_boundary(d):
    data = HEADER + tm.frame(GOOD) + tm.frame(GOOD)
    path = write(d, data[: -len(tm.frame(GOOD))], meta={"data_bytes": len(data), "record_count": 2})
    at = len(data) - len(tm.frame(GOOD))
    msg = f"the file ends at byte offset {at} but its Meta covers {len(data)} bytes"
    return path, 1, [ERR + f"{{path}}: corrupt at byte offset {at}: {msg}"], ["gstep: 7 "]


@case
def torn_tail_past_meta(d):
    data = HEADER + tm.frame(GOOD)
    path = write(d, data + tm.frame(GOOD)[:9], meta={"data_bytes": len(data), "record_count": 1})
    return path, 0, [], ["gstep: 7 ", f"torn final frame at byte offset {len(data)}"]


@case
def garbage_meta(d):
    path = write(d, HEADER + tm.frame(GOOD), meta=b"\xff\xff\xff\xff")
    return (
        path,
        1,
        [ERR + "{path}.meta: not a serialized Meta"],
        ["meta: (unreadable)", "gstep: 7 "],
    )


@case
def oversized_meta(d):
    path = write(d, HEADER + tm.frame(GOOD), meta=b"\x08\x01" * 40000)
    msg = "{path}.meta: 80000 bytes, more than a Meta can be \\(65536\\)"
    return path, 1, [ERR + msg], ["meta: (unreadable)", "gstep: 7 "]


@case
def meta_from_a_newer_format(d):
    path = write(d, HEADER + tm.frame(GOOD), meta={"format_version": 2})
    msg = (
        "{path}.meta: format_version 2 is newer than this reader knows \\(1\\): not reading {path}"
    )
    return path, 1, [ERR + msg], []


@case
def meta_with_negative_format_version(d):
    path = write(d, HEADER + tm.frame(GOOD), meta={"format_version": -1})
    msg = "{path}.meta: format_version -1 is not one this reader knows: not reading {path}"
    return path, 1, [ERR + msg], []


@case
def unknown_dtype_is_opaque_bytes(d):
    col = column_bytes(14, [2, 3], b"abcde")  # 5 bytes: a future dtype's size is unknown.
    path = write(d, HEADER + tm.frame(record_bytes([col])) + tm.frame(GOOD))
    warn = WARN + "{path}: dtype 14 is unknown to this reader: its columns are read as raw bytes"
    return path, 0, [warn], ["w Unknown(14)[2, 3] raw bytes: [ 97  98  99 100 101]", "gstep: 7 "]


@case
def negative_dtype_is_opaque_bytes(d):
    col = column_bytes(-1, [1], b"xy")
    path = write(d, HEADER + tm.frame(record_bytes([col])))
    warn = WARN + "{path}: dtype -1 is unknown to this reader: its columns are read as raw bytes"
    return path, 0, [warn], ["w Unknown(-1)[1] raw bytes: [120 121]"]


@case
def zero_filled_tail(d):  # A power loss with fsync off: the size grew, the data never landed.
    data = HEADER + tm.frame(GOOD) + tm.frame(GOOD)
    path = write(d, data + b"\0" * 4096)
    warn = (
        WARN
        + f"{{path}}: torn tail at byte offset {len(data)}: zero-filled from byte offset {len(data)} to the end \\(4096 bytes\\), as a power loss leaves unsynced data"
    )
    return path, 0, [warn], ["gstep: 7 ", f"torn final frame at byte offset {len(data)}"]


@case
def zero_filled_inside_a_frame(d):
    data = HEADER + tm.frame(GOOD)
    partial = tm.frame(GOOD)[:26]  # Ends in a non-zero byte.
    path = write(d, data + partial + b"\0" * 4000)
    warn = (
        WARN
        + f"{{path}}: torn tail at byte offset {len(data)}: zero-filled from byte offset {len(data) + 26} to the end \\(4000 bytes\\)"
    )
    return (
        path,
        0,
        [warn + ", as a power loss leaves unsynced data"],
        ["gstep: 7 ", f"torn final frame at byte offset {len(data)}"],
    )


@case
def zero_filled_tail_the_meta_covered(d):  # fsync off: the Meta's rename landed, the data did not.
    data = HEADER + tm.frame(GOOD)
    path = write(d, data + b"\0" * 100, meta={"data_bytes": len(data) + 100, "record_count": 2})
    warn = (
        WARN
        + f"{{path}}: torn tail at byte offset {len(data)}: zero-filled from byte offset {len(data)} to the end \\(100 bytes\\), as a power loss leaves unsynced data; the Meta covers {len(data) + 100} bytes, so records it counted were lost"
    )
    return path, 0, [warn], ["gstep: 7 "]


@case
def zeros_followed_by_data_are_corruption(d):
    data = HEADER + tm.frame(GOOD)
    path = write(d, data + tm.frame(b"\0" * 10) + tm.frame(GOOD))
    msg = f"corrupt at byte offset {len(data) + 4}: invalid field number"
    return path, 1, [ERR + "{path}: " + msg], ["gstep: 7 "]


@case
def data_file_is_a_fifo(d):
    path = os.path.join(d, "train.trace.0.1")
    os.mkfifo(path)
    return path, 1, [ERR + "{path}: not a regular file \\(a FIFO\\)"], []


@case
def data_file_links_to_dev_zero(d):
    path = os.path.join(d, "train.trace.0.1")
    os.symlink("/dev/zero", path)
    return path, 1, [ERR + "{path}: not a regular file \\(a character device\\)"], []


@case
def data_file_is_a_directory(d):
    path = os.path.join(d, "train.trace.0.1")
    os.mkdir(path)
    return path, 1, [ERR + "{path}: not a regular file \\(a directory\\)"], [], d


@case
def meta_links_to_dev_zero(d):
    path = write(d, HEADER + tm.frame(GOOD))
    os.symlink("/dev/zero", path + ".meta")
    return (
        path,
        1,
        [ERR + "{path}.meta: not a regular file \\(a character device\\)"],
        ["gstep: 7 "],
    )


@case
def meta_is_a_fifo(d):
    path = write(d, HEADER + tm.frame(GOOD))
    os.mkfifo(path + ".meta")
    return path, 1, [ERR + "{path}.meta: not a regular file \\(a FIFO\\)"], ["gstep: 7 "]


@case
def missing_file(d):
    path = os.path.join(d, "train.trace.0.9")
    return path, 1, [ERR + "{path}: No such file or directory"], []


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_gives_one_line_and_an_exit_code(tmp_path, name):
    path, code, stderr_lines, stdout_parts, *arg = CASES[name](str(tmp_path))
    result = run_script(*(arg or [path]), timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == len(stderr_lines), result.stderr
    for line, pattern in zip(lines, stderr_lines):
        assert re.match(pattern.replace("{path}", re.escape(path)), line), (line, pattern)
    for part in stdout_parts:
        assert part in result.stdout, (part, result.stdout)
    assert result.returncode == code, (result.returncode, result.stderr)


def test_a_directory_scan_reports_a_planted_non_regular_file_and_reads_the_rest(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(2)))
    os.symlink("/dev/zero", f"{d}/train.trace.0.2")
    os.mkfifo(f"{d}/train.trace.0.3")
    result = run_script(d, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"read_trace.py: error: {d}/train.trace.0.2: not a regular file (a character device)",
        f"read_trace.py: error: {d}/train.trace.0.3: not a regular file (a FIFO)",
    ]
    assert result.stdout.count("gstep:") == 2


def test_the_api_raises_one_error_type_naming_file_and_offset(tmp_path):
    script = load_script()
    col = column_bytes(4, [2, -3], b"\0" * 24)
    path = write(str(tmp_path), HEADER + tm.frame(record_bytes([col])))
    with pytest.raises(script.TraceFileError, match=f"{re.escape(path)}: corrupt at byte offset"):
        list(script.read_file(path))
    assert issubclass(script.TraceFileError, ValueError)


def test_unknown_dtype_column_reads_as_raw_bytes_with_a_warning():
    script = load_script()
    column = script.Column()
    column.ParseFromString(column_bytes(14, [3], b"\x01\x02\x03\x04"))
    with pytest.warns(script.UnknownDTypeWarning, match="dtype 14 is unknown"):
        values = script.column_to_array(column)
    assert values.dtype == np.uint8 and values.tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="negative dimension -2"):
        column.ParseFromString(column_bytes(4, [-2], b""))
        script.column_to_array(column)


def test_zero_tail_records_all_come_back_through_the_api(tmp_path):
    script = load_script()
    data = HEADER + tm.frame(GOOD) * 3
    path = write(str(tmp_path), data + b"\0" * 8192)
    with pytest.warns(script.TornTailWarning, match=f"torn tail at byte offset {len(data)}"):
        events = list(script.read_file(path))
    assert [k for k, _ in events] == ["header", "record", "record", "record", "torn"]
    assert events[-1][1] == len(data)


# --- XDL's own files (issue 9, item 14) --------------------------------------------------------


def test_xdl_writer_writes_what_xdl_writes(tmp_path):
    d = str(tmp_path)
    paths = xf.write_xdl_run(d, KEYS, xf.xdl_steps(7), max_file_m_size=150e-6)
    assert [os.path.basename(p) for p in paths] == [
        "train.trace.0.1",
        "train.trace.0.2",
        "train.trace.0.3",
    ]
    pb = tm.pb2()
    lsteps = []
    for path in paths:
        data = open(path, "rb").read()
        (n,) = struct.unpack_from("<I", data, 0)
        assert list(pb.Header.FromString(data[4 : 4 + n]).key) == KEYS  # A Header in every file.
        pos = 4 + n
        while pos < len(data):
            (n,) = struct.unpack_from("<I", data, pos)
            lsteps.append(pb.Record.FromString(data[pos + 4 : pos + 4 + n]).lstep)
            pos += 4 + n
        meta_bytes = open(path + ".meta", "rb").read()
        assert set(xf.meta_field_numbers(meta_bytes)) <= {1, 2, 3, 4, 5, 6}
    assert lsteps == list(range(1, 8))  # lstep counts from 1.
    last = pb.Meta.FromString(open(paths[-1] + ".meta", "rb").read())
    assert (last.lstep_begin, last.lstep_end) == (-1, 7)  # XDL's -1: the begin never learnt.
    first = pb.Meta.FromString(open(paths[0] + ".meta", "rb").read())
    assert (first.lstep_begin, first.gstep_begin, first.record_count) == (1, 100, 0)
    os.mkdir(tmp_path / "killed")
    crashed = xf.write_xdl_run(str(tmp_path / "killed"), KEYS, xf.xdl_steps(2), finish=False)
    assert os.path.getsize(crashed[0] + ".meta") == 0  # XDL writes its Meta only when done.


def test_script_reads_xdl_files_and_does_not_call_their_record_count_zero(tmp_path):
    d = str(tmp_path)
    xf.write_xdl_run(
        d,
        KEYS,
        xf.xdl_steps(7),
        once_keys=["vocab"],
        once_values=[np.arange(4, dtype=np.int64)],
        max_file_m_size=150e-6,
    )
    result = run_script(d)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    out = result.stdout
    assert out.count("gstep:") == 7 and "gstep: 100 lstep: 1 timestamp: 1700000000010" in out
    assert "vocab Int64[4]: [0 1 2 3]" in out and "vocab Float[0]: []" in out
    assert "record_count=0" not in out
    assert out.count("record_count=unknown") == 4
    assert "meta: XDL lstep_begin=1 lstep_end=" in out
    assert "lstep_begin=-1 lstep_end=7" in out


def test_script_reads_a_killed_xdl_run(tmp_path):
    d = str(tmp_path)
    xf.write_xdl_run(d, KEYS, xf.xdl_steps(3), finish=False)
    result = run_script(d)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "meta: (empty: XDL writes its Meta when it finishes a file)" in result.stdout
    assert result.stdout.count("gstep:") == 3


def test_valid_but_unusual_encodings_are_not_called_corrupt(tmp_path):
    """No false alarms: what protobuf accepts and a writer may legally produce reads back."""
    script = load_script()
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    reordered = (  # Timestamp first, dtype 0 written out, unpacked shape, unknown field 9 in a column.
        field(4, 0, 1700000000001)
        + field(3, 2, column_bytes(4, [2, 3], w.tobytes(), packed=False) + field(9, 0, 5))
        + field(2, 0, 1)
        + field(3, 2, field(1, 0, 0) + field(2, 2, varint(2)) + field(3, 2, b"\x01\xff"))
        + field(1, 0, 1)
    )
    with_device_fields = tm.simple_records([2])[0]
    with_device_fields.host_span.add().gstep = 2
    with_device_fields.device_trace.add().tracer = "fake"
    data = HEADER + tm.frame(reordered) + tm.frame(with_device_fields.SerializeToString())
    path = write(str(tmp_path), data, meta={"data_bytes": len(data), "record_count": 2})
    events = list(script.read_file(path, script.read_meta(path)))
    assert [k for k, _ in events] == ["header", "record", "record"]
    first, second = events[1][1], events[2][1]
    assert (first.gstep, first.lstep, first.timestamp) == (1, 1, 1700000000001)
    np.testing.assert_array_equal(script.column_to_array(first.column[0]), w)
    assert script.column_to_array(first.column[1]).tolist() == [1, -1]
    assert second.SerializeToString() == with_device_fields.SerializeToString()  # Kept whole.


def test_the_api_refuses_a_directory_and_a_device(tmp_path):
    script = load_script()
    for path, kind in ((str(tmp_path), "a directory"), ("/dev/null", "a character device")):
        with pytest.raises(script.TraceFileError, match=f"not a regular file \\({kind}\\)"):
            list(script.read_file(path))


def test_mutated_files_give_records_or_one_error_type(tmp_path):
    """A small seeded fuzz: flipped, cut and inserted bytes never raise anything else."""
    import random
    import warnings

    script = load_script()
    recs = tm.simple_records(range(4))
    recs[1].host_span.add().gstep = 1
    path = str(tmp_path / "train.trace.0.1")
    base = tm.write_file(path, KEYS, recs, meta=False)
    rng, errors = random.Random(9), 0
    for _ in range(600):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(data))
            op = rng.random()
            if op < 0.6:
                data[pos] = rng.randrange(256)
            elif op < 0.8:
                del data[pos : pos + rng.randint(1, 8)]
            else:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        with open(path, "wb") as f:
            f.write(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for kind, value in script.read_file(path):
                    if kind == "record":
                        [script.column_to_array(c) for c in value.column]
        except script.TraceFileError as e:
            assert str(e).startswith(f"{path}: corrupt at byte offset "), e
            assert "\n" not in str(e)
            errors += 1
    assert errors > 200  # Most mutations are caught, not read as something else.


def test_script_reads_an_xdl_run_that_traced_no_step(tmp_path):
    """XDL opens its first file at start and writes the Header at lstep 1: no step leaves an
    empty data file and a Meta of -1s."""
    path = xf.write_xdl_run(str(tmp_path), KEYS, [])[0]
    assert os.path.getsize(path) == 0
    result = run_script(str(tmp_path))
    assert result.returncode == 0
    assert result.stderr == f"read_trace.py: warning: {path}: empty file, no Header frame\n"
    assert "meta: XDL lstep_begin=-1 lstep_end=-1 gstep_begin=-1" in result.stdout
    assert "torn final frame at byte offset 0 (no Header frame)" in result.stdout
