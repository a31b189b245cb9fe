#!/usr/bin/env python3
"""Stand-alone reader of XDL / xdl_trace trace files; needs only numpy and protobuf.

This file can be copied anywhere together with xdl_trace.protoset, the descriptor
set of proto/xdl_trace.proto that the build writes beside it (or named by the
environment variable XDL_TRACE_PROTOSET): it does not import the xdl_trace
package or its compiled extension, and it needs no generated ``*_pb2`` module.
The messages a reader needs (Header, Column, Record, Meta), the dtype enum and
the Header's column descriptors (what each column holds: a value, or a stats or
histogram summary, whose fields --summary prints by name) are built at run time
from that descriptor set, so a new Meta field or dtype needs no edit here.
Record fields beyond those XDL defined (device tracing) are kept as unknown
fields.

Usage:  python3 read_trace.py PATH [PATH ...] [--keys k1,k2] [--max-records N] [--summary]
                              [--no-checksums]

PATH is a data file ("train.trace.0.1") or a directory (every data file in it,
by rank, then index). Prints each file's Meta, the header keys, then each
record's gstep, lstep and columns, like the XDL wiki's reader.

Hostile or damaged input never ends in a traceback: a corrupt file is one line
on stderr naming the file and the byte offset ("PATH: corrupt at byte offset
N: what", the C++ reader's wording), and the exit status is 1. Only regular
files are read (a FIFO or a link to /dev/zero is refused), a Meta is read only
up to 64 KiB, and column shapes are checked against their data. What a crash
or a power loss leaves is not corruption: a frame cut short at the end of the
file, or a zero-filled tail, ends the file with every complete record read and
a warning. Each record's checksum (Record.crc32c) and the Meta's own are checked
when present: a damaged record is corruption, never printed as data. A dtype
newer than this script is read as raw bytes (a warning).
Files XDL itself wrote (no Meta checksum or record count) read normally.
docs/format.md is the format; docs/reliability.md lists the inputs tested.
"""

import argparse
import errno
import os
import re
import stat
import struct
import sys
import warnings

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

# The schema: proto/xdl_trace.proto (with device_trace.proto) as a descriptor set that protoc writes
# at build time beside this script (--descriptor_set_out, --include_imports). Message classes,
# field names and numbers, the dtype enum and the column descriptors' enums all come from it.
DESCRIPTOR_SET = "xdl_trace.protoset"
DESCRIPTOR_SET_ENV = "XDL_TRACE_PROTOSET"  # Where to find it when the script was copied alone.
# The Record fields this script reads; the rest (device tracing, the checksum, read by hand
# below) stay unknown fields, kept on a round trip like any newer writer's field.
_RECORD_FIELDS_READ = ("gstep", "lstep", "column", "timestamp")
# numpy reads each Type value as numpy spells its name ("UInt16" -> uint16), except XDL's own
# names and bfloat16, which numpy lacks (its raw bits read as uint16). A value numpy cannot
# name is read as raw bytes, as a dtype newer than this script.
_NUMPY_SPELLING = {"Float": "float32", "Double": "float64", "Byte": "uint8", "BFloat16": "uint16"}


def _descriptor_set_path():
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), DESCRIPTOR_SET)
    return os.environ.get(DESCRIPTOR_SET_ENV) or beside


