"""xdl.watch: real torch training traced by TraceHook, files read back; numpy dicts; every=N."""

import contextlib
import io
import warnings

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import _core, cli
from xdl_trace.read import analysis, report

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

STATS = {name: i for i, name in enumerate(analysis.STATS_FIELDS)}


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _train(model, out_dir, steps, on_step=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    with xdl.TraceHook({"output_dir": out_dir, "on_error": "raise", "fsync": False}) as hook:
        for step in range(steps):
            opt.zero_grad()
            out = model(x)
            loss = ((out - y) ** 2).mean()
            loss.backward()
            opt.step()
            if on_step is not None:
                on_step(step)
            hook.step()
    return x


def test_watch_traces_parameter_and_gradient_stats_and_their_digests(tmp_path):
    model = _model()
    keys = xdl.watch(model)
    names = [n for n, _ in model.named_parameters()]
    assert keys == names + [f"gradient/{n}" for n in names]
    out = str(tmp_path / "run")
    snapshots = {}

    def snapshot(step):
        snapshots[step] = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
        snapshots[step].update(
            {f"gradient/{n}": p.grad.numpy().copy() for n, p in model.named_parameters()}
        )

    _train(model, out, 5, snapshot)
    trace = xdl.open_trace(out)
    # Beside each key its exact digest (digest=True, the default): digest/<key>.
    assert trace.keys == [k for key in names for k in (key, f"digest/{key}")] + [
        k for key in keys[len(names) :] for k in (key, f"digest/{key}")
    ]
    records = list(trace.records())
    assert [r.gstep for r in records] == list(range(5))
    for record in records:
        for key in keys:
            digest = record.columns[f"digest/{key}"]
            expected = _core.digest(snapshots[record.gstep][key], 4)  # Wire dtype 4: float32.
            assert (int(digest[0]) << 32) | int(digest[1]) == expected, (key, record.gstep)
            row = record.columns[key]
            value = snapshots[record.gstep][key].astype(np.float64)
            assert row.shape == (8,)
            assert row[STATS["count"]] == value.size
            np.testing.assert_allclose(row[STATS["mean"]], value.mean(), rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(row[STATS["l2"]], np.linalg.norm(value), rtol=1e-6)
    assert not np.array_equal(records[0]["gradient/0.weight"], records[4]["gradient/0.weight"])


@pytest.mark.parametrize("where", ["host", "host, every=2", "device"])
def test_the_header_declares_the_tensor_of_every_gradient_and_digest(tmp_path, where):
    """A gradient exists only after the first backward, yet has its parameter's dtype and shape
    for the whole run: watch declares it in the Header, for its digests too (before: none, and
    `info` read "stats of ??"). An activation's shape follows the batch: not declared."""
    from fake_device import FakeDevice, installed

    model = _model()
    out = str(tmp_path / "run")
    with installed(FakeDevice()) if where == "device" else contextlib.nullcontext():
        keys = xdl.watch(model, activations=True, every=2 if "every" in where else None)
        _train(model, out, 2)
    schema = xdl.open_trace(out).schema()
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    declared = {
        key: (d["input_dtype"], d["input_shape"])
        for key, d in ((k, schema[k].descriptor) for k in schema)
        if not key.startswith(("activation/", "digest/activation/"))
    }
    expected = {
        f"{part}{name}": ("float32", shape)
        for name, shape in shapes.items()
        for part in ("", "gradient/", "digest/", "digest/gradient/")
    }
    assert declared == expected
    assert [k for k in keys if k.startswith("activation/")]
    for key in schema:
        if "activation/" in key:
            assert schema[key].descriptor["input_shape"] is None, key
    cli_out = io.StringIO()
    with contextlib.redirect_stdout(cli_out):
        cli.main(["info", out])
    assert "digest of float32[8, 4]" in cli_out.getvalue()
    assert "stats of a tensor not declared at start" in cli_out.getvalue()  # The activations.


@pytest.fixture
def scoped_run(tmp_path):
    model = _model()
    keys = xdl.watch(model, activations=True, summary=None, every=2, scope="net")
    outputs = {}
    model[1].register_forward_hook(lambda m, i, o: outputs.__setitem__("tanh", o.detach().clone()))
    seen = {}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 4)
    out = str(tmp_path / "run")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    with xdl.TraceHook(config, scope="net") as hook:
        for step in range(5):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            seen[step] = (
                outputs["tanh"],
                model[0].weight.grad.clone(),
                model[2].bias.detach().clone(),
            )
            hook.step()
    return keys, seen, out


def test_every_n_traces_values_then_empty_columns(scoped_run):
    keys, seen, out = scoped_run
    trace = xdl.open_trace(out)
    assert trace.keys == keys
    for record in trace.records():
        captured = record.gstep % 2 == 0
        for key, column in record.columns.items():
            assert (column.size > 0) == captured, (record.gstep, key)
        if captured:
            tanh, grad, bias = seen[record.gstep]
            np.testing.assert_array_equal(record["net/activation/1"], tanh.numpy())
            np.testing.assert_array_equal(record["net/gradient/0.weight"], grad.numpy())
            np.testing.assert_array_equal(record["net/2.bias"], bias.numpy())
    gsteps, values = trace.stack("net/activation/2", return_gsteps=True)
    assert list(gsteps) == [0, 2, 4] and values.shape == (3, 32, 1)


def test_report_pairs_watched_gradients_with_their_parameters(scoped_run):
    keys, _, out = scoped_run
    model = report.build_report(out)
    card = next(c for c in model["cards"] if c["key"] == "net/gradient/0.weight")
    assert card["charts"][-1]["title"] == "gradient norm / weight norm"
    assert "net/activation/1" in [c["key"] for c in model["cards"]]
    assert xdl.find_nan(out) == []


def test_watch_numpy_dict_parameters_only(tmp_path):
    params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    assert xdl.watch(params, summary=None) == ["w", "b"]
    out = str(tmp_path / "run")
    with xdl.TraceHook({"output_dir": out, "on_error": "raise"}) as hook:
        for step in range(3):
            params["w"] += 1  # In place: traced where it lives.
            hook.step()
    stacked = xdl.open_trace(out).stack("w")
    np.testing.assert_array_equal(stacked[:, 0, 0], [2, 3, 4])
    # trace_gradient finds a watched variable; the gradient comes through send_gradient.
    xdl.trace_gradient("w")
    assert "gradient/w" in xdl.keys()


def test_watch_rejects_bad_arguments():
    with pytest.raises(TypeError, match="nn.Module or a dict of numpy arrays, got list"):
        xdl.watch([1, 2])
    with pytest.raises(TypeError, match="'w' is a list, not a numpy array"):
        xdl.watch({"w": [1.0]})
    with pytest.raises(ValueError, match=r"watch\(every=\): 0 is not an int >= 1"):
        xdl.watch(_model(), every=0)


def test_watch_optimizer_traces_each_param_group_s_learning_rate_as_the_scheduler_sets_it(
    tmp_path,
):
    model = _model()
    one = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(one, step_size=2, gamma=0.5)
    keys = xdl.watch(model, optimizer=one, gradients=False, digest=False)
    assert keys[0] == "optimizer/lr" and "0.weight" in keys
    two = torch.optim.Adam(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.5}], lr=0.2
    )
    # Several groups: one key each (here with no model: a dict of no parameter).
    assert xdl.watch({}, optimizer=two) == ["optimizer/0/lr", "optimizer/1/lr"]
    assert xdl.watch({}, optimizer=two, scope="b") == ["b/optimizer/0/lr", "b/optimizer/1/lr"]
    out = str(tmp_path / "lr")
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for _ in range(5):
            one.step()
            scheduler.step()
            hook.step()
    records = list(xdl.open_trace(out).records())
    assert [r["optimizer/lr"].item() for r in records] == pytest.approx(
        [0.1, 0.05, 0.05, 0.025, 0.025]
    )
    assert [r["optimizer/1/lr"].item() for r in records] == [0.5] * 5
    assert records[0]["optimizer/lr"].dtype == np.float64
    with pytest.raises(TypeError, match=r"watch\(optimizer=\): a list has no param_groups"):
        xdl.watch(_model(), optimizer=[], scope="c")


