"""Device tensors captured without waiting for the device (_device.py, xdl_trace/deferred.h).

Without a GPU the device is tests/python/fake_device.py: its work runs later, in order, on a
stream thread. With CUDA, the gpu-marked cases at the end run the same checks on real tensors.
"""

import math
import threading
import time

import numpy as np
import pytest
import torch

import xdl_trace as xdl
from fake_device import FakeDevice, installed
from xdl_trace import _core
from xdl_trace.write import _device, _device_graphs, _device_summary

STATS = list(_core.STATS_FIELDS)
EXACT_STATS = [STATS.index(f) for f in ("count", "min", "max", "nan", "inf")]
SUMMED_STATS = [STATS.index(f) for f in ("mean", "std", "l2")]


def _values():
    g = torch.Generator().manual_seed(3)
    nan_inf = torch.randn(40, generator=g)
    nan_inf[[1, 7]] = math.nan
    nan_inf[3] = math.inf
    nan_inf[9] = -math.inf
    rows = torch.randn(3 * _device_summary.TILE + 5, generator=g) * 2 - 50  # Several rows.
    rows[[5, 2 * _device_summary.TILE + 1]] = math.nan
    rows[[_device_summary.TILE + 3, -1]] = -math.inf
    return {
        "f32": torch.randn(64, 33, generator=g) * 3 + 100,
        "near_one": 1 + torch.randn(300, generator=g) * 1e-4,  # mean / std 1e4, as BN weights.
        "f16": torch.randn(17, generator=g).to(torch.float16),
        "bf16": torch.randn(5, 6, generator=g).to(torch.bfloat16),
        "i64": torch.arange(-5, 20),
        "bool": torch.tensor([True, False, True, True]),
        "empty": torch.zeros(0),
        "nan_inf": nan_inf,
        "rows": rows,
        # Means a step off in float64: 0.10000000000000002 (above max), 0.6999999999999998.
        "tenths": torch.tensor([0.1] * 3 + [math.nan], dtype=torch.float64),
        "sevenths": torch.tensor([0.7] * 3 + [math.inf], dtype=torch.float64),
        "all_nan": torch.full((3,), math.nan),
        "constant": torch.full((4,), 2.5),
        "scalar": torch.tensor(7.0),
    }


def _host_copy(t):
    """The same values as a numpy array (bfloat16 widened exactly): they take the host path."""
    return t.float().numpy().copy() if t.dtype == torch.bfloat16 else t.numpy().copy()


def _bits(t):
    """What a reader returns for `t`'s column (bfloat16 as its uint16 bits)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


ONE_DTYPE = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def _assert_sums_close(device, host, err_msg=""):
    """Mean, std and l2 to a relative 1e-12; a std that is ~0 (a constant float64 tensor, whose
    mean is a step off) to 1e-15 of the mean's magnitude (docs/python.md)."""
    d, h = device[SUMMED_STATS], host[SUMMED_STATS]
    atol = np.zeros(len(SUMMED_STATS))
    atol[SUMMED_STATS.index(STATS.index("std"))] = 1e-15 * abs(host[STATS.index("mean")])
    close = np.abs(d - h) <= atol + 1e-12 * np.abs(h)
    assert (np.isnan(d) == np.isnan(h)).all() and (close | np.isnan(h)).all(), (d, h, err_msg)


def _values_of(dtypes):
    """_values(), or its floating ones in one dtype (the pass stays in it, widening as it sums)."""
    values = _values()
    if dtypes == "mixed":
        return values
    return {name: t.to(dtypes) for name, t in values.items() if t.dtype in ONE_DTYPE[:2]}


