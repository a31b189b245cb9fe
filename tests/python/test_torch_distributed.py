"""A real 2-rank torch.distributed job (gloo on CPU, started with torch.multiprocessing, no RANK in
the environment): ranks come from torch.distributed, all-reduced gradients agree across ranks in
the files, and a second job into the same directory is a second run."""

import os
import time

import numpy as np
import pytest

import xdl_trace as xdl
from spawned_ranks import free_port, run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - Debian's torch has it
    pytest.skip("torch.distributed is not available", allow_module_level=True)

WORLD_SIZE = 2
STEPS = 4
PARAMS = ["0.weight", "0.bias", "2.weight", "2.bias"]


def train_rank(rank, port, out_dir, metadata):
    """One data-parallel rank: DDP over gloo, parameters and gradients traced every step."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        assert var not in os.environ, f"{var} must come from torch.distributed, not the env"
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE
    )
    try:
        torch.manual_seed(rank)  # Different initial weights: DDP must broadcast rank 0's.
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        xdl.trace_collection(model)
        for name in PARAMS:
            xdl.trace_gradient(name)
        state = {}
        xdl.trace_callback("loss", lambda: state["loss"])
        data = torch.Generator().manual_seed(100 + rank)  # Each rank its own batches.
        with xdl.TraceHook({"output_dir": out_dir, "fsync": False}, metadata=metadata) as hook:
            assert hook.rank == rank
            for step in range(STEPS):
                x = torch.randn(8, 4, generator=data)
                y = torch.randn(8, 1, generator=data)
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                loss.backward()  # DDP all-reduces (averages) the gradients here.
                state["loss"] = loss.detach()
                hook.step(gstep=10 * step)
                opt.step()
    finally:
        dist.destroy_process_group()


def run_job(out_dir, metadata, timeout_s=50):
    """Starts WORLD_SIZE spawned ranks and waits for them, killing them after timeout_s."""
    run_ranks(train_rank, (free_port(), out_dir, metadata), WORLD_SIZE, timeout_s)


def test_two_rank_data_parallel_job(tmp_path, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    out_dir = str(tmp_path / "ddp")
    start = time.monotonic()
    run_job(out_dir, {"job": "first"})

    # The files name ranks 0 and 1.
    names = sorted(n for n in os.listdir(out_dir) if not n.startswith("."))
    assert names == [
        "train.trace.0.1",
        "train.trace.0.1.meta",
        "train.trace.1.1",
        "train.trace.1.1.meta",
    ]
    (run,) = xdl.runs(out_dir)
    assert run.ranks == [0, 1] and run.world_size == 2
    assert run.metadata == {"job": "first"}
    assert run.gsteps == (0, 10 * (STEPS - 1)) and run.records == 2 * STEPS

    trace = xdl.open_trace(out_dir)
    assert trace.ranks == [0, 1]
    by_rank = {
        r: trace.stack_many(["loss"] + PARAMS + [f"gradient/{p}" for p in PARAMS], rank=r)
        for r in (0, 1)
    }
    for key, (gsteps, values) in by_rank[0].items():
        assert list(gsteps) == [10 * s for s in range(STEPS)]
        other_steps, other = by_rank[1][key]
        assert list(other_steps) == list(gsteps)
        if key == "loss":  # Each rank saw its own data ...
            assert not np.array_equal(values, other)
        else:  # ... yet parameters and all-reduced gradients agree at every gstep.
            np.testing.assert_allclose(values, other, rtol=1e-6, atol=1e-7, err_msg=key)
    assert np.any(by_rank[0]["gradient/0.weight"][1] != 0)

    # A second job into the same directory is a second run, continuing the file index.
    run_job(out_dir, {"job": "second"})
    runs = xdl.runs(out_dir)
    assert [r.metadata["job"] for r in runs] == ["first", "second"]  # Oldest first.
    assert all(r.world_size == 2 and r.ranks == [0, 1] for r in runs)
    with pytest.raises(ValueError, match="2 runs") as error:
        xdl.open_trace(out_dir)
    assert runs[0].id in str(error.value) and runs[1].id in str(error.value)
    latest = xdl.open_trace(out_dir, run="latest")
    assert [f.index for f in latest.files] == [2, 2]
    first = xdl.open_trace(out_dir, run=runs[0].id)
    assert [f.index for f in first.files] == [1, 1]
    assert len(list(xdl.open_trace(out_dir, run="all").records())) == 4 * STEPS
    assert time.monotonic() - start < 60