def test_a_param_group_added_after_watch_is_said_once_not_left_out_silently(tmp_path):
    """Gradual unfreezing (ULMFiT): the backbone's group is added to the optimizer mid-run. Its
    learning rate has no column (the keys are fixed at begin()); a warning says so once, at the
    first traced step that sees the new group, pointing at the user's hook.step() line."""
    model = _model()
    opt = torch.optim.SGD(model[2].parameters(), lr=0.1)
    xdl.watch(model, optimizer=opt, gradients=False, digest=False)
    out = str(tmp_path / "run")
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for step in range(4):
                if step == 2:
                    opt.add_param_group({"params": model[0].parameters(), "lr": 0.01})
                hook.step()
    lines = [w for w in said if "param groups" in str(w.message)]
    assert len(lines) == 1 and lines[0].filename == __file__, [str(w.message) for w in said]
    assert "has 2 param groups, 1 when watched" in str(lines[0].message)
    assert xdl.open_trace(out).stack("optimizer/lr").tolist() == [0.1] * 4


def test_a_leaf_module_that_never_runs_forward_leaves_its_activation_empty_not_the_step(tmp_path):
    """nn.MultiheadAttention uses its out_proj's weight directly: that leaf never runs a forward
    pass. Its activation column is empty (stats of no element, digest of none), said once; the
    step and every other key are written, even under on_error="raise" (before: every traced
    step failed on it, and a run traced nothing)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2)  # Two such leaves: said once for the model.
    keys = xdl.watch(model, gradients=False, activations=True)
    assert "activation/layers.1.self_attn.out_proj" in keys
    out = str(tmp_path / "run")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    x = torch.randn(2, 5, 8)
    with pytest.warns(
        RuntimeWarning, match="'layers.0.self_attn.out_proj' has run no forward"
    ) as said:
        with xdl.TraceHook(config) as hook:
            for _ in range(3):
                model(x)
                hook.step()
    (warning,) = [w for w in said if "has run no forward pass" in str(w.message)]  # Once.
    assert warning.filename == __file__  # At the user's hook.step(), not inside xdl_trace.
    trace = xdl.open_trace(out)
    records = list(trace.records())
    assert len(records) == 3
    for record in records:
        for layer in ("layers.0", "layers.1"):
            assert record.summary(f"activation/{layer}.self_attn.out_proj").count == 0
            digest = record.columns[f"digest/activation/{layer}.self_attn.out_proj"]
            assert digest.tolist() == [0, 0]
            assert record.summary(f"activation/{layer}.linear1").count == 2 * 5 * 16


@pytest.mark.parametrize("order", ["forward, then step", "step, then forward"])
def test_an_activation_the_step_did_not_run_is_empty_not_an_older_step_s_output(tmp_path, order):
    """A branch taken at even steps only: at odd steps its activation column is empty (said
    once), never the output of the step before; the branch taken shows this step's output. Both
    step orders agree (hook.step() after the forward, or at the top of the loop: the output of
    the forward since the previous step). Before, an odd step recorded the even step's output."""

    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x, step):
            return self.a(x) if step % 2 == 0 else self.b(x)

    torch.manual_seed(0)
    model = Branches()
    xdl.watch(model, gradients=False, activations=True, digest=False)
    out = str(tmp_path / "run")
    sums = {}  # gstep -> the sum of branch a's output the record must hold (None: empty)
    with pytest.warns(RuntimeWarning) as said:
        with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
            for step in range(6):
                if order == "step, then forward":
                    hook.step()  # Traces the forward of the iteration before.
                x = torch.full((2, 4), float(step))
                y = model(x, step)
                ran = float(y.sum()) if step % 2 == 0 else None
                if order == "forward, then step":
                    hook.step()
                    sums[step] = ran
                else:
                    sums[step + 1] = ran
    records = {r.gstep: r for r in xdl.open_trace(out).records()}
    checked = 0
    for gstep, expected in sums.items():
        if gstep not in records:
            continue  # The loop's last forward, after its last step.
        stats = records[gstep].summary("activation/a")
        if expected is None:
            assert stats.count == 0, f"gstep {gstep}: branch a did not run, yet {stats}"
        else:
            assert stats.count == 8 and stats.mean * 8 == pytest.approx(expected, rel=1e-5)
            checked += 1
    assert checked == 3  # Branch a's three forwards, each in the record of its step.
    skipped = [w for w in said if "ran no forward pass since the previous" in str(w.message)]
    assert len(skipped) == 1 and skipped[0].filename == __file__