def _assert_device_summaries_equal_the_host_s(cfg, read_trace, values):
    """Traces each value through the device pass and from a host copy, in one step, and
    compares the record's columns (the histogram bit for bit); the device's digest is the
    host's (_core.digest of the same bits), bit for bit."""
    for name, t in values.items():
        for summary in ("stats", "histogram"):
            xdl.trace_tensor(f"device/{summary}/{name}", lambda t=t: t, summary=summary)
            xdl.trace_tensor(f"host/{summary}/{name}", _host_copy(t.cpu()), summary=summary)
        xdl.trace_tensor(f"device/digest/{name}", lambda t=t: t, summary="digest")
        xdl.trace_tensor(f"device/values/{name}", lambda t=t: t)
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    (cols,) = [rec[3] for rec in trace.records]
    for name, t in values.items():
        device, host = cols[f"device/stats/{name}"], cols[f"host/stats/{name}"]
        np.testing.assert_array_equal(device[EXACT_STATS], host[EXACT_STATS], err_msg=name)
        _assert_sums_close(device, host, err_msg=name)
        np.testing.assert_array_equal(
            cols[f"device/histogram/{name}"], cols[f"host/histogram/{name}"], err_msg=name
        )
        high, low = cols[f"device/digest/{name}"]
        digest = _core.digest(_bits(t.cpu()), _device.wire_dtype(t))
        assert (int(high) << 32) | int(low) == digest, name
        np.testing.assert_array_equal(cols[f"device/values/{name}"], _bits(t.cpu()), err_msg=name)


@pytest.mark.parametrize("dtypes", ["mixed"] + ONE_DTYPE)
@pytest.mark.parametrize("chunk", [None, 40])
def test_summaries_on_the_device_equal_the_host_summaries(
    cfg, read_trace, monkeypatch, chunk, dtypes
):
    if chunk is not None:  # Passes of at most `chunk` elements: several here.
        monkeypatch.setattr(_device_summary, "_CHUNK_ELEMENTS", chunk)
    with installed(FakeDevice()):
        _assert_device_summaries_equal_the_host_s(cfg, read_trace, _values_of(dtypes))


@pytest.mark.parametrize("dtypes", ["mixed", torch.float32])
def test_the_pass_never_waits_for_the_device_nor_divides_by_a_host_number(dtypes):
    """What a CPU run cannot show: CUDA divides by a host number as a multiply by its
    reciprocal (a bit off the host's division); an .item() or nonzero waits for the device,
    and a tensor made from host data is a host-to-device copy: both break a graph's capture,
    so static_inputs makes the pass's constants beforehand. The pass's ops, as the
    dispatcher sees them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((str(func), args))
            return func(*args, **(kwargs or {}))

    values = list(_values_of(dtypes).values())
    _device_summary.static_inputs(values)
    with Ops():
        _device_summary.stats_rows(values)
        _device_summary.histogram_rows(values, 30)
    names = {name for name, _ in seen}
    assert "aten.div.Tensor" in names  # The check below sees divisions.
    for name, args in seen:
        waits = ("aten._local_scalar_dense", "aten.nonzero", "aten.lift_fresh")
        assert not name.startswith(waits + ("aten.reciprocal",)), name
        if name.startswith("aten.div"):
            assert isinstance(args[1], torch.Tensor) and args[1].dim() > 0, (name, args[1])


def test_a_pass_of_empty_tensors_alone_has_their_summaries():
    """docs/format.md's rows of no value (segment_reduce refuses empty data: a pass must not)."""
    stats = _device_summary.stats_rows([torch.zeros(0)])
    np.testing.assert_array_equal(stats[0, EXACT_STATS], [0, np.nan, np.nan, 0, 0])
    rows = _device_summary.histogram_rows([torch.zeros(0), torch.zeros(0, 3)], 4)
    np.testing.assert_array_equal(rows[:, 6:], np.zeros((2, 4)))
    assert np.isnan(rows[:, :6]).all()


def test_full_values_of_every_dtype_arrive_as_on_the_host(cfg, read_trace):
    values = _values()
    with installed(FakeDevice()):
        for name, t in values.items():
            xdl.trace_tensor(name, lambda t=t: t)
        with xdl.TraceHook(cfg) as hook:
            hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    (cols,) = [rec[3] for rec in trace.records]
    for name, t in values.items():
        np.testing.assert_array_equal(cols[name], _bits(t), err_msg=name)
        assert cols[name].shape == tuple(t.shape)


