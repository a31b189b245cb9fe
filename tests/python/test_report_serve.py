"""xdl-trace serve: the live report of runs being written, read incrementally (LiveRun) and
followed by a real Chromium (browser.py) while training processes write and are killed."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np

import xdl_trace as xdl
from browser import page  # noqa: F401  (the fixture)
from xdl_trace.read import analysis, report, serve

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A training process: 40 keys of 500 floats under block/layer prefixes, the loss; one step
# every `pause` seconds for `steps` steps (then it waits to be killed), rolling over every ~25
# records.
_WRITER = r"""
import sys, time
import numpy as np
import xdl_trace as xdl
out, rank, steps, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rng = np.random.default_rng(rank)
tensors = [rng.normal(size=500).astype(np.float32) for _ in range(40)]
for i, t in enumerate(tensors):
    xdl.trace_tensor(f"block{i // 8}/layer{i % 8}/w", t)
loss = np.zeros((), np.float32)
xdl.trace_tensor("loss", loss)
config = {"output_dir": out, "rank": rank, "on_error": "raise", "fsync": False,
          "max_file_m_size": 2, "meta_interval_s": 0.2}
hook = xdl.TraceHook(config, metadata={"lr": 0.1})
hook.begin()
for step in range(steps):
    for t in tensors:
        t += 0.01
    loss[...] = 1.0 / (1 + step)
    hook.step(gstep=step)
    print(step, flush=True)
    with open(out + f".rank{rank}.step", "w") as f:  # The step it is at, for the page test.
        f.write(str(step))
    time.sleep(pause)
time.sleep(3600)
"""


def _writer(out, rank, steps, pause=0.05):
    """Rank `rank` of one run (the launcher's job id is the same for every rank)."""
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, out, str(rank), str(steps), str(pause)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO, TORCHELASTIC_RUN_ID="serve-test-" + out),
    )


def _wait_for_step(proc, step):
    for line in proc.stdout:
        if int(line) >= step:
            return int(line)
    raise AssertionError(f"the writer ended before step {step}")