def test_activation_before_any_forward_is_an_empty_column_said_by_name(tmp_path):
    model = _model()
    xdl.watch(model, gradients=False, activations=True)
    config = {"output_dir": str(tmp_path / "run"), "on_error": "raise"}
    with pytest.warns(RuntimeWarning, match="activation '.*activation/0'.*run no forward pass"):
        with xdl.TraceHook(config) as hook:
            hook.step()
    (record,) = xdl.open_trace(str(tmp_path / "run")).records()
    assert record.summary("activation/0").count == 0


def test_every_with_stats_summary_writes_count_zero_rows_in_between(tmp_path):
    model = _model()
    xdl.watch(model, gradients=False, every=3)
    out = str(tmp_path / "run")
    _train(model, out, 4)
    counts = [r["0.bias"][STATS["count"]] for r in xdl.open_trace(out).records()]
    assert counts == [8, 0, 0, 8]  # Captured at traced steps 0 and 3; empty tensors between.


def test_a_model_moved_or_cast_after_watch_is_refused_at_begin_not_traced_stale(tmp_path):
    """watch(model), then model.double() (or .to(), .cuda(), .half()): the parameters' values now
    lie elsewhere, and the registration read their old memory: every record held the initial
    float32 weights, silently. begin() now says which keys moved, from where to where."""
    model = _model()
    xdl.watch(model, gradients=False)
    model.double()
    out = str(tmp_path / "run")
    with pytest.raises(
        RuntimeError,
        match=r"'0.weight' was float32\[8, 4\] on cpu at 0x[0-9a-f]+, "
        r"is float64\[8, 4\] on cpu",
    ) as refused:
        xdl.TraceHook({"output_dir": out}).begin()
    assert "model.to(), .cuda(), .half(), .double()" in str(refused.value)
    assert "xdl.clear() first" in str(refused.value)
    # Registered again after the last cast: traced from where the values are.
    model.float()
    xdl.clear()
    xdl.watch(model, gradients=False, summary=None, digest=False)
    _train(model, out, 3)
    stacked = xdl.open_trace(out).stack("0.weight")
    np.testing.assert_array_equal(stacked[-1], model[0].weight.detach().numpy())
    assert not np.array_equal(stacked[0], stacked[-1])