def test_step_returns_before_the_device_ran_and_later_updates_never_reach_the_file(cfg, read_trace):
    w = torch.zeros(1000)
    returned_with_work_pending = []
    with installed(FakeDevice(delay_s=0.02)) as device:
        xdl.trace_tensor("w", lambda: w)
        xdl.trace_tensor("w_stats", lambda: w, summary="stats")
        with xdl.TraceHook(cfg) as hook:
            for step in range(4):
                device.enqueue(lambda s=step: w.fill_(float(s)))  # The step's own work.
                hook.step()
                returned_with_work_pending.append(device.pending)
                device.enqueue(lambda: w.add_(100.0))  # The optimizer, after hook.step().
    assert all(n >= 2 for n in returned_with_work_pending), returned_with_work_pending
    (trace,) = read_trace(cfg["output_dir"])
    for step, cols in enumerate(rec[3] for rec in trace.records):
        np.testing.assert_array_equal(cols["w"], np.full(1000, float(step), np.float32))
        assert cols["w_stats"][STATS.index("max")] == step


def test_watch_of_a_model_every_step(cfg, read_trace):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected, digests = [], []
    named = lambda m: m.named_parameters()  # noqa: E731
    with installed(FakeDevice()) as device:
        keys = xdl.watch(model)
        with xdl.TraceHook(cfg) as hook:
            for step in range(3):
                batch = torch.randn(4, 8)

                def forward_backward(batch=batch):
                    optimizer.zero_grad()
                    model(batch).pow(2).mean().backward()

                device.enqueue(forward_backward)  # The step's work runs on the device.
                device.synchronize()  # Only so the test can read what the record must hold.
                expected.append(
                    {
                        **{n: p.detach().norm().item() for n, p in model.named_parameters()},
                        **{
                            f"gradient/{n}": p.grad.norm().item()
                            for n, p in model.named_parameters()
                        },
                    }
                )
                digests.append(  # The host's digest (wire dtype 4: float32) of each tensor.
                    {
                        **{n: _core.digest(p.detach().numpy(), 4) for n, p in named(model)},
                        **{
                            f"gradient/{n}": _core.digest(p.grad.numpy(), 4)
                            for n, p in named(model)
                        },
                    }
                )
                hook.step()
                device.enqueue(optimizer.step)
    (trace,) = read_trace(cfg["output_dir"])
    assert len(trace.records) == 3
    for step, cols in enumerate(rec[3] for rec in trace.records):
        for key in keys:
            assert cols[key].shape == (len(STATS),)
            assert cols[key][STATS.index("l2")] == pytest.approx(expected[step][key], rel=1e-6)
            # watch's companion digest, from the device summary pass: the host's, bit for bit.
            high, low = cols[f"digest/{key}"]
            assert (int(high) << 32) | int(low) == digests[step][key], (key, step)


@pytest.mark.parametrize("summary", ["stats", None])
def test_a_device_group_member_without_a_gradient_is_empty_at_that_step(cfg, read_trace, summary):
    """watch on a device reads its gradients as one group: a parameter the step did not use has
    no gradient under zero_grad(set_to_none=True) (torch 2's default); its member is empty at
    that step (stats of no element, no values, digest 0) and the group's others are staged as
    ever (before: the group's read raised and the step failed)."""
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 2), "b": torch.nn.Linear(3, 2)})
    x = torch.randn(4, 3)
    with installed(FakeDevice()) as device:
        xdl.watch(model, summary=summary)
        with pytest.warns(RuntimeWarning, match="grad is None at a traced step"):
            with xdl.TraceHook(cfg) as hook:
                for step in range(2):
                    used = model["a" if step == 0 else "b"]

                    def forward_backward(used=used):
                        model.zero_grad(set_to_none=True)
                        used(x).sum().backward()

                    device.enqueue(forward_backward)
                    device.synchronize()
                    hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    assert len(trace.records) == 2
    for step, cols in enumerate(rec[3] for rec in trace.records):
        unused, used = ("b", "a") if step == 0 else ("a", "b")
        empty, full = cols[f"gradient/{unused}.weight"], cols[f"gradient/{used}.weight"]
        if summary == "stats":
            assert empty[STATS.index("count")] == 0 and full[STATS.index("count")] == 6
            assert cols[f"digest/gradient/{unused}.weight"].tolist() == [0, 0]
        else:  # Full values (no digest companion: the column is exact).
            assert empty.size == 0 and full.shape == (2, 3)


