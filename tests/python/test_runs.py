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
from xdl_trace.read import report
from xdl_trace.write import _run

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


# -- reading runs ------------------------------------------------------------------------------


def write_run(cfg, ranks=(0,), steps=3, gstep0=0, metadata=None):
    """One run: each rank traced in turn by this process (one job), `steps` records each."""
    xdl.trace_tensor("x", np.arange(3.0))
    ids = set()
    for rank in ranks:
        with xdl.TraceHook(dict(cfg, rank=rank), metadata=metadata) as hook:
            for step in range(steps):
                hook.step(gstep=gstep0 + step)
        ids.add(hook.run_id)
    xdl.clear()
    (run_id,) = ids  # Ranks of one process's n-th run share its id.
    return run_id


def test_runs_lists_ranks_world_hosts_times_steps_records_and_metadata(cfg, out_dir):
    before = time_ms()
    run_id = write_run(cfg, ranks=(0, 1), steps=3, gstep0=5, metadata={"lr": 0.5})
    (run,) = xdl.runs(out_dir)
    assert run.id == run_id and run.ranks == [0, 1]
    assert run.world_size is None  # Ranks set by config: the world size is unknown.
    assert run.hosts == [socket.gethostname()] and run.pids == {0: os.getpid(), 1: os.getpid()}
    assert run.metadata == {"lr": 0.5} and run.version == xdl.__version__
    assert run.gsteps == (5, 7) and run.records == 6 and run.files == 2
    assert before <= run.start_ms <= run.end_ms <= time_ms() and run.closed_cleanly
    assert run.start.tzinfo is not None
    trace = xdl.open_trace(out_dir)
    assert trace.run.id == run_id and trace.ranks == [0, 1]


def time_ms():
    import time

    return int(time.time() * 1000)


def test_several_runs_need_run_and_are_selected_as_documented(cfg, out_dir):
    first = write_run(cfg, ranks=(0, 1), steps=2, metadata={"n": 1})
    second = write_run(cfg, ranks=(0, 1), steps=3, gstep0=100, metadata={"n": 2})
    runs = xdl.runs(out_dir)
    assert [r.id for r in runs] == [first, second]  # Oldest first.
    with pytest.raises(ValueError, match="holds 2 runs") as error:
        xdl.open_trace(out_dir)
    assert first in str(error.value) and second in str(error.value)

    latest = xdl.open_trace(out_dir, run="latest")
    assert latest.run.id == second and [f.index for f in latest.files] == [2, 2]
    assert [r.gstep for r in latest.records()] == [100, 100, 101, 101, 102, 102]
    assert latest.stack("x", rank=1).shape == (3, 3)

    older = xdl.open_trace(out_dir, run=first[:8])  # A unique prefix is enough.
    assert older.run.id == first and [f.index for f in older.files] == [1, 1]
    assert len(list(older.records())) == 4

    both = xdl.open_trace(out_dir, run="all")
    assert both.run is None and len(both.runs) == 2
    assert len(list(both.records())) == 10
    together = xdl.open_trace(out_dir, run=(second, first))  # Whole ids, read together.
    assert together.run is None and len(list(together.records())) == 10
    assert [f.index for f in xdl.open_trace(out_dir, run=(second,)).files] == [2, 2]
    with pytest.raises(ValueError, match="no run 'nope'"):
        xdl.open_trace(out_dir, run=(first, "nope"))

    with pytest.raises(ValueError, match="'nope' matches no run") as error:
        xdl.open_trace(out_dir, run="nope")
    assert first in str(error.value)
    with pytest.raises(ValueError, match="run must be"):
        xdl.open_trace(out_dir, run=3)


