"""xdl_trace.dask on a real LocalCluster (2 worker processes): statistics rows, stacked arrays
and record bags equal to the local reader's, partitions planned from Meta alone."""

import os

import warnings

import numpy as np
import pytest

import xdl_trace as xdl

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")
xdd = pytest.importorskip("xdl_trace.dask")

from conftest import REPO  # noqa: E402


@pytest.fixture(scope="module")
def client():
    os.environ["PYTHONPATH"] = REPO + os.pathsep + os.environ.get("PYTHONPATH", "")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def write_trace(out_dir, ranks=(0, 1), steps=12, gstep0=0):
    """Each rank: w float32[4, 5], loss float64, ids int64[3], rolled over every few records."""
    state = {}
    xdl.trace_callback("w", lambda: state["w"])
    xdl.trace_callback("loss", lambda: state["loss"])
    xdl.trace_callback("ids", lambda: state["ids"])
    for rank in ranks:
        cfg = {"output_dir": out_dir, "rank": rank, "fsync": False, "max_file_m_size": 0.0003}
        with xdl.TraceHook(cfg) as hook:
            for step in range(steps):
                w = np.arange(20, dtype=np.float32).reshape(4, 5) * (step + 1) - 7 * rank
                if step == 3:
                    w[0, 0] = np.nan
                    w[1, 1] = np.inf
                state["w"], state["loss"] = w, np.float64(1.0 / (step + 1 + rank))
                state["ids"] = np.arange(3, dtype=np.int64) - step
                hook.step(gstep=gstep0 + step)
    xdl.clear()


def test_dataframe_rows_match_numpy_on_two_worker_processes(client, tmp_path):
    out = str(tmp_path / "t")
    write_trace(out)
    trace = xdl.open_trace(out)
    assert len(trace.files) > 4  # Several partitions per rank.
    df = xdd.to_dataframe(out)
    assert df.npartitions == len(trace.files)
    got = df.compute().sort_values(["rank", "gstep", "key"]).reset_index(drop=True)
    assert len(got) == 2 * 12 * 3
    assert set(got["run"]) == {trace.run.id}
    workers = client.run(os.getpid)
    assert len(set(workers.values())) == 2 and os.getpid() not in workers.values()
    for record in trace.records():
        for key, column in record.columns.items():
            row = got[
                (got["rank"] == record.rank) & (got["gstep"] == record.gstep) & (got["key"] == key)
            ]
            assert len(row) == 1
            row = row.iloc[0]
            values = np.asarray(column, dtype=np.float64).ravel()
            finite = values[np.isfinite(values)]
            assert row["lstep"] == record.lstep and row["timestamp"] == record.timestamp
            assert row["count"] == values.size
            assert row["nan"] == np.isnan(values).sum() and row["inf"] == np.isinf(values).sum()
            np.testing.assert_allclose(
                [row["min"], row["max"], row["mean"], row["std"], row["l2"]],
                [finite.min(), finite.max(), finite.mean(), finite.std(), np.linalg.norm(finite)],
            )
    by_key = df[df["key"] == "loss"].groupby("rank")["max"].max().compute()
    assert by_key.to_dict() == {0: 1.0, 1: 0.5}


def test_files_outside_gsteps_are_never_opened(client, tmp_path):
    out = str(tmp_path / "t")
    write_trace(out, ranks=(0,))
    trace = xdl.open_trace(out)
    first = trace.files[0]
    assert first.meta["gstep_end"] < 8
    with open(first.path, "r+b") as f:  # Garbage a reader would report as corrupt.
        f.seek(4)
        f.write(b"\xff" * 16)
    files = xdd.plan(out, gsteps=(8, 11))
    assert first.path not in [p["path"] for p in files]
    df = xdd.to_dataframe(out, keys=["loss"], gsteps=(8, 11))
    assert df.npartitions == len(files)
    assert sorted(df.compute()["gstep"]) == [8, 9, 10, 11]
    with pytest.raises(Exception, match="corrupt|does not parse|train.trace.0.1"):
        xdd.to_dataframe(out, keys=["loss"]).compute()


