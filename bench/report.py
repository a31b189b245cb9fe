"""`xdl-trace report` against `xdl-trace verify` on the same files: wall time, CPU time and peak RSS
(figures, no pass/fail).

    /usr/bin/python3 bench/report.py [--dir DIR] [--gb 1] [--keep]
    /usr/bin/python3 bench/report.py --small 100000   # many small records instead

Writes a trace of about --gb gigabytes (default 1; --gb 10 for the issue's target size where the
disk allows) with the real tracer into DIR (default: a temporary directory under /dev/shm when it
exists): 6 float32 tensors of 1 MB (3 variables and their gradients), a 256 KB activation and a
scalar loss per record, in 300 MB files (the default max_file_m_size). It reads every file once to
warm the page cache, then runs each command in a fresh subprocess (twice; the faster run is kept)
and reports its wall time and its peak resident set size (VmHWM of the child: the interpreter,
numpy, the mapped file pages it touched, and the report's accumulators), plus its CPU
time (user + system: the report computes on every core, verify on one).

--small N writes N records of the same keys with 64-element tensors instead (about 1.8 KB per
record): the case where per-record work, not bytes, sets the report's time.

--trace DIR measures a trace already on disk instead (e.g. one a run with --keep left);
--root CHECKOUT runs the commands from another checkout's xdl_trace (built), so two revisions
are measured side by side on the same files:

    /usr/bin/python3 bench/report.py --small 1000000 --dir /dev/shm/r --keep
    /usr/bin/python3 bench/report.py --trace /dev/shm/r/run --root ../old-checkout --runs 5
    /usr/bin/python3 bench/report.py --trace /dev/shm/r/run --runs 5

--page KEYSxSTEPS (repeatable) measures the HTML page instead, in Chromium (chromedriver +
selenium): a run of KEYS keys (8 floats each, grouped block<i>/layer<j>/w) over STEPS steps,
its page built by this checkout and by each --root, then loaded three times in a fresh
headless Chromium; it prints the page's bytes, the time to its first drawn chart and to its
load event (median of the loads). With --serve, the page of `xdl-trace serve` of the same run
as well (each root's): the seconds from its start to its first page (it reads the runs first;
compare the report's "built in"), the page's bytes, those of one /update, its first chart and
load event:

    /usr/bin/python3 bench/report.py --page 300x2000 --page 1000x10000 --root /work/main --serve

--sweep RUNS measures a directory holding RUNS runs (a sweep: lr in three values, each run 40
records of 8 x 64K float32 tensors and an evaluation hook beside it): `report DIR` (every run
drawn; each root's rules for which to compare) and `serve`'s look at the finished directory
(LiveReport.refresh in the root's xdl_trace: the first, which reads every run, then the mean
of 20 looks that find nothing new), each root side by side:

    /usr/bin/python3 bench/report.py --sweep 21 --root ../old-checkout

--sweep-small: each run of the sweep small instead (a hyperparameter search's: lr x batch x
seed in its metadata, 300 steps of 6 stats keys of 256 float32 and a loss, an evaluation every
50 steps), for a directory of hundreds of runs; --sweep-keys and --sweep-steps change its keys
and steps (a model of 300 traced tensors: the page's memory):

    /usr/bin/python3 bench/report.py --sweep 200 --sweep-small --root ../old-checkout
    /usr/bin/python3 bench/report.py --sweep 20 --sweep-small --sweep-keys 300 --sweep-steps 1000
"""

import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # A checkout without an installed package.

# Runs one xdl-trace command in this (fresh) process and prints its time and peak RSS as JSON.
CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from xdl_trace.cli import main
start = time.perf_counter()
code = main({argv!r})
seconds = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
# Peak RSS of this program: VmHWM (ru_maxrss would include the forking parent's pages, kept
# across exec).
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print("BENCH " + json.dumps({{"code": code, "seconds": seconds, "rss_mb": int(hwm.split()[1]) / 1024,
                              "cpu": usage.ru_utime + usage.ru_stime}}))