def test_watch_on_a_device_is_one_group_per_kind_with_every_and_full_values(cfg, read_trace):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model(torch.randn(2, 3)).sum().backward()
    with installed(FakeDevice()) as device:
        stats_keys = xdl.watch(model, every=2)
        value_keys = xdl.watch(model, gradients=False, summary=None, scope="full")
        assert len(_device.groups([""], stats_keys)) == 2  # Parameters, gradients.
        with xdl.TraceHook(cfg, scope=["", "full"]) as hook:
            for _ in range(3):
                hook.step()
        device.synchronize()
    (trace,) = read_trace(cfg["output_dir"])
    steps = [rec[3] for rec in trace.records]
    for step, cols in enumerate(steps):
        for key in stats_keys:  # A skipped step holds the stats of an empty tensor.
            assert (cols[key][STATS.index("count")] > 0) == (step % 2 == 0)
        for key, (name, p) in zip(value_keys, model.named_parameters()):
            np.testing.assert_array_equal(cols[key], p.detach().numpy())
    weight = steps[0]["0.weight"]
    assert weight[STATS.index("max")] == model[0].weight.max().item()


def test_watch_on_a_device_before_backward_says_so_naming_the_key(cfg, read_trace):
    """hook.step() before any backward(): no gradient yet, so the gradient columns are empty,
    said once naming the first key (either cause: an unused parameter, or the step's order)."""
    model = torch.nn.Linear(3, 1)
    with installed(FakeDevice()):
        xdl.watch(model)
        with pytest.warns(RuntimeWarning, match=r"'gradient/weight'.*before backward\(\)"):
            with xdl.TraceHook(cfg) as hook:
                hook.step()
    ((_, _, _, cols),) = read_trace(cfg["output_dir"])[0].records
    assert cols["gradient/weight"][STATS.index("count")] == 0
    assert cols["weight"][STATS.index("count")] == 3


def test_a_failed_copy_drops_its_record_counts_it_and_the_next_steps_are_written(cfg, read_trace):
    w = torch.arange(4.0)
    with installed(FakeDevice()) as device:
        xdl.trace_tensor("w", lambda: w)
        with xdl.TraceHook(cfg) as hook:
            hook.step(gstep=0)
            device.fail_next_work = True
            hook.step(gstep=1)
            hook.step(gstep=2)
        stats = hook.stats()
    assert stats["deferred_failed"] == 1
    assert stats["records_dropped"] == 1
    assert "gstep=1" in stats["last_deferred_error"]
    assert "fake device fault" in stats["last_deferred_error"]
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 2]
    assert trace.meta.dropped_records == 1


def test_a_step_failing_after_a_device_capture_writes_nothing_and_end_does_not_hang(
    cfg, read_trace
):
    w = torch.arange(4.0)
    with installed(FakeDevice(delay_s=0.01)):
        xdl.trace_tensor("w", lambda: w)
        # A failing summary fails the step (a failing callback only empties its own column).
        xdl.trace_tensor("broken", np.ones(1), summary=lambda a: 1 / 0)
        hook = xdl.TraceHook({**cfg, "on_error": "warn"})
        with pytest.warns(RuntimeWarning, match="ZeroDivisionError"):
            hook.step()
        started = time.monotonic()
        with pytest.warns(RuntimeWarning, match="1 traced step"):
            hook.end()
        assert time.monotonic() - started < 5
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.records == []
    assert hook.stats()["step_errors"] == 1


