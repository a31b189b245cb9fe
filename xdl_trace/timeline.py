"""Turns a run's host step spans and device events into a Chrome Trace Event Format timeline.

The records of a run carry, next to XDL's columns, ``Record.device_trace``
(field 5: what device tracers such as CUPTI collected) and ``Record.host_span``
(field 6: each traced step's host intervals); proto/device_trace.proto defines
both. ``xdl-trace timeline PATH -o trace.json`` writes one JSON file that
Perfetto UI (ui.perfetto.dev) and chrome://tracing open:

- one process per rank's host, with a thread per span kind (steps,
  capture/encode, queue wait, device collect) and one per host thread that
  called the CUDA API;
- one process per (rank, device), with one thread per stream;
- complete ("X") events for steps, API calls, kernels, copies and memsets,
  with args naming gstep/lstep, correlation ids, bytes, grid and block;
- flow arrows from each host step to the device work it launched (matched by
  the step's external correlation id), and from each API call to its kernel
  (matched by the CUDA correlation id).

Times are microseconds since the earliest event of the run (``ts`` would lose
sub-microsecond precision as absolute epoch values); the origin, in
nanoseconds since the epoch (CLOCK_REALTIME), is in ``otherData``.
"""

import json
import sys

from google.protobuf import descriptor_pb2

from .tools.read_trace import message_classes

__all__ = ["DeviceTrace", "HostSpan", "build_timeline", "write_timeline"]

DEVICE_TRACE_FIELD = 5  # Record.device_trace
HOST_SPAN_FIELD = 6  # Record.host_span
HOST_API_DEVICE = -1  # Device id of the host threads calling the CUDA API.

# Mirror of proto/device_trace.proto (tests/python/test_timeline.py checks it
# against protoc's reading of that file). Built at import into a private pool by
# xdl_trace/tools/read_trace.py's message_classes, so no generated module is needed.
_ENUMS = {
    "DeviceEventKind": [
        "DEVICE_EVENT_UNSPECIFIED",
        "DEVICE_EVENT_KERNEL",
        "DEVICE_EVENT_MEMCPY",
        "DEVICE_EVENT_MEMSET",
        "DEVICE_EVENT_RUNTIME_API",
        "DEVICE_EVENT_DRIVER_API",
        "DEVICE_EVENT_SYNCHRONIZATION",
        "DEVICE_EVENT_OVERHEAD",
        "DEVICE_EVENT_OTHER",
    ],
}
_HOST_SPAN_KINDS = ["KIND_UNSPECIFIED", "STEP", "CAPTURE_ENCODE", "QUEUE_WAIT", "DEVICE_COLLECT"]
# message -> [(field, number, type, repeated, type_name, oneof_index)]
_MESSAGES = {
    "DeviceStat": [
        ("name_index", 1, "INT32", False, None, None),
        ("int64_value", 2, "INT64", False, None, 0),
        ("uint64_value", 3, "UINT64", False, None, 0),
        ("double_value", 4, "DOUBLE", False, None, 0),
        ("str_value", 5, "STRING", False, None, 0),
    ],
    "DeviceEvent": [
        ("name_index", 1, "INT32", False, None, None),
        ("kind", 2, "ENUM", False, ".xdl.proto.DeviceEventKind", None),
        ("start_ns", 3, "INT64", False, None, None),
        ("end_ns", 4, "INT64", False, None, None),
        ("correlation_id", 5, "UINT64", False, None, None),
        ("external_id", 6, "UINT64", False, None, None),
        ("stat", 7, "MESSAGE", True, ".xdl.proto.DeviceStat", None),
    ],
    "DeviceLine": [
        ("id", 1, "INT64", False, None, None),
        ("name", 2, "STRING", False, None, None),
        ("event", 3, "MESSAGE", True, ".xdl.proto.DeviceEvent", None),
    ],
    "Device": [
        ("id", 1, "INT32", False, None, None),
        ("name", 2, "STRING", False, None, None),
        ("line", 3, "MESSAGE", True, ".xdl.proto.DeviceLine", None),
    ],
    "DeviceTrace": [
        ("tracer", 1, "STRING", False, None, None),
        ("name", 2, "STRING", True, None, None),
        ("device", 3, "MESSAGE", True, ".xdl.proto.Device", None),
        ("dropped_events", 4, "INT64", False, None, None),
        ("status", 5, "STRING", False, None, None),
    ],
    "HostSpan": [
        ("kind", 1, "ENUM", False, ".xdl.proto.HostSpan.Kind", None),
        ("start_ns", 2, "INT64", False, None, None),
        ("end_ns", 3, "INT64", False, None, None),
        ("gstep", 4, "INT64", False, None, None),
        ("lstep", 5, "INT64", False, None, None),
        ("correlation_id", 6, "UINT64", False, None, None),
        ("thread_id", 7, "INT64", False, None, None),
    ],
}