"""


def write_trace(directory, gigabytes, small_records=None):
    import xdl_trace as xdl

    rng = np.random.default_rng(0)
    tensor = 64 if small_records else 256 * 1024  # float32 elements: 1 MB.
    params = {f"layer{i}/w": rng.normal(size=tensor).astype(np.float32) for i in range(3)}
    activation = np.zeros(64 if small_records else 64 * 1024, np.float32)
    loss = np.zeros(1, np.float32)
    xdl.clear()
    for name, value in params.items():
        xdl.trace_variable(name, value)
        xdl.trace_gradient(name)
    xdl.trace_tensor("activation", activation)
    xdl.trace_tensor("loss", loss)
    record_bytes = 6 * tensor * 4 + activation.nbytes + 4
    steps = small_records or max(int(gigabytes * 1e9 / record_bytes), 10)
    grads = {name: rng.normal(size=tensor).astype(np.float32) for name in params}
    config = {"output_dir": directory, "fsync": False, "max_pending_mb": 512}
    with xdl.TraceHook(config) as hook:
        for step in range(steps):
            for name, value in params.items():
                value -= 1e-3 * grads[name]
                xdl.send_gradient(name, grads[name])
            activation[:] = np.tanh(params["layer0/w"][: activation.size] * (1 + step / steps))
            loss[0] = 1.0 / (1 + step)
            hook.step(gstep=step)
    xdl.clear()
    return steps


def run(argv, root=ROOT):
    code = CHILD.format(root=root, argv=argv)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next((l for l in result.stdout.splitlines() if l.startswith("BENCH ")), None)
    if line is None:
        raise SystemExit(f"{' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(line[len("BENCH ") :])


def best_of(argv, runs=2, root=ROOT):
    results = [run(argv, root) for _ in range(runs)]
    return min(results, key=lambda r: r["seconds"])


def measure(trace_dir, out_dir, runs, root=ROOT):
    """Runs verify and report on `trace_dir` (page cache warmed first) and prints the table."""
    files = [os.path.join(trace_dir, f) for f in os.listdir(trace_dir)]
    size = sum(os.path.getsize(f) for f in files)
    for path in files:  # Warm the page cache so both commands read from memory.
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    out = os.path.join(out_dir, "report.html")
    verify = best_of(["verify", trace_dir], runs, root)
    rep = best_of(["report", trace_dir, "-o", out], runs, root)
    print(f"{'command':<10} {'seconds':>8} {'GB/s':>6} {'CPU s':>7} {'peak RSS MB':>12}")
    for name, r in (("verify", verify), ("report", rep)):
        print(
            f"{name:<10} {r['seconds']:8.3f} {size / 1e9 / r['seconds']:6.2f} "
            f"{r['cpu']:7.2f} {r['rss_mb']:12.0f}"
        )
    print(
        f"report / verify time: {rep['seconds'] / verify['seconds']:.2f}x; "
        f"report HTML {os.path.getsize(out) / 1e3:.0f} KB"
    )


# Builds a run's page with the xdl_trace of {root} and prints its size as JSON.
PAGE_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from xdl_trace.read import report
start = time.perf_counter()
result = report.write_report({trace!r}, {out!r})
print("BENCH " + json.dumps({{"bytes": result["bytes"], "seconds": time.perf_counter() - start}}))
"""

# Injected before the page's scripts: when the first chart (a uPlot root) enters the DOM.
FIRST_CHART = """
window.__firstChart = null;
new MutationObserver(function (m, o) {
  if (document.querySelector('.uplot')) { window.__firstChart = performance.now(); o.disconnect(); }
}).observe(document, {childList: true, subtree: true});
"""