def _file_descriptors(path=None):
    """(FileDescriptorProtos of the descriptor set at `path` (default: beside this script) with
    Record trimmed to the fields this script reads, {Record field name: number} before that)."""
    path = path or _descriptor_set_path()
    try:
        with open(path, "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
    except (OSError, message.DecodeError) as e:
        sys.exit(
            f"read_trace.py: error: cannot read the schema {path} ({e}): copy {DESCRIPTOR_SET} "
            f"(built from proto/*.proto) beside the script, or name it in ${DESCRIPTOR_SET_ENV}"
        )
    for file_proto in files:
        for m in file_proto.message_type:
            if file_proto.package == "xdl.proto" and m.name == "Record":
                record_numbers = {f.name: f.number for f in m.field}
                kept = [f for f in m.field if f.name in _RECORD_FIELDS_READ]
                del m.field[:]
                m.field.extend(kept)
    return files, record_numbers


def message_classes(file_protos, names):
    """Message classes by name for `names` of package xdl.proto in `file_protos` (a list of
    FileDescriptorProto, imports first), built in a private pool: no clash with other
    xdl.proto modules."""
    pool = descriptor_pool.DescriptorPool()
    for file_proto in file_protos:
        pool.Add(file_proto)
    classes = {}
    for name in names:
        descriptor = pool.FindMessageTypeByName("xdl.proto." + name)
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
            classes[name] = message_factory.GetMessageClass(descriptor)
        else:
            classes[name] = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return classes


_FILES, _RECORD_NUMBERS = _file_descriptors()
_CLASSES = message_classes(_FILES, ("Header", "Column", "Record", "Meta"))
Header = _CLASSES["Header"]
Column = _CLASSES["Column"]
Record = _CLASSES["Record"]
Meta = _CLASSES["Meta"]


def _numpy_type(name):
    try:
        return np.dtype(_NUMPY_SPELLING.get(name, name.lower()))
    except TypeError:
        return None


# Wire dtype number -> (enum name, numpy dtype) for each Type value numpy can read, in order.
_TYPE = Column.DESCRIPTOR.fields_by_name["dtype"].enum_type
DTYPES = []
for _value in _TYPE.values:
    if _value.number != len(DTYPES) or _numpy_type(_value.name) is None:
        break
    DTYPES.append((_value.name, _numpy_type(_value.name)))
_COLUMN_DESCRIPTOR = Header.DESCRIPTOR.fields_by_name["column"].message_type
_CONTENTS = [v.name for v in _COLUMN_DESCRIPTOR.enum_types_by_name["Content"].values]
# The stats summary's float64[8], in order (summary layout version 1, docs/format.md).
_STATS_FIELDS = ["count", "min", "max", "mean", "std", "l2", "nan", "inf"]

FORMAT_VERSION = 1  # The newest Meta.format_version this script knows.
META_MAX_BYTES = 64 * 1024  # A Meta is about 100 bytes: anything past this is not one.
_INT64_MAX = 2**63 - 1
_PREFIX_BYTES = 4  # The u32 LE length before each frame.
_SECTOR = 512  # The smallest unit a disk loses: a zero-filled tail spans a multiple of it.

_DATA_FILE = re.compile(r"^(?P<prefix>[^.]+)\.(?P<name>.+)\.(?P<rank>\d+)\.(?P<index>\d+)$")


class TraceFileError(ValueError):
    """A file this script cannot read; the message is one line naming the file (and offset)."""


class TornTailWarning(UserWarning):
    """A data file ends in what a crash or power loss leaves; every complete record was read."""


class UnknownDTypeWarning(UserWarning):
    """A column has a dtype newer than this script; it is read as raw bytes."""


def _bytes(buf, start, end):
    """buf[start:end] as bytes, copied once."""
    with memoryview(buf) as view:
        return bytes(view[start:end])


def _corrupt(path, offset, what):
    return TraceFileError(f"{path}: corrupt at byte offset {offset}: {what}")


# --- CRC-32C (Castagnoli), as the writer's checksums (docs/format.md) -------------------------------


def _crc_table():
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(0x82F63B78), t >> 1).astype(np.uint32)
    return t


_CRC_TABLE = _crc_table()
_CRC_TABLE_LIST = [int(v) for v in _CRC_TABLE]
_CRC_SMALL = 4096  # Below this many bytes a plain loop; above, numpy lanes.


def _crc_apply(op, c):
    """The GF(2)-linear map `op` (32 images of the register's bits) applied to registers c."""
    out = np.zeros_like(c)
    for bit in range(32):
        out ^= np.where((c >> np.uint32(bit)) & np.uint32(1), op[bit], np.uint32(0))
    return out