def test_a_run_of_runs_opens_from_its_listing(cfg, out_dir, monkeypatch):
    """open_trace(path, run=<a Run of xdl.runs(path)>) reads that run from the listing that found
    it: a loop over a sweep's runs lists the directory once (before, each open listed it again,
    every file's Header and Meta: 200 runs, 9.9 s; now 0.7 s), and reads what opening by id
    reads. A run begun since (new files) lists it again, as a Run of another directory does."""
    from xdl_trace.read import trace_runs

    ids = [write_run(cfg, ranks=(0, 1), steps=2 + n, gstep0=10 * n) for n in range(4)]
    listed = []
    real = trace_runs.set_aside_copies
    monkeypatch.setattr(
        trace_runs, "set_aside_copies", lambda reader: listed.append(1) or real(reader)
    )
    runs = xdl.runs(out_dir)
    for run in runs:
        trace = xdl.open_trace(out_dir, run=run)
        by_id = xdl.open_trace(out_dir, run=run.id)
        assert trace.run is run and [f.path for f in trace.files] == [f.path for f in by_id.files]
        assert [(r.rank, r.gstep) for r in trace.records()] == [
            (r.rank, r.gstep) for r in by_id.records()
        ]
    assert [r.id for r in runs] == ids and len(listed) == 1 + len(runs)  # The by-id opens.
    del listed[:]
    write_run(cfg, ranks=(0,), steps=1, gstep0=100)  # A run begins: new files.
    again = xdl.open_trace(out_dir, run=runs[1])
    assert len(listed) == 1 and again.run.id == ids[1] and len(again.runs) == 5
    other = str(out_dir) + "-other"
    write_run(dict(cfg, output_dir=other), ranks=(0,), steps=2)
    del listed[:]
    # Another directory is listed, and its run of that id read (one process's first runs in
    # two directories share an id).
    elsewhere = xdl.open_trace(other, run=runs[0])
    assert len(listed) == 1 and elsewhere.run is not runs[0]
    assert all(f.path.startswith(other) for f in elsewhere.files)


def test_xdl_files_are_one_run_without_an_id(tmp_path):
    import xdl_files as xf

    d = str(tmp_path / "xdl")
    os.makedirs(d)
    xf.write_xdl_run(d, ["w", "loss"], xf.xdl_steps(4), max_file_m_size=150e-6)
    (run,) = xdl.runs(d)
    assert run.id == "" and run.ranks == [0] and run.infos == {}
    assert run.records is None and run.gsteps == (100, 103)  # XDL's Meta has no record count.
    assert len(list(xdl.open_trace(d).records())) == 4
    assert len(list(xdl.open_trace(d, run="latest").records())) == 4


def run_job(out_dir, rank, env):
    """A separate process tracing `rank` (as a launcher would start it) with `env` added."""
    script = textwrap.dedent(
        f"""
        import sys, numpy as np
        sys.path.insert(0, {REPO!r})
        import xdl_trace as xdl
        xdl.trace_tensor("x", np.zeros(1))
        with xdl.TraceHook({{"output_dir": {out_dir!r}, "fsync": False}}) as hook:
            hook.step()
        """
    )
    full = {k: v for k, v in os.environ.items() if k not in PLACEMENT_VARS + _run.JOB_ID_ENV_VARS}
    full.pop(_run.RUN_ID_ENV_VAR, None)
    full.update(env, RANK=str(rank), WORLD_SIZE="2")
    subprocess.run([sys.executable, "-c", script], env=full, check=True, timeout=60)


