"""Host spans and device events as records carry them (Record fields 6 and 5): the message classes,
the category of each device event kind and the parsing the timeline uses (the report reads the
same payloads in C++: ``_core.DeviceEventTable``, see gpu_steps.py).

proto/device_trace.proto defines both messages; the classes and field numbers come from protoc's
output (xdl_trace._proto), never from a table written here.
"""

from ._proto import device_trace_pb2, xdl_trace_pb2

__all__ = [
    "DeviceTrace",
    "HostSpan",
    "DEVICE_TRACE_FIELD",
    "HOST_SPAN_FIELD",
    "EVENT_CATEGORY",
    "category",
    "parse_extra",
    "parse_device_trace",
]

DeviceTrace = device_trace_pb2.DeviceTrace
HostSpan = device_trace_pb2.HostSpan
DEVICE_TRACE_FIELD = xdl_trace_pb2.Record.DEVICE_TRACE_FIELD_NUMBER
HOST_SPAN_FIELD = xdl_trace_pb2.Record.HOST_SPAN_FIELD_NUMBER
_LENGTH_DELIMITED = 2  # Wire type of a message field.

EVENT_CATEGORY = {  # DeviceEventKind -> the event's category (timeline "cat", report "kind")
    device_trace_pb2.DEVICE_EVENT_KERNEL: "kernel",
    device_trace_pb2.DEVICE_EVENT_MEMCPY: "memcpy",
    device_trace_pb2.DEVICE_EVENT_MEMSET: "memset",
    device_trace_pb2.DEVICE_EVENT_RUNTIME_API: "cuda_runtime",
    device_trace_pb2.DEVICE_EVENT_DRIVER_API: "cuda_driver",
    device_trace_pb2.DEVICE_EVENT_SYNCHRONIZATION: "synchronization",
    device_trace_pb2.DEVICE_EVENT_OVERHEAD: "overhead",
    device_trace_pb2.DEVICE_EVENT_MARKER: "nvtx",  # A range on the thread that opened it.
    device_trace_pb2.DEVICE_EVENT_MEMORY: "memory",  # The timeline adds a counter.
}
OTHER_CATEGORY = "device"  # A kind newer than this table.


def category(kind):
    """The category of a DeviceEventKind ("device" for a kind this table does not know)."""
    return EVENT_CATEGORY.get(kind, OTHER_CATEGORY)


def parse_extra(extra):
    """([HostSpan], [DeviceTrace]) of one record's trailing fields (``Record.extra``: 6 and 5)."""
    spans, traces = [], []
    for number, wire_type, payload in extra or ():
        if wire_type != _LENGTH_DELIMITED:
            continue
        if number == DEVICE_TRACE_FIELD:
            traces.append(DeviceTrace.FromString(payload))
        elif number == HOST_SPAN_FIELD:
            spans.append(HostSpan.FromString(payload))
    return spans, traces


def parse_device_trace(payload):
    """One serialized DeviceTrace (a Record field 5)."""
    return DeviceTrace.FromString(payload)