def test_a_tensor_whose_data_is_replaced_after_registration_is_refused(tmp_path):
    w = torch.zeros(3)
    xdl.trace_variable("w", w)
    w.data = torch.ones(5)  # New storage: the registration still reads the old zeros.
    with pytest.raises(RuntimeError, match=r"'w' was float32\[3\] on cpu .*, is float32\[5\]"):
        xdl.TraceHook({"output_dir": str(tmp_path / "run")}).begin()


@pytest.mark.parametrize("summary", [None, "stats"])
def test_a_parameter_given_new_storage_while_tracing_is_read_where_it_lies_now(tmp_path, summary):
    """`param.data = ...` mid-run (weights loaded, averaged or pruned by reassignment): the
    parameter is traced from its new memory at once; before, every later record held the old
    storage's frozen values, silently."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    xdl.watch(model, gradients=False, summary=summary, digest=False)
    out = str(tmp_path / "run")
    held = []
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for step in range(5):
            if step in (2, 4):
                model.weight.data = torch.full((2, 4), 10.0 * step)  # New storage, same kind.
            with torch.no_grad():
                model.weight.add_(1.0)
            hook.step()
            held.append(model.weight.detach().clone())
    for record, weight in zip(xdl.open_trace(out).records(), held):
        if summary is None:
            np.testing.assert_array_equal(record["weight"], weight.numpy())
        else:
            assert record.summary("weight").mean == pytest.approx(float(weight.mean()))


@pytest.mark.parametrize("on_error", ["warn", "raise"])
def test_a_model_cast_while_tracing_writes_its_columns_empty_said_once_never_stale(
    tmp_path, on_error
):
    """model.double() mid-run: float64 memory no float32 column can be read from. Its columns are
    empty from that step on (said once, naming the key; under "raise" the step raises), the
    other keys are written; before, the old float32 storage was traced as today's values."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    xdl.watch(model, gradients=False, summary=None, digest=False)
    xdl.trace_value("loss")
    out = str(tmp_path / "run")
    config = {"output_dir": out, "on_error": on_error, "fsync": False}
    raised = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with xdl.TraceHook(config) as hook:
            for step in range(4):
                if step == 2:
                    model.double()
                try:
                    hook.step(values={"loss": float(step)})
                except xdl.errors.FailedPreconditionError as error:
                    raised.append((step, str(error)))
    records = list(xdl.open_trace(out).records())
    assert [r["loss"].item() for r in records] == (
        [0, 1, 2, 3] if on_error == "warn" else [0, 1, 3]
    )
    for record in records:
        assert record["weight"].size == (8 if record.gstep < 2 else 0)
    if on_error == "raise":
        # The step that found them raised; later steps write the columns empty without raising.
        ((step, message),) = raised
        assert step == 2
    else:
        (message,) = [str(w.message) for w in said if "tracing failed" in str(w.message)]
        assert hook.stats()["column_errors"] == 1
    assert "'weight' (was float32[2, 4] on cpu" in message and "is float64[2, 4] on cpu" in message
    assert "'bias' (was float32[2] on cpu" in message