def test_to_array_and_records_match_the_local_reader(client, tmp_path):
    out = str(tmp_path / "t")
    write_trace(out)
    trace = xdl.open_trace(out)
    arr = xdd.to_array(out, "w", rank=1)
    assert arr.dtype == np.float32 and arr.shape[1:] == (4, 5)
    np.testing.assert_array_equal(arr.compute(), trace.stack("w", rank=1))
    part = xdd.to_array(out, "w", rank=1, gsteps=(2, 5)).compute()
    np.testing.assert_array_equal(part, trace.stack("w", rank=1, gsteps=(2, 5)))

    bag = xdd.records(out, keys=["loss"], gsteps=range(0, 12, 3))
    got = sorted(bag.compute(), key=lambda r: (r["rank"], r["gstep"]))
    want = sorted(
        trace.records(keys=["loss"], gsteps=range(0, 12, 3)), key=lambda r: (r.rank, r.gstep)
    )
    assert [(r["rank"], r["gstep"], float(r["columns"]["loss"])) for r in got] == [
        (r.rank, r.gstep, float(r["loss"])) for r in want
    ]


def test_runs_are_selected_as_in_open_trace(client, tmp_path):
    out = str(tmp_path / "t")
    write_trace(out, ranks=(0,), steps=3)
    write_trace(out, ranks=(0,), steps=2, gstep0=100)
    first, second = xdl.runs(out)
    # The latest by default, said: a sweep's frame of one run looked like the sweep's.
    with pytest.warns(UserWarning, match=f"holds 2 runs; reading the latest \\({second.id}\\)"):
        latest = xdd.to_dataframe(out, keys=["loss"]).compute()
    assert sorted(latest["gstep"]) == [100, 101] and set(latest["run"]) == {second.id}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # A run named: nothing to say.
        every = xdd.to_dataframe(out, keys=["loss"], run="all").compute()
    assert sorted(zip(every["run"], every["gstep"])) == sorted(
        [(first.id, g) for g in range(3)] + [(second.id, 100), (second.id, 101)]
    )
    older = xdd.records(out, run=first.id[:8]).compute()
    assert [r["gstep"] for r in older] == [0, 1, 2]


def test_stats_summary_columns_are_their_own_rows_and_bfloat16_reads(client, tmp_path):
    torch = pytest.importorskip("torch")
    out = str(tmp_path / "t")
    x = np.array([[1.0, -2.0, np.nan], [4.0, np.inf, 0.5]], dtype=np.float32)
    xdl.trace_tensor("x_stats", x, summary="stats")
    xdl.trace_tensor("x", x)
    b = torch.tensor([1.5, -3.0, 2.0], dtype=torch.bfloat16)
    xdl.trace_tensor("b", b)
    with xdl.TraceHook({"output_dir": out, "fsync": False}) as hook:
        for _ in range(3):
            hook.step()
    xdl.clear()
    df = xdd.to_dataframe(out).compute().set_index(["gstep", "key"])
    summary, value = df.loc[(1, "x_stats")], df.loc[(1, "x")]
    for name in xdd.STATS:  # The summary's row is what the stats of the tensor are.
        np.testing.assert_allclose(summary[name], value[name], err_msg=name)
    assert (value["count"], value["nan"], value["inf"]) == (6, 1, 1)
    assert (df.loc[(2, "b")]["min"], df.loc[(2, "b")]["max"]) == (-3.0, 2.0)
    arr = xdd.to_array(out, "b").compute()
    assert arr.dtype == np.float32
    np.testing.assert_array_equal(arr, np.tile([1.5, -3.0, 2.0], (3, 1)))


def test_digest_and_histogram_columns_are_no_rows_of_statistics(client, tmp_path):
    """watch's default digests beside every key: their halves (~1e9) read as statistics made
    every digest an "exploding" l2 (docs/scale.md's df[df["l2"] > 1e3]); a histogram row's
    edges and counts are no tensor's statistics either. Both stay out; to_array reads them."""
    out = str(tmp_path / "t")
    w = np.linspace(-1, 1, 12, dtype=np.float32)
    xdl.trace_tensor("w", w, summary="stats")
    xdl.trace_tensor("digest/w", w, summary="digest")
    xdl.trace_tensor("h", w, summary="histogram")
    xdl.trace_tensor("v", w)
    with xdl.TraceHook({"output_dir": out, "fsync": False}) as hook:
        for _ in range(3):
            hook.step()
    xdl.clear()
    df = xdd.to_dataframe(out).compute()
    assert sorted(df["key"].unique()) == ["v", "w"]
    assert df["l2"].max() < 3  # Before: the digest's rows, l2 ~1e9.
    digests = xdd.to_array(out, "digest/w").compute()
    assert digests.shape == (3, 2) and (digests == digests[0]).all()
