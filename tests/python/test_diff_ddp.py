"""`xdl-trace diff RUN --ranks` on a real 2-rank DDP job (gloo on CPU, torch.multiprocessing.spawn,
`xdl.watch` on each rank): rank 0 alone lowers its learning rate at step 100, and the diff names
the first gstep where the replicated parameters part ways; the same seeded job twice is identical."""

import os

import pytest

import xdl_trace as xdl
from spawned_ranks import free_port, run_ranks
from xdl_trace import cli

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - Debian's torch has it
    pytest.skip("torch.distributed is not available", allow_module_level=True)

WORLD_SIZE = 2
STEPS = 120
BUG_STEP = 100  # Rank 0's optimizer step at this gstep uses a lower lr: parameters differ after.


def train_rank(rank, port, out_dir, summary, lr_bug, replicated, optimizer):
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE
    )
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        xdl.watch(model, summary=summary, optimizer=opt if optimizer else None)
        state = {}
        xdl.trace_callback("loss", lambda: state["loss"])  # Per rank: each sees its own shard.
        data = torch.Generator().manual_seed(100 + rank)
        config = {"output_dir": out_dir, "fsync": False, "on_error": "raise"}
        with xdl.TraceHook(config, replicated=replicated) as hook:
            for step in range(STEPS):
                x = torch.randn(16, 8, generator=data)
                y = torch.randn(16, 1, generator=data)
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                loss.backward()  # All-reduced gradients: equal on both ranks.
                state["loss"] = loss.detach()
                hook.step(gstep=step)
                if lr_bug and rank == 0 and step == BUG_STEP:
                    for group in opt.param_groups:
                        group["lr"] = 0.01
                opt.step()
    finally:
        dist.destroy_process_group()


def run_job(out_dir, summary=None, lr_bug=False, replicated=None, optimizer=False, timeout_s=90):
    args = (free_port(), out_dir, summary, lr_bug, replicated, optimizer)
    run_ranks(train_rank, args, WORLD_SIZE, timeout_s)
    return out_dir