def file_descriptor():
    """proto/device_trace.proto as a FileDescriptorProto (built by hand)."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="xdl_trace_timeline_device_trace.proto", package="xdl.proto", syntax="proto3"
    )
    for enum_name, values in _ENUMS.items():
        enum = fdp.enum_type.add(name=enum_name)
        for number, value in enumerate(values):
            enum.value.add(name=value, number=number)
    for message_name, fields in _MESSAGES.items():
        message = fdp.message_type.add(name=message_name)
        if message_name == "DeviceStat":
            message.oneof_decl.add(name="value")
        if message_name == "HostSpan":
            kind = message.enum_type.add(name="Kind")
            for number, value in enumerate(_HOST_SPAN_KINDS):
                kind.value.add(name=value, number=number)
        for name, number, type_name, repeated, ref, oneof in fields:
            field = message.field.add(
                name=name, number=number, type=getattr(F, "TYPE_" + type_name)
            )
            field.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if ref:
                field.type_name = ref
            if oneof is not None:
                field.oneof_index = oneof
    return fdp


_CLASSES = message_classes(file_descriptor(), ("DeviceTrace", "HostSpan"))
DeviceTrace = _CLASSES["DeviceTrace"]
HostSpan = _CLASSES["HostSpan"]

_SPAN_THREADS = {  # HostSpan.Kind -> (tid in the host process, thread name)
    1: (1, "steps"),
    2: (2, "capture + encode"),
    3: (3, "queue wait"),
    4: (4, "device collect"),
}
_EVENT_CATEGORY = {
    1: "kernel",
    2: "memcpy",
    3: "memset",
    4: "cuda_runtime",
    5: "cuda_driver",
    6: "synchronization",
    7: "overhead",
}
_DEVICE_WORK = {1, 2, 3}  # Kernels, copies, memsets: the targets of step flows.
_API_TID_BASE = 1000  # Host-process tids for CUDA API threads: base + index.


def _stat_value(stat):
    which = stat.WhichOneof("value")
    return getattr(stat, which) if which else None


def _collect(path, prefix, name):
    """(rank, [HostSpan], [(DeviceTrace)]) per rank from the records of `path`."""
    from .reader import open_trace  # Needs the compiled extension.

    trace = open_trace(path, prefix=prefix, name=name)
    spans, traces = {}, {}
    for record in trace.records(keys=[]):
        spans.setdefault(record.rank, [])
        traces.setdefault(record.rank, [])
        for number, wire_type, payload in record.extra or ():
            if wire_type != 2:
                continue
            if number == DEVICE_TRACE_FIELD:
                message = DeviceTrace()
                message.ParseFromString(payload)
                traces[record.rank].append(message)
            elif number == HOST_SPAN_FIELD:
                message = HostSpan()
                message.ParseFromString(payload)
                spans[record.rank].append(message)
    return trace.ranks, spans, traces


def build_timeline(path, prefix="train", name="trace"):
    """The Chrome Trace Event Format object (a dict) for the run at `path`."""
    ranks, spans, traces = _collect(path, prefix, name)
    starts = [s.start_ns for r in spans.values() for s in r if s.start_ns > 0]
    starts += [
        e.start_ns
        for r in traces.values()
        for t in r
        for d in t.device
        for line in d.line
        for e in line.event
        if e.start_ns > 0
    ]
    origin = min(starts) if starts else 0

    def us(ns):
        return round((ns - origin) / 1000.0, 3)

    events, flows = [], 0
    stats = {"steps": 0, "device_events": 0, "flows": 0, "dropped_events": 0, "ranks": len(ranks)}

    def meta(kind, pid, tid, value, sort=None):
        events.append({"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": value}})
        if sort is not None:
            sort_kind = "process_sort_index" if kind == "process_name" else "thread_sort_index"
            events.append(
                {"ph": "M", "name": sort_kind, "pid": pid, "tid": tid, "args": {"sort_index": sort}}
            )

    for rank in sorted(set(ranks) | set(spans) | set(traces)):
        host_pid = 1 + rank * 1000
        meta("process_name", host_pid, 0, f"rank {rank} host", sort=host_pid)
        used_span_threads = set()
        step_of = {}  # correlation id -> STEP span
        for span in spans.get(rank, ()):
            tid, _ = _SPAN_THREADS.get(span.kind, (9, "other"))
            used_span_threads.add(span.kind)
            if span.kind == 1:
                step_of[span.correlation_id] = span
                stats["steps"] += 1
                label = f"step {span.gstep}"
            else:
                label = f"{_SPAN_THREADS.get(span.kind, (0, 'span'))[1]} (step {span.gstep})"
            events.append(
                {
                    "ph": "X",
                    "name": label,
                    "cat": "host",
                    "pid": host_pid,
                    "tid": tid,
                    "ts": us(span.start_ns),
                    "dur": round(max(0, span.end_ns - span.start_ns) / 1000.0, 3),
                    "args": {
                        "gstep": span.gstep,
                        "lstep": span.lstep,
                        "correlation_id": span.correlation_id,
                        "os_thread_id": span.thread_id,
                    },
                }
            )
        for kind in sorted(used_span_threads):
            tid, thread_name = _SPAN_THREADS.get(kind, (9, "other"))
            meta("thread_name", host_pid, tid, thread_name, sort=tid)

        # Devices of this rank, in a stable order: one process each.
        device_pids, api_tids, launches = {}, {}, {}
        device_events = []  # (pid, tid, event, names, tracer)
        for t in traces.get(rank, ()):
            stats["dropped_events"] += t.dropped_events
            for device in t.device:
                for line in device.line:
                    if device.id == HOST_API_DEVICE:
                        key = (t.tracer, line.id)
                        if key not in api_tids:
                            api_tids[key] = _API_TID_BASE + len(api_tids)
                            meta(
                                "thread_name",
                                host_pid,
                                api_tids[key],
                                f"{t.tracer}: {line.name}",
                                sort=api_tids[key],
                            )
                        pid, tid = host_pid, api_tids[key]
                    else:
                        key = (t.tracer, device.id)
                        if key not in device_pids:
                            device_pids[key] = host_pid + 1 + len(device_pids)
                            meta(
                                "process_name",
                                device_pids[key],
                                0,
                                f"rank {rank} {device.name or 'device ' + str(device.id)} ({t.tracer})",
                                sort=device_pids[key],
                            )
                        pid, tid = device_pids[key], line.id
                        meta("thread_name", pid, tid, line.name or f"line {line.id}")
                    for e in line.event:
                        device_events.append((pid, tid, e, t.name, t.tracer))
                        if e.kind in (4, 5) and e.correlation_id:
                            launches[(t.tracer, e.correlation_id)] = (pid, tid, e)
        for pid, tid, e, names, tracer in device_events:
            stats["device_events"] += 1
            event_name = (
                names[e.name_index] if e.name_index < len(names) else f"event {e.name_index}"
            )
            args = {"correlation_id": e.correlation_id, "tracer": tracer}
            step = step_of.get(e.external_id) if e.external_id else None
            if e.external_id:
                args["step_correlation_id"] = e.external_id
            if step is not None:
                args["gstep"] = step.gstep
                args["lstep"] = step.lstep
            for stat in e.stat:
                stat_name = (
                    names[stat.name_index] if stat.name_index < len(names) else str(stat.name_index)
                )
                args[stat_name] = _stat_value(stat)
            ts = us(e.start_ns)
            events.append(
                {
                    "ph": "X",
                    "name": event_name,
                    "cat": _EVENT_CATEGORY.get(e.kind, "device"),
                    "pid": pid,
                    "tid": tid,
                    "ts": ts,
                    "dur": round(max(0, e.end_ns - e.start_ns) / 1000.0, 3),
                    "args": args,
                }
            )
            if e.kind not in _DEVICE_WORK:
                continue
            if step is not None:  # Host step -> the device work it launched.
                flows += 1
                events.append(
                    {
                        "ph": "s",
                        "id": flows,
                        "name": "step launch",
                        "cat": "step",
                        "pid": host_pid,
                        "tid": 1,
                        "ts": us(step.start_ns),
                    }
                )
                events.append(
                    {
                        "ph": "f",
                        "bp": "e",
                        "id": flows,
                        "name": "step launch",
                        "cat": "step",
                        "pid": pid,
                        "tid": tid,
                        "ts": ts,
                    }
                )
            launch = launches.get((tracer, e.correlation_id)) if e.correlation_id else None
            if launch is not None:  # API call -> its kernel/copy.
                flows += 1
                lpid, ltid, le = launch
                events.append(
                    {
                        "ph": "s",
                        "id": flows,
                        "name": "cuda launch",
                        "cat": "launch",
                        "pid": lpid,
                        "tid": ltid,
                        "ts": us(le.start_ns),
                    }
                )
                events.append(
                    {
                        "ph": "f",
                        "bp": "e",
                        "id": flows,
                        "name": "cuda launch",
                        "cat": "launch",
                        "pid": pid,
                        "tid": tid,
                        "ts": ts,
                    }
                )
    stats["flows"] = flows
    # Thread-name metadata repeats across collections: keep the first of each.
    seen, unique = set(), []
    for ev in events:
        if ev["ph"] == "M":
            key = (ev["name"], ev["pid"], ev["tid"])
            if key in seen:
                continue
            seen.add(key)
        unique.append(ev)
    return {
        "traceEvents": unique,
        "displayTimeUnit": "ns",
        "otherData": {
            "time_origin_unix_ns": origin,
            "source": str(path),
            **{k: v for k, v in stats.items()},
        },
    }


def write_timeline(path, output, prefix="train", name="trace"):
    """Writes build_timeline(path) as JSON to `output`; returns its otherData."""
    timeline = build_timeline(path, prefix=prefix, name=name)
    with open(output, "w") as out:
        json.dump(timeline, out, separators=(",", ":"))
    return timeline["otherData"]


# --- the `xdl-trace timeline` subcommand (registered with xdl_trace.cli) -------


def _configure(parser):
    parser.add_argument(
        "-o", "--output", default="trace.json", help="JSON file to write (default trace.json)"
    )


def _run(args):
    info = write_timeline(args.path, args.output, prefix=args.prefix, name=args.name)
    print(
        f"wrote {args.output}: {info['steps']} steps, {info['device_events']} device events, "
        f"{info['flows']} flows from {info['ranks']} rank(s)"
        + (
            f"; {info['dropped_events']} device events dropped while tracing"
            if info["dropped_events"]
            else ""
        )
        + " (open in ui.perfetto.dev or chrome://tracing)"
    )
    if info["steps"] == 0 and info["device_events"] == 0:
        print(
            "note: no host spans or device events in these records; trace with "
            "device_tracers set (docs/device-tracing.md)",
            file=sys.stderr,
        )
    return 0


try:
    from .cli import command as _command
except ImportError:  # pragma: no cover - the CLI module is optional here
    _command = None
if _command is not None:
    _command(
        "timeline",
        "write host steps and device activity as a Chrome/Perfetto trace (JSON)",
        _configure,
    )(_run)
