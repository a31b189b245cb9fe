"""Writes the report, timeline and CLI outputs of the test traces at two revisions and compares
them byte for byte (a refactor of the Python package must change no output).

    /usr/bin/python3 scripts/compare_revisions_output.py [BASE_REV]   # default: main

BASE_REV's xdl_trace/ (git archive) runs beside the working tree's, both with the working tree's
compiled extension and generated protobuf modules (the C++ is assumed the same). The traces are
those of tests/python/test_report.py (two runs, a NaN, an exploding gradient; a run with the fake
device plugin when a C compiler exists). The report's "generated" time is masked. Exit 1 on any
difference, with the first differing files named.
"""

import filecmp
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "tests", "python")]

_RENDER = r"""
import json, sys
from xdl_trace.read import report
for out, paths, kwargs in json.loads(sys.argv[1]):
    report.write_report(paths, out, **kwargs)
"""

_GENERATED = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d UTC")


def _make_traces(base):
    import numpy as np

    import conftest
    import test_report
    import xdl_trace as xdl

    a, b, once = (os.path.join(base, n) for n in ("run_a", "run_b", "once"))
    test_report._train(a, rank=0, nan_at=25, explode_at=40)
    test_report._train(a, rank=1, seed=1)
    test_report._train(b, rank=0, steps=40, scale=2.0)
    test_report._train(once, rank=0, steps=1)
    xdl.clear()
    traces = {"a": a, "b": b, "once": once}
    plugin = conftest.compile_test_plugin(base, "fake_device_plugin.c", "xdl_trace_fake")
    if plugin is not None:
        device = os.path.join(base, "device")
        xdl.trace_tensor("w", np.arange(8, dtype=np.float32))
        config = {"output_dir": device, "device_tracers": [plugin], "device_collect_interval_s": 0}
        with xdl.TraceHook(config) as hook:
            for _ in range(6):
                hook.step()
        xdl.clear()
        traces["device"] = device
    return traces


def _tree(rev, where):
    """`rev`'s xdl_trace/ under `where` with the working tree's built files; its root."""
    if rev is None:
        return REPO
    os.makedirs(where)
    archive = subprocess.run(
        ["git", "-C", REPO, "archive", rev, "xdl_trace"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", where], input=archive, check=True)
    built = glob.glob(os.path.join(REPO, "xdl_trace", "_core*.so"))
    built += glob.glob(os.path.join(REPO, "xdl_trace", "_proto", "*_pb2.py"))
    for path in built:
        shutil.copy(path, os.path.join(where, os.path.relpath(path, REPO)))
    return where


def _outputs(root, traces, out):
    """Every output of `root`'s package into directory `out`."""
    os.makedirs(out)
    env = dict(os.environ, PYTHONPATH=root)
    a, b = traces["a"], traces["b"]
    cases = [
        [os.path.join(out, "two_runs.html"), [a, b], {"png_dir": os.path.join(out, "png")}],
        [os.path.join(out, "one_run.html"), [a], {}],
        [os.path.join(out, "window.html"), [a, b], {"keys": "w,loss", "gsteps": [10, 29]}],
        [os.path.join(out, "rank1.html"), [a], {"ranks": [1]}],
        [os.path.join(out, "once.html"), [traces["once"]], {}],
    ]
    if "device" in traces:
        cases.append([os.path.join(out, "device.html"), [traces["device"]], {}])
    subprocess.run(  # In `out`: the current directory comes first on sys.path.
        [sys.executable, "-c", _RENDER, json.dumps(cases)], env=env, cwd=out, check=True
    )
    commands = {
        "info": ["info", a],
        "info_json": ["info", a, "--json"],
        "dump": ["dump", a, "--max-records", "6", "--summary", "--gsteps", "3:9"],
        "verify": ["verify", a],
        "export_csv": ["export", a, "-o", os.path.join(out, "e.csv"), "--ranks", "0"],
        "export_npz": ["export", b, "-o", os.path.join(out, "e.npz"), "--keys", "w,loss"],
        "find_nan": ["find-nan", a],
        "find_nan_json": ["find-nan", a, "--json", "--keys", "hid*"],
        "timeline": ["timeline", a, "-o", os.path.join(out, "t.json"), "--gsteps", "5:"],
        "report": ["report", a, b, "-o", os.path.join(out, "r.html"), "--ranks", "0"],
        "help": ["--help"],
    }
    if "device" in traces:
        commands["timeline_device"] = ["timeline", traces["device"], "-o", f"{out}/td.json"]
    for name, argv in commands.items():
        result = subprocess.run(
            [sys.executable, "-m", "xdl_trace", *argv], env=env, cwd=out, capture_output=True
        )
        text = f"exit {result.returncode}\n".encode() + result.stdout + b"\n--\n" + result.stderr
        with open(os.path.join(out, name + ".out"), "wb") as f:
            f.write(text.replace(out.encode(), b"OUT"))
    for path in glob.glob(os.path.join(out, "*.html")):
        with open(path, "rb") as f:
            page = f.read()
        with open(path, "wb") as f:
            f.write(_GENERATED.sub(b"GENERATED", page))


def _compare(left, right):
    names = sorted(
        os.path.relpath(os.path.join(d, f), left) for d, _, fs in os.walk(left) for f in fs
    )
    theirs = sorted(
        os.path.relpath(os.path.join(d, f), right) for d, _, fs in os.walk(right) for f in fs
    )
    if names != theirs:
        return [f"file lists differ: {sorted(set(names) ^ set(theirs))}"], names
    differ = [
        n
        for n in names
        if not filecmp.cmp(os.path.join(left, n), os.path.join(right, n), shallow=False)
    ]
    return differ, names


def main(argv):
    base = argv[1] if len(argv) > 1 else "main"
    with tempfile.TemporaryDirectory(prefix="xdl_compare_") as tmp:
        traces = _make_traces(os.path.join(tmp, "traces"))
        _outputs(_tree(base, os.path.join(tmp, "base")), traces, os.path.join(tmp, "out_base"))
        _outputs(_tree(None, None), traces, os.path.join(tmp, "out_work"))
        differ, names = _compare(os.path.join(tmp, "out_base"), os.path.join(tmp, "out_work"))
        if differ:
            print(f"DIFFERENT from {base}: {', '.join(differ)}")
            return 1
        pages = [n for n in names if n.endswith(".html")]
        print(
            f"identical to {base}: {len(names)} files ({len(pages)} HTML reports, "
            f"{sum(n.endswith('.png') for n in names)} PNGs, the rest CLI output and files)"
        )
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
