"""Shared fixtures: the in-tree package on sys.path, a clean registry per test, and a reader for
checking files that uses protobuf's own parser (the protoc-generated xdl_trace._proto modules), not
xdl_trace's C++ reader: a file the writer encodes by hand must parse with the .proto's classes."""

import contextlib
import glob
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import xdl_trace as xdl  # noqa: E402

from xdl_trace._proto import xdl_trace_pb2  # noqa: E402
from xdl_trace.write import _device_graphs  # noqa: E402

# Wire dtype -> numpy dtype, from the C++ dtype table (bfloat16 reads as its uint16 bits).
NUMPY_DTYPES = {value: np.dtype(numpy) for value, _, _, numpy in xdl._core.dtype_table()}


def run_python(*args, timeout=120):
    """`python3 ARGS...` with this checkout's package first on the path (a hang past `timeout`
    fails the test)."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=REPO),
    )


def start_python(code, *args):
    """A process of its own running `code` with ARGS and this checkout first on the path (as
    run_python), returned once it printed its first line: the Popen, its stdout a text pipe."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert process.stdout.readline(), "the process ended before its first line"
    return process


@contextlib.contextmanager
def trained_and_evaluated(out):
    """(training hook, eval hook) of a run written at `out` and its evaluation beside it (scope
    "eval", is_training=False: test.* files), with `loss` and `eval/acc` traced as values: the
    README's training loop with its evaluation. The registry is cleared before and after."""
    xdl.clear()
    xdl.trace_value("loss")
    xdl.trace_value("acc", scope="eval")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    try:
        with xdl.TraceHook(config) as train, xdl.TraceHook(
            config, is_training=False, scope="eval"
        ) as evaluate:
            yield train, evaluate
    finally:
        xdl.clear()


def error_exit(command):
    """The exit status of an xdl-trace command that fails: 2 for diff and find-nan, whose 1 is an
    answer (the runs differ, a NaN was found), as diff(1) and grep do; 1 for the others."""
    return 2 if command in ("diff", "find-nan") else 1


@pytest.fixture(autouse=True)
def clean_registry():
    xdl.clear()
    yield
    xdl.clear()


@pytest.fixture(autouse=True)
def fresh_summary_graphs(monkeypatch):
    """Summary graphs are the process's (_device_graphs.py): each test starts with none."""
    monkeypatch.setattr(_device_graphs, "_graphs", _device_graphs.SummaryGraphs())


@pytest.fixture(scope="session")
def pb():
    """The protoc-generated xdl_trace_pb2 module the package ships (built from proto/ by CMake)."""
    return xdl_trace_pb2


class Trace:
    """A parsed data file: keys, records [(gstep, lstep, timestamp, {key: ndarray})], meta."""

    def __init__(self, pb, path):
        self.path = path
        data = open(path, "rb").read()
        frames = []
        off = 0
        while off < len(data):
            (n,) = struct.unpack_from("<I", data, off)
            frames.append(data[off + 4 : off + 4 + n])
            off += 4 + n
        header = pb.Header()
        header.ParseFromString(frames[0])
        self.keys = list(header.key)
        self.records = []
        self.raw = []
        for frame in frames[1:]:
            r = pb.Record()
            r.ParseFromString(frame)
            self.raw.append(r)
            cols = {}
            for key, c in zip(self.keys, r.column):
                arr = np.frombuffer(c.data, dtype=NUMPY_DTYPES[c.dtype]).reshape(tuple(c.shape))
                cols[key] = arr
            self.records.append((r.gstep, r.lstep, r.timestamp, cols))
        self.meta = None
        if os.path.exists(path + ".meta"):
            self.meta = pb.Meta()
            self.meta.ParseFromString(open(path + ".meta", "rb").read())

    def column(self, key):
        return [rec[3][key] for rec in self.records]

    def gsteps(self):
        return [rec[0] for rec in self.records]


@pytest.fixture
def read_trace(pb):
    """read_trace(dir, prefix='train', name='trace', rank=0) -> list of Trace, one per file."""

    def read(directory, prefix="train", name="trace", rank=0):
        pattern = os.path.join(str(directory), f"{prefix}.{name}.{rank}.*")
        paths = [p for p in glob.glob(pattern) if not p.endswith(".meta")]
        paths.sort(key=lambda p: int(p.rsplit(".", 1)[1]))
        return [Trace(pb, p) for p in paths]

    return read


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "trace")


@pytest.fixture
def cfg(out_dir):
    return {"output_dir": out_dir, "on_error": "raise", "fsync": False}


def compile_test_plugin(out_dir, source, lib_name, defines=()):
    """tests/plugins/`source` built as `out_dir`/lib`lib_name`.so with the system C compiler, the
    `defines` set (names, or NAME=VALUE); links nothing, so symbols a plugin takes from its host
    (TF_SetStatus) stay undefined. None when there is no C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out = os.path.join(str(out_dir), f"lib{lib_name}.so")
    include = os.path.join(REPO, "cpp", "include")
    flags = [f"-D{d}" for d in defines]
    source = os.path.join(REPO, "tests", "plugins", source)
    cmd = [cc, "-shared", "-fPIC", "-O1", "-I", include, *flags, source, "-o", out]
    subprocess.run(cmd, check=True, timeout=120)
    return out


@pytest.fixture(scope="session")
def fake_plugin(tmp_path_factory):
    """tests/plugins/fake_device_plugin.c built as a shared library with the system C compiler."""
    out = tmp_path_factory.mktemp("plugin")
    path = compile_test_plugin(out, "fake_device_plugin.c", "xdl_trace_fake")
    if path is None:
        pytest.skip("SKIPPED: no C compiler to build the fake device plugin")
    return path
