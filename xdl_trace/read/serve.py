"""``xdl-trace serve RUN...``: the report as a local web page that follows runs as they write.

    serve(["/tmp/run"], port=8080)   # http://127.0.0.1:8080/

A ``LiveRun`` keeps one ``analysis.RunScan`` per run, made by the static report's scan at the
first ``update``; each later one reads only what the run's files gained: a file whose size is
unchanged is not opened again, a grown one is scanned on from the byte where its last read
ended (``RunScan.end_offsets``: the frames before are not walked again), a new one (a rollover,
a rank that started late) from its start; every record so read is new, a repeated gstep
included, and is added to the same accumulators. One updater thread refreshes every run twice a second
and keeps the latest report model as JSON; request threads (``ThreadingHTTPServer``) only hand
out the page and that JSON, so a slow browser never slows the reading. The page
(report.js with live.js) holds no chart data: each card fetches its charts (``/card``) when it
comes into view; it polls ``/update`` (the model less the cards' charts, with per card the
version that last changed them) and fetches again the drawn cards that changed.
"""

import html
import http.server
import json
import os
import socket
import sys
import threading
import urllib.parse
import warnings

from ..errors import TraceError
from . import analysis, report, report_html, trace_runs
from .alerts import run_not_read
from .reader import TornTailWarning
from .selection import Selection

__all__ = ["LiveRun", "LiveReport", "serve"]

POLL_S = 0.5  # How often the updater thread looks at the runs' files.


def _alive(pid):
    """Whether process `pid` runs on this host (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class LiveRun:
    """One run followed as it writes (`which`: the run to read, asked at each update; default
    the latest of `path`). Not thread-safe: one updater thread calls ``update``."""

    def __init__(self, path, label=None, prefix="train", name="trace", which=None):
        self.path = os.fspath(path)
        self.label = label or os.path.basename(os.path.normpath(self.path)) or self.path
        self.prefix, self.name = prefix, name
        # Which run to follow, asked at each update: open_trace's run=, or None (none yet).
        self._which = which or (lambda: "latest")
        self._read_as = None  # The `which` the scan was first read with.
        self.scan = None  # The RunScan, once the run has a file.
        self.run = None  # Its trace_runs.Run (ids, pids, metadata).
        self.bytes_read = 0  # Bytes of records added so far (grows by what files gained).
        self._sizes = {}  # data file path -> size when it was last read.
        self.evaluates = None  # Of an evaluation: the LiveRun of the run it evaluates.
        self._selection = Selection()
        self._looked = None  # What the last update saw (``_look``): unchanged, nothing to read.
        self.error = None  # Why the last update failed (a damaged file), else None.
        self.histograms = True  # Whether its distributions are read (a page's first runs').
        # What its curves may hold: its share of the page's (report.series_budget), set before
        # its first read by the runs followed then.
        self.series_budget = None

    def _look(self, names):
        """What tells that the run may have changed since the last update, without opening it:
        the names in its directory (a new file: a rollover, a rank, a run or an attempt that
        began) and the size and time of each file it read and of their Metas (records
        appended, a Meta rewritten: closed). `names`: the directory's, listed by the caller."""
        own = []
        for path in self._sizes:
            for p in (path, path + ".meta"):
                try:
                    st = os.stat(p)
                    own.append((st.st_size, st.st_mtime_ns))
                except OSError:
                    own.append(None)
        return names, tuple(own)

    def update(self, names=None):
        """Reads what the run's files gained since the last call; True when anything did.
        `names`: the listing of the run's directory (``_names``), when the caller has it."""
        looked = self._look(_names(self.path) if names is None else names)
        if looked == self._looked:
            return False  # A sweep's finished runs cost a stat per file, not a read.
        which = self._which()
        if which is None:
            self._looked = looked  # No such run (an evaluation not begun): asked again at news.
            return False
        try:
            trace = analysis.open_trace(self.path, prefix=self.prefix, name=self.name, run=which)
        except (FileNotFoundError, ValueError):
            # Not readable yet (no file, a Header not written): looked at again next time, as
            # what it writes next may change no name.
            return False
        self._looked = looked
        if (
            self.scan is None
            or which != self._read_as
            or (
                trace.run is not None
                and (
                    self.run is None
                    or trace.run.id != self.run.id
                    or trace.run.resumes != self.run.resumes
                )
            )
        ):  # Another run, or an attempt of this one resumed: what it supersedes is read again.
            return self._first_read(trace, which)
        changed = False
        self.run = trace.run
        scan = self.scan
        analysis.begin_scan(scan, trace, self._selection)
        files = [f for f in trace.files if f.rank in scan.ranks]
        scan.files, scan.bytes = len(files), sum(f.size for f in files)
        analysis.read_meta(scan, files)
        pairs = analysis.scan_pairs(scan)
        grown = [f for f in files if self._sizes.get(f.path) != f.size]
        del trace
        histogram_rank = scan.ranks[0] if scan.ranks else None
        scan.torn_tails = {}
        for f in grown:
            # A file read before goes on from where that read ended (scan_file), a new one (a
            # rollover, a rank that started late) from its start: every record read is new,
            # gsteps repeated included (an evaluation's batches share one). No gstep window:
            # each record is in one file, and every file a read took is in end_offsets.
            with warnings.catch_warnings():
                # The file being written ends inside the record being appended: not an error.
                warnings.simplefilter("ignore", TornTailWarning)
                analysis.scan_file(
                    scan,
                    f.rank,
                    f.path,
                    self._selection.before(f.superseded_from),
                    pairs,
                    histograms=self.histograms and f.rank == histogram_rank,
                )
            self.bytes_read += f.size - self._sizes.get(f.path, 0)
            self._sizes[f.path] = f.size
            changed = True
        if changed:
            analysis.finish_scan(scan, self.path, self.prefix, self.name, self._selection)
        return changed

    def _first_read(self, trace, which):
        """Reads a run seen for the first time as the static report does (``scan_run``: the
        distributions' rows grouped in C++, the next file's walkers reading while this one ends),
        so a large finished run serves as fast as ``report`` reads it. The sizes are taken
        before: what a file gains meanwhile is read again by the next update, from the gstep after
        the last one read, so no record counts twice."""
        self.run, self._read_as = trace.run, which
        self._sizes = {f.path: f.size for f in trace.files}
        run = which if trace.run is None else trace.run.id
        del trace
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TornTailWarning)  # A file being written.
            self.scan = analysis.scan_run(
                self.path,
                self.label,
                prefix=self.prefix,
                name=self.name,
                run=run,
                histograms=self.histograms,
                series_budget=self.series_budget,
            )
        self.bytes_read = sum(self._sizes.values())
        return True

    def writing(self):
        """Whether a writer of this run is alive on this host (False once every one is gone)."""
        if self.run is None:
            return False
        here = socket.gethostname()
        if self.run.hosts and here not in self.run.hosts:
            return not self.scan.closed_cleanly  # Another host's: its Meta is all we know.
        return any(_alive(pid) for pid in self.run.pids.values())