def _serve(out, *more):
    """(process, url) of `xdl-trace serve out [more]` on a free port, once it listens."""
    server = subprocess.Popen(
        [sys.executable, "-m", "xdl_trace", "serve", out, "--port", "0", *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    return server, re.search(r"at (http://127\.0\.0\.1:\d+/)", server.stdout.readline()).group(1)


def _stop(server):
    """Ctrl-C to a serve, then a kill if it has not ended within 10 s."""
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def test_the_first_read_of_a_finished_run_is_the_static_report_s_scan(tmp_path, monkeypatch):
    """A large finished run is read once as `report` reads it: its distributions' rows grouped in
    C++ (a file scanned per record instead took 462 s for 1,000 keys x 10,000 steps), and the
    model is the static report's."""
    out = str(tmp_path / "run")
    values = np.zeros(8, np.float32)
    xdl.clear()
    xdl.trace_tensor("w", values)
    with xdl.TraceHook({"output_dir": out, "fsync": False}) as hook:
        for step in range(1200):
            values += 0.01
            hook.step(gstep=step)
    xdl.clear()
    groups = []
    open_scan = analysis._open_scan
    monkeypatch.setattr(
        analysis,
        "_open_scan",
        lambda scan, path, selection, histograms, group, series: groups.append(group)
        or open_scan(scan, path, selection, histograms, group, series),
    )
    live = serve.LiveRun(out)
    assert live.update()
    assert groups and all(g > 1 for g in groups), groups
    assert live.bytes_read == sum(f.size for f in xdl.open_trace(out).files)
    assert not live.update()  # Nothing gained: nothing read.
    model = report.model_of([live.scan], [live.run], writing=[False])
    static = report.build_report(out)
    assert model["cards"] == static["cards"]


def _assert_rolled_over_and_read_once(out, live):
    """Rank 0 of the run in `out` rolled over, and `live` read every byte of it once."""
    files = xdl.open_trace(out).files
    assert len([f for f in files if f.rank == 0]) > 1
    assert live.bytes_read == sum(f.size for f in files)  # Every byte once, none twice.


def _loss_chart(model):
    """The first chart of a report model's "loss" card."""
    return {c["key"]: c for c in model["cards"]}["loss"]["charts"][0]


def test_live_run_reads_only_what_the_files_gained(tmp_path):
    """Each update reads the bytes the files gained (through rollover, two ranks), and the
    model it gives is the static report's of the same files."""
    out = str(tmp_path / "run")
    writers = [_writer(out, rank, steps=400, pause=0.002) for rank in (0, 1)]
    try:
        live = serve.LiveRun(out)
        for w in writers:
            _wait_for_step(w, 60)
        assert live.update()
        first_read = live.bytes_read
        assert first_read > 0 and live.scan.records[0] >= 1
        read = [first_read]
        for w in writers:
            _wait_for_step(w, 399)
        time.sleep(0.5)  # The IO threads write the last records.
        live.update()
        read.append(live.bytes_read)
        assert not live.update()  # Nothing gained: nothing read.
        assert live.bytes_read == read[-1]
    finally:
        for w in writers:
            w.kill()
            w.wait()
    _assert_rolled_over_and_read_once(out, live)
    assert live.scan.records == {0: 400, 1: 400}
    assert live.writing() is False
    static = report.build_report(out)
    model = report.model_of([live.scan], [live.run], writing=[False])
    loss, static_loss = _loss_chart(model), _loss_chart(static)
    assert loss["x"] == static_loss["x"] and loss["series"] == static_loss["series"]
    assert model["runs"][0]["records"] == static["runs"][0]["records"] == 800


def test_a_grown_file_is_read_on_from_where_the_last_read_ended(tmp_path):
    """An update reads a grown file from the byte its last read ended at, never its start
    again: the records read before are damaged here after the first read, which a walk from the
    start reports ("record checksum mismatch"; so did serve before), and each record counts
    once."""
    out = str(tmp_path / "run")
    xdl.clear()
    w = np.zeros(1000, np.float32)
    xdl.trace_tensor("w", w)
    hook = xdl.TraceHook(output_dir=out, fsync=False, on_error="raise")
    hook.begin()
    try:
        for step in range(20):
            w[:] = step
            hook.step()
        hook.flush()
        live = serve.LiveRun(out)
        assert live.update()
        (path,) = [f.path for f in xdl.open_trace(out).files]
        read_to = live.scan.end_offsets[path]
        assert read_to == os.path.getsize(path)
        with open(path, "r+b") as f:  # Inside the last record read: w's values.
            f.seek(read_to - 100)
            f.write(b"\xff" * 8)
        for step in range(20, 50):
            w[:] = step
            hook.step()
        hook.flush()
        assert live.update()
        assert live.scan.records == {0: 50} and live.scan.gstep_range == (0, 49)
        assert live.scan.end_offsets[path] == os.path.getsize(path)
        assert not live.update()
    finally:
        hook.end()
        xdl.clear()


def test_a_run_being_written_is_read_whole_once_then_only_what_it_gained(tmp_path, monkeypatch):
    """While the run writes too, the first read is the static report's scan (one
    ``analysis.scan_run``, no ``scan_file``) and the records written after it come on the next
    update through ``scan_file`` only, each once: two ranks, rollover, one writer killed."""
    calls = []
    for name in ("scan_run", "scan_file"):
        real = getattr(analysis, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(analysis, name, counted)
    out = str(tmp_path / "run")
    writers = [_writer(out, rank, steps=400, pause=0.002) for rank in (0, 1)]
    try:
        for w in writers:
            _wait_for_step(w, 60)
        live = serve.LiveRun(out)
        assert live.update()
        assert calls == ["scan_run"]  # Not file by file.
        assert min(live.scan.records.values()) >= 1
        first = dict(live.scan.records)
        writers[1].send_signal(signal.SIGKILL)  # Rank 1 is killed, rank 0 writes on.
        writers[1].wait()
        _wait_for_step(writers[0], 399)
        time.sleep(0.5)  # The IO thread writes the last records.
        calls.clear()
        assert live.update()
        assert calls and set(calls) == {"scan_file"}  # Only the files that grew or are new.
    finally:
        for w in writers:
            w.kill()
            w.wait()
    _assert_rolled_over_and_read_once(out, live)
    assert live.scan.records[0] == 400 > first[0]
    whole = analysis.scan_run(out)
    assert live.scan.records == whole.records
    model = report.model_of([live.scan], [live.run], writing=[False])
    static = report.model_of([whole], [live.run], writing=[False])
    loss, static_loss = _loss_chart(model), _loss_chart(static)
    assert loss["x"] == static_loss["x"] and loss["series"] == static_loss["series"]


def test_page_follows_the_writers_and_says_when_they_are_killed(tmp_path, page):
    out = str(tmp_path / "run")
    writers = [_writer(out, rank, steps=100000, pause=0.05) for rank in (0, 1)]
    server = None
    try:
        for w in writers:
            _wait_for_step(w, 5)
        server, url = _serve(out)
        page.open(url)
        assert page.js("return document.body.dataset.live") == "1"
        assert "writing" in page.element("#runs-table").text
        assert len(page.js("return [...document.querySelectorAll('.card[data-key]')]")) == 41
        # New steps reach the page: the loss chart's last gstep follows the writer's.
        meta = "return document.querySelector('#card-0 h3 .meta').textContent"
        first_meta = page.js(meta)
        assert re.search(r" · \d+ records$", first_meta), first_meta
        latencies = []
        for _ in range(3):
            time.sleep(0.3)
            with open(out + ".rank0.step") as f:
                step = int(f.read() or 0)  # Traced by now (hook.step returned).
            start = time.monotonic()
            page.wait(
                "var p = xdlReport.plots.find(p => p.where.group == 'card-0');"
                "return p && p.spec.x[p.spec.x.length - 1] >= %d" % step,
                timeout=30,
            )
            latencies.append(time.monotonic() - start)
        print(f"serve: a written step on the page after {max(latencies):.2f} s at most")
        # The card's heading counts them too (it kept its first count before).
        counted = int(re.search(r"(\d+) records$", page.js(meta)).group(1))
        assert counted > int(re.search(r"(\d+) records$", first_meta).group(1)), page.js(meta)
        for w in writers:
            w.send_signal(signal.SIGKILL)
            w.wait()
        page.wait(
            "return document.getElementById('runs-table').textContent"
            ".indexOf('its writer is gone') >= 0",
            timeout=30,
        )
        assert "writing" not in page.element("#runs-table").text
        assert "writer gone" in page.element("#live-note").text
        page.open("about:blank")  # Its polling stops before the server does.
        page.check()
    finally:
        for w in writers:
            w.kill()
            w.wait()
        if server is not None:
            _stop(server)


def test_a_run_that_begins_while_the_page_is_open_joins_it(tmp_path, page):
    """A sweep's next run begins while its page is open in a browser: within seconds the Runs
    table has its row, both runs are named after their metadata ("lr 0.1", "lr 0.2"), and the
    loss chart draws a series for each; no JavaScript error. Before: serve followed the latest
    run alone, so the page dropped the first run when the second began. With a third run the
    hparams view appears, and a fourth run's point joins it."""
    out = str(tmp_path / "sweep")
    _sweep_run(out, 0.1)
    server, url = _serve(out)
    try:
        page.open(url)
        series = (
            "var p = xdlReport.plots.find(p => p.box.closest('#card-0'));"
            "return p ? p.plot.series.slice(1).map(s => s.label) : []"
        )
        page.wait(f"return (function () {{ {series} }})().length == 1", timeout=30)
        assert page.js(series) == ["rank 0"]  # One run of one rank.
        _sweep_run(out, 0.2)
        page.wait(
            "var t = document.getElementById('runs-table').textContent;"
            "return t.indexOf('lr 0.1') >= 0 && t.indexOf('lr 0.2') >= 0",
            timeout=30,
        )
        page.wait(f"return (function () {{ {series} }})().length == 2", timeout=30)
        assert page.js(series) == ["lr 0.1", "lr 0.2"]
        # A third run: the hparams view ("last loss by lr") appears; a fourth: its point joins.
        sweep = (
            "var p = xdlReport.plots.find(p => p.where.group === 'sweep');"
            "return p ? p.plot.data[0] : []"
        )
        _sweep_run(out, 0.3)
        page.wait(f"return (function () {{ {sweep} }})().length == 3", timeout=30)
        _sweep_run(out, 0.4)
        page.wait(f"return (function () {{ {sweep} }})().length == 4", timeout=30)
        assert page.js(sweep) == [0.1, 0.2, 0.3, 0.4]
        page.open("about:blank")
        page.check()
    finally:
        _stop(server)


def _sweep_run(out, lr):
    xdl.clear()
    xdl.trace_value("loss")
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}, metadata={"lr": lr}) as hook:
        for step in range(10):
            hook.step(gstep=step, values={"loss": 1.0 / (1 + lr * step)})
    xdl.clear()


def test_serve_rejects_a_busy_port_with_a_clear_error(tmp_path):
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "xdl_trace", "serve", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, PYTHONPATH=REPO),
        )
    finally:
        busy.close()
    assert done.returncode == 1 and "Address already in use" in done.stderr


