"""Host spans and device events as records carry them (Record fields 6 and 5): the message classes,
the category of each device event kind and the parsing the timeline uses (the report reads the
same payloads in C++: ``_core.DeviceEventTable``, see gpu_steps.py).

proto/device_trace.proto defines both messages; the classes and field numbers come from protoc's
output (xdl_trace._proto), never from a table written here.
"""

from .. import _core
from .._proto import device_trace_pb2, xdl_trace_pb2

__all__ = [
    "DeviceDataWarning",
    "DeviceTrace",
    "HostSpan",
    "DEVICE_TRACE_FIELD",
    "HOST_SPAN_FIELD",
    "KINDS",
    "WORK",
    "API_CALL",
    "OTHER",
    "EVENT_CATEGORY",
    "DEVICE_WORK",
    "API_CALLS",
    "category",
    "parse_extra",
    "parse_device_trace",
]

DeviceTrace = device_trace_pb2.DeviceTrace
HostSpan = device_trace_pb2.HostSpan
DEVICE_TRACE_FIELD = xdl_trace_pb2.Record.DEVICE_TRACE_FIELD_NUMBER
HOST_SPAN_FIELD = xdl_trace_pb2.Record.HOST_SPAN_FIELD_NUMBER
_LENGTH_DELIMITED = 2  # Wire type of a message field.

# The roles of a kind, which the readers act on:
WORK = "work"  # Device work: GPU busy time, step windows, the targets of step and launch flows,
#                joined to the host range of its launch call (gpu_steps, timeline).
API_CALL = "api_call"  # A host call that may launch work (matched to it by correlation id).
OTHER = "other"  # Anything else (drawn on its line, counted nowhere).

# The one table of device event kinds: DeviceEventKind -> (category: the timeline's "cat" and
# the report's "kind"; role, above). Everything that lists kinds by role derives from it.
KINDS = {
    device_trace_pb2.DEVICE_EVENT_KERNEL: ("kernel", WORK),
    device_trace_pb2.DEVICE_EVENT_MEMCPY: ("memcpy", WORK),
    device_trace_pb2.DEVICE_EVENT_MEMSET: ("memset", WORK),
    device_trace_pb2.DEVICE_EVENT_RUNTIME_API: ("cuda_runtime", API_CALL),
    device_trace_pb2.DEVICE_EVENT_DRIVER_API: ("cuda_driver", API_CALL),
    device_trace_pb2.DEVICE_EVENT_SYNCHRONIZATION: ("synchronization", OTHER),
    device_trace_pb2.DEVICE_EVENT_OVERHEAD: ("overhead", OTHER),
    device_trace_pb2.DEVICE_EVENT_MARKER: ("nvtx", OTHER),  # A range on its host thread.
    device_trace_pb2.DEVICE_EVENT_MEMORY: ("memory", OTHER),  # The timeline adds a counter.
}
EVENT_CATEGORY = {kind: category for kind, (category, _) in KINDS.items()}
DEVICE_WORK = tuple(kind for kind, (_, role) in KINDS.items() if role == WORK)
API_CALLS = tuple(kind for kind, (_, role) in KINDS.items() if role == API_CALL)
OTHER_CATEGORY = "device"  # A kind newer than this table.


def category(kind):
    """The category of a DeviceEventKind ("device" for a kind this table does not know)."""
    return EVENT_CATEGORY.get(kind, OTHER_CATEGORY)


class DeviceDataWarning(UserWarning):
    """A device tracer sent what the writer accepted but a reader cannot show as sent: a name
    that is not UTF-8 (shown with U+FFFD), a stat of the wrong type (left out where a number is
    needed). Counted and warned once per read, never an error (issue 24 #5)."""


def parse_extra(extra, counts=None):
    """([HostSpan], [DeviceTrace]) of one record's trailing fields (``Record.extra``: 6 and 5).
    counts: a dict whose "bad_names" grows by the names that were not UTF-8
    (``parse_device_trace``)."""
    spans, traces = [], []
    for number, wire_type, payload in extra or ():
        if wire_type != _LENGTH_DELIMITED:
            continue
        if number == DEVICE_TRACE_FIELD:
            traces.append(parse_device_trace(payload, counts))
        elif number == HOST_SPAN_FIELD:
            spans.append(HostSpan.FromString(payload))
    return spans, traces


def parse_device_trace(payload, counts=None):
    """One serialized DeviceTrace (a Record field 5). Its strings that are not UTF-8 (which
    protobuf refuses: a plugin's kernel name may be any bytes) are read with U+FFFD for their
    bad bytes, in C++ (``_core.repair_device_trace``); counts["bad_names"] grows by how many."""
    payload, replaced = _core.repair_device_trace(payload)
    if replaced and counts is not None:
        counts["bad_names"] = counts.get("bad_names", 0) + replaced
    return DeviceTrace.FromString(payload)


def bad_data_message(bad_names, bad_stats=0):
    """The warning's text for `bad_names` names that were not UTF-8 and `bad_stats` stats of the
    wrong type ("" when both are 0)."""
    parts = []
    if bad_names:
        parts.append(
            f"{bad_names} device trace name(s) not UTF-8: shown with replacement characters "
            "(U+FFFD) for their bad bytes"
        )
    if bad_stats:
        parts.append(
            f"{bad_stats} device event stat(s) not a number where one is needed (the 'bytes' of "
            "a memory event): treated as absent"
        )
    return "; ".join(parts)