def _names(path):
    """The names in the directory `path` (or of the data file `path`), sorted: a new one is news."""
    try:
        return tuple(sorted(os.listdir(path))) if os.path.isdir(path) else (path,)
    except OSError:
        return ()


def _evaluation_of(training):
    """The `which` of the LiveRun that follows the eval records of the LiveRun `training`
    (``trace_runs.evaluation_of`` of the run it follows, paired as the static report pairs)."""

    def which():
        if training.run is None:
            return None
        found = trace_runs.evaluation_of(training.path, training.run, training.name)
        return None if found is None else found[0]

    return which


class LiveReport:
    """The runs of a serve and their latest report model, refreshed by one updater thread.
    ``state()`` is read by request threads: the model JSON and its version, under a lock.

    run: None or "all" follows every run of each directory, a LiveRun each, a run that begins
    later joining at the next refresh (a sweep, a job launched again: TensorBoard draws every
    run of its logdir); else which run of each directory (``open_trace``'s run, "latest": the
    newest, whichever it is at each refresh)."""

    def __init__(self, paths, prefix="train", name="trace", poll_s=POLL_S, run=None):
        self.prefix, self.name, self.poll_s = prefix, name, poll_s
        self.paths = [os.fspath(p) for p in paths]
        self._labels = dict(zip(self.paths, report.run_labels(self.paths)))
        self._every = run is None or run == "all"
        self.runs = []  # Updater thread only: LiveRuns, each training run's evaluation after it.
        self._followed = {}  # Updater thread only: (path, run id) -> its LiveRun (every-run mode).
        self._listed = {}  # Updater thread only: path -> its names when its runs were listed.
        if not self._every:
            for p in self.paths:
                self._follow(p, self._labels[p], lambda run=run: run)
        self._lock = threading.Lock()
        self._version = 0  # Guarded by _lock.
        self._payload = None  # Guarded by _lock: the JSON of /update.
        self._reading = None  # Guarded by _lock: what the first refresh reads now, in words.
        self._model = None  # Guarded by _lock.
        self._cards = []  # Guarded by _lock: per card (key, its charts' JSON, version changed).
        self._writing = None  # Updater thread only.
        self._stop = threading.Event()
        self._thread = None
        self.errors = []  # Updater thread only: the last few errors an update raised.

    def _follow(self, path, label, which):
        """Follows the run `which` names at `path`, and its evaluation beside it (eval records,
        as the static report has them); returns the training run's LiveRun."""
        training = LiveRun(path, label, self.prefix, self.name, which)
        # As the static page: the distributions of its first DISTRIBUTION_RUNS runs.
        followed = sum(r.evaluates is None for r in self.runs)
        training.histograms = followed < report.DISTRIBUTION_RUNS
        self.runs.append(training)
        if self.prefix == "train":
            evaluation = LiveRun(
                path, f"{label} · eval", "test", self.name, _evaluation_of(training)
            )
            evaluation.evaluates = training
            evaluation.histograms = training.histograms
            self.runs.append(evaluation)
        return training

    def _discover(self, names):
        """Follows each run of the directories not followed yet (every-run mode), labelled as the
        static report labels them: the directory's name, with the start of the run id where it
        holds several (``report.model_of`` then names them after the metadata that differs).
        `names`: each directory's listing; one whose names are those of its last listing is not
        listed again (that reads every file's Header): a run that begins adds a data file, and
        its Meta once the Header is written (``DataFileSegment::WriteHeader``), both new names."""
        for path in self.paths:
            if self._listed.get(path) == names[path]:
                continue
            try:
                every = trace_runs.runs(path, prefix=self.prefix, name=self.name)
            except (FileNotFoundError, ValueError):
                continue  # Nothing written yet.
            self._listed[path] = names[path]
            for r in every:
                if (path, r.id) not in self._followed:
                    # A run of XDL's files has no id: the only run, read as "latest".
                    which = lambda id=r.id or "latest": id  # noqa: E731
                    self._followed[path, r.id] = self._follow(path, self._labels[path], which)
            for (p, run_id), live in self._followed.items():
                if p == path:
                    live.label = self._labels[path] + (f" · {run_id[:8]}" if len(every) > 1 else "")
                    if live.scan is not None:
                        live.scan.label = live.label

    def refresh(self):
        """One update of every run; a new model (and version) when anything changed."""
        with trace_runs.listed_once():  # Each directory listed once a refresh, not once a run.
            return self._refresh()

    def _refresh(self):
        changed = False
        names = {path: _names(path) for path in self.paths}  # One listing a refresh.
        if self._every:
            self._discover(names)
        failed = []
        budget = report.series_budget(sum(r.evaluates is None for r in self.runs))
        for run in self.runs:
            if run.scan is None:
                run.series_budget = budget
        to_read = sum(r.scan is None and r.evaluates is None for r in self.runs)
        reading = 0  # Before the first page: which of the `to_read` runs is being read, said.
        for run in self.runs:
            if self._payload is None and run.scan is None and run.evaluates is None:
                reading += 1
                self._say_reading(f"reading {run.path}: run {reading} of {to_read}")
            try:
                changed |= run.update(names[run.path])
            except TraceError as error:  # A damaged run: the others are drawn, it is named.
                changed |= run.error != str(error)
                run.error = str(error)
                failed.append(error)
            else:  # Read since (a look that saw nothing new keeps the error it had).
                if run.scan is not None and run.error is not None:
                    run.error, changed = None, True
        live = [run for run in self.runs if run.scan is not None]
        if failed and not live:
            raise failed[0]  # Nothing to draw: the updater says it and retries.
        writing = [run.writing() for run in live]
        if not changed and writing == self._writing and self._payload is not None:
            return False
        self._writing = writing
        for run in live:  # An evaluation's scan names its run's (report.model_of).
            evaluates = run.evaluates
            run.scan.evaluates = None if evaluates is None else evaluates.scan
        unread = [
            run_not_read(r.label, None if r.run is None else r.run.id, r.error)
            for r in self.runs
            if r.error is not None
        ]
        model = report.model_of(
            [r.scan for r in live],
            [r.run for r in live],
            self.prefix,
            self.name,
            writing,
            unread=unread,
        )
        started = {r.path for r in self.runs if r.scan is not None and r.prefix == self.prefix}
        waiting = [p for p in self.paths if p not in started]
        state = "; ".join(
            f"{r['label']}: {'writing' if r['writing'] else 'writer gone'}" for r in model["runs"]
        )
        if waiting:
            state += ("; " if state else "") + "waiting for " + ", ".join(waiting)
        # Each key's charts are fetched by the page when its card comes into view (/card?n=N),
        # packed; the update carries the cards without them and, per card, the version of the
        # refresh that last changed its charts, so the page fetches again only what changed.
        cards, versions = [], []
        for n, card in enumerate(model["cards"]):
            charts = report_html.charts_json(card["charts"])
            previous = self._cards[n] if n < len(self._cards) else None
            same = previous is not None and previous[0] == card["key"] and previous[1] == charts
            cards.append(previous if same else (card["key"], charts, self._version + 1))
            versions.append(cards[-1][2])
        index = dict(
            model,
            cards=[dict(c, charts=None, n_charts=len(c["charts"])) for c in model["cards"]],
            card_versions=versions,
        )
        payload = {
            "model": index,
            "runs_html": report_html.runs_html(model),
            "alerts_html": report_html.alerts_html(model),
            "sections_html": report_html.sections_html(model),
            "n_alerts": len(model["alerts"]),
            "state": state,
            "records": sum(r["records"] for r in model["runs"]),
        }
        with self._lock:
            self._version += 1
            payload["version"] = self._version
            self._model = model
            self._cards = cards
            self._payload = json.dumps(payload, separators=(",", ":"), allow_nan=False)
            self._reading = None
        return True

    def state(self):
        """(version, model, payload JSON) of the latest refresh."""
        with self._lock:
            return self._version, self._model, self._payload

    def reading(self):
        """What the first refresh reads now ("reading runs/sweep: run 3 of 21"), else None."""
        with self._lock:
            return self._reading

    def _say_reading(self, text):
        with self._lock:
            self._reading = text

    def card(self, n):
        """The JSON of card `n`'s charts (packed, ``report_html.charts_json``) and the version
        that last changed them; None past the last card."""
        with self._lock:
            if not 0 <= n < len(self._cards):
                return None
            _, charts, version = self._cards[n]
            return charts, version

    def start(self):
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="xdl-serve-update", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self):
        while not self._stop.wait(self.poll_s):
            try:
                self.refresh()
            except Exception as e:  # A file removed while read, a torn Meta: retried.
                self.errors.append(f"{type(e).__name__}: {e}")
                del self.errors[:-5]
                print(f"xdl-trace serve: warning: {e} (retrying)", file=sys.stderr, flush=True)