def write_page_trace(directory, keys, steps):
    """KEYS keys of 8 float32 values (block<i>/layer<j>/w) traced at each of STEPS steps."""
    import xdl_trace as xdl

    xdl.clear()
    rng = np.random.default_rng(0)
    tensors = [rng.normal(size=8).astype(np.float32) for _ in range(keys)]
    for i, t in enumerate(tensors):
        xdl.trace_tensor(f"block{i // 10:03d}/layer{i % 10}/w", t)
    loss = np.zeros((), np.float32)
    xdl.trace_tensor("loss", loss)
    out = os.path.join(directory, f"run_{keys}x{steps}")
    with xdl.TraceHook({"output_dir": out, "fsync": False}) as hook:
        for step in range(steps):
            for t in tensors[: max(1, keys // 50)]:  # A few keys move; the others keep values.
                t += 0.01
            loss[...] = 1.0 / (1 + step)
            hook.step(gstep=step)
    xdl.clear()
    return out


def load_page(page, loads=3):
    """(time to the first chart, time to the load event) in ms, medians of `loads` loads of
    `page` in a fresh headless Chromium each."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    first, loaded = [], []
    for _ in range(loads):
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium")
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        try:
            driver.set_page_load_timeout(600)
            driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FIRST_CHART})
            driver.get(page if page.startswith("http") else "file://" + page)
            timing = driver.execute_script(
                "var n = performance.getEntriesByType('navigation')[0];"
                "return [window.__firstChart, n.loadEventEnd]"
            )
        finally:
            driver.quit()
        first.append(timing[0])
        loaded.append(timing[1])
    return statistics.median(first), statistics.median(loaded)


def serve_page(root, trace):
    """Starts `xdl-trace serve` of this trace with the xdl_trace of `root`; (process, URL,
    seconds from the start of the process to its first page: serve reads the runs before it
    listens)."""
    import urllib.request

    start = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "xdl_trace", "serve", trace, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=root,
        env=dict(os.environ, PYTHONPATH=root),
    )
    line = server.stdout.readline()
    url = line[line.index("http://") :].split()[0]
    urllib.request.urlopen(url).read()
    return server, url, time.perf_counter() - start


def measure_served(trace, root):
    """The page of `xdl-trace serve` (its bytes and the first /update's), loaded in Chromium."""
    import urllib.request

    server, url, first_page = serve_page(root, trace)
    try:
        page = len(urllib.request.urlopen(url).read())
        update = len(urllib.request.urlopen(url + "update?since=-1").read())
        first, loaded = load_page(url)
    finally:
        server.terminate()
        server.wait()
    print(
        f"  {root} serve: first page after {first_page:.1f} s (start to GET /),"
        f" page {page / 1e6:.2f} MB, an update {update / 1e6:.2f} MB,"
        f" first chart {first / 1000:.2f} s, load event {loaded / 1000:.2f} s"
    )


def measure_pages(shapes, roots, directory, served=False):
    for shape in shapes:
        keys, steps = (int(v) for v in shape.lower().split("x"))
        start = time.perf_counter()
        trace = write_page_trace(directory, keys, steps)
        print(f"{keys} keys x {steps} steps: traced in {time.perf_counter() - start:.1f} s")
        for root in roots:
            out = os.path.join(directory, f"page_{keys}x{steps}_{roots.index(root)}.html")
            done = subprocess.run(
                [sys.executable, "-c", PAGE_CHILD.format(root=root, trace=trace, out=out)],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                print(f"  {root}: failed: {done.stderr[-500:]}")
                continue
            built = json.loads(done.stdout.split("BENCH ", 1)[1])
            first, loaded = load_page(out)
            print(
                f"  {root}: page {built['bytes'] / 1e6:.2f} MB (built in {built['seconds']:.1f} s),"
                f" first chart {first / 1000:.2f} s, load event {loaded / 1000:.2f} s"
            )
            if served:
                measure_served(trace, root)


def write_sweep(directory, runs, small=None):
    """RUNS runs into `directory`, lr cycling over three values, each with an eval hook; small:
    (keys, steps) of ``write_small_sweep``'s runs instead."""
    import xdl_trace as xdl

    if small:
        write_small_sweep(directory, runs, *small)
        return
    rng = np.random.default_rng(0)
    for n in range(runs):
        lr = (0.1, 0.01, 0.001)[n % 3]
        xdl.clear()
        weights = [rng.normal(size=64 * 1024).astype(np.float32) for _ in range(8)]
        for i, w in enumerate(weights):
            xdl.trace_variable(f"layer{i}/w", w)
        xdl.trace_value("loss")
        xdl.trace_value("acc", scope="eval")
        config = {"output_dir": directory, "fsync": False}
        with xdl.TraceHook(config, metadata={"lr": lr}) as hook, xdl.TraceHook(
            config, is_training=False, scope="eval"
        ) as evaluate:
            for step in range(40):
                for w in weights:
                    w *= np.float32(1 - lr)
                hook.step(gstep=step, values={"loss": float(weights[0][0])})
                if step % 10 == 9:
                    evaluate.step(values={"acc": step / 40})
    xdl.clear()


def write_small_sweep(directory, runs, keys=6, steps=300):
    """RUNS small runs of a hyperparameter search into `directory` (see --sweep-small)."""
    import xdl_trace as xdl

    rng = np.random.default_rng(0)
    for n in range(runs):
        lr = (0.1, 0.03, 0.01, 0.003, 0.001)[n % 5]
        batch = (32, 64, 128, 256)[(n // 5) % 4]
        xdl.clear()
        weights = [rng.normal(size=256).astype(np.float32) for _ in range(keys)]
        for i, w in enumerate(weights):
            xdl.trace_variable(f"block{i // 10}/layer{i % 10}/w", w, summary="stats")
        xdl.trace_value("loss")
        xdl.trace_value("acc", scope="eval")
        config = {"output_dir": directory, "fsync": False}
        metadata = {"lr": lr, "batch": batch, "seed": n // 20}
        with xdl.TraceHook(config, metadata=metadata) as hook, xdl.TraceHook(
            config, is_training=False, scope="eval"
        ) as evaluate:
            for step in range(steps):
                for w in weights:
                    w *= np.float32(1 - lr * 0.01)
                loss = float(np.exp(-lr * step) + rng.normal() * 0.01)
                hook.step(gstep=step, values={"loss": loss})
                if step % 50 == 49:
                    evaluate.step(values={"acc": 1 - float(np.exp(-lr * step))})
    xdl.clear()


# serve's looks at a finished directory with the xdl_trace of {root}: the first refresh (every
# run read) and the mean of 20 more (nothing new), as JSON.
LOOK_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from xdl_trace.read import serve
live = serve.LiveReport([{path!r}])
start = time.perf_counter()
live.refresh()
first = time.perf_counter() - start
live.refresh()  # A look after a first read may see the files it read.
start = time.perf_counter()
for _ in range(20):
    live.refresh()
print("BENCH " + json.dumps({{"first": first, "look": (time.perf_counter() - start) / 20,
                              "runs": len(live.state()[1]["runs"])}}))
"""


def measure_sweep(runs, roots, base, small=None):
    directory = os.path.join(base, "sweep")
    start = time.perf_counter()
    write_sweep(directory, runs, small)
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    print(
        f"sweep: {runs} runs (each with its evaluation), {size / 1e6:.0f} MB in {directory} "
        f"(written in {time.perf_counter() - start:.1f} s)"
    )
    print(
        f"{'root':<40} {'report s':>9} {'report MB':>10} {'serve first s':>14} "
        f"{'serve look ms':>14} {'series':>7}"
    )
    for root in roots:
        rep = best_of(["report", directory, "-o", os.path.join(base, "sweep.html")], 2, root)
        if rep["code"] != 0:  # An older root asks for --run: its page of every run.
            rep = best_of(
                ["report", directory, "--run", "all", "-o", os.path.join(base, "sweep.html")],
                2,
                root,
            )
        code = LOOK_CHILD.format(root=root, path=directory)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        line = next((l for l in done.stdout.splitlines() if l.startswith("BENCH ")), None)
        if line is None:
            raise SystemExit(f"serve's look failed:\n{done.stdout}\n{done.stderr}")
        look = json.loads(line[len("BENCH ") :])
        print(
            f"{root[-40:]:<40} {rep['seconds']:9.2f} {rep['rss_mb']:10.0f} "
            f"{look['first']:14.2f} {look['look'] * 1e3:14.1f} {look['runs']:7d}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to write the trace (default: a temp dir)")
    parser.add_argument("--gb", type=float, default=1.0, help="trace size in GB (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the trace afterwards")
    parser.add_argument("--small", type=int, help="N records of 64-element tensors instead")
    parser.add_argument("--trace", help="measure this trace directory instead of writing one")
    parser.add_argument("--runs", type=int, default=2, help="runs per command; the best is kept")
    parser.add_argument("--root", default=ROOT, help="run the commands from this checkout")
    parser.add_argument(
        "--page", action="append", metavar="KEYSxSTEPS", help="measure the HTML page (repeatable)"
    )
    parser.add_argument(
        "--serve", action="store_true", help="with --page: the page of xdl-trace serve as well"
    )
    parser.add_argument("--sweep", type=int, metavar="RUNS", help="a directory of RUNS runs")
    parser.add_argument(
        "--sweep-small", action="store_true", help="with --sweep: small runs (hundreds of them)"
    )
    parser.add_argument("--sweep-keys", type=int, default=6, help="--sweep-small: traced keys")
    parser.add_argument("--sweep-steps", type=int, default=300, help="--sweep-small: steps")
    args = parser.parse_args()
    if args.sweep or args.page:  # Each root's figures side by side, in one scratch directory.
        root = os.path.abspath(args.root)
        roots = [root] + ([ROOT] if root != ROOT else [])
        base = args.dir or tempfile.mkdtemp(
            prefix="xdl_sweep_bench_" if args.sweep else "xdl_page_bench_",
            dir="/dev/shm" if os.path.isdir("/dev/shm") else None,
        )
        try:
            if args.sweep:
                small = (args.sweep_keys, args.sweep_steps) if args.sweep_small else None
                measure_sweep(args.sweep, roots, base, small)
            else:
                measure_pages(args.page, roots, base, args.serve)
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
        return
    if args.trace:
        with tempfile.TemporaryDirectory(prefix="xdl_report_bench_") as out_dir:
            measure(args.trace, out_dir, args.runs, os.path.abspath(args.root))
        return
    base = args.dir or tempfile.mkdtemp(
        prefix="xdl_report_bench_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    trace_dir = os.path.join(base, "run")
    os.makedirs(trace_dir, exist_ok=True)
    try:
        start = time.perf_counter()
        steps = write_trace(trace_dir, args.gb, args.small)
        files = [os.path.join(trace_dir, f) for f in os.listdir(trace_dir)]
        size = sum(os.path.getsize(f) for f in files)
        print(
            f"trace: {size / 1e9:.2f} GB, {steps} records, "
            f"{len([f for f in files if not f.endswith('.meta')])} data files in {trace_dir} "
            f"(written in {time.perf_counter() - start:.1f} s)"
        )
        measure(trace_dir, base, args.runs, os.path.abspath(args.root))
    finally:
        if not args.keep:
            shutil.rmtree(base if not args.dir else trace_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
