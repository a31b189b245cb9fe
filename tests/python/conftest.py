"""Shared fixtures: the in-tree package on sys.path, a clean registry per test, and an
independent protobuf reader (pb2 generated with protoc into a temp dir) for checking files."""

import glob
import importlib
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import xdl_trace as xdl  # noqa: E402

NUMPY_DTYPES = {
    0: np.int8,
    1: np.int16,
    2: np.int32,
    3: np.int64,
    4: np.float32,
    5: np.float64,
    6: np.bool_,
    7: np.uint8,
    8: np.uint8,
    9: np.uint16,
    10: np.uint32,
    11: np.uint64,
    12: np.float16,
    13: np.uint16,  # bfloat16 bits
}


@pytest.fixture(autouse=True)
def clean_registry():
    xdl.clear()
    yield
    xdl.clear()


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """The generated xdl_trace_pb2 module (protoc from proto/)."""
    out = tmp_path_factory.mktemp("pb2")
    protos = glob.glob(os.path.join(REPO, "proto", "*.proto"))
    subprocess.run(
        ["protoc", "-I" + os.path.join(REPO, "proto"), "--python_out=" + str(out)] + protos,
        check=True,
        timeout=60,
    )
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("xdl_trace_pb2")
    finally:
        sys.path.remove(str(out))


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