def _handler(live):
    class Handler(http.server.BaseHTTPRequestHandler):
        """GET /: the page; GET /update?since=N: the model as JSON (its cards without their
        charts), or 204 when its version is still N; GET /card?n=N: card N's charts. Runs on a
        request thread: reads ``live.state()`` and ``live.card()`` only."""

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            version, model, payload = live.state()
            if url.path == "/":
                if model is None:  # The first read of big runs takes a while: say where.
                    doing = live.reading() or "waiting for the runs' first records"
                    body = f"<p>{html.escape(doing)}…</p>".encode()
                    return self._send(200, "text/html; charset=utf-8", body, refresh=True)
                page = report_html.render_html(model, live=True, version=version)
                return self._send(200, "text/html; charset=utf-8", page.encode("utf-8"))
            if url.path == "/card":
                n = urllib.parse.parse_qs(url.query).get("n", [""])[0]
                found = live.card(int(n)) if n.isdigit() else None
                if found is None:
                    return self._send(404, "text/plain; charset=utf-8", b"no such card")
                charts, changed = found
                body = f'{{"version":{changed},"charts":{charts}}}'.encode("utf-8")
                return self._send(200, "application/json", body)
            if url.path == "/update":
                since = urllib.parse.parse_qs(url.query).get("since", ["-1"])[0]
                if payload is None or since == str(version):
                    return self._send(204, "application/json", b"")
                return self._send(200, "application/json", payload.encode("utf-8"))
            body = f"no page {html.escape(url.path)}".encode()
            return self._send(404, "text/plain; charset=utf-8", body)

        def _send(self, code, kind, body, refresh=False):
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if refresh:
                self.send_header("Refresh", "1")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002  (the base class's name)
            pass  # One line per poll would flood the terminal.

    return Handler


def serve(
    paths, host="127.0.0.1", port=8080, prefix="train", name="trace", on_ready=None, run=None
):
    """Serves the live report of the runs at `paths` until interrupted. on_ready(url) is
    called once the server listens (port 0 picks a free port). run: as ``LiveReport``'s."""
    live = LiveReport(paths, prefix, name, run=run)
    server = http.server.ThreadingHTTPServer((host, port), _handler(live))
    live.start()
    server.daemon_threads = True
    url = f"http://{host}:{server.server_address[1]}/"
    if on_ready is not None:
        on_ready(url)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        live.stop()
    return url