def test_a_parameter_without_a_gradient_at_a_step_leaves_its_columns_empty_not_the_record(tmp_path):
    """A branch the step did not take has no gradient under zero_grad(set_to_none=True) (torch
    2's default): its gradient's stats count 0 and digest 0 at that step, said once for the model;
    every record is written (before: every step failed, 0 records)."""

    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x, step):
            return self.head(self.a(x) if step % 2 == 0 else self.b(x))

    torch.manual_seed(0)
    model = Branches()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xdl.watch(model)
    out = str(tmp_path / "run")
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with pytest.warns(RuntimeWarning, match=r"'b.weight'.grad is None") as said:
        with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
            for step in range(4):
                opt.zero_grad(set_to_none=True)
                ((model(x, step) - y) ** 2).mean().backward()
                hook.step()
                opt.step()
    (warning,) = [w for w in said if "grad is None" in str(w.message)]  # Once for the model.
    assert warning.filename == __file__  # At the user's hook.step(), not inside xdl_trace.
    records = list(xdl.open_trace(out).records())
    assert len(records) == 4
    for step, record in enumerate(records):
        unused, used = ("b", "a") if step % 2 == 0 else ("a", "b")
        assert record.summary(f"gradient/{unused}.weight").count == 0
        assert record.summary(f"digest/gradient/{unused}.weight") == 0
        assert record.summary(f"gradient/{used}.weight").count == 16
        assert record.summary("gradient/head.weight").count == 4


class OptimizedModule(torch.nn.Module):
    """What torch.compile returns (torch._dynamo.eval_frame.OptimizedModule, torch >= 2.0; this
    machine's torch 1.13 has no compile): the model under ``_orig_mod``, run through it."""

    def __init__(self, model):
        super().__init__()
        self._orig_mod = model

    def forward(self, *args):
        return self._orig_mod(*args)


@contextlib.contextmanager
def _wrapped(wrapper, model, tmp_path):
    if wrapper == "DistributedDataParallel":
        import torch.distributed as dist

        store = f"file://{tmp_path / 'store'}"
        dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
        try:
            yield torch.nn.parallel.DistributedDataParallel(model)
        finally:
            dist.destroy_process_group()
    elif wrapper == "DataParallel":
        yield torch.nn.DataParallel(model)  # On CPU: runs the model itself.
    else:
        yield OptimizedModule(model)


@pytest.mark.parametrize("wrapper", ["DistributedDataParallel", "DataParallel", "compile"])
def test_a_wrapped_model_is_watched_under_its_own_names_and_diffs_against_the_plain_run(
    tmp_path, wrapper
):
    """DDP's "module." and torch.compile's "_orig_mod." prefixes made every key of a wrapped run
    differ from the plain run's: `diff` of single-process against DDP named no common key."""
    plain = _model()
    keys = xdl.watch(plain, activations=True)
    _train(plain, str(tmp_path / "plain"), 4)
    xdl.clear()
    with _wrapped(wrapper, _model(), tmp_path) as model:
        assert xdl.watch(model, activations=True) == keys
        assert not any(k.startswith(("module.", "_orig_mod.")) for k in keys)
        names = [n for n, _ in plain.named_parameters()]
        assert xdl.trace_collection(model, scope="collection") == names
        _train(model, str(tmp_path / "wrapped"), 4)
    result = xdl.diff(str(tmp_path / "plain"), str(tmp_path / "wrapped"))
    assert result.identical and not result.only_a and not result.only_b
    assert len(result.keys) == len(keys)