def test_end_waits_for_copies_in_flight(cfg, read_trace):
    w = torch.arange(4.0)
    with installed(FakeDevice(delay_s=0.05)):
        xdl.trace_tensor("w", lambda: w)
        with xdl.TraceHook(cfg) as hook:
            for _ in range(5):
                hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("overflow", ["drop", "block"])
def test_staging_memory_is_bounded_by_max_pending_mb(cfg, read_trace, overflow):
    big = torch.ones(300_000)  # 1.2 MB a step; the bound holds one step.
    with installed(FakeDevice(delay_s=0.03)):
        xdl.trace_tensor("big", lambda: big)
        with xdl.TraceHook({**cfg, "max_pending_mb": 1.5, "overflow": overflow}) as hook:
            for _ in range(6):
                hook.step()
        stats = hook.stats()
    (trace,) = read_trace(cfg["output_dir"])
    assert stats["staging_high_water_bytes"] <= 1.5e6
    if overflow == "drop":
        assert stats["staging_dropped"] >= 1
        assert len(trace.records) == 6 - stats["records_dropped"]
        assert stats["records_dropped"] >= stats["staging_dropped"]
    else:
        assert trace.gsteps() == list(range(6))


@pytest.mark.parametrize("block", [True, False])
def test_the_staging_pool_waits_for_or_drops_when_every_buffer_is_busy(block):
    backend = FakeDevice()
    pool = _device.StagingPool(1 << 16, block=block)
    first = pool.acquire(1000, backend)
    pending = _core.PendingBytes()
    fence = _core.ManualFenceForTesting()
    pending.arm(first.buffer.data_ptr(), fence, first.lease)
    pool.release(first)  # Armed: its lease keeps it busy.
    held = [pending.value(0, 0, [0])]  # A record's hold on the buffer.
    assert first.lease.busy
    release = threading.Timer(0.05, lambda: held.clear())
    started = time.monotonic()
    release.start()
    del pending
    second = pool.acquire(1000, backend)
    release.join()
    backend.close()
    if block:
        assert second is first and time.monotonic() - started >= 0.04
        assert pool.stats()["staging_waits"] >= 1
    else:
        assert second is None and pool.stats()["staging_dropped"] == 1
    assert pool.stats()["staging_high_water_bytes"] <= 1 << 16


def test_the_staging_pool_reuses_buffers_in_turn_and_keeps_large_ones_for_large_steps():
    backend = FakeDevice()
    pool = _device.StagingPool(10 << 20)

    def use(nbytes):  # Taken and given back unarmed: free again at once.
        slot = pool.acquire(nbytes, backend)
        pool.release(slot)
        return slot

    big = use(4 << 20)
    small = [use(1000) for _ in range(2)]
    assert small[0] is small[1] and small[0] is not big
    assert [use(1000) for _ in range(3)] == [small[0]] * 3
    assert use(4 << 20) is big
    assert use(2 << 20) is big  # Within twice the size.
    assert pool.stats()["staging_bytes"] == (4 << 20) + (1 << 16)
    backend.close()


def test_a_slot_taken_and_not_yet_given_back_is_never_handed_out_again():
    backend = FakeDevice()
    pool = _device.StagingPool(10 << 20)
    first = pool.acquire(1000, backend)  # Its copies being enqueued: not armed yet.
    second = pool.acquire(1000, backend)
    assert second is not first
    pool.release(first)
    assert pool.acquire(1000, backend) is first
    backend.close()


def test_send_gradient_of_a_device_tensor_holds_the_values_sent(cfg, read_trace):
    g = torch.zeros(3)
    with installed(FakeDevice(delay_s=0.01)) as device:
        xdl.trace_gradient("w")
        with xdl.TraceHook(cfg) as hook:
            for step in range(2):
                device.enqueue(lambda s=step: g.fill_(float(s)))
                xdl.send_gradient("w", g)
                device.enqueue(lambda: g.fill_(-1.0))  # Changed after the send.
                hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    for step, cols in enumerate(rec[3] for rec in trace.records):
        np.testing.assert_array_equal(cols["gradient/w"], np.full(3, float(step), np.float32))


