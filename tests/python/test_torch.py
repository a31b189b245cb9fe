"""PyTorch: tensors and Parameters in place, .grad after backward, Modules, dtypes, lazy import."""

import subprocess
import sys

import numpy as np
import pytest

import xdl_trace as xdl

from conftest import REPO

torch = pytest.importorskip("torch")


def test_numpy_users_never_import_torch():
    script = f"""
import sys
sys.path.insert(0, {REPO!r})
import numpy as np, xdl_trace as xdl
xdl.trace_tensor("x", np.zeros(2))
xdl.trace_callback("c", lambda: 1.0)
assert "torch" not in sys.modules, "xdl_trace imported torch"
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_module_parameters_gradients_loss_and_activation(cfg, read_trace):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    names = xdl.trace_collection(model)
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name in names:
        xdl.trace_gradient(name)
    state = {}
    model[1].register_forward_hook(lambda m, i, o: state.__setitem__("act", o))
    xdl.trace_callback("activation", lambda: state["act"])
    xdl.trace_callback("loss", lambda: state["loss"])
    x = torch.randn(8, 4)
    y = torch.randn(8, 1)
    snapshots = []
    with xdl.TraceHook(cfg) as hook:
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            state["loss"] = loss.detach()
            snapshots.append(
                (model[0].weight.detach().clone(), model[0].weight.grad.clone(), loss.item())
            )
            hook.step()
            opt.step()  # In place: the registered memory sees the update.
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.keys == names + ["gradient/" + n for n in names] + ["activation", "loss"]
    for i, (weight, grad, loss) in enumerate(snapshots):
        cols = trace.records[i][3]
        np.testing.assert_array_equal(cols["0.weight"], weight.numpy())
        np.testing.assert_array_equal(cols["gradient/0.weight"], grad.numpy())
        assert float(cols["loss"]) == pytest.approx(loss)
        assert cols["activation"].shape == (8, 3)
    # Parameters were registered once, in place (no provider): the last record shows the
    # values as of that step, not the final values.
    assert not np.array_equal(trace.records[2][3]["0.weight"], model[0].weight.detach().numpy())


def test_grad_none_is_an_empty_column_said_once_naming_the_key(cfg, read_trace):
    """No gradient at a step (torch >= 2's zero_grad sets .grad to None; a parameter the loss
    did not use keeps it so): the column is empty there and the record is written (before: an
    error failing the step, so a model with one unused parameter traced nothing)."""
    p = torch.nn.Parameter(torch.zeros(2))
    xdl.trace_variable("p", p)
    xdl.trace_gradient("p")
    with pytest.warns(RuntimeWarning, match=r"gradient 'gradient/p': 'p'.grad is None") as said:
        with xdl.TraceHook(cfg) as hook:
            hook.step()
            p.grad = torch.ones(2)
            hook.step()
            p.grad = None
            hook.step()
    assert sum("grad is None" in str(w.message) for w in said) == 1
    (trace,) = read_trace(cfg["output_dir"])
    assert [c.tolist() for c in trace.column("gradient/p")] == [[], [1.0, 1.0], []]


@pytest.mark.parametrize(
    "dtype,code,np_dtype",
    [
        (torch.float32, 4, np.float32),
        (torch.float64, 5, np.float64),
        (torch.float16, 12, np.float16),
        (torch.int8, 0, np.int8),
        (torch.int16, 1, np.int16),
        (torch.int32, 2, np.int32),
        (torch.int64, 3, np.int64),
        (torch.uint8, 8, np.uint8),
        (torch.bool, 6, np.bool_),
    ],
)
def test_torch_dtypes(cfg, read_trace, dtype, code, np_dtype):
    t = torch.arange(6).reshape(2, 3).to(dtype)
    xdl.trace_tensor("t", t)
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.raw[0].column[0].dtype == code
    np.testing.assert_array_equal(trace.column("t")[0], t.numpy().astype(np_dtype))


def test_bfloat16_keeps_its_bits(cfg, read_trace):
    t = torch.tensor([1.0, -2.5, 3.0e10], dtype=torch.bfloat16)
    xdl.trace_tensor("b", t)
    xdl.trace_callback("bc", lambda: t * 2)
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.raw[0].column[0].dtype == 13
    bits = trace.column("b")[0]
    np.testing.assert_array_equal(bits, t.view(torch.int16).numpy().view(np.uint16))
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(widened, t.float().numpy())
    assert trace.raw[0].column[1].dtype == 13


def test_non_contiguous_and_complex_tensors(cfg, read_trace):
    base = torch.arange(12.0).reshape(3, 4)
    xdl.trace_tensor("t", base.t())
    with pytest.raises(TypeError, match="'c'.*complex"):
        xdl.trace_tensor("c", torch.zeros(2, dtype=torch.complex64))
    with xdl.TraceHook(cfg) as hook:
        base.add_(1)
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    np.testing.assert_array_equal(trace.column("t")[0], base.t().numpy())


def test_send_gradient_accepts_tensors(cfg, read_trace):
    xdl.trace_gradient("w")
    with xdl.TraceHook(cfg) as hook:
        xdl.send_gradient("w", torch.ones(3))
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    np.testing.assert_array_equal(trace.column("gradient/w")[0], [1.0, 1.0, 1.0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_are_copied_to_host(cfg, read_trace):
    t = torch.arange(4.0, device="cuda")
    xdl.trace_tensor("t", t)
    with xdl.TraceHook(cfg) as hook:
        t.add_(1)
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    np.testing.assert_array_equal(trace.column("t")[0], [1.0, 2.0, 3.0, 4.0])


@pytest.mark.parametrize("summary", ["stats", None])
def test_a_sparse_gradient_is_traced_as_the_dense_tensor_it_stands_for(cfg, read_trace, summary):
    """nn.Embedding(sparse=True) (recommendation models) has a sparse COO gradient: traced as
    its dense values (before: "can't convert Sparse layout tensor to numpy" failed every step,
    naming no key, and nothing was written)."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    xdl.watch(emb, summary=summary, digest=False)
    dense = []
    with xdl.TraceHook(cfg) as hook:
        for step in range(2):
            emb.zero_grad()
            emb(torch.tensor([step, 7, 7])).sum().backward()
            assert emb.weight.grad.is_sparse
            dense.append(emb.weight.grad.to_dense().numpy())
            hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    assert len(trace.records) == 2
    for expected, column in zip(dense, trace.column("gradient/weight")):
        if summary is None:
            np.testing.assert_array_equal(column, expected)
        else:
            assert column[0] == 30 and column[5] == pytest.approx(np.linalg.norm(expected))