def test_a_poisoned_batchnorm_running_statistic_is_found_though_training_stays_finite(tmp_path):
    """An evaluation batch with an Inf, run in train mode by mistake, poisons BatchNorm's running
    variance: training goes on finite (train mode normalizes with the batch's own statistics),
    and only eval collapses. watch traces the running statistics (floating-point state buffers,
    state_dict names; not the integer num_batches_tracked), so find-nan names the buffer and
    the step (Inf in the mean, NaN in the variance); parameters, gradients and the loss are
    clean."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    keys = xdl.watch(model)
    assert "1.running_mean" in keys and "1.running_var" in keys
    assert "1.num_batches_tracked" not in keys
    out = str(tmp_path / "run")
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    losses = []
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for step in range(8):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if step == 4:
                with torch.no_grad():  # "Validation", in train mode, on a corrupt batch.
                    bad = torch.randn(16, 4)
                    bad[0, 0] = float("inf")
                    model(bad)
            hook.step()
    assert all(np.isfinite(losses))
    found = xdl.find_nan(out)
    assert [(f["key"], f["gstep"]) for f in found] == [("1.running_mean", 4), ("1.running_var", 4)]
    trace = xdl.open_trace(out)
    assert trace.schema()["1.running_var"].source == "tensor"  # Per rank: diff --ranks skips it.
    assert xdl.open_trace(out).stack("1.running_mean").shape == (8, len(STATS))


class _Frozen(torch.nn.Module):
    """torchvision.ops.FrozenBatchNorm2d's state (statistics as constant buffers) and the PyTorch
    transformer tutorial's PositionalEncoding table (a persistent constant buffer)."""

    def __init__(self, n):
        super().__init__()
        self.register_buffer("running_var", torch.ones(n))
        self.register_buffer("pe", torch.arange(float(n)))
        self.register_buffer("cache", torch.zeros(n), persistent=False)

    def forward(self, x):
        return x * self.running_var.rsqrt() + self.pe


@pytest.mark.parametrize("buffers", [True, "all", False])
def test_buffers_default_to_running_statistics_so_constants_raise_no_alert(tmp_path, buffers):
    """The default traces what should move (normalization layers' running statistics), not a
    frozen layer's statistics or a positional-encoding table, which would each raise "never
    changes" in every report; "all" takes every floating-point persistent buffer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), _Frozen(4))
    keys = xdl.watch(model, gradients=False, buffers=buffers)
    expected = {
        True: ["1.running_mean", "1.running_var"],
        "all": ["1.running_mean", "1.running_var", "2.running_var", "2.pe"],
        False: [],
    }[buffers]
    assert keys == [n for n, _ in model.named_parameters()] + expected
    out = str(tmp_path / "run")
    with xdl.TraceHook({"output_dir": out, "on_error": "raise", "fsync": False}) as hook:
        for _ in range(3):
            model(torch.randn(8, 4))
            hook.step()
    alerts = report.build_report(out)["alerts"]
    never = {a["key"] for a in alerts if a["kind"] == "never changes"} & set(expected)
    assert never == ({"2.running_var", "2.pe"} if buffers == "all" else set())  # No step: the
    # parameters never change either, and say so.
    with pytest.raises(ValueError, match="buffers="):
        xdl.watch(model, buffers="some", scope="bad")


def test_a_frozen_layer_is_one_info_alert_not_a_never_changes_row_per_parameter(tmp_path):
    """Fine-tuning with a frozen backbone: watch traces no gradient of a requires_grad=False
    parameter, which tells the report it is frozen; before, each raised "never changes" (a
    ResNet backbone: one row per parameter). A parameter traced without gradients at all
    (gradients=False) still raises it: nothing says it is frozen rather than stuck."""
    torch.manual_seed(0)
    model = _model()
    for p in model[0].parameters():
        p.requires_grad_(False)
    xdl.watch(model)
    out = str(tmp_path / "run")
    _train(model, out, 5)
    alerts = report.build_report(out)["alerts"]
    assert [a["key"] for a in alerts if a["kind"] == "never changes"] == []
    (frozen,) = [a for a in alerts if a["kind"] == "frozen"]
    assert frozen["severity"] == "info" and "2 parameter(s) never change" in frozen["detail"]
    assert frozen["detail"].endswith(": 0.weight, 0.bias")
    xdl.clear()
    plain = str(tmp_path / "no_gradients")
    xdl.watch(model, gradients=False)
    _train(model, plain, 5)
    never = [a["key"] for a in report.build_report(plain)["alerts"] if a["kind"] == "never changes"]
    assert never == ["0.weight", "0.bias"]