def crc32c(data):
    """CRC-32C of `data` (bytes-like): Value("123456789") == 0xE3069283.

    Large inputs run as numpy lanes: the raw CRC (register 0, no final xor) is linear, leading
    zeros leave it unchanged, and the standard CRC is the raw CRC of the data with its first four
    bytes inverted, inverted; so the data, zero-padded in front, is cut into lanes computed side by
    side, then merged pairwise by "append w zero bytes" operators."""
    view = memoryview(data).cast("B")
    n = len(view)
    if n < _CRC_SMALL:
        table, c = _CRC_TABLE_LIST, 0xFFFFFFFF
        for b in view.tobytes():
            c = table[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF
    width = 1 << max(6, (n.bit_length() + 1) // 2)
    lanes = -(-n // width)
    lanes = 1 << (lanes - 1).bit_length()  # A power of two, for the pairwise merge.
    padded = np.zeros(lanes * width, np.uint8)
    padded[lanes * width - n :] = np.frombuffer(view, np.uint8)
    padded[lanes * width - n : lanes * width - n + 4] ^= 0xFF
    rows = padded.reshape(lanes, width)
    c = np.zeros(lanes, np.uint32)
    for j in range(width):
        c = _CRC_TABLE[(c ^ rows[:, j]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    # The operator "append one zero byte", then doubled to `width` bytes.
    unit = np.array([1 << bit for bit in range(32)], np.uint32)
    op = _CRC_TABLE[unit & np.uint32(0xFF)] ^ (unit >> np.uint32(8))
    for _ in range(width.bit_length() - 1):
        op = _crc_apply(op, op)
    while len(c) > 1:
        c = _crc_apply(op, c[0::2]) ^ c[1::2]
        op = _crc_apply(op, op)
    return int(c[0]) ^ 0xFFFFFFFF


# --- The protobuf wire format, walked by hand to say where a message is broken -------------------
#
# protobuf parses every frame (fast, and it keeps unknown fields). When a frame does not parse, or
# its known fields re-serialized are not the frame's first bytes (protobuf keeps a known field of
# the wrong wire type as an unknown one), these functions find the offending byte. Offsets are
# into the whole file, like the C++ reader's (cpp/src/core/wire_reader.h, same wording).


class _WireError(Exception):
    def __init__(self, offset, what):
        super().__init__(what)
        self.offset, self.what = offset, what


def _varint(buf, pos, end):
    """(value, next position) of the varint at buf[pos:end], or None if cut short or too long."""
    value, shift = 0, 0
    while pos < end and shift < 70:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    return None


def _int32(raw):
    """A varint as protobuf's int32 reads it (the low 32 bits, signed)."""
    return ((raw & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000


def _fields(buf, start, end):
    """Yields (number, wire_type, varint value, payload start, payload end, field start) for each
    field of the message buf[start:end]; raises _WireError on malformed input."""
    pos = start
    while pos < end:
        field_start = pos
        got = _varint(buf, pos, end)
        if got is None:
            raise _WireError(pos, "bad varint in field tag")
        tag, pos = got
        number, wire_type, value = tag >> 3, tag & 7, None
        if number == 0 or number > 0x1FFFFFFF:
            raise _WireError(field_start, "invalid field number")
        payload_start = pos
        if wire_type == 0:
            got = _varint(buf, pos, end)
            if got is None:
                raise _WireError(pos, "bad varint")
            value, pos = got
        elif wire_type in (1, 5):
            width = 8 if wire_type == 1 else 4
            if end - pos < width:
                raise _WireError(field_start, f"fixed{width * 8} field overruns its message")
            pos += width
        elif wire_type == 2:
            got = _varint(buf, pos, end)
            if got is None:
                raise _WireError(pos, "bad varint in field length")
            length, pos = got
            if length > end - pos:
                raise _WireError(field_start, "length-delimited field overruns its message")
            payload_start = pos
            pos += length
        else:
            raise _WireError(field_start, "unsupported wire type")
        yield number, wire_type, value, payload_start, pos, field_start


def _check_column_wire(buf, start, end):
    for number, wire_type, _, payload_start, payload_end, at in _fields(buf, start, end):
        if number == 1 and wire_type != 0:
            raise _WireError(at, "Column.dtype is not a varint")
        if number == 2:
            if wire_type == 2:  # Packed.
                pos = payload_start
                while pos < payload_end:
                    got = _varint(buf, pos, payload_end)
                    if got is None:
                        raise _WireError(at, "bad varint in packed Column.shape")
                    pos = got[1]
            elif wire_type != 0:
                raise _WireError(at, "Column.shape has a wrong wire type")
        if number == 3 and wire_type != 2:
            raise _WireError(at, "Column.data is not length-delimited")


def _check_record_wire(buf, start, end):
    for number, wire_type, _, payload_start, payload_end, at in _fields(buf, start, end):
        if number in (1, 2, 4) and wire_type != 0:
            raise _WireError(at, f"Record field {number} is not a varint")
        if number == 3:
            if wire_type != 2:
                raise _WireError(at, "Record.column is not length-delimited")
            _check_column_wire(buf, payload_start, payload_end)


def _column_spans(buf, start, end):
    """(payload start, payload end) of each Column of the Record at buf[start:end]."""
    return [(s, e) for number, _, _, s, e, _ in _fields(buf, start, end) if number == 3]


def _negative_dimension_offset(buf, start, end):
    """Where the Column at buf[start:end] holds its first negative dimension."""
    for number, wire_type, value, payload_start, payload_end, at in _fields(buf, start, end):
        if number == 2 and wire_type == 0 and _int32(value) < 0:
            return at
        if number == 2 and wire_type == 2:
            pos = payload_start
            while pos < payload_end:
                raw, pos = _varint(buf, pos, payload_end)
                if _int32(raw) < 0:
                    return at
    return start


# --- Columns ----------------------------------------------------------------------------------


_ITEM_SIZES = [np.dtype(numpy_type).itemsize for _, numpy_type in DTYPES]


def dtype_name(dtype):
    """The enum name of wire dtype `dtype`, or "Unknown(N)" for one newer than this script."""
    return DTYPES[dtype][0] if 0 <= dtype < len(DTYPES) else f"Unknown({dtype})"


def _is_empty(column):
    """XDL's value-less column (a trace_once key after its first step): no data, shape [] or [0]."""
    return not column.data and (not column.shape or list(column.shape) == [0])


def column_problem(column):
    """What is wrong with a Column's shape and data, or None.

    Dimensions must be >= 0 and their product must fit an int64 (the C++ reader's
    element count); for a dtype this script knows, product x element size must be
    the data's length. A dtype it does not know is opaque bytes of any length."""
    shape = list(column.shape)
    for dim in shape:
        if dim < 0:
            return f"negative dimension {dim}"
    if _is_empty(column):
        return None
    elements = 0 if 0 in shape else 1
    for dim in shape if elements else ():
        elements *= dim
        if elements > _INT64_MAX:
            return f"shape {shape} has more than {_INT64_MAX} elements"
    if not 0 <= column.dtype < len(DTYPES):
        return None
    need = elements * _ITEM_SIZES[column.dtype]
    if need != len(column.data):
        return (
            f"column data has {len(column.data)} bytes but its shape {shape} and "
            f"{dtype_name(column.dtype)} dtype need {need}"
        )
    return None


def column_to_array(column, path=None):
    """A Column as a numpy array (a read-only view of the message's bytes).

    A dtype newer than this script (docs/format.md: "treat unknown dtype values
    as opaque bytes") comes back as its raw bytes, a flat uint8 array, with an
    UnknownDTypeWarning naming `path` when given. Raises TraceFileError (a
    ValueError) when the shape does not fit the data."""
    problem = column_problem(column)
    if problem is not None:
        raise TraceFileError(f"{path}: {problem}" if path else problem)
    if not 0 <= column.dtype < len(DTYPES):
        where = f"{path}: " if path else ""
        warnings.warn(
            f"{where}dtype {column.dtype} is unknown to this reader: "
            "its columns are read as raw bytes",
            UnknownDTypeWarning,
            stacklevel=2,
        )
        return np.frombuffer(column.data, dtype=np.uint8)
    values = np.frombuffer(column.data, dtype=DTYPES[column.dtype][1])
    if _is_empty(column):
        return values  # XDL's empty column (a trace_once value after its first step).
    return values.reshape(tuple(column.shape))


# --- Files ------------------------------------------------------------------------------------


def _file_kind(mode):
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return f"mode {stat.S_IFMT(mode):o}"


def _read_regular_file(path, max_bytes=None, sparse_tail=False):
    """The bytes of regular file `path` as a bytearray; at most `max_bytes` (else TraceFileError).
    With `sparse_tail`, (bytes up to the file's last data extent, its size): _read_data_file.

    Opened with O_NONBLOCK, so a FIFO cannot make the open wait for a writer, then
    refused unless fstat says it is a regular file (a FIFO, a device such as
    /dev/zero behind a symlink, a directory). Reads what fstat saw, not to EOF, so
    a file still being appended to is read as it was."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise TraceFileError(f"{path}: not a regular file ({_file_kind(info.st_mode)})")
    with os.fdopen(fd, "rb", buffering=0) as f:
        size = info.st_size
        if sparse_tail:
            size = _data_end(fd, size)
        if max_bytes is not None:
            if size > max_bytes:
                raise TraceFileError(f"{path}: {size} bytes, more than a Meta can be ({max_bytes})")
            size = max_bytes + 1  # st_size may be 0 for files that still have content (/proc).
        data, got = bytearray(size), 0
        with memoryview(data) as view:
            while got < size:
                with view[got:] as rest:
                    n = f.readinto(rest)
                if not n:
                    break
                got += n
        del data[got:]  # The file shrank (or a Meta is shorter than the cap).
        if max_bytes is not None and got > max_bytes:
            raise TraceFileError(f"{path}: more than {max_bytes} bytes: not a Meta")
        if sparse_tail:
            return data, info.st_size if got == size else got
        return data


def _check_meta_wire(buf):
    for number, wire_type, _, payload_start, payload_end, at in _fields(buf, 0, len(buf)):
        if number == _META_RUN_ID_FIELD:
            if wire_type != 2:
                raise _WireError(at, "Meta.run_id is not length-delimited")
            try:
                bytes(buf[payload_start:payload_end]).decode("utf-8")
            except UnicodeDecodeError:
                raise _WireError(at, "Meta.run_id is not valid UTF-8") from None
        elif 1 <= number <= 15 and wire_type != 0:
            raise _WireError(at, f"Meta field {number} is not a varint")


def read_meta(path):
    """The Meta sidecar of data file `path`, or None when there is none.

    An XDL Meta (format_version 0) holds only fields 1-6; an empty `.meta` is
    what XDL leaves while a file is open (it writes the Meta when it is done)."""
    meta_path = path + ".meta"
    try:
        content = _read_regular_file(meta_path, max_bytes=META_MAX_BYTES)
    except FileNotFoundError:
        return None
    try:
        _check_meta_wire(content)
        meta = Meta.FromString(bytes(content))
        _check_meta_crc(meta_path, content, meta)
        _check_xdl_meta(meta_path, content, meta)
        return meta
    except _WireError as e:
        raise TraceFileError(
            f"{meta_path}: not a serialized Meta ({e.what} at byte offset {e.offset})"
        )
    except message.DecodeError:
        raise TraceFileError(f"{meta_path}: not a serialized Meta") from None


def _check_meta_crc(meta_path, content, meta):
    """Meta.meta_crc32c, when the Meta has one: its last field, the CRC-32C of the bytes before.
    A Meta with header_crc32c must have one: the writer that writes the one writes the other."""
    sealed = False
    for number, wire_type, _, _, payload_end, at in _fields(content, 0, len(content)):
        if number != _META_CRC_FIELD:
            continue
        sealed = True
        if wire_type != 5 or payload_end != len(content):
            raise TraceFileError(f"{meta_path}: Meta.meta_crc32c is not the Meta's last field")
        (expected,) = struct.unpack_from("<I", content, at + 2)
        actual = crc32c(memoryview(content)[:at])
        if actual != expected:
            raise TraceFileError(
                f"{meta_path}: Meta checksum mismatch: crc32c of its first {at} bytes is "
                f"{actual:08x}, its meta_crc32c says {expected:08x}"
            )
    if meta.HasField("header_crc32c") and not sealed:
        raise TraceFileError(
            f"{meta_path}: the Meta has header_crc32c (field {_META_HEADER_CRC_FIELD}) but not "
            f"its own checksum (meta_crc32c, field {_META_CRC_FIELD}), which the writer always "
            "writes with it (a damaged Meta)"
        )


def _check_xdl_meta(meta_path, content, meta):
    """XDL's Meta holds its fields 1-6 only: one without a format_version that holds another
    lost it to a flipped bit, and would otherwise be read as XDL's, with nothing to verify."""
    if meta.format_version != 0:
        return
    for number, *_ in _fields(content, 0, len(content)):
        if number > _LAST_XDL_META_FIELD:
            raise TraceFileError(
                f"{meta_path}: the Meta has no format_version but holds field {number}, which "
                f"XDL's Meta (fields 1-{_LAST_XDL_META_FIELD}) never has (a damaged Meta)"
            )


def _records_sealed(meta):
    """Whether every record must carry Record.crc32c: our Meta with its own checksum (the writer
    that seals Metas seals every record). A Meta whose checksum is 0 and that has no
    header_crc32c (older than field 18) reads as unsealed here: protobuf keeps no presence for
    it; the C++ reader sees the field itself."""
    return (
        meta is not None
        and meta.format_version >= 1
        and (meta.HasField("header_crc32c") or meta.meta_crc32c != 0)
    )


def _check_header_crc(path, data, end, meta):
    """Meta.header_crc32c, when our Meta has one: the CRC-32C of the Header frame, data[:end]."""
    if meta is None or meta.format_version < 1 or not meta.HasField("header_crc32c"):
        return
    actual = crc32c(memoryview(data)[:end])
    if actual != meta.header_crc32c:
        raise _corrupt(
            path,
            0,
            f"Header checksum mismatch: crc32c of its {end}-byte frame is {actual:08x}, "
            f"the Meta's header_crc32c says {meta.header_crc32c:08x} (a damaged Header)",
        )


def meta_record_count(meta):
    """The Meta's record count, or None when it has none (XDL's Meta: unknown, not zero)."""
    return meta.record_count if meta.format_version >= 1 else None


def _check_format_version(path, meta):
    if meta is None or meta.format_version in (0, FORMAT_VERSION):
        return
    if meta.format_version > FORMAT_VERSION:
        what = f"is newer than this reader knows ({FORMAT_VERSION})"
    else:
        what = "is not one this reader knows"
    raise TraceFileError(
        f"{path}.meta: format_version {meta.format_version} {what}: not reading {path}"
    )


def _data_end(fd, size):
    """Where the file's last data extent ends (lseek SEEK_DATA / SEEK_HOLE): past it a sparse
    file holds a hole, which reads as zeros without being stored. `size` where the filesystem
    does not say."""
    end = at = 0
    while at < size:
        try:
            data = os.lseek(fd, at, os.SEEK_DATA)
            at = end = os.lseek(fd, data, os.SEEK_HOLE)
        except OSError as e:
            end = end if e.errno == errno.ENXIO else size  # ENXIO: no data past `at`.
            break
    os.lseek(fd, 0, os.SEEK_SET)  # Where the caller reads from.
    return min(end, size)


def _read_data_file(path):
    """(bytes, size): a data file's bytes up to the end of its last data extent, and its size.
    A hole that ends a sparse file (what is left after `truncate -s`) is zeros, never read."""
    return _read_regular_file(path, sparse_tail=True)


def _zero_tail_start(data):
    """Where the run of zero bytes that ends `data` begins (len(data) when there is none)."""
    end = len(data)
    while end > 0:
        start = max(0, end - 65536)
        kept = len(data[start:end].rstrip(b"\0"))
        if kept:
            return start + kept
        end = start
    return 0


def _decode_header(path, data, start, end):
    try:
        for number, wire_type, _, payload_start, payload_end, at in _fields(data, start, end):
            if number != 1:
                continue
            if wire_type != 2:
                raise _corrupt(path, at, "Header.key is not length-delimited")
            try:
                _bytes(data, payload_start, payload_end).decode("utf-8")
            except UnicodeDecodeError:
                keys_before = sum(1 for f in _fields(data, start, at) if f[0] == 1)
                raise _corrupt(path, at, f"Header.key {keys_before} is not valid UTF-8") from None
    except _WireError as e:
        raise _corrupt(path, e.offset, f"{e.what} (in the Header frame)") from None
    try:
        return Header.FromString(_bytes(data, start, end))
    except message.DecodeError:
        raise _corrupt(path, start, "the Header frame does not parse") from None


def _only_unknown_record_fields(buf, start, end):
    """True if buf[start:end] holds whole fields none of which is a Record field this script knows
    (protobuf would keep a known field of the wrong wire type as an unknown one)."""
    try:
        return all(f[0] > 4 for f in _fields(buf, start, end))
    except _WireError:
        return False


# Record.crc32c and Meta.meta_crc32c: fixed32, each its message's last field (docs/format.md).
_RECORD_CRC_FIELD = _RECORD_NUMBERS["crc32c"]
_META_CRC_FIELD = Meta.DESCRIPTOR.fields_by_name["meta_crc32c"].number
_META_RUN_ID_FIELD = Meta.DESCRIPTOR.fields_by_name["run_id"].number
_META_HEADER_CRC_FIELD = Meta.DESCRIPTOR.fields_by_name["header_crc32c"].number
_LAST_XDL_META_FIELD = Meta.DESCRIPTOR.fields_by_name["timestamp_end"].number
_RECORD_CRC_TAG = bytes([(_RECORD_CRC_FIELD << 3 | 5) & 0x7F | 0x80, _RECORD_CRC_FIELD >> 4])


def _check_record_crc(path, data, start, end, check, required=False):
    """Record.crc32c, when the record has one: its last field, and (with `check`) the CRC-32C
    of the bytes before it. A record without one (XDL's, older writers') is not checked, unless
    `required` (a file whose Meta has its own checksum): then it is corruption."""

    def missing():
        if required:
            raise _corrupt(
                path,
                start - _PREFIX_BYTES,
                f"record without its checksum (Record.crc32c, field {_RECORD_CRC_FIELD}) in a "
                "file whose Meta has its own: every record of such a file carries one "
                "(a damaged record)",
            )

    if end - start < 6 or bytes(data[end - 6 : end - 4]) != _RECORD_CRC_TAG:
        fields = [f for f in _fields(data, start, end) if f[0] == _RECORD_CRC_FIELD]
        if fields:
            raise _corrupt(path, fields[0][5], "Record.crc32c is not the last field of its record")
        missing()
        return
    last = None
    for field in _fields(data, start, end):
        last = field
        if field[0] == _RECORD_CRC_FIELD and field[4] != end:
            raise _corrupt(path, field[5], "Record.crc32c is not the last field of its record")
    if last is None or last[0] != _RECORD_CRC_FIELD or last[1] != 5:
        missing()
        return  # The bytes 0x85 0x01 ended another field's payload.
    if check:
        (expected,) = struct.unpack_from("<I", data, end - 4)
        actual = crc32c(memoryview(data)[start : end - 6])
        if actual != expected:
            raise _corrupt(
                path,
                start - _PREFIX_BYTES,
                f"record checksum mismatch: crc32c of its {end - 6 - start} bytes is "
                f"{actual:08x}, its Record.crc32c says {expected:08x} (a damaged record)",
            )


def _decode_record(path, data, start, end, keys, check_crc=True, crc_required=False):
    body = _bytes(data, start, end)
    record = Record()
    try:
        record.ParseFromString(body)
        parsed = True
        # The fast check: the known fields, re-serialized, are the frame's first bytes, and
        # the rest is fields this script does not know (a newer writer's device traces).
        known = Record()
        known.CopyFrom(record)
        known.DiscardUnknownFields()
        known_bytes = known.SerializeToString()
        valid = body.startswith(known_bytes) and _only_unknown_record_fields(
            data, start + len(known_bytes), end
        )
    except message.DecodeError:
        parsed = valid = False
    if not valid:  # Say what is wrong and where (a valid non-canonical encoding passes).
        try:
            _check_record_wire(data, start, end)
        except _WireError as e:
            raise _corrupt(path, e.offset, e.what) from None
        if not parsed:
            raise _corrupt(path, start, "the Record frame does not parse")
    try:
        _check_record_crc(path, data, start, end, check_crc, crc_required)
    except _WireError as e:
        raise _corrupt(path, e.offset, e.what) from None
    for i, column in enumerate(record.column):
        problem = column_problem(column)
        if problem is not None:
            column_start, column_end = _column_spans(data, start, end)[i]
            at = column_start
            if problem.startswith("negative dimension"):
                at = _negative_dimension_offset(data, column_start, column_end)
            name = f"column {i} ({keys[i]!r})" if i < len(keys) else f"column {i}"
            raise _corrupt(path, at, f"{name}: {problem}")
    # A device-only record (docs/format.md): no column while the header has keys, and fields
    # above 4 (device events left at close). Not corrupt; read_file skips it.
    device_only = not record.column and keys and any(n > 4 for n, *_ in _fields(data, start, end))
    if len(record.column) != len(keys) and not device_only:
        raise _corrupt(
            path,
            start - _PREFIX_BYTES,
            f"record has {len(record.column)} columns but the header has {len(keys)} keys",
        )
    return record


def read_file(path, meta=None, check_crc=True):
    """Yields ("header", Header) once, then ("record", Record) per frame, and ("torn", offset)
    when the file ends in what a crash leaves: a frame cut short (the writer stopped
    mid-record) or a zero-filled tail (a power loss with data not synced; also warns).

    `meta` (from read_meta) makes bytes it covers count as written: a frame cut short
    there is corruption. Raises TraceFileError ("PATH: corrupt at byte offset N: what")
    for anything else malformed, a record whose checksum does not match included (unless
    `check_crc` is False), after yielding every record before it."""
    _check_format_version(path, meta)
    data, size = _read_data_file(path)
    sealed = _records_sealed(meta)
    covered = meta.data_bytes if meta is not None and meta.format_version >= 1 else 0
    zeros = _zero_tail_start(data)
    # A power loss zero-fills from where the synced data ended (a frame boundary, handled
    # below) or from a lost block's start; a frame that merely ends in zero bytes of data
    # has no sector boundary in its zero run, and its problems stay corruption.
    lost_block = -(-zeros // _SECTOR) * _SECTOR < size

    def zero_tail(offset):
        start = max(zeros, offset)
        text = (
            f"{path}: torn tail at byte offset {offset}: zero-filled from byte offset {start} "
            f"to the end ({size - start} bytes), as a power loss leaves unsynced data"
        )
        if covered > offset:
            text += f"; the Meta covers {covered} bytes, so records it counted were lost"
        warnings.warn(text, TornTailWarning, stacklevel=3)
        return "torn", offset

    if size == 0:
        if covered:
            raise _corrupt(path, 0, f"the file is empty but its Meta covers {covered} bytes")
        warnings.warn(f"{path}: empty file, no Header frame", TornTailWarning, stacklevel=2)
        yield "torn", 0
        return

    def upto(end):
        """Zeros for the hole `data` stops at, up to `end` (a frame that runs into it)."""
        if end > len(data):
            data.extend(bytes(end - len(data)))

    offset, keys = 0, None
    while offset < size:
        if offset >= zeros:
            yield zero_tail(offset)
            return
        length = None
        if size - offset >= _PREFIX_BYTES:
            upto(offset + _PREFIX_BYTES)
            (length,) = struct.unpack_from("<I", data, offset)
        end = None if length is None else offset + _PREFIX_BYTES + length
        if end is None or end > size:
            if lost_block:
                yield zero_tail(offset)
                return
            if covered > offset:
                what = (
                    f"length prefix cut short but the Meta covers {covered} bytes"
                    if length is None
                    else f"frame length {length} runs past the end of the file ({size} bytes) "
                    f"inside the {covered} bytes the Meta covers"
                )
                raise _corrupt(path, offset, what)
            yield "torn", offset
            return
        upto(end)  # Known to fit the file: a frame longer than the file is never read.
        try:
            if keys is None:
                header = _decode_header(path, data, offset + _PREFIX_BYTES, end)
                _check_header_crc(path, data, end, meta)
                keys = list(header.key)
                item = ("header", header)
            else:
                item = (
                    "record",
                    _decode_record(
                        path, data, offset + _PREFIX_BYTES, end, keys, check_crc, sealed
                    ),
                )
        except TraceFileError:
            if lost_block and end > zeros:  # The frame runs into a zero-filled tail.
                yield zero_tail(offset)
                return
            raise
        if not (item[0] == "record" and keys and not item[1].column):  # Device-only: skipped.
            yield item
        offset = end
    if covered > size:
        raise _corrupt(
            path, size, f"the file ends at byte offset {size} but its Meta covers {covered} bytes"
        )


def data_files(path):
    """`path` itself, or the data files of directory `path` by name, rank, index.

    An entry with a data file's name that is not a regular file is listed too
    (and refused when read): a planted FIFO or directory is reported, not skipped."""
    if not os.path.isdir(path):
        return [path]
    found = []
    for entry in os.listdir(path):
        m = _DATA_FILE.match(entry)
        if m:
            found.append((m["prefix"], m["name"], int(m["rank"]), int(m["index"]), entry))
    return [os.path.join(path, f[-1]) for f in sorted(found)]


def _format_meta(meta):
    if meta.format_version == 0:  # Written by XDL: fields 1-6, -1 where it never learnt a value.
        if meta.ByteSize() == 0:
            return "(empty: XDL writes its Meta when it finishes a file)"
        parts = [
            f"{f.name}={getattr(meta, f.name)}" for f in Meta.DESCRIPTOR.fields if f.number <= 6
        ]
        return "XDL " + " ".join(parts + ["record_count=unknown"])
    return " ".join(f"{f.name}={getattr(meta, f.name)}" for f in Meta.DESCRIPTOR.fields)


def _describe_summary(descriptor, array):
    """A stats, histogram or digest summary column (layout version 1) with its fields named, or
    None for any other column (a value, a user summary, a layout this script does not know)."""
    if descriptor is None or descriptor.layout_version != 1 or array.dtype != np.float64:
        return None
    content = _CONTENTS[descriptor.content] if descriptor.content < len(_CONTENTS) else None
    bins = descriptor.histogram_bins
    if content == "STATS" and array.shape == (len(_STATS_FIELDS),):
        return "stats " + " ".join(f"{n}={v:g}" for n, v in zip(_STATS_FIELDS, array))
    if content == "HISTOGRAM" and bins > 0 and array.shape == (2 + 2 * bins,):
        counts = array[2 + bins :].astype(np.int64)
        counts_text = np.array2string(counts, threshold=40, edgeitems=5)
        return f"histogram {bins} bins over [{array[0]:g}, {array[1]:g}]: counts {counts_text}"
    if content == "DIGEST" and array.shape == (2,):  # Its high and low 32 bits.
        return f"digest {(int(array[0]) << 32) | int(array[1]):016x}"
    return None


def print_file(path, keys=None, max_records=None, summary=False, out=sys.stdout, check_crc=True):
    """Prints one data file. Raises TraceFileError (or OSError) on the first problem, after
    printing everything before it; a bad Meta is raised after the records are printed."""
    meta_error = None
    try:
        meta = read_meta(path)
    except TraceFileError as e:
        meta, meta_error = None, e
    print(f"== {path}", file=out)
    if meta_error is not None:
        print("meta: (unreadable)", file=out)
    else:
        print(f"meta: {_format_meta(meta) if meta is not None else '(none)'}", file=out)
    header_keys, contents, printed = [], {}, 0
    for kind, value in read_file(path, meta, check_crc=check_crc):
        if kind == "header":
            header_keys = list(value.key)
            print(f"keys: {header_keys}", file=out)
            if len(value.column) == len(header_keys):  # Column descriptors (not in XDL's files).
                contents = {k: c for k, c in zip(header_keys, value.column)}
        elif kind == "torn":
            if not value:
                why = "no Header frame"
            elif meta is not None and meta.format_version > 0 and not meta.closed_cleanly:
                why = "still being written, or its writer stopped before closing it"
            else:
                why = "the writer stopped mid-record"
            print(f"torn final frame at byte offset {value} ({why})", file=out)
        else:
            if max_records is not None and printed >= max_records:
                break
            printed += 1
            print(
                f"gstep: {value.gstep} lstep: {value.lstep} timestamp: {value.timestamp}", file=out
            )
            for key, column in zip(header_keys, value.column):
                if keys is not None and key not in keys:
                    continue
                array = column_to_array(column, path)
                name = f"{dtype_name(column.dtype)}{list(column.shape)}"
                if not 0 <= column.dtype < len(DTYPES):
                    body = np.array2string(array, threshold=20, edgeitems=3)
                    print(f"  {key} {name} raw bytes: {body}", file=out)
                    continue
                described = _describe_summary(contents.get(key), array)
                if described is not None:
                    body = described
                elif summary and array.size:
                    as_float = array.astype(np.float64)
                    body = f"min={as_float.min():g} max={as_float.max():g} mean={as_float.mean():g}"
                else:
                    body = np.array2string(array, threshold=20, edgeitems=3)
                print(f"  {key} {name}: {body}", file=out)
    if meta_error is not None:
        raise meta_error


def _print_warning(message_, category, filename, lineno, file=None, line=None):
    print(f"read_trace.py: warning: {message_}", file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="data files or directories")
    parser.add_argument("--keys", help="comma-separated keys to print (default all)")
    parser.add_argument("--max-records", type=int, default=None, help="records per file")
    parser.add_argument("--summary", action="store_true", help="min/max/mean instead of values")
    parser.add_argument(
        "--no-checksums",
        action="store_true",
        help="do not check each record's crc32c (faster; a damaged record may then be printed)",
    )
    args = parser.parse_args(argv)
    keys = set(args.keys.split(",")) if args.keys else None
    status = 0

    def error(text):
        nonlocal status
        sys.stdout.flush()
        print(f"read_trace.py: error: {text}", file=sys.stderr)
        status = 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # protobuf's own parse warnings: we say what is wrong.
        for category in (TornTailWarning, UnknownDTypeWarning):
            warnings.simplefilter("default", category)  # Once per message (file, dtype).
        warnings.showwarning = _print_warning
        for path in args.paths:
            try:
                files = data_files(path)
            except OSError as e:
                error(f"{path}: {e.strerror or e}")
                continue
            if not files:
                error(f"{path}: no data files")
            for f in files:
                try:
                    print_file(
                        f,
                        keys=keys,
                        max_records=args.max_records,
                        summary=args.summary,
                        check_crc=not args.no_checksums,
                    )
                except BrokenPipeError:
                    raise
                except TraceFileError as e:
                    error(str(e))
                except OSError as e:
                    error(f"{e.filename or f}: {e.strerror or e}")
                except Exception as e:  # A bug here must still name the file, not dump a traceback.
                    error(f"{f}: cannot read: {type(e).__name__}: {e}")
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # Piped into `head`: stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
