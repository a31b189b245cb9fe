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

from ._proto import device_trace_pb2, xdl_trace_pb2

__all__ = ["DeviceTrace", "HostSpan", "build_timeline", "write_timeline"]

# The message classes and field numbers come from protoc's output for proto/ (xdl_trace._proto).
DeviceTrace = device_trace_pb2.DeviceTrace
HostSpan = device_trace_pb2.HostSpan
DEVICE_TRACE_FIELD = xdl_trace_pb2.Record.DEVICE_TRACE_FIELD_NUMBER
HOST_SPAN_FIELD = xdl_trace_pb2.Record.HOST_SPAN_FIELD_NUMBER
HOST_API_DEVICE = -1  # Device id of the host threads calling the CUDA API.
_LENGTH_DELIMITED = 2  # Wire type of a message field.

_SPAN_THREADS = {  # HostSpan.Kind -> (tid in the host process, thread name)
    HostSpan.STEP: (1, "steps"),
    HostSpan.CAPTURE_ENCODE: (2, "capture + encode"),
    HostSpan.QUEUE_WAIT: (3, "queue wait"),
    HostSpan.DEVICE_COLLECT: (4, "device collect"),
}
_EVENT_CATEGORY = {  # DeviceEventKind -> the event's category in the timeline
    device_trace_pb2.DEVICE_EVENT_KERNEL: "kernel",
    device_trace_pb2.DEVICE_EVENT_MEMCPY: "memcpy",
    device_trace_pb2.DEVICE_EVENT_MEMSET: "memset",
    device_trace_pb2.DEVICE_EVENT_RUNTIME_API: "cuda_runtime",
    device_trace_pb2.DEVICE_EVENT_DRIVER_API: "cuda_driver",
    device_trace_pb2.DEVICE_EVENT_SYNCHRONIZATION: "synchronization",
    device_trace_pb2.DEVICE_EVENT_OVERHEAD: "overhead",
}
# Kernels, copies, memsets: the targets of step flows.
_DEVICE_WORK = {
    device_trace_pb2.DEVICE_EVENT_KERNEL,
    device_trace_pb2.DEVICE_EVENT_MEMCPY,
    device_trace_pb2.DEVICE_EVENT_MEMSET,
}
# CUDA API calls: the sources of launch flows (matched by correlation id).
_API_CALLS = {device_trace_pb2.DEVICE_EVENT_RUNTIME_API, device_trace_pb2.DEVICE_EVENT_DRIVER_API}
_API_TID_BASE = 1000  # Host-process tids for CUDA API threads: base + index.


def _stat_value(stat):
    which = stat.WhichOneof("value")
    return getattr(stat, which) if which else None


def _collect(path, prefix, name, run=None):
    """(rank, [HostSpan], [(DeviceTrace)]) per rank from the records of `path` (one run:
    open_trace's `run`)."""
    from .reader import open_trace  # Needs the compiled extension.

    trace = open_trace(path, prefix=prefix, name=name, run=run)
    spans, traces = {}, {}
    for record in trace.records(keys=[]):
        spans.setdefault(record.rank, [])
        traces.setdefault(record.rank, [])
        for number, wire_type, payload in record.extra or ():
            if wire_type != _LENGTH_DELIMITED:
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


def build_timeline(path, prefix="train", name="trace", run=None):
    """The Chrome Trace Event Format object (a dict) for the run at `path`."""
    ranks, spans, traces = _collect(path, prefix, name, run)
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
            if span.kind == HostSpan.STEP:
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
                        if e.kind in _API_CALLS and e.correlation_id:
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


def write_timeline(path, output, prefix="train", name="trace", run=None):
    """Writes build_timeline(path) as JSON to `output`; returns its otherData."""
    timeline = build_timeline(path, prefix=prefix, name=name, run=run)
    with open(output, "w") as out:
        json.dump(timeline, out, separators=(",", ":"))
    return timeline["otherData"]


# --- the `xdl-trace timeline` subcommand (registered with xdl_trace.cli) -------


def _configure(parser):
    parser.add_argument(
        "-o", "--output", default="trace.json", help="JSON file to write (default trace.json)"
    )


def _run(args):
    info = write_timeline(
        args.path, args.output, prefix=args.prefix, name=args.name, run=getattr(args, "run", None)
    )
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