def test_serve_page_fetches_each_card_as_it_comes_into_view(tmp_path, page):
    """Issue 32 #6 under serve: the page and its updates carry no chart data (the cards'
    index only, with per card the version that last changed it); each card fetches its
    charts (/card?n=N) when drawn: the first ones on load, the last one once scrolled to."""
    out = str(tmp_path / "run")
    xdl.clear()
    values = [np.zeros(4, np.float32) for _ in range(60)]
    for i, v in enumerate(values):
        xdl.trace_tensor(f"block{i // 10}/layer{i % 10}/w", v)
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for step in range(30):
            for i, v in enumerate(values):
                v[:] = step * (i + 1) + np.arange(4)
            hook.step(gstep=step)
    xdl.clear()
    server, url = _serve(out)
    try:
        html = urllib.request.urlopen(url).read().decode()
        data = re.search(r"id='xdl-report-data'>([^<]*)", html).group(1)
        assert all(c["charts"] is None for c in json.loads(data)["cards"])
        assert "id='cd-" not in html
        update = json.loads(urllib.request.urlopen(url + "update?since=-1").read())
        assert all(c["charts"] is None for c in update["model"]["cards"])
        assert len(update["model"]["card_versions"]) == 60
        card = json.loads(urllib.request.urlopen(url + "card?n=59").read())
        assert card["version"] == update["model"]["card_versions"][59]
        page.open(url)
        fetched = (
            "return performance.getEntriesByType('resource').map(e => e.name)"
            ".filter(n => n.indexOf('/card?n=') >= 0).map(n => +n.split('=')[1])"
        )
        page.wait("return document.querySelector('#card-0 .uplot')")
        assert 59 not in page.js(fetched)
        page.js("document.getElementById('card-59').scrollIntoView()")
        page.wait("return document.querySelector('#card-59 .uplot')")
        assert 59 in page.js(fetched)
        last = page.js(
            "return xdlReport.plots.find(p => p.where.group == 'card-59').spec.series"
            ".find(s => s.label.endsWith('mean')).values"
        )
        assert last[-1] == 29 * 60 + 1.5  # The mean of 29 * 60 + [0, 1, 2, 3].
        page.open("about:blank")
        page.check()
    finally:
        _stop(server)