def test_a_callable_summary_reads_a_device_tensor_on_the_host(cfg, read_trace):
    with installed(FakeDevice()):
        xdl.trace_tensor("m", lambda: torch.arange(6.0), summary=lambda a: a.mean(keepdims=True))
        with xdl.TraceHook(cfg) as hook:
            hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    np.testing.assert_array_equal(trace.column("m")[0], [2.5])


# -- summary graphs (_device_graphs.py) -----------------------------------------------------------


def _traced_summaries(cfg, read_trace, steps, device=None, env=None):
    """Traces "s" (stats) and "h" (histogram) of what `steps[i]()` returns at step i on a fake
    device; returns the records' columns and hook.stats()."""
    current = {}
    with installed(device or FakeDevice()) as device:
        xdl.trace_tensor("s", lambda: current["t"], summary="stats")
        xdl.trace_tensor("h", lambda: current["t"], summary="histogram")
        xdl.trace_tensor("v", lambda: current["t"])
        with xdl.TraceHook(cfg) as hook:
            for make in steps:
                current["t"] = make()
                hook.step()
                device.synchronize()
        stats = hook.stats()
    (trace,) = read_trace(cfg["output_dir"])
    return [rec[3] for rec in trace.records], stats


def _assert_summaries_of_values(cols):
    """Each record's summaries are those of its own full values (the host path's)."""
    for step, c in enumerate(cols):
        host = torch.from_numpy(c["v"].copy())
        np.testing.assert_array_equal(
            c["s"][EXACT_STATS],
            _device_summary.stats_rows([host])[0].numpy()[EXACT_STATS],
            err_msg=f"step {step}",
        )
        np.testing.assert_array_equal(
            c["h"], _device_summary.histogram_rows([host], 30)[0].numpy(), err_msg=f"step {step}"
        )


def test_a_pass_over_tensors_that_stay_put_is_captured_once_and_replayed(cfg, read_trace):
    w = torch.zeros(1000)

    def step_values(k):
        return lambda: w.copy_(torch.randn(1000, generator=torch.Generator().manual_seed(k)))

    cols, stats = _traced_summaries(cfg, read_trace, [step_values(k) for k in range(6)])
    _assert_summaries_of_values(cols)
    # Step 0 eager (first sight), step 1 captures and replays, steps 2-5 replay: per kind.
    assert stats["summary_passes_eager"] == 2
    assert stats["summary_graph_captures"] == 2 and stats["summary_graphs"] == 2
    assert stats["summary_graph_replays"] == 2 * 5
    assert stats["summary_graph_failures"] == 0 and stats["summary_graphs_off"] is None


def test_a_graph_of_a_pass_in_several_chunks_equals_the_eager_pass(cfg, read_trace, monkeypatch):
    monkeypatch.setattr(_device_graphs, "CHUNK_ELEMENTS", 100)
    values = _values()
    tensors = [values[name] for name in ("f32", "near_one", "nan_inf", "empty", "constant")]
    with installed(FakeDevice()) as device:
        for i, t in enumerate(tensors):
            xdl.trace_tensor(f"s{i}", lambda t=t: t, summary="stats")
            xdl.trace_tensor(f"h{i}", lambda t=t: t, summary="histogram")
        with xdl.TraceHook(cfg) as hook:
            for _ in range(3):  # Eager, captured, replayed.
                hook.step()
        stats = hook.stats()
        device.synchronize()
    assert stats["summary_graph_captures"] == 2 and stats["summary_graph_replays"] == 4
    (trace,) = read_trace(cfg["output_dir"])
    eager, *replayed = [rec[3] for rec in trace.records]
    for cols in replayed:
        for key, column in cols.items():  # Sums in other chunks: summed in another order.
            np.testing.assert_allclose(column, eager[key], rtol=1e-12, err_msg=key)