@pytest.fixture(autouse=True)
def no_rank_env(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    return {
        "bug": run_job(str(root / "bug"), lr_bug=True),
        "bug_digests": run_job(str(root / "bug_digests"), summary="digest", lr_bug=True),
        "seeded": run_job(str(root / "seeded")),
        "seeded_digests": run_job(str(root / "seeded_digests"), summary="digest"),
        # watch's default (stats, with digest companions), the parameters declared replicated.
        "bug_declared": run_job(
            str(root / "bug_declared"), summary="stats", lr_bug=True, replicated=["0.*", "2.*"]
        ),
        # watch(optimizer=opt): the learning rate traced beside the parameters.
        "bug_optimizer": run_job(str(root / "bug_optimizer"), lr_bug=True, optimizer=True),
    }


PARAMS = ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_lr_bug_on_rank_0_is_found_at_its_gstep_by_full_values(jobs, capsys):
    result = xdl.diff(jobs["bug"])
    assert result.per_rank == ["loss"]  # A callback: legitimately per rank, not compared.
    differing = result.differing
    assert {k.key for k in differing} == set(PARAMS)  # All-reduced gradients still agree.
    assert all(k.basis == "values" for k in result.keys)
    assert all(k.first["gstep"] == BUG_STEP + 1 for k in differing)
    assert all((k.rank_a, k.rank_b) == (0, 1) for k in differing)
    gradients = [k for k in result.keys if k.key.startswith("gradient/")]
    assert len(gradients) == 4 and not any(k.differs for k in gradients)

    assert cli.main(["diff", jobs["bug"], "--ranks"]) == 1
    out = capsys.readouterr().out
    assert f"rank 1 differs from rank 0 from gstep {BUG_STEP + 1} in 0.bias (and 3 more)" in out


def test_lr_bug_is_found_by_digests_alone(jobs, capsys):
    result = xdl.diff(jobs["bug_digests"])
    differing = result.differing
    assert {k.key for k in differing} == set(PARAMS)
    assert all(k.basis == "digests" for k in result.keys)
    assert all(k.first["gstep"] == BUG_STEP + 1 for k in differing)
    assert cli.main(["diff", jobs["bug_digests"], "--ranks"]) == 1
    out = capsys.readouterr().out
    assert f"rank 1 differs from rank 0 from gstep {BUG_STEP + 1} in 0.bias (and 3 more)" in out
    assert "compared by digests" in out


def test_the_same_seeded_job_twice_is_identical(jobs, capsys):
    # One job traced full values, the other digests: the values are digested to meet them.
    assert cli.main(["diff", jobs["seeded"], jobs["seeded_digests"]]) == 0
    assert "identical: 9 key(s) over 240 step pair(s), compared by digests and values" in (
        capsys.readouterr().out
    )
    assert cli.main(["diff", jobs["seeded"], "--ranks"]) == 0
    assert "ranks agree" in capsys.readouterr().out
    # The loss is compared when asked for by name: it differs per rank from the start.
    (loss,) = xdl.diff(jobs["seeded"], keys="loss").differing
    assert loss.first["gstep"] == 0


def test_report_opens_with_rank_agreement(jobs):
    from xdl_trace.read import report

    model = report.build_report([jobs["bug"]])
    text = model["headline"][0]["text"]
    assert f"rank 1 differs from rank 0 from gstep {BUG_STEP + 1} in 0.bias (and 3 more keys)" in (
        text
    )
    differ = [a for a in model["alerts"] if a["kind"] == "ranks differ"]
    assert {a["key"] for a in differ} == set(PARAMS)
    assert all(a["gstep"] == BUG_STEP + 1 and a["rank"] == 1 for a in differ)
    model = report.build_report([jobs["seeded"]])
    assert "ranks agree (8 keys compared by values)" in model["headline"][0]["text"]
    assert [a["kind"] for a in model["alerts"]].count("ranks agree") == 1


def test_declared_replicated_keys_are_what_ranks_compare_in_a_real_ddp_job(jobs, capsys):
    """TraceHook(replicated=) travels with each rank's run metadata through a spawned DDP job:
    exactly the declared parameters are compared (by watch's digest companions, not its stats),
    the lr bug found at its gstep; the gradients and the loss are left to each rank."""
    result = xdl.diff(jobs["bug_declared"])
    assert result.replicated == "declared replicated (TraceHook(replicated=)): 0.*, 2.*"
    assert sorted(k.key for k in result.keys) == sorted(PARAMS)
    assert all(k.basis == "digests" for k in result.keys)
    assert all(k.differs and k.first["gstep"] == BUG_STEP + 1 for k in result.keys)
    assert sorted(result.per_rank) == sorted(["loss"] + [f"gradient/{p}" for p in PARAMS])
    assert cli.main(["diff", jobs["bug_declared"], "--ranks"]) == 1
    assert "compared across ranks: declared replicated" in capsys.readouterr().out


def test_watching_the_optimizer_names_the_learning_rate_as_where_the_ranks_part(jobs, capsys):
    """With watch(optimizer=opt) the cause itself is a key: rank 0's optimizer/lr is compared
    across ranks by rule and, parting at the same gstep as the parameters it updates, is named
    first (the parameters alone said where, not why)."""
    result = xdl.diff(jobs["bug_optimizer"])
    assert result.replicated == "replicated by rule: parameters, gradients and optimizer settings"
    assert result.per_rank == ["loss"]
    first, *rest = result.differing
    assert (first.key, first.first["gstep"]) == ("optimizer/lr", BUG_STEP + 1)
    assert first.first["max_abs"] == pytest.approx(0.04)
    assert {k.key for k in rest} == set(PARAMS)
    assert all(k.first["gstep"] == BUG_STEP + 1 for k in rest)
    assert cli.main(["diff", jobs["bug_optimizer"], "--ranks"]) == 1
    out = capsys.readouterr().out
    assert f"rank 1 differs from rank 0 from gstep {BUG_STEP + 1} in optimizer/lr (and 4 more)" in (
        out
    )