def test_serve_follows_a_runs_evaluation_beside_it_as_the_static_report_draws_it(tmp_path):
    """The eval records of the run served (a hook begun per evaluation, test.* files) come in as
    they are written, as the series "<run> · eval", and the page ends as `report` draws it."""
    out = str(tmp_path / "run")
    xdl.clear()
    w = np.ones(4, np.float32)
    xdl.trace_variable("w", w)
    xdl.trace_value("acc", scope="eval")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    live = serve.LiveReport([out])

    def eval_gsteps(live=live, label="run · eval"):
        cards = {c["key"]: c for c in live.state()[1]["cards"]}
        if "eval/acc" not in cards:
            return []
        (chart,) = cards["eval/acc"]["charts"]
        (series,) = [s for s in chart["series"] if s["label"] == label]
        return [x for x, v in zip(chart["x"], series["values"]) if v is not None]

    with xdl.TraceHook(config) as train:
        for step in range(40):
            w *= np.float32(0.99)
            train.step(gstep=step)
            if step % 10 == 9:
                with xdl.TraceHook(config, is_training=False, scope="eval", gstep=step) as ev:
                    ev.step(values={"acc": step / 40})
            if step in (5, 19):
                train.flush()
                live.refresh()
                assert eval_gsteps() == ([] if step == 5 else [9, 19])
    xdl.clear()
    live.refresh()
    assert eval_gsteps() == [9, 19, 29, 39]
    static = report.build_report(out)
    model = live.state()[1]
    assert model["cards"] == static["cards"]
    assert [r["label"] for r in model["runs"]] == ["run", "run · eval"]
    # A second run into the directory (one eval hook now) joins the page beside the first, as
    # `report` draws the directory, each with its own evaluation (never the first run's eval
    # steps merged into the second's); with run="latest", serve follows the newest alone.
    newest = serve.LiveReport([out], run="latest")
    xdl.trace_variable("w", w)
    xdl.trace_value("acc", scope="eval")
    with xdl.TraceHook(config) as train, xdl.TraceHook(
        config, is_training=False, scope="eval"
    ) as ev:
        for step in range(12):
            train.step(gstep=step)
            if step % 5 == 4:
                ev.step(gstep=step, values={"acc": 0.5})
            if step == 10:
                train.flush()
                ev.flush()
                newest.refresh()
                live.refresh()
                assert eval_gsteps(newest) == [4, 9]
    xdl.clear()
    live.refresh()
    first, second = [run.id[:8] for run in xdl.runs(out)]
    assert [r["label"] for r in live.state()[1]["runs"]] == [
        f"run · {first}",
        f"run · {first} · eval",
        f"run · {second}",
        f"run · {second} · eval",
    ]
    assert eval_gsteps(label=f"run · {first} · eval") == [9, 19, 29, 39]
    assert eval_gsteps(label=f"run · {second} · eval") == [4, 9]
    assert live.state()[1]["cards"] == report.build_report(out)["cards"]
    newest.refresh()
    assert [r["label"] for r in newest.state()[1]["runs"]] == ["run", "run · eval"]
    assert eval_gsteps(newest) == [4, 9]
    # The command takes --run as the others do (before: serve ignored it).
    for more, runs in (((), 4), (("--run", "latest"), 2), (("--run", first), 2)):
        server, url = _serve(out, *more)
        try:
            update = json.loads(urllib.request.urlopen(url + "update?since=-1").read())
        finally:
            _stop(server)
        assert len(update["model"]["runs"]) == runs, (more, update["model"]["runs"])
        if more:  # The second run, then the first: the one asked for.
            assert update["model"]["runs"][0]["id"].startswith(
                second if more[1] == "latest" else first
            )


