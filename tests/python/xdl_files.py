"""Writes trace files the way X-DeepLearning's own TraceWriter does, for reader tests.

A faithful re-enactment of XDL's writer (xdl/python/training/trace_hook.py,
classes TraceWriter and TraceHook; messages from xdl/proto/trace.proto), with
protobuf's own Python serialization of messages whose XDL fields are the same
numbers and types as ours:

* files `{train|test}.{output_file_name}.{rank}.{index}` with index from 1, and
  for each an `.meta` opened (empty) together with the data file;
* a Header frame first in every file (XDL writes it at lstep 1 and again after
  every rollover), then one Record frame per traced step, lstep counting from 1,
  timestamps in ms; a trace_once key after lstep 1 is `np.array([], float32)`;
* rollover before a record once the file already holds `max_file_m_size * 1e6`
  bytes or more (so a file may pass the limit by one record);
* the Meta holds fields 1-6 only (no record_count, data_bytes, crc32c,
  format_version): a step or time range whose begin (or end) it never learnt
  stays -1, which proto3 writes as a 10-byte varint. It is written at rollover
  and at wait_done only, so a file whose writer died keeps an empty `.meta`;
* no checksum, no run id, nothing else.
"""

import os
import struct

import numpy as np

import trace_file_maker as tm

# XDL's nptype2trace: only these dtypes can be written (np.byte is int8, so Byte never is).
XDL_DTYPE = {
    np.dtype(np.int8): 0,
    np.dtype(np.int16): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.int64): 3,
    np.dtype(np.float32): 4,
    np.dtype(np.float64): 5,
    np.dtype(np.bool_): 6,
}
XDL_META_FIELDS = (
    "lstep_begin",
    "lstep_end",
    "gstep_begin",
    "gstep_end",
    "timestamp_begin",
    "timestamp_end",
)


class XdlTraceWriter:
    """XDL's TraceWriter, synchronous (XDL queues the same bytes to one writer thread)."""

    def __init__(
        self, output_dir, output_file_name="trace", rank=0, is_training=True, max_file_m_size=300
    ):
        prefix = "train" if is_training else "test"
        self._out_prefix = os.path.join(output_dir, f"{prefix}.{output_file_name}.{rank}")
        self._max_file_size = max_file_m_size
        self._cur_file_index = 0
        self.paths = []  # Data files, in order.
        self._new_file()
        self._headers = []
        self._begin = {"lstep": -1, "gstep": -1, "timestamp": -1}
        self._end = {"lstep": -1, "gstep": -1, "timestamp": -1}
        self._last = {"lstep": -1, "gstep": -1, "timestamp": -1}

    def _new_file(self):
        self._cur_size = 0
        self._cur_file_index += 1
        self._cur_path = f"{self._out_prefix}.{self._cur_file_index}"
        self.paths.append(self._cur_path)
        for path in (self._cur_path, self._cur_path + ".meta"):  # XDL opens both with "w".
            open(path, "wb").close()

    def _write_buf(self, buf):
        self._cur_size += len(buf)
        with open(self._cur_path, "ab") as f:
            f.write(buf)

    def _write_protobuf(self, message):
        buf = message.SerializeToString()
        self._write_buf(struct.pack("<I", len(buf)))
        self._write_buf(buf)

    def write_headers(self, headers):
        self._headers = list(headers)
        header = tm.pb2().Header()
        header.key.extend(self._headers)
        self._write_protobuf(header)

    def write_meta(self):
        meta = tm.pb2().Meta()
        for what in ("lstep", "gstep", "timestamp"):
            setattr(meta, what + "_begin", self._begin[what])
            setattr(meta, what + "_end", self._end[what])
        with open(self._cur_path + ".meta", "ab") as f:  # XDL's meta writer is a stream.
            f.write(meta.SerializeToString())

    def write_records(self, columns, gstep, lstep, timestamp):
        now = {"lstep": lstep, "gstep": gstep, "timestamp": timestamp}
        for what in now:
            if self._last[what] == -1:
                self._last[what] = now[what]
            if self._begin[what] == -1:
                self._begin[what] = self._last[what]
        if self._cur_size >= self._max_file_size * 1e6:
            self._end = dict(self._last)
            self.write_meta()
            self._new_file()
            self.write_headers(self._headers)
            self._begin = {"lstep": -1, "gstep": -1, "timestamp": -1}
        assert len(self._headers) == len(columns)
        record = tm.pb2().Record()
        record.gstep, record.lstep, record.timestamp = gstep, lstep, timestamp
        for arr in columns:
            arr = np.asarray(arr)
            col = record.column.add()
            col.dtype = XDL_DTYPE[arr.dtype]
            col.shape.extend(list(arr.shape))
            col.data = arr.tobytes()
        self._write_protobuf(record)
        self._last = dict(now)

    def wait_done(self):
        self._end = dict(self._last)
        self.write_meta()
        self._begin = {"lstep": -1, "gstep": -1, "timestamp": -1}


def write_xdl_run(
    output_dir,
    keys,
    steps,
    once_keys=(),
    once_values=(),
    gstep0=100,
    max_file_m_size=300,
    finish=True,
    **writer_args,
):
    """Runs XDL's TraceHook.after_run for each of `steps` (lists of arrays for `keys`).

    gstep is `gstep0 + lstep - 1`, lstep counts from 1, the timestamp is
    1_700_000_000_000 + 10 * lstep ms. `once_values` are written at lstep 1 and
    XDL's empty float32 column after. With finish=False the run stops as if
    killed: no wait_done, so the last file's `.meta` stays empty. Returns the
    data file paths in order.
    """
    writer = XdlTraceWriter(output_dir, max_file_m_size=max_file_m_size, **writer_args)
    once_keys = list(once_keys)
    for lstep, values in enumerate(steps, start=1):
        if lstep == 1:
            writer.write_headers(list(keys) + once_keys)
            once = list(once_values)
        else:
            once = len(once_keys) * [np.array([], dtype=np.float32)]
        writer.write_records(
            list(values) + once, gstep0 + lstep - 1, lstep, 1_700_000_000_000 + 10 * lstep
        )
    if finish:
        writer.wait_done()
    return writer.paths


def xdl_steps(count):
    """Values for keys ["w", "loss"] at `count` steps: w float32[2, 3], loss float64 scalar."""
    return [
        [(np.arange(6, dtype=np.float32) + i).reshape(2, 3), np.float64(i * 0.25)]
        for i in range(count)
    ]


def meta_field_numbers(meta_bytes):
    """The field numbers present in a serialized Meta, in order (every field is a varint)."""
    numbers, pos = [], 0
    while pos < len(meta_bytes):
        tag, pos = _varint(meta_bytes, pos)
        numbers.append(tag >> 3)
        assert tag & 7 == 0, "XDL's Meta holds varints only"
        _, pos = _varint(meta_bytes, pos)
    return numbers


def _varint(buf, pos):
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