def test_a_tensor_that_moved_runs_eagerly_until_its_new_place_holds(cfg, read_trace):
    fixed = torch.arange(50.0)
    base = torch.arange(100.0) - 30  # Views at one address with other extents: not the same.
    makes = [
        lambda: fixed,
        lambda: fixed,  # Captured and replayed.
        lambda: torch.arange(50.0) * 2,  # A new tensor: eager.
        lambda: base[:50],
        lambda: base[:60],  # Same address, other shape.
        lambda: base[::2],  # Same address, other stride.
        lambda: base[::2],  # Stable again: captured.
        lambda: fixed,  # The first graph, still there.
    ]
    cols, stats = _traced_summaries(cfg, read_trace, makes)
    _assert_summaries_of_values(cols)
    assert [c["v"].shape[0] for c in cols] == [50, 50, 50, 50, 60, 50, 50, 50]
    assert stats["summary_graph_captures"] == 2 * 2
    assert stats["summary_graph_replays"] == 2 * 3
    assert stats["summary_passes_eager"] == 2 * 5


def test_a_failed_capture_turns_graphs_off_and_the_summaries_stay_right(cfg, read_trace):
    w = torch.arange(10.0)
    device = FakeDevice()
    device.fail_capture = True
    with pytest.warns(RuntimeWarning, match="fake capture fault"):
        cols, stats = _traced_summaries(cfg, read_trace, [lambda: w.add_(1.0)] * 4, device)
    _assert_summaries_of_values(cols)
    assert stats["summary_graph_failures"] == 1 and stats["summary_graph_captures"] == 0
    assert "fake capture fault" in stats["summary_graphs_off"]
    assert stats["summary_passes_eager"] == 2 * 4


def test_graphs_are_off_with_XDL_TRACE_DEVICE_GRAPHS_0(cfg, read_trace, monkeypatch):
    monkeypatch.setenv("XDL_TRACE_DEVICE_GRAPHS", "0")
    w = torch.arange(10.0)
    device = FakeDevice()
    cols, stats = _traced_summaries(cfg, read_trace, [lambda: w.add_(1.0)] * 3, device)
    _assert_summaries_of_values(cols)
    assert device.captures == 0 and stats["summary_passes_eager"] == 2 * 3


def test_graphs_are_bounded_in_number_and_size(cfg, read_trace, monkeypatch):
    monkeypatch.setattr(_device_graphs, "MAX_GRAPHS", 3)
    big = torch.zeros(200)
    makes = []
    for _ in range(3):  # Three tensors in turn, each twice: a graph each, one too many.
        t = torch.randn(20)
        makes += [lambda t=t: t, lambda t=t: t]
    makes += [lambda: big, lambda: big]
    monkeypatch.setattr(_device_graphs, "MAX_ELEMENTS", 100)
    cols, stats = _traced_summaries(cfg, read_trace, makes)
    _assert_summaries_of_values(cols)
    assert stats["summary_graphs"] == 3  # Stats, histogram of the first; stats of the second.
    assert stats["summary_passes_eager"] == len(makes) * 2 - stats["summary_graph_replays"]


# -- real CUDA -------------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="SKIPPED: no CUDA device")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtypes", ["mixed"] + ONE_DTYPE)
def test_cuda_summaries_equal_the_host_summaries(cfg, read_trace, dtypes):
    values = {name: t.cuda() for name, t in _values_of(dtypes).items()}
    _assert_device_summaries_equal_the_host_s(cfg, read_trace, values)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("side_stream", [False, True])
def test_cuda_update_enqueued_right_after_step_never_shows(cfg, read_trace, side_stream):
    w = torch.zeros(8 << 20, device="cuda")  # 32 MB: the copy takes a while.
    src = torch.ones(8 << 20).pin_memory()
    xdl.trace_tensor("w", lambda: w)
    xdl.trace_tensor("w_stats", lambda: w, summary="stats")
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    with xdl.TraceHook(cfg) as hook, torch.cuda.stream(stream):
        for step in range(5):
            w.fill_(float(step))
            w.add_(src.to("cuda", non_blocking=True) * 0)  # A non_blocking transfer in flight.
            hook.step()
            w.mul_(-7.0)  # Enqueued right after hook.step(): never in the record.
    (trace,) = read_trace(cfg["output_dir"])
    for step, cols in enumerate(rec[3] for rec in trace.records):
        assert (cols["w"] == step).all()
        assert cols["w_stats"][STATS.index("min")] == cols["w_stats"][STATS.index("max")] == step


