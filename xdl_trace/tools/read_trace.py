#!/usr/bin/env python3
"""Stand-alone reader of XDL / xdl_trace trace files; needs only numpy and protobuf.

This file can be copied anywhere: it does not import the xdl_trace package or
its compiled extension, and it needs no generated ``*_pb2`` module. The
messages of proto/xdl_trace.proto that a reader needs (Header, Column, Record,
Meta; fields XDL defined plus xdl_trace's additive Meta fields) are built at
run time from a FileDescriptorProto written out below. Fields a newer writer
adds (such as device-tracing fields of Record) are kept as unknown fields.

Usage:  python3 read_trace.py PATH [PATH ...] [--keys k1,k2] [--max-records N] [--summary]

PATH is a data file ("train.trace.0.1") or a directory (every data file in it,
by rank, then index). Prints each file's Meta, the header keys, then each
record's gstep, lstep and columns, like the XDL wiki's reader.
"""

import argparse
import os
import re
import struct
import sys

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# Wire dtype number -> (enum name, numpy dtype). Byte reads as uint8; bfloat16
# has no numpy type, so its raw bits read as uint16.
DTYPES = [
    ("Int8", np.int8),
    ("Int16", np.int16),
    ("Int32", np.int32),
    ("Int64", np.int64),
    ("Float", np.float32),
    ("Double", np.float64),
    ("Bool", np.bool_),
    ("Byte", np.uint8),
    ("UInt8", np.uint8),
    ("UInt16", np.uint16),
    ("UInt32", np.uint32),
    ("UInt64", np.uint64),
    ("Float16", np.float16),
    ("BFloat16", np.uint16),
]

_META_FIELDS = [  # (name, number, type) of Meta, in proto order.
    ("lstep_begin", 1, "INT64"),
    ("lstep_end", 2, "INT64"),
    ("gstep_begin", 3, "INT64"),
    ("gstep_end", 4, "INT64"),
    ("timestamp_begin", 5, "INT64"),
    ("timestamp_end", 6, "INT64"),
    ("rank", 7, "INT32"),
    ("file_index", 8, "INT64"),
    ("record_count", 9, "INT64"),
    ("data_bytes", 10, "INT64"),
    ("crc32c", 11, "UINT32"),
    ("run_id", 12, "STRING"),
    ("format_version", 13, "INT32"),
    ("dropped_records", 14, "INT64"),
    ("closed_cleanly", 15, "BOOL"),
]


def _file_descriptor():
    """The subset of proto/xdl_trace.proto a reader needs, as a FileDescriptorProto."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="xdl_trace_read_trace.proto", package="xdl.proto", syntax="proto3"
    )
    enum = fdp.enum_type.add(name="Type")
    for number, (name, _) in enumerate(DTYPES):
        enum.value.add(name=name, number=number)

    def message(name, fields):
        m = fdp.message_type.add(name=name)
        for field_name, number, type_name, repeated, ref in fields:
            field = m.field.add(
                name=field_name, number=number, type=getattr(F, "TYPE_" + type_name)
            )
            field.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if ref:
                field.type_name = ref

    message("Header", [("key", 1, "STRING", True, None)])
    message(
        "Column",
        [
            ("dtype", 1, "ENUM", False, ".xdl.proto.Type"),
            ("shape", 2, "INT32", True, None),
            ("data", 3, "BYTES", False, None),
        ],
    )
    message(
        "Record",
        [
            ("gstep", 1, "INT64", False, None),
            ("lstep", 2, "INT64", False, None),
            ("column", 3, "MESSAGE", True, ".xdl.proto.Column"),
            ("timestamp", 4, "INT64", False, None),
        ],
    )
    message("Meta", [(n, num, t, False, None) for n, num, t in _META_FIELDS])
    return fdp


def message_classes(file_proto, names):
    """Message classes by name for `names` of package xdl.proto in `file_proto` (a
    FileDescriptorProto), built in a private pool: no clash with other xdl.proto modules."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    classes = {}
    for name in names:
        descriptor = pool.FindMessageTypeByName("xdl.proto." + name)
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
            classes[name] = message_factory.GetMessageClass(descriptor)
        else:
            classes[name] = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return classes