def test_a_damaged_run_of_a_sweep_leaves_the_others_served(tmp_path):
    """serve of a sweep whose first run's Header took a flipped bit: the page draws the other
    runs, opens with the error naming the run, and goes on following the directory (a run that
    begins joins). Before: every refresh raised on the one file, so the page never came."""
    out = str(tmp_path / "sweep")
    for lr in (0.1, 0.2, 0.3):
        _sweep_run(out, lr)
    with open(os.path.join(out, "train.trace.0.1"), "r+b") as f:
        f.seek(30)
        byte = f.read(1)
        f.seek(30)
        f.write(bytes([byte[0] ^ 0x20]))
    live = serve.LiveReport([out])
    assert live.refresh()
    model = live.state()[1]
    assert [r["label"] for r in model["runs"]] == ["lr 0.2", "lr 0.3"]
    assert model["headline"][0]["tag"] == "run not read"
    assert "a damaged Header" in model["headline"][0]["text"]
    assert not live.refresh()  # Nothing new: the damaged file is not read again.
    _sweep_run(out, 0.4)
    assert live.refresh()
    model = live.state()[1]
    assert [r["label"] for r in model["runs"]] == ["lr 0.2", "lr 0.3", "lr 0.4"]
    assert model["headline"][0]["tag"] == "run not read"


