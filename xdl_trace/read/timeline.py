"""Turns a run's host spans and device events into a Chrome Trace Event Format timeline, streamed.

The records of a run carry, next to XDL's columns, ``Record.host_span``
(field 6: every step the hook saw, traced or not, with the capture/encode,
queue-wait and IO-write intervals; written by every run) and
``Record.device_trace`` (field 5: what device tracers such as CUPTI
collected); proto/device_trace.proto defines both. ``xdl-trace timeline PATH
-o trace.json [--gsteps A:B] [--ranks R,...]`` writes one JSON file that
Perfetto UI (ui.perfetto.dev) and chrome://tracing open:

- one process per rank's host, with a thread per span kind (steps,
  capture/encode, queue wait, IO write, device collect), and per OS thread its
  named ranges (xdl.watch's module forward/backward and optimizer step, category
  the phase) with its CUDA API calls on the track just below; steps the hook saw
  but did not trace are slices of their own on the steps track, category
  ``step (not traced)``;
- one process per (rank, device), with one thread per stream;
- complete ("X") events for steps, API calls, kernels, copies and memsets,
  with args naming gstep/lstep, correlation ids, bytes, grid and block;
  kernel names demangled as Kineto and Nsight show them (``gpu_steps.demangle``),
  the mangled name kept in args (``mangled_name``);
  NVTX ranges on the host thread that opened them; device memory allocations
  and frees as instants plus a "memory allocated" counter per device;
- flow arrows from each host step (traced or not) to the device work it launched
  (matched by the step's external correlation id), and from each API call to
  its kernel (matched by the CUDA correlation id).

The JSON is written as records are read: memory does not grow with the
number of events (the correlation maps behind the flows are bounded, see
``_BoundedMap``). Times are microseconds since the earliest span or event of
the first record written (later records never start much earlier; a slightly
earlier event gets a negative ``ts``, which the viewers accept); the origin,
in nanoseconds since the epoch (CLOCK_REALTIME), is in ``otherData``, which
follows the event array.
"""

import array
import bisect
import io
import json
import math
import numbers
import os
import warnings

from .._proto import device_trace_pb2
from .device_events import (
    API_CALLS,
    DEVICE_WORK,
    EVENT_CATEGORY,
    OTHER_CATEGORY,
    DeviceDataWarning,
    DeviceTrace,
    HostSpan,
    bad_data_message,
    parse_extra,
)
from .gpu_steps import api_name, demangle
from .reader import open_trace
from .selection import Selection

__all__ = ["DeviceTrace", "HostSpan", "build_timeline", "write_timeline", "BROWSER_LIMIT_BYTES"]

# DeviceTrace, HostSpan and their field numbers: xdl_trace.read.device_events (from protoc's output).
HOST_API_DEVICE = -1  # Device id of the host threads calling the CUDA API.
# Browsers' JSON viewers (Perfetto UI, chrome://tracing) struggle above this size.
BROWSER_LIMIT_BYTES = 256 * 1024 * 1024

_SPAN_THREADS = {  # HostSpan.Kind -> (tid in the host process, thread name)
    HostSpan.STEP: (1, "steps"),
    HostSpan.STEP_NOT_TRACED: (1, "steps"),
    HostSpan.CAPTURE_ENCODE: (2, "capture + encode"),
    HostSpan.QUEUE_WAIT: (3, "queue wait"),
    HostSpan.IO_WRITE: (5, "IO write"),
    HostSpan.DEVICE_COLLECT: (4, "device collect"),
}
_OTHER_SPAN_THREAD = (9, "other")
_EVAL_TID_OFFSET = 10  # An evaluation's span kinds: "eval steps" at tid 11, and so on.
_STEP_KINDS = {HostSpan.STEP, HostSpan.STEP_NOT_TRACED}  # Sources of step flows.
NOT_TRACED_CATEGORY = "step (not traced)"
# Device work (kernels, copies, memsets): the targets of step flows; CUDA API calls: the sources
# of launch flows (matched by correlation id). By role, from device_events.KINDS.
_DEVICE_WORK = set(DEVICE_WORK)
_API_CALLS = set(API_CALLS)
# Host-process tids of an OS thread's tracks: its named ranges (xdl.watch's modules) at
# base + 2k and its CUDA API calls just below at base + 2k + 1, k the thread's slot, so a
# launch sits under the range that made it.
_THREAD_TID_BASE = 1000
_OTHER_API_TID_BASE = 100_000  # A second tracer's API line of a thread already placed.
# How many traced steps / unmatched API calls a rank remembers for flows. Device
# events arrive at most a collect interval after their step, and a kernel in
# the same collect as its launch call, so these cover any sane interval.
_STEP_MEMORY = 1 << 14
_LAUNCH_MEMORY = 1 << 16