_CLASSES = message_classes(_file_descriptor(), ("Header", "Column", "Record", "Meta"))
Header = _CLASSES["Header"]
Column = _CLASSES["Column"]
Record = _CLASSES["Record"]
Meta = _CLASSES["Meta"]

_DATA_FILE = re.compile(r"^(?P<prefix>[^.]+)\.(?P<name>.+)\.(?P<rank>\d+)\.(?P<index>\d+)$")


def column_to_array(column):
    """A Column as a numpy array (a read-only view of the message's bytes)."""
    dtype = DTYPES[column.dtype][1]
    values = np.frombuffer(column.data, dtype=dtype)
    if not column.shape and not column.data:
        return values  # XDL's empty column (a trace_once value after its first step).
    return values.reshape(tuple(column.shape))


def read_meta(path):
    """The Meta sidecar of data file `path`, or None when there is none."""
    try:
        with open(path + ".meta", "rb") as f:
            content = f.read()
    except FileNotFoundError:
        return None
    meta = Meta()
    meta.ParseFromString(content)
    return meta


def read_file(path):
    """Yields ("header", Header) once, then ("record", Record) per frame, and
    ("torn", offset) when the file ends inside a frame (a crash mid-write)."""
    with open(path, "rb") as f:
        data = f.read()
    offset, first = 0, True
    while offset < len(data):
        if len(data) - offset < 4:
            yield "torn", offset
            return
        (length,) = struct.unpack_from("<I", data, offset)
        if length > len(data) - offset - 4:
            yield "torn", offset
            return
        body = data[offset + 4 : offset + 4 + length]
        if first:
            header = Header()
            header.ParseFromString(body)
            yield "header", header
            first = False
        else:
            record = Record()
            record.ParseFromString(body)
            yield "record", record
        offset += 4 + length


def data_files(path):
    """`path` itself, or the data files of directory `path` by name, rank, index."""
    if not os.path.isdir(path):
        return [path]
    found = []
    for entry in os.listdir(path):
        m = _DATA_FILE.match(entry)
        if m and os.path.isfile(os.path.join(path, entry)):
            found.append((m["prefix"], m["name"], int(m["rank"]), int(m["index"]), entry))
    return [os.path.join(path, f[-1]) for f in sorted(found)]


def _format_meta(meta):
    parts = []
    for name, _, _ in _META_FIELDS:
        parts.append(f"{name}={getattr(meta, name)}")
    return " ".join(parts)


def print_file(path, keys=None, max_records=None, summary=False, out=sys.stdout):
    meta = read_meta(path)
    print(f"== {path}", file=out)
    print(f"meta: {_format_meta(meta) if meta is not None else '(none)'}", file=out)
    header_keys, printed = [], 0
    for kind, value in read_file(path):
        if kind == "header":
            header_keys = list(value.key)
            print(f"keys: {header_keys}", file=out)
        elif kind == "torn":
            print(
                f"torn final frame at byte offset {value} (the writer stopped mid-record)", file=out
            )
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
                array = column_to_array(column)
                if summary and array.size:
                    as_float = array.astype(np.float64)
                    body = f"min={as_float.min():g} max={as_float.max():g} mean={as_float.mean():g}"
                else:
                    body = np.array2string(array, threshold=20, edgeitems=3)
                print(f"  {key} {DTYPES[column.dtype][0]}{list(column.shape)}: {body}", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="data files or directories")
    parser.add_argument("--keys", help="comma-separated keys to print (default all)")
    parser.add_argument("--max-records", type=int, default=None, help="records per file")
    parser.add_argument("--summary", action="store_true", help="min/max/mean instead of values")
    args = parser.parse_args(argv)
    keys = set(args.keys.split(",")) if args.keys else None
    status = 0
    for path in args.paths:
        files = data_files(path)
        if not files:
            print(f"{path}: no data files", file=sys.stderr)
            status = 1
        for f in files:
            print_file(f, keys=keys, max_records=args.max_records, summary=args.summary)
    return status


if __name__ == "__main__":
    sys.exit(main())