@pytest.mark.parametrize(
    "job_env",
    [
        {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"},
        {"TORCHELASTIC_RUN_ID": "abc"},
        {"XDL_TRACE_RUN_ID": "my-run"},
    ],
)
def test_processes_of_one_launcher_job_are_one_run(out_dir, job_env):
    for rank in (0, 1):
        run_job(out_dir, rank, job_env)
    (run,) = xdl.runs(out_dir)
    assert run.ranks == [0, 1] and run.world_size == 2
    if "XDL_TRACE_RUN_ID" in job_env:
        assert run.id == "my-run"


def test_processes_without_a_job_id_share_a_run_by_their_rendezvous(out_dir, tmp_path):
    # Ranks started by hand (RANK, WORLD_SIZE=2, no launcher's id) are one run (issue 34)...
    for rank in (0, 1):
        run_job(out_dir, rank, {})
    assert [r.ranks for r in xdl.runs(out_dir)] == [[0, 1]]
    # ...unless their rendezvous (MASTER_ADDR:MASTER_PORT) differs: then separate runs.
    other = str(tmp_path / "other")
    for rank in (0, 1):
        run_job(other, rank, {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": str(29500 + rank)})
    assert [r.ranks for r in xdl.runs(other)] == [[0], [1]]


def test_cli_lists_runs_and_takes_run(cfg, out_dir, tmp_path, capsys):
    from xdl_trace import cli

    first = write_run(cfg, ranks=(0, 1), steps=2, metadata={"n": 1})
    second = write_run(cfg, ranks=(0, 1), steps=3, gstep0=100)

    assert cli.main(["info", out_dir]) == 0
    out = capsys.readouterr().out
    assert "runs: 2, oldest first" in out
    assert out.index(first) < out.index(second) and 'metadata: {"n": 1}' in out
    assert cli.main(["info", out_dir, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in info["runs"]] == [first, second] and info["run"] is None
    assert info["runs"][1]["gsteps"] == [100, 102] and info["runs"][1]["records"] == 6

    assert cli.main(["dump", out_dir]) == 1
    err = capsys.readouterr().err
    assert "holds 2 runs" in err and first in err and second in err
    assert cli.main(["dump", out_dir, "--run", "latest"]) == 0
    assert capsys.readouterr().out.count("gstep") == 6
    assert cli.main(["dump", out_dir, "--run", first[:6]]) == 0
    assert capsys.readouterr().out.count("gstep") == 4

    npz = str(tmp_path / "x.npz")
    assert cli.main(["export", out_dir, "--run", "latest", "-o", npz, "--ranks", "0"]) == 0
    capsys.readouterr()
    with np.load(npz) as exported:
        assert any(len(exported[k]) == 3 for k in exported.files)

    assert cli.main(["verify", out_dir]) == 0  # Every file of every run.
    assert "4 of 4 files verified" in capsys.readouterr().out
    assert cli.main(["verify", out_dir, "--run", "latest"]) == 0
    assert "2 of 2 files verified" in capsys.readouterr().out
    assert cli.main(["timeline", out_dir, "--run", "all", "-o", str(tmp_path / "t.json")]) == 0


def test_report_and_find_nan_take_run(cfg, out_dir, tmp_path, capsys):
    from xdl_trace import cli

    first = write_run(cfg, steps=2)
    second = write_run(cfg, steps=3, gstep0=100)
    html = str(tmp_path / "r.html")
    # A report draws every run of a directory, a series each, as TensorBoard its logdir, and
    # says how to pick one (before: an error asking for --run).
    assert cli.main(["report", out_dir, "-o", html]) == 0
    assert "holds 2 runs: each is drawn, a series of its own" in capsys.readouterr().err
    model = report.build_report(out_dir)
    name = os.path.basename(out_dir)
    assert [r["label"] for r in model["runs"]] == [
        f"{name} · {first[:8]}",
        f"{name} · {second[:8]}",
    ]
    assert cli.main(["report", out_dir, "--run", "latest", "-o", html]) == 0
    assert "holds 2 runs" not in capsys.readouterr().err
    assert [r["id"] for r in report.build_report(out_dir, run="latest")["runs"]] == [second]
    assert cli.main(["find-nan", out_dir]) == 2  # An error: 1 would say a NaN was found.
    assert "holds 2 runs" in capsys.readouterr().err
    assert cli.main(["find-nan", out_dir, "--run", "all"]) == 0
    assert "over 5 records" in capsys.readouterr().out
