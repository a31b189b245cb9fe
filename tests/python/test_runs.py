"""Runs and ranks on the write side: placement (rank, world size, local rank), run metadata in the
Header, one writer per rank, and a rerun being a new run."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import _run

from conftest import REPO

PLACEMENT_VARS = _run.RANK_ENV_VARS + _run.WORLD_SIZE_ENV_VARS + _run.LOCAL_RANK_ENV_VARS


@pytest.fixture(autouse=True)
def no_launcher_env(monkeypatch):
    for var in PLACEMENT_VARS:
        monkeypatch.delenv(var, raising=False)


def header_run(read_trace, directory, rank=0):
    """The RunInfo of each data file of `rank`, parsed with protobuf's own classes."""
    out = []
    for trace in read_trace(directory, rank=rank):
        with open(trace.path, "rb") as f:
            n = int.from_bytes(f.read(4), "little")
            header = xdl._proto.xdl_trace_pb2.Header.FromString(f.read(n))
        out.append((header, trace.meta))
    return out


@pytest.mark.parametrize(
    "env,placement",
    [
        ({}, (0, 1, 0, "default")),
        ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, (3, 8, 1, "RANK")),
        (
            {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6"},
            (5, 6, -1, "OMPI_COMM_WORLD_RANK"),
        ),
        (
            {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"},
            (2, 4, 0, "SLURM_PROCID"),
        ),
        ({"PMI_RANK": "1"}, (1, 0, -1, "PMI_RANK")),
    ],
)
def test_placement_from_the_launcher_environment(env, placement):
    p = _run.detect_placement(None, env)
    assert (p.rank, p.world_size, p.local_rank, p.source) == placement


def test_config_rank_wins_over_the_environment():
    p = _run.detect_placement(4, {"RANK": "1", "WORLD_SIZE": "8"})
    assert (p.rank, p.world_size, p.source) == (4, 8, "config")


@pytest.mark.parametrize("rank", [2**40, 2**31, -1, 1.5, "0", True])
def test_bad_rank_is_a_value_error_naming_rank(cfg, rank):
    with pytest.raises(ValueError, match="'rank'"):
        xdl.TraceHook(dict(cfg, rank=rank))


@pytest.mark.parametrize(
    "var,value", [("RANK", str(2**40)), ("WORLD_SIZE", "0"), ("LOCAL_RANK", "x")]
)
def test_bad_placement_environment_names_the_variable(cfg, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=f"{var}={value!r}"):
        xdl.TraceHook(cfg)


@pytest.mark.parametrize("metadata", [[1, 2], {"f": object()}, {"x": float("nan")}])
def test_metadata_must_be_a_json_dict(cfg, metadata):
    with pytest.raises(ValueError, match="metadata"):
        xdl.TraceHook(cfg, metadata=metadata)


def test_run_info_is_in_every_header_and_end_time_in_the_last_meta(cfg, read_trace, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "0")
    xdl.trace_tensor("x", np.zeros(2000))
    metadata = {"lr": 0.1, "git": "abc123", "layers": [4, 4]}
    hook = xdl.TraceHook(dict(cfg, max_file_m_size=0.02), metadata=metadata)
    with hook:
        for _ in range(5):
            hook.step()
    files = header_run(read_trace, cfg["output_dir"], rank=2)
    assert len(files) >= 2  # Rolled over: every file carries the run.
    for header, meta in files:
        run = header.run
        assert run.run_id == meta.run_id == hook.run_id
        assert (run.rank, run.world_size, run.local_rank) == (2, 4, 0)
        assert run.hostname == socket.gethostname() and run.pid == os.getpid()
        assert list(run.argv) == sys.argv
        assert run.version == xdl.__version__
        assert json.loads(run.metadata_json) == metadata
        assert meta.closed_cleanly and meta.end_time_ms >= run.start_time_ms > 0
        assert meta.end_time_ms >= meta.timestamp_end


def test_second_live_writer_on_a_rank_fails_begin_naming_the_owner(cfg, out_dir):
    xdl.trace_tensor("x", np.zeros(1))
    with xdl.TraceHook(cfg) as first:
        first.step()
        with pytest.raises(RuntimeError, match=rf"pid {os.getpid()} .*run {first.run_id}"):
            xdl.TraceHook(cfg).begin()
        with xdl.TraceHook(dict(cfg, rank=1)) as other_rank:  # Another rank is fine.
            other_rank.step()
        first.step()
    assert sorted(os.listdir(out_dir)) == [
        "train.trace.0.1",
        "train.trace.0.1.meta",
        "train.trace.1.1",
        "train.trace.1.1.meta",
    ]


def test_a_writer_in_another_process_holds_the_rank_until_it_exits(cfg, out_dir):
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, numpy as np
                sys.path.insert(0, {REPO!r})
                import xdl_trace as xdl
                xdl.trace_tensor("x", np.zeros(1))
                hook = xdl.TraceHook({{"output_dir": {out_dir!r}, "fsync": False}})
                hook.begin()
                print("ready", flush=True)
                sys.stdin.readline()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        xdl.trace_tensor("x", np.zeros(1))
        with pytest.raises(RuntimeError, match=f"pid {child.pid} "):
            xdl.TraceHook(cfg).begin()
    finally:
        child.kill()  # A crash: the kernel drops the lock with the process.
        child.wait(timeout=30)
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    assert os.path.exists(os.path.join(out_dir, "train.trace.0.2"))


def test_each_begin_is_a_new_run_continuing_the_file_index(cfg, read_trace):
    xdl.trace_tensor("x", np.zeros(1))
    hook = xdl.TraceHook(cfg)
    ids = []
    for _ in range(2):
        with hook:
            hook.step()
        ids.append(hook.run_id)
    with xdl.TraceHook(cfg) as other:
        other.step()
    ids.append(other.run_id)
    assert len(set(ids)) == 3
    files = header_run(read_trace, cfg["output_dir"])
    assert [meta.file_index for _, meta in files] == [1, 2, 3]
    assert [header.run.run_id for header, _ in files] == ids