def test_device_records_pass_every_reader_s_checksums(cfg):
    # The IO thread seals a record's checksum once its device bytes have landed.
    w = torch.arange(1000.0)
    with installed(FakeDevice(delay_s=0.01)):
        xdl.trace_tensor("w", lambda: w)
        xdl.trace_tensor("w_stats", lambda: w, summary="stats")
        with xdl.TraceHook(cfg) as hook:
            for _ in range(3):
                hook.step()
    trace = xdl.open_trace(cfg["output_dir"])  # Checks every record's crc32c.
    np.testing.assert_array_equal(trace.stack("w")[2], w.numpy())
    reports = trace.verify()
    assert reports and all(r["ok"] and not r["unverifiable"] for r in reports), reports


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("set_to_none", [False, True])
def test_cuda_watch_through_summary_graphs_equals_the_host_summaries(cfg, read_trace, set_to_none):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    keys = xdl.watch(model)
    expected = []
    with xdl.TraceHook(cfg) as hook:
        for _ in range(6):
            optimizer.zero_grad(set_to_none=set_to_none)  # True: gradients may move.
            model(torch.randn(32, 64, device="cuda")).pow(2).mean().backward()
            named = list(model.named_parameters())
            expected.append(  # Blocking copies: only so the test knows what the record holds.
                {n: p.detach().cpu() for n, p in named}
                | {f"gradient/{n}": p.grad.cpu() for n, p in named}
            )
            hook.step()
            optimizer.step()  # Enqueued right after: never in the record.
        stats = hook.stats()
    if not set_to_none:
        assert stats["summary_graph_captures"] == 1 and stats["summary_graph_replays"] == 5
    assert stats["summary_graph_failures"] == 0, stats["summary_graphs_off"]
    (trace,) = read_trace(cfg["output_dir"])
    for step, cols in enumerate(rec[3] for rec in trace.records):
        for key in keys:
            host = _device_summary.stats_rows([expected[step][key]])[0].numpy()
            np.testing.assert_array_equal(cols[key][EXACT_STATS], host[EXACT_STATS], err_msg=key)
            _assert_sums_close(cols[key], host, err_msg=key)


def test_watch_on_a_device_reads_the_state_buffers_as_one_more_group(cfg, read_trace):
    """BatchNorm's running statistics, which the step's forward updates on the device, are one
    group beside the parameters': what they held at hook.step(), their digests the host's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    buffers = {"1.running_mean": model[1].running_mean, "1.running_var": model[1].running_var}
    expected = []
    with installed(FakeDevice(delay_s=0.01)) as device:
        keys = xdl.watch(model, gradients=False)
        assert keys == ["0.weight", "0.bias", "1.weight", "1.bias", *buffers]
        assert len(_device.groups([""], keys)) == 2  # Parameters, buffers.
        with xdl.TraceHook(cfg) as hook:
            for step in range(3):
                batch = torch.randn(8, 3) + step
                device.enqueue(lambda batch=batch: model(batch))  # Updates the running stats.
                device.synchronize()  # Only so the test can read what the record must hold.
                expected.append(
                    {k: (b.norm().item(), _core.digest(b.numpy(), 4)) for k, b in buffers.items()}
                )
                hook.step()
                device.enqueue(lambda: model(torch.randn(8, 3) * 100))  # The next step's.
        device.synchronize()
    (trace,) = read_trace(cfg["output_dir"])
    assert len(trace.records) == 3
    for step, cols in enumerate(rec[3] for rec in trace.records):
        for key, (norm, digest) in expected[step].items():
            assert cols[key][STATS.index("l2")] == pytest.approx(norm, rel=1e-6), (key, step)
            high, low = cols[f"digest/{key}"]
            assert (int(high) << 32) | int(low) == digest, (key, step)