class _BoundedMap(dict):
    """A dict that forgets its oldest half when it outgrows `limit` (insertion order)."""

    def __init__(self, limit):
        super().__init__()
        self.limit = limit

    def put(self, key, value):
        self[key] = value
        if len(self) > self.limit:
            for old in list(self)[: len(self) // 2]:
                del self[old]


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(str(value))
    return json.dumps(value)


def _stat_value(stat):
    which = stat.WhichOneof("value")
    return getattr(stat, which) if which else None


class _Rank:
    """What the timeline remembers about one rank while streaming (bounded). `trained`: of an
    evaluation's records, the _Rank of the training run's (its host process and OS threads'
    tracks are shared; its span kinds get tracks of their own); `inline`: whether the training's
    own process evaluated (else an eval job of its own)."""

    def __init__(self, rank, trained=None, inline=True):
        self.rank = rank
        self.host_pid = 1 + rank * 1000
        self.trained = trained
        self.inline = inline
        # With an evaluation to draw: the end of each step, in order (8 bytes a step), so an eval
        # step starts no earlier than the training step before it ended (``eval_step_start``).
        self.step_ends = None
        self.steps = _BoundedMap(_STEP_MEMORY)  # correlation id -> (start_ns, gstep, lstep)
        self.launches = _BoundedMap(_LAUNCH_MEMORY)  # (tracer, correlation id) -> (pid, tid, ts)
        self.device_pids = {}  # (tracer, device id) -> pid
        self.api_tids = {}  # (tracer, line id) -> tid
        # OS thread id -> slot (its range and API tracks), shared with the training run's.
        self.thread_slots = {} if trained is None else trained.thread_slots
        self.memory = {}  # device pid -> bytes allocated since tracing started
        self.past_window = False  # A record beyond the gstep window was read.

    @property
    def evaluation(self):
        return self.trained is not None

    def eval_step_start(self, span):
        """Where an eval step's span starts: an eval hook's step runs from its previous Step(),
        which for the first step of an evaluation lies before the training steps since the last
        one; it starts where the training step before it ended. An eval job of its own (another
        process) steps apart from training: its span stands."""
        ends = self.trained.step_ends
        i = bisect.bisect_right(ends, span.end_ns) if ends and self.inline else 0
        return max(span.start_ns, ends[i - 1]) if i else span.start_ns


class _TimelineWriter:
    """Writes the JSON of a timeline as events come: '{"traceEvents":[' ... '],...}'."""

    def __init__(self, out, window):
        self.out = out
        self.begin, self.end = window if window else (None, None)
        self.origin = None
        self.count = 0
        self.flows = 0
        self.meta_seen = set()
        self.stats = {
            "steps": 0,
            "steps_not_traced": 0,
            "eval_steps": 0,  # Of the run's evaluation (its eval hooks' test.* records).
            "host_spans": 0,
            "device_events": 0,
            "flows": 0,
            "dropped_events": 0,
            "bad_names": 0,  # Names that were not UTF-8 (shown with U+FFFD).
            "bad_stats": 0,  # Stats not a number where one is needed (treated as absent).
            "dropped_buffers": 0,  # Activity buffers lost whole: their events are unknown.
            "spans_dropped": 0,
            "ranges": 0,  # Named host ranges (xdl.watch's modules, the optimizer step).
        }
        out.write('{"traceEvents":[\n')

    def in_window(self, gstep):
        return (self.begin is None or gstep >= self.begin) and (
            self.end is None or gstep <= self.end
        )

    def emit(self, text):
        if self.count:
            self.out.write(",\n")
        self.out.write(text)
        self.count += 1

    def us(self, ns):
        return f"{(ns - self.origin) / 1000.0:.3f}"

    def meta(self, kind, pid, tid, value, sort=None):
        key = (kind, pid, tid)
        if key in self.meta_seen:
            return
        self.meta_seen.add(key)
        self.emit(
            f'{{"ph":"M","name":"{kind}","pid":{pid},"tid":{tid},'
            f'"args":{{"name":{json.dumps(value)}}}}}'
        )
        if sort is not None:
            sort_kind = "process_sort_index" if kind == "process_name" else "thread_sort_index"
            self.emit(
                f'{{"ph":"M","name":"{sort_kind}","pid":{pid},"tid":{tid},'
                f'"args":{{"sort_index":{sort}}}}}'
            )

    def set_origin(self, record, spans, traces):
        starts = [s.start_ns for s in spans if s.start_ns > 0]
        for t in traces:
            for device in t.device:
                for line in device.line:
                    starts.extend(e.start_ns for e in line.event if e.start_ns > 0)
        if starts:
            self.origin = min(starts)
        elif record.timestamp > 0:
            self.origin = record.timestamp * 1_000_000

    def _thread_slot(self, state, os_tid):
        slot = state.thread_slots.get(os_tid)
        if slot is None:
            slot = state.thread_slots[os_tid] = len(state.thread_slots)
        return _THREAD_TID_BASE + 2 * slot

    def _range(self, state, span):
        """A named host range (HostSpan RANGE) on its thread's range track."""
        pid = state.host_pid
        tid = self._thread_slot(state, span.thread_id)
        self.meta("thread_name", pid, tid, f"ranges (tid {span.thread_id})", sort=tid)
        self.stats["ranges"] += 1
        self.emit(
            f'{{"ph":"X","name":{json.dumps(span.name)},"cat":{json.dumps(span.category)},'
            f'"pid":{pid},"tid":{tid},"ts":{self.us(span.start_ns)},'
            f'"dur":{max(0, span.end_ns - span.start_ns) / 1000.0:.3f},'
            f'"args":{{"gstep":{span.gstep},"os_thread_id":{span.thread_id}}}}}'
        )

    def host_spans(self, state, spans):
        pid = state.host_pid
        self.meta("process_name", pid, 0, f"rank {state.rank} host", sort=pid)
        for span in spans:
            self.stats["spans_dropped"] += span.spans_dropped
            if span.kind == HostSpan.RANGE:
                if self.in_window(span.gstep):
                    self._range(state, span)
                continue
            if span.correlation_id and span.kind in _STEP_KINDS:
                # Remembered even outside the window: its device work is left out by it.
                state.steps.put(span.correlation_id, (span.start_ns, span.gstep, span.lstep))
            start = span.start_ns
            if span.kind in _STEP_KINDS:
                if state.step_ends is not None:
                    state.step_ends.append(span.end_ns)
                elif state.evaluation:
                    start = state.eval_step_start(span)
            if not self.in_window(span.gstep):
                continue
            tid, thread_name = _SPAN_THREADS.get(span.kind, _OTHER_SPAN_THREAD)
            step = "step"
            if state.evaluation:
                tid, thread_name, step = tid + _EVAL_TID_OFFSET, "eval " + thread_name, "eval step"
            self.meta("thread_name", pid, tid, thread_name, sort=tid)
            category = "host"
            if span.kind == HostSpan.STEP:
                self.stats["eval_steps" if state.evaluation else "steps"] += 1
                label = f"{step} {span.gstep}"
            elif span.kind == HostSpan.STEP_NOT_TRACED:
                self.stats["steps_not_traced"] += 1
                label = f"{step} {span.gstep} (not traced)"
                category = NOT_TRACED_CATEGORY
            else:
                self.stats["host_spans"] += 1
                label = f"{thread_name} (step {span.gstep})"
            args = (
                f'"gstep":{span.gstep},"lstep":{span.lstep},'
                f'"correlation_id":{span.correlation_id},"os_thread_id":{span.thread_id}'
            )
            if span.records:
                args += f',"records":{span.records}'
            if span.spans_dropped:
                args += f',"spans_dropped":{span.spans_dropped}'
            self.emit(
                f'{{"ph":"X","name":"{label}","cat":"{category}","pid":{pid},"tid":{tid},'
                f'"ts":{self.us(start)},'
                f'"dur":{max(0, span.end_ns - start) / 1000.0:.3f},"args":{{{args}}}}}'
            )

    def _line_place(self, state, t, device, line):
        """(pid, tid) of a device line, naming its process/thread on first sight."""
        host_pid = state.host_pid
        if device.id == HOST_API_DEVICE:
            key = (t.tracer, line.id)
            tid = state.api_tids.get(key)
            if tid is None:
                tid = self._thread_slot(state, line.id) + 1
                if tid in state.api_tids.values():
                    tid = _OTHER_API_TID_BASE + len(state.api_tids)
                state.api_tids[key] = tid
                self.meta("thread_name", host_pid, tid, f"{t.tracer}: {line.name}", sort=tid)
            return host_pid, tid
        key = (t.tracer, device.id)
        pid = state.device_pids.get(key)
        if pid is None:
            pid = state.device_pids[key] = host_pid + 1 + len(state.device_pids)
            device_name = device.name or f"device {device.id}"
            self.meta(
                "process_name",
                pid,
                0,
                f"rank {state.rank} {device_name} ({t.tracer})",
                sort=pid,
            )
        self.meta("thread_name", pid, line.id, line.name or f"line {line.id}")
        return pid, line.id

    def device_traces(self, state, traces, record_in_window):
        """Emits the events of one record's DeviceTraces, with their flows.

        The hot loop of a large timeline: each event's fields are read once and
        its JSON built with one f-string, and a line's events are written in one
        call (per-event cost is what bench/timeline.py measures)."""
        origin = self.origin
        # API calls first: a kernel may precede its launch call in the trace.
        lines = []
        for t in traces:
            self.stats["dropped_events"] += t.dropped_events
            self.stats["dropped_buffers"] += t.dropped_buffers
            for device in t.device:
                for line in device.line:
                    events = line.event
                    if not events:
                        continue
                    pid, tid = self._line_place(state, t, device, line)
                    lines.append((t, pid, tid, events))
                    if device.id != HOST_API_DEVICE:
                        continue
                    for e in events:
                        correlation = e.correlation_id
                        if correlation and e.kind in _API_CALLS:
                            state.launches.put(
                                (t.tracer, correlation),
                                f'"pid":{pid},"tid":{tid},"ts":{(e.start_ns - origin) / 1000.0:.3f}',
                            )
        steps, launches = state.steps, state.launches
        windowed = self.begin is not None or self.end is not None
        step_place = f'"pid":{state.host_pid},"tid":{_SPAN_THREADS[HostSpan.STEP][0]},"ts":'
        flows, emitted, stats = self.flows, 0, self.stats
        shown_names = {}  # id(trace) -> (kernel names, API names): JSON, and the mangled args.
        for t, pid, tid, events in lines:
            # Kernel names as Kineto and Nsight show them (the mangled one stays in args), API
            # calls as users know them (CUPTI's "_v7000" suffix dropped, as the report does).
            if id(t) not in shown_names:
                shown = demangle(t.name)
                kernels = [json.dumps(n) for n in shown], [
                    f',"mangled_name":{json.dumps(n)}' if n != d else ""
                    for n, d in zip(t.name, shown)
                ]
                api = [json.dumps(api_name(n)) for n in t.name], [""] * len(t.name)
                shown_names[id(t)] = (kernels, api)
            names, mangled = shown_names[id(t)][pid == state.host_pid]
            n_names = len(names)
            tracer = t.tracer
            tracer_json = json.dumps(tracer)
            place = f'"pid":{pid},"tid":{tid}'
            parts = []
            for e in events:
                external = e.external_id
                step = steps.get(external) if external else None
                if windowed and not (
                    self.in_window(step[1]) if step is not None else record_in_window
                ):
                    continue
                kind, correlation, name_index = e.kind, e.correlation_id, e.name_index
                start, end = e.start_ns, e.end_ns
                name = names[name_index] if 0 <= name_index < n_names else f'"event {name_index}"'
                args = f'"correlation_id":{correlation},"tracer":{tracer_json}'
                if 0 <= name_index < n_names:
                    args += mangled[name_index]
                if external:
                    args += f',"step_correlation_id":{external}'
                    if step is not None:
                        args += f',"gstep":{step[1]},"lstep":{step[2]}'
                stat_list = e.stat
                if stat_list:
                    for stat in stat_list:
                        i = stat.name_index
                        stat_name = names[i] if 0 <= i < n_names else json.dumps(str(i))
                        args += f",{stat_name}:{_json_value(_stat_value(stat))}"
                ts = f"{(start - origin) / 1000.0:.3f}"
                parts.append(
                    f'{{"ph":"X","name":{name},"cat":"{EVENT_CATEGORY.get(kind, OTHER_CATEGORY)}",'
                    f'{place},"ts":{ts},"dur":{max(0, end - start) / 1000.0:.3f},'
                    f'"args":{{{args}}}}}'
                )
                emitted += 1
                if kind == device_trace_pb2.DEVICE_EVENT_MEMORY:
                    parts.append(self._memory(state, pid, t.name, stat_list, ts, stats))
                if kind not in _DEVICE_WORK:
                    continue
                if step is not None:  # Host step -> the device work it launched.
                    flows += 1
                    parts.append(
                        f'{{"ph":"s","id":{flows},"name":"step launch","cat":"step",'
                        f"{step_place}{(step[0] - origin) / 1000.0:.3f}}}"
                    )
                    parts.append(
                        f'{{"ph":"f","bp":"e","id":{flows},"name":"step launch","cat":"step",'
                        f'{place},"ts":{ts}}}'
                    )
                if correlation:  # API call -> its kernel/copy.
                    launch = launches.pop((tracer, correlation), None)
                    if launch is not None:
                        flows += 1
                        parts.append(
                            f'{{"ph":"s","id":{flows},"name":"cuda launch","cat":"launch",'
                            f"{launch}}}"
                        )
                        parts.append(
                            f'{{"ph":"f","bp":"e","id":{flows},"name":"cuda launch",'
                            f'"cat":"launch",{place},"ts":{ts}}}'
                        )
            if parts:
                self.out.write((",\n" if self.count else "") + ",\n".join(parts))
                self.count += len(parts)
        self.flows = flows
        stats["device_events"] += emitted

    @staticmethod
    def _memory(state, pid, names, stats, ts, counts):
        """The "memory allocated" counter sample after one alloc or free of device `pid`.

        A running total in arrival order, which is time order: a tracer's
        memory line is sorted, and collects follow one another. A "bytes" stat
        that is not a number (a plugin's string) counts as absent, in
        counts["bad_stats"]."""
        values = {names[s.name_index]: _stat_value(s) for s in stats if s.name_index < len(names)}
        delta = values.get("bytes") or 0
        if (
            isinstance(delta, bool)
            or not isinstance(delta, numbers.Real)
            or not math.isfinite(delta)
        ):
            counts["bad_stats"] += 1
            delta = 0
        delta = int(delta)
        total = state.memory.get(pid, 0) + (-delta if values.get("operation") == "free" else delta)
        state.memory[pid] = total
        return f'{{"ph":"C","name":"memory allocated","pid":{pid},"ts":{ts},"args":{{"bytes":{total}}}}}'

    def finish(self, other):
        self.stats["flows"] = self.flows
        other.update(self.stats)
        other["time_origin_unix_ns"] = self.origin or 0
        self.out.write(f'\n],"displayTimeUnit":"ns","otherData":{json.dumps(other)}}}\n')
        return other


def stream_timeline(
    path, out, prefix="train", name="trace", gsteps=None, ranks=None, run=None, selection=None
):
    """Writes the timeline JSON of the run at `path` to the text stream `out`, record by record.

    ``selection``: a ``Selection`` (the keywords gsteps, ranks and run stand for its fields;
    its keys are not used). Its gsteps: the window from the first to the last selected step,
    ``(begin, end)`` inclusive, either may be None: keeps the spans of those steps and the
    device work they launched. Its ranks: the ranks to keep (default all). Its run: which run
    of a directory holding several (as ``open_trace``). A training run's evaluation
    (``Trace.evaluation``) comes with it: its steps on "eval steps" tracks of the same host
    process, its named ranges (an eval forward's module marks) on their threads' tracks.
    Returns the summary also written as ``otherData``.
    """
    selection = Selection.of(selection, gsteps=gsteps, ranks=ranks, run=run)
    ranks = selection.ranks
    trace = open_trace(
        path, prefix=prefix, name=name, run=selection.run, attempts=selection.attempts
    )
    selected = sorted(set(trace.ranks) & set(ranks)) if ranks else list(trace.ranks)
    begin, end = selection.window()[:2] if selection.gsteps else (None, None)
    writer = _TimelineWriter(out, (begin, end))
    states = {r: _Rank(r) for r in selected}
    evaluation = trace.evaluation()
    if evaluation is not None:
        for state in states.values():
            state.step_ends = array.array("q")
    _stream(writer, trace, states, selected)
    if evaluation is not None:
        evaluated = {}
        for r in evaluation.ranks:
            if r in selected:
                # Evaluated by the training's own process (not an eval job of its own).
                inline = bool(trace.writers(r) & evaluation.writers(r))
                evaluated[r] = _Rank(r, states.setdefault(r, _Rank(r)), inline)
        _stream(writer, evaluation, evaluated, selected)
    other = {"source": str(path), "ranks": len(selected)}
    if selection.gsteps:
        other["gsteps"] = [begin, end]
    message = bad_data_message(writer.stats["bad_names"], writer.stats["bad_stats"])
    if message:
        warnings.warn(f"{path}: {message}", DeviceDataWarning, stacklevel=2)
    return writer.finish(other)


def _stream(writer, trace, states, ranks):
    """Writes the spans and device events of `trace`'s records of `ranks` ({rank: _Rank})."""
    # Spans of step g travel in the record of g or of a later traced step, so the
    # read starts at `begin` and ends once every rank has a record past `end`.
    for record in trace.records(keys=[], gsteps=(writer.begin, None), ranks=ranks):
        state = states.setdefault(record.rank, _Rank(record.rank))
        if state.past_window:
            if all(s.past_window for s in states.values()):
                break
            continue
        spans, traces = parse_extra(record.extra, writer.stats)
        if writer.origin is None:
            writer.set_origin(record, spans, traces)
            if writer.origin is None:
                continue  # Nothing timed in this record.
        writer.host_spans(state, spans)
        if traces:
            writer.device_traces(state, traces, writer.in_window(record.gstep))
        if writer.end is not None and record.gstep > writer.end:
            state.past_window = True


def build_timeline(
    path, prefix="train", name="trace", gsteps=None, ranks=None, run=None, selection=None
):
    """The Chrome Trace Event Format object (a dict) for the run at `path` (held in memory).
    selection and gsteps, ranks, run: as ``stream_timeline``."""
    selection = Selection.of(selection, gsteps=gsteps, ranks=ranks, run=run)
    buffer = io.StringIO()
    stream_timeline(path, buffer, prefix=prefix, name=name, selection=selection)
    return json.loads(buffer.getvalue())


def write_timeline(
    path, output, prefix="train", name="trace", gsteps=None, ranks=None, run=None, selection=None
):
    """Streams the timeline of `path` as JSON to the file `output`; returns its otherData
    plus ``bytes``, the size of what was written. selection and gsteps, ranks, run: as
    ``stream_timeline``."""
    selection = Selection.of(selection, gsteps=gsteps, ranks=ranks, run=run)
    with open(output, "w", buffering=1 << 20) as out:
        info = stream_timeline(path, out, prefix=prefix, name=name, selection=selection)
    info["bytes"] = os.path.getsize(output)
    return info
