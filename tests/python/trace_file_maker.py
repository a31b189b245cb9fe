"""Writes trace files for the reader tests with protobuf's own Python serialization (not the tracer).

Message classes are protoc's output for proto/ as the package ships it (xdl_trace._proto), so
the files are exactly what a reader generated from the real .proto expects, independent of
xdl_trace's hand-written writer and its C++ reader. Files as XDL itself writes them (Meta
fields 1-6 only, -1 markers, no checksum) come from xdl_files.py.
"""

import os
import struct
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from xdl_trace import _core  # noqa: E402
from xdl_trace._proto import xdl_trace_pb2  # noqa: E402

# numpy dtype -> wire dtype, from the C++ dtype table (the rows numpy spells as the wire does).
WIRE_DTYPE = {
    np.dtype(numpy): value
    for value, name, _, numpy in _core.dtype_table()
    if np.dtype(numpy).name == name
}
# The wire-only dtypes, by their xdl.proto.Type names.
BYTE, BFLOAT16 = xdl_trace_pb2.Byte, xdl_trace_pb2.BFloat16


def pb2():
    """The protoc-generated xdl_trace_pb2 module."""
    return xdl_trace_pb2


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli), bit-reflected, as the Meta stores it."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def frame(message_bytes):
    return struct.pack("<I", len(message_bytes)) + message_bytes


def column(value, wire_dtype=None):
    """A Column from a numpy array; None makes XDL's empty column (float32, no shape, no data)."""
    c = pb2().Column()
    if value is None:
        c.dtype = xdl_trace_pb2.Float
        return c
    value = np.asarray(value)  # 0-d stays 0-d (ascontiguousarray would make it 1-d).
    c.dtype = WIRE_DTYPE[value.dtype] if wire_dtype is None else wire_dtype
    c.shape.extend(value.shape)
    c.data = value.tobytes()
    return c


def record(gstep, columns, lstep=None, timestamp=None):
    r = pb2().Record()
    r.gstep = gstep
    r.lstep = gstep if lstep is None else lstep
    r.timestamp = 1_700_000_000_000 + gstep if timestamp is None else timestamp
    for value in columns:
        r.column.append(value if isinstance(value, pb2().Column) else column(value))
    return r


def write_file(path, keys, records, meta=True, closed=True, tail=b"", meta_overrides=None):
    """Writes Header + framed records (+ `tail` bytes) and, unless meta=False, a
    Meta covering everything before `tail`. Returns the data bytes."""
    header = pb2().Header()
    header.key.extend(keys)
    data = frame(header.SerializeToString())
    for r in records:
        data += frame(r.SerializeToString())
    with open(path, "wb") as f:
        f.write(data + tail)
    if meta:
        m = pb2().Meta()
        if records:
            m.gstep_begin, m.gstep_end = records[0].gstep, records[-1].gstep
            m.lstep_begin, m.lstep_end = records[0].lstep, records[-1].lstep
            m.timestamp_begin, m.timestamp_end = records[0].timestamp, records[-1].timestamp
        base = os.path.basename(path).split(".")
        if len(base) >= 4 and base[-1].isdigit() and base[-2].isdigit():
            m.rank, m.file_index = int(base[-2]), int(base[-1])
        m.record_count = len(records)
        m.data_bytes = len(data)
        m.crc32c = crc32c(data)
        m.run_id = "test-run"
        m.format_version = 1
        m.closed_cleanly = closed
        for k, v in (meta_overrides or {}).items():
            setattr(m, k, v)
        with open(path + ".meta", "wb") as f:
            f.write(m.SerializeToString())
    return data


def simple_records(gsteps, seed=0):
    """Records with keys ["w", "loss"]: w float32[2, 3], loss float64 scalar."""
    out = []
    for g in gsteps:
        w = (np.arange(6, dtype=np.float32) + g * 10).reshape(2, 3)
        out.append(record(g, [w, np.float64(g * 0.5 + seed)]))
    return out


def device_records(
    steps, kernels_per_step, keys=(), first_gstep=0, start_ns=1_700_000_000 * 10**9
):
    """Records with host spans (field 6) and a DeviceTrace (field 5) per step, as a device-traced
    run writes them: per step a STEP span, `kernels_per_step` launch calls on the host API line
    and as many kernels on stream 7, each kernel tagged with its step and launch correlation ids.
    Yields Record messages (2 * kernels_per_step device events each); `keys` get empty columns."""
    from xdl_trace._proto import device_trace_pb2 as dt

    step_ns, kernel_ns = 1_000_000, 1_000_000 // (kernels_per_step + 1)
    correlation = 0
    for i in range(steps):
        gstep, begin = first_gstep + i, start_ns + i * step_ns
        rec = record(gstep, [column(np.zeros(0, np.float32)) for _ in keys], lstep=i)
        rec.timestamp = (begin + step_ns) // 1_000_000
        span = rec.host_span.add()
        span.kind, span.gstep, span.lstep, span.correlation_id = dt.HostSpan.STEP, gstep, i, i + 1
        span.start_ns, span.end_ns, span.thread_id = begin, begin + step_ns, 4242
        trace = rec.device_trace.add()
        trace.tracer = "synthetic"
        trace.name.extend(["", "synthetic_kernel", "cudaLaunchKernel", "bytes"])
        api = trace.device.add(id=-1, name="host").line.add(id=4242, name="CUDA API")
        stream = trace.device.add(id=0, name="GPU 0").line.add(id=7, name="stream 7")
        for k in range(kernels_per_step):
            correlation += 1
            t = begin + k * kernel_ns
            api.event.add(
                name_index=2,
                kind=dt.DEVICE_EVENT_RUNTIME_API,
                start_ns=t,
                end_ns=t + kernel_ns // 4,
                correlation_id=correlation,
                external_id=i + 1,
            )
            stream.event.add(
                name_index=1,
                kind=dt.DEVICE_EVENT_KERNEL,
                start_ns=t + kernel_ns // 2,
                end_ns=t + kernel_ns,
                correlation_id=correlation,
                external_id=i + 1,
            )
        yield rec


def write_stream(path, keys, records):
    """Writes Header + framed `records` (any iterable) without holding them: no Meta (readers
    scan such files, as XDL's crash-torn ones). Returns the bytes written."""
    header = pb2().Header()
    header.key.extend(keys)
    with open(path, "wb") as f:
        written = f.write(frame(header.SerializeToString()))
        for r in records:
            written += f.write(frame(r.SerializeToString()))
    return written
