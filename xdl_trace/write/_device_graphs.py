"""Summary passes replayed as device graphs: one launch a step, not ~45, while the tensors stay put.

A summary pass (_device_summary) launches ~45 kernels; on a GPU each costs the training thread
a few microseconds to launch, ~200 us a step in all. Once the same tensors come to a pass on two
steps in a row (same addresses, shapes, strides and dtypes: a model's parameters always, its
gradients while the allocator hands back the same blocks), the pass is captured once as a graph
(the backend's ``capture``: a CUDA graph) and replayed while they stay there. A graph reads the
tensors where they lay at capture, so a tensor that moved (a gradient reallocated elsewhere)
runs the pass eagerly again, and it is captured anew once its new place holds for two steps.

Bounds: at most MAX_GRAPHS graphs a process; passes of more than MAX_ELEMENTS elements stay
eager (their launches are small beside their own kernels' time). A graph keeps the device memory
of its pass's temporaries, in passes of at most CHUNK_ELEMENTS elements (~30 bytes an element:
~125 MB a graph at most), for the life of the process: a graph is never destroyed while the
device may still be running it. A capture that fails turns graphs off for the process (counted,
warned once); the pass then runs eagerly, as it does with ``XDL_TRACE_DEVICE_GRAPHS=0`` or a
backend that cannot capture.
"""

import os
import threading
import warnings

from . import _device_summary

MAX_GRAPHS = 4
MAX_ELEMENTS = 1 << 26
CHUNK_ELEMENTS = 1 << 22


class _Graph:
    __slots__ = ("graph", "rows", "keep")

    def __init__(self, graph, rows, keep):
        self.graph = graph  # The backend's graph: replay() runs the pass on the current stream.
        self.rows = rows  # The pass's output, rewritten by every replay.
        self.keep = keep  # Device constants the graph reads (_device_summary.static_inputs).


class SummaryGraphs:
    """The process's summary graphs (see the module docstring). Thread-safe: a graph belongs to
    the thread and stream that captured it, so two threads never replay into one output."""

    def __init__(self):
        self._lock = threading.Lock()
        self._graphs = {}  # GUARDED_BY(_lock): (where, kind, bins, signature) -> _Graph
        self._last = {}  # GUARDED_BY(_lock): (where, kind, bins) -> the previous pass's signature
        self._off = None  # GUARDED_BY(_lock): why graphs are off (a failed capture), or None
        self._counts = dict.fromkeys(  # GUARDED_BY(_lock)
            (
                "summary_graph_captures",
                "summary_graph_replays",
                "summary_graph_failures",
                "summary_passes_eager",
            ),
            0,
        )

    def rows(self, kind, bins, tensors, backend):
        """The pass's rows (_device_summary.rows), replayed from a graph where one applies."""
        capture = getattr(backend, "capture", None)
        if capture is None or os.environ.get("XDL_TRACE_DEVICE_GRAPHS", "1") == "0":
            return self._eager(kind, bins, tensors)
        device = tensors[0].device
        signature = tuple((t.data_ptr(), t.shape, t.stride(), t.dtype) for t in tensors)
        where = (threading.get_ident(), device, backend.stream_key(device))
        key = (where, kind, bins, signature)
        with self._lock:
            graph = self._graphs.get(key)
            stable = self._last.get(key[:3]) == signature
            self._last[key[:3]] = signature
            if graph is not None:
                self._counts["summary_graph_replays"] += 1
            wanted = (
                graph is None
                and stable
                and self._off is None
                and len(self._graphs) < MAX_GRAPHS
                and sum(t.numel() for t in tensors) <= MAX_ELEMENTS
            )
        if wanted:
            graph = self._capture(key, capture, device, kind, bins, tensors)
        if graph is None:
            return self._eager(kind, bins, tensors)
        graph.graph.replay()
        return graph.rows

    def _capture(self, key, capture, device, kind, bins, tensors):
        keep = _device_summary.static_inputs(tensors, CHUNK_ELEMENTS)
        try:
            graph, rows = capture(
                device, lambda: _device_summary.rows(kind, bins, tensors, CHUNK_ELEMENTS)
            )
        except Exception as e:  # noqa: BLE001  (any failure: eager from now on, and said so)
            why = f"{type(e).__name__}: {e}"
            with self._lock:
                self._off = why
                self._counts["summary_graph_failures"] += 1
            warnings.warn(
                f"xdl_trace: capturing a device summary graph failed ({why}); device summaries "
                "run without graphs from now on",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        made = _Graph(graph, rows, keep)
        with self._lock:
            self._graphs[key] = made
            self._counts["summary_graph_captures"] += 1
            self._counts["summary_graph_replays"] += 1  # The replay that follows.
        return made

    def _eager(self, kind, bins, tensors):
        with self._lock:
            self._counts["summary_passes_eager"] += 1
        return _device_summary.rows(kind, bins, tensors)

    def stats(self):
        with self._lock:
            out = dict(self._counts)
            out["summary_graphs"] = len(self._graphs)
            out["summary_graphs_off"] = self._off
        return out


_graphs = SummaryGraphs()


def graphs():
    return _graphs