def test_before_its_first_page_serve_says_which_run_it_reads(tmp_path, monkeypatch):
    """The first read of a big sweep takes seconds (21 runs of 84 MB: 3.9 s): until the first
    page, GET / says which run it reads ("reading DIR: run 2 of 3"), not only that it waits."""
    out = str(tmp_path / "sweep")
    for lr in (0.1, 0.2, 0.3):
        _sweep_run(out, lr)
    live = serve.LiveReport([out])
    said = []
    real_scan = serve.analysis.scan_run

    def scan_run(*args, **kwargs):
        said.append(live.reading())
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(serve.analysis, "scan_run", scan_run)
    live.refresh()
    trained = [s for s in said if s is not None]
    assert trained[:1] == [f"reading {out}: run 1 of 3"] and trained[-1].endswith("run 3 of 3")
    assert live.reading() is None  # The page is there.


def _fails_once(real_open):
    calls = []

    def open_trace(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise ValueError("no Header yet")
        return real_open(*args, **kwargs)

    return open_trace


def test_a_sweeps_finished_runs_are_not_read_again_at_each_look(tmp_path, monkeypatch):
    """serve of a directory holding many finished runs (a sweep) looks at their files twice a
    second: a run whose files and Metas are unchanged, in a directory with no new file, is not
    opened again, nor the directory's runs listed (before: every run and its evaluation opened
    and paired at every look, 197 ms a look for 21 runs here, O(runs x files)); a record
    appended to one run is read, a run that begins joins."""
    out = str(tmp_path / "sweep")
    xdl.clear()
    xdl.trace_value("loss")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    for lr in (0.1, 0.01, 0.001):
        with xdl.TraceHook(config, metadata={"lr": lr}) as hook:
            for step in range(5):
                hook.step(gstep=step, values={"loss": lr * step})
    live = serve.LiveReport([out])
    live.refresh()
    live.refresh()  # The first look after a read sees the files it read.
    opened, listed = [], []
    real_open, real_runs = analysis.open_trace, serve.trace_runs.runs
    monkeypatch.setattr(
        analysis, "open_trace", lambda *a, **k: opened.append(a) or real_open(*a, **k)
    )
    monkeypatch.setattr(
        serve.trace_runs, "runs", lambda *a, **k: listed.append(a) or real_runs(*a, **k)
    )
    assert not live.refresh() and opened == [] and listed == []  # No Header read.
    assert [r["records"] for r in live.state()[1]["runs"]] == [5, 5, 5]
    # One more run begins: a new file, so each run looks again, and the new one joins.
    with xdl.TraceHook(config, metadata={"lr": 1.0}) as hook:
        hook.step(gstep=0, values={"loss": 0.0})
        hook.flush()
        assert live.refresh() and opened and listed
        assert [r["records"] for r in live.state()[1]["runs"]] == [5, 5, 5, 1]
        del opened[:]
        live.refresh()  # Its first look after its read.
        hook.step(gstep=1, values={"loss": 1.0})
        hook.flush()
        assert live.refresh()
        assert [r["records"] for r in live.state()[1]["runs"]] == [5, 5, 5, 2]
    xdl.clear()
    # A run not readable at a look (its Header not written yet) is looked at again, though what
    # it writes next adds no name to the directory.
    late = serve.LiveRun(out, which=lambda: "latest")
    monkeypatch.setattr(analysis, "open_trace", _fails_once(real_open))
    assert not late.update() and late.update() and late.scan.records == {0: 2}


# A training process that steps when told: each line on its stdin is a step; "nan" makes that
# step's loss NaN; "more" adds named host ranges from that step on.
_STEPPER = r"""
import sys
import numpy as np
import xdl_trace as xdl
out = sys.argv[1]
loss = np.zeros((), np.float32)
xdl.trace_tensor("loss", loss)
names = [f"op{i}" for i in range(4)]
with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False,
                    "meta_interval_s": 0.1}) as hook:
    for step, line in enumerate(sys.stdin):
        if line.strip() == "more":
            names += [f"op{i}" for i in range(4, 12)]
        for name in names:
            with xdl.host_range(name, "forward"):
                pass
        loss[...] = np.nan if line.strip() == "nan" else 1.0 / (1 + step)
        hook.step(gstep=step)
        print(step, flush=True)
"""


def test_serve_page_follows_the_headline_and_tables_as_the_run_writes(tmp_path, page):
    """The live page's headline, host-time table (and GPU tables, the same path) follow the run
    as its alerts do: a NaN written after the page opened is named in the headline, ranges that
    begin later are rows of the table, and the order the user sorted it in and what they typed
    in its search box are kept across updates. Before: they stayed as at page load."""
    out = str(tmp_path / "run")
    writer = subprocess.Popen(
        [sys.executable, "-c", _STEPPER, out],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    server = None

    def step(line=""):
        writer.stdin.write(line + "\n")
        writer.stdin.flush()
        return int(writer.stdout.readline())

    try:
        for _ in range(3):
            step()
        server, url = _serve(out)
        page.open(url)
        rows = "return [...document.querySelectorAll('#host-ranges tbody tr')]"
        names = rows + ".map(r => r.cells[0].textContent)"
        assert sorted(page.js(names)) == ["op0", "op1", "op2", "op3"]
        assert page.js("return document.getElementById('headline-box').textContent") == ""
        page.click("#host-ranges th:nth-child(1)")  # Sorted by name, descending next.
        page.click("#host-ranges th:nth-child(1)")
        assert page.js(names) == ["op3", "op2", "op1", "op0"]
        step("more")
        page.wait(rows + ".length == 12", timeout=30)
        # Descending still: op9 first (a text sort), the new rows in their place.
        assert page.js(names)[:3] == ["op9", "op8", "op7"]
        page.type("#host-ranges .table-search", "op1")
        visible = rows + ".filter(r => r.style.display != 'none').map(r => r.cells[0].textContent)"
        assert page.js(visible) == ["op11", "op10", "op1"]
        gstep = step("nan")
        page.wait(
            "return document.getElementById('headline-box').textContent"
            f".indexOf('first non-finite at gstep {gstep}') >= 0",
            timeout=30,
        )
        for _ in range(2):
            step()
        calls = page.js(rows + ".map(r => r.cells[2].textContent)")
        page.wait(
            rows + f".map(r => r.cells[2].textContent).join() != {calls!r}.join()", timeout=30
        )
        assert page.js(visible) == ["op11", "op10", "op1"]  # Its search kept after the update.
        page.open("about:blank")
        page.check()
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
        if server is not None:
            _stop(server)


def test_every_new_record_is_read_gstep_repeated_or_not(tmp_path):
    """Records appended after an update at the gstep the last one had (an evaluation's batches
    share the training step; an XDL eval hook's fixed gstep) are read by the next update, in the
    file being written and in the next one after a rollover, as the static report reads them.
    Before: an update kept only gsteps past the last one read, so they were never counted."""
    out = str(tmp_path / "run")
    xdl.clear()
    xdl.trace_value("acc", scope="eval")
    xdl.trace_tensor("batch", np.zeros(100_000, np.float32), scope="eval")  # 400 KB a record.
    config = {"output_dir": out, "fsync": False, "on_error": "raise", "meta_interval_s": 0}
    config["max_file_m_size"] = 1  # A new file every 2 records.
    live = serve.LiveRun(out, prefix="test")
    with xdl.TraceHook(config, is_training=False, scope="eval", gstep=19) as evaluate:
        for batch in range(7):
            evaluate.step(values={"acc": float(batch)})
            evaluate.flush()
            assert live.update()
            assert live.scan.total_records == batch + 1
    xdl.clear()
    assert len([f for f in os.listdir(out) if not f.endswith(".meta")]) == 4
    static = analysis.scan_run(out, prefix="test")
    assert live.scan.total_records == static.total_records == 7
