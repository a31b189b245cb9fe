"""Every API function, end to end: register, trace steps, read the files back with protobuf."""

import numpy as np
import pytest

import xdl_trace as xdl


def run(cfg, steps, body=None, **hook_kwargs):
    with xdl.TraceHook(cfg, **hook_kwargs) as hook:
        for step in range(steps):
            if body is not None:
                body(step)
            hook.step()
    return hook


def test_trace_tensor_reads_registered_memory_each_step(cfg, read_trace):
    w = np.zeros((2, 3), dtype=np.float32)
    xdl.trace_tensor("w", w)

    def body(step):
        w[...] = step  # In-place update: the registered memory changes.

    run(cfg, 4, body)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.keys == ["w"]
    assert trace.gsteps() == [0, 1, 2, 3]
    for step, col in enumerate(trace.column("w")):
        assert col.shape == (2, 3) and col.dtype == np.float32
        np.testing.assert_array_equal(col, np.full((2, 3), step, np.float32))
    assert trace.raw[0].column[0].dtype == 4  # Float


def test_trace_variable_kinds(cfg, read_trace):
    class Var:
        def __init__(self, name, value):
            self.name = name
            self.value = value

    a = np.arange(4, dtype=np.int64)
    v = Var("v", np.ones(2, np.float64))
    xdl.trace_variable("a", a)
    xdl.trace_variable("v", v)

    def body(step):
        v.value = np.full(2, step, np.float64)  # Rebinding .value is seen: read each step.

    run(cfg, 3, body)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.keys == ["a", "v"]
    np.testing.assert_array_equal(trace.column("a")[2], np.arange(4))
    np.testing.assert_array_equal(trace.column("v")[2], [2.0, 2.0])


def test_trace_gradient_with_send_gradient(cfg, read_trace):
    w = np.ones(3, np.float32)
    b = np.ones(1, np.float32)
    xdl.trace_variable("w", w)
    xdl.trace_variable("b", b)
    xdl.trace_gradient("w")
    xdl.trace_gradient("b", key="gb_stats", summary="stats")

    def body(step):
        xdl.send_gradient("w", np.full(3, step + 0.5, np.float32))
        xdl.send_gradient("b", np.full(1, step, np.float32))

    run(cfg, 3, body)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.keys == ["w", "b", "gradient/w", "gb_stats"]
    np.testing.assert_array_equal(trace.column("gradient/w")[1], [1.5, 1.5, 1.5])
    stats = trace.column("gb_stats")[2]
    assert stats.shape == (8,) and stats[0] == 1 and stats[1] == 2.0


def test_one_send_serves_every_entry_on_that_gradient(cfg, read_trace):
    w = np.ones(3, np.float32)
    xdl.trace_variable("w", w)
    xdl.trace_gradient("w")
    xdl.trace_gradient("w", key="gradient_stats/w", summary="stats")

    def body(step):
        xdl.send_gradient("w", np.array([step, 2.0, 4.0], np.float32))

    run(cfg, 2, body)
    (trace,) = read_trace(cfg["output_dir"])
    np.testing.assert_array_equal(trace.column("gradient/w")[1], [1.0, 2.0, 4.0])
    stats = trace.column("gradient_stats/w")[1]
    assert stats[0] == 3 and stats[1] == 1.0 and stats[2] == 4.0  # count, min, max


def test_untraced_steps_drop_pending_gradients(cfg, read_trace):
    xdl.trace_gradient("w")
    with xdl.TraceHook(cfg, filter=xdl.Steps(1)) as hook:
        xdl.send_gradient("w", np.zeros(1))
        hook.step()  # Step 0 not traced: its gradient is dropped...
        with pytest.raises(xdl.errors.FailedPreconditionError, match="gradient/w"):
            hook.step()  # ...so step 1 has none.


def test_missing_gradient_is_an_error_naming_the_key(cfg):
    xdl.trace_gradient("w")
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(xdl.errors.TraceError, match="w"):
            hook.step()


def test_trace_callback_called_each_traced_step(cfg, read_trace):
    calls = []

    def loss():
        calls.append(1)
        return 0.25 * len(calls)

    xdl.trace_callback("loss", loss)
    run(cfg, 6, filter=xdl.Every(2))
    (trace,) = read_trace(cfg["output_dir"])
    assert len(calls) == 3  # Only traced steps call it.
    assert trace.gsteps() == [0, 2, 4]
    assert [float(c) for c in trace.column("loss")] == [0.25, 0.5, 0.75]
    assert trace.column("loss")[0].shape == ()


def test_trace_once_then_empty_float32_columns(cfg, read_trace):
    xdl.trace_once("config", np.array([7, 8, 9], np.int32))
    xdl.trace_tensor("x", np.zeros(1))
    run(cfg, 3)
    (trace,) = read_trace(cfg["output_dir"])
    cols = trace.column("config")
    np.testing.assert_array_equal(cols[0], [7, 8, 9])
    for raw in trace.raw[1:]:
        assert raw.column[0].dtype == 4 and list(raw.column[0].shape) == [0]


def test_trace_once_first_traced_step_may_be_any_step(cfg, read_trace):
    xdl.trace_once("c", lambda: np.array([3.0]))
    run(cfg, 10, filter=xdl.Steps(5, 7))
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [5, 7]
    np.testing.assert_array_equal(trace.column("c")[0], [3.0])
    assert trace.column("c")[1].size == 0


def test_trace_collection_dict_and_named_objects(cfg, read_trace):
    class Var:
        def __init__(self, name, value):
            self.name = name
            self.value = value

    names = xdl.trace_collection({"a": np.zeros(2), "b": np.ones(3)}, scope="d")
    assert names == ["a", "b"]
    xdl.trace_collection([Var("c", np.full(1, 5.0))], scope="o")
    run(cfg, 1, scope=["d", "o"])
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.keys == ["d/a", "d/b", "o/c"]
    np.testing.assert_array_equal(trace.column("o/c")[0], [5.0])


def test_trace_collection_rejects_objects_without_name():
    with pytest.raises(TypeError, match="no .name"):
        xdl.trace_collection([np.zeros(2)])


def test_scopes_prefix_keys_and_hooks_trace_their_scopes(cfg, read_trace, tmp_path):
    xdl.trace_tensor("x", np.zeros(1))
    xdl.trace_tensor("x", np.ones(1), scope="eval")
    assert xdl.keys() == ["x"]
    assert xdl.keys("eval") == ["eval/x"]
    run(cfg, 1)
    run(dict(cfg, output_dir=str(tmp_path / "ev")), 1, scope="eval", is_training=False)
    (train,) = read_trace(cfg["output_dir"])
    (test,) = read_trace(str(tmp_path / "ev"), prefix="test")
    assert train.keys == ["x"]
    assert test.keys == ["eval/x"]


def test_clear_scope_and_all():
    xdl.trace_tensor("x", np.zeros(1))
    xdl.trace_tensor("y", np.zeros(1), scope="s")
    xdl.clear("s")
    assert xdl.keys("s") == [] and xdl.keys() == ["x"]
    xdl.trace_tensor("y", np.zeros(1), scope="s")  # Re-registering after clear is fine.
    xdl.clear()
    assert xdl.keys() == [] and xdl.keys("s") == []


def test_summaries_on_api_functions(cfg, read_trace):
    x = np.arange(10, dtype=np.float32)
    xdl.trace_tensor("st", x, summary="stats")
    xdl.trace_tensor("fn", x, summary=lambda a: np.array([a.max() - a.min()]))
    run(cfg, 1)
    (trace,) = read_trace(cfg["output_dir"])
    stats = trace.column("st")[0]
    assert stats.dtype == np.float64 and stats.shape == (8,)
    assert stats[0] == 10 and stats[1] == 0 and stats[2] == 9
    np.testing.assert_array_equal(trace.column("fn")[0], [9.0])


def test_array_likes_and_scalars(cfg, read_trace):
    lst = [1.0, 2.0]
    xdl.trace_tensor("lst", lst)
    xdl.trace_tensor("lr", 0.5)
    xdl.trace_tensor("flag", np.bool_(True))

    def body(step):
        lst[0] = 10.0 + step  # Lists are converted at each traced step.

    run(cfg, 2, body)
    (trace,) = read_trace(cfg["output_dir"])
    np.testing.assert_array_equal(trace.column("lst")[1], [11.0, 2.0])
    assert float(trace.column("lr")[1]) == 0.5
    assert trace.raw[0].column[2].dtype == 6  # Bool


@pytest.mark.parametrize(
    "dtype,code",
    [
        (np.int8, 0),
        (np.int16, 1),
        (np.int32, 2),
        (np.int64, 3),
        (np.float32, 4),
        (np.float64, 5),
        (np.bool_, 6),
        (np.uint8, 8),
        (np.uint16, 9),
        (np.uint32, 10),
        (np.uint64, 11),
        (np.float16, 12),
    ],
)
def test_every_numpy_dtype_round_trips(cfg, read_trace, dtype, code):
    x = (np.arange(6) % 2).astype(dtype).reshape(3, 2)
    xdl.trace_tensor("x", x)
    run(cfg, 1)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.raw[0].column[0].dtype == code
    np.testing.assert_array_equal(trace.column("x")[0], x)


def test_duplicate_key_names_the_key():
    xdl.trace_tensor("dup", np.zeros(1))
    with pytest.raises(ValueError, match="'dup'"):
        xdl.trace_tensor("dup", np.zeros(2))
    xdl.trace_tensor("dup", np.zeros(1), scope="other")  # Same key, other scope: fine.


def test_registrations_after_begin_do_not_change_the_header(cfg, read_trace):
    xdl.trace_tensor("a", np.zeros(1))
    with xdl.TraceHook(cfg) as hook:
        with pytest.warns(RuntimeWarning, match="'b' was registered after TraceHook.begin()"):
            xdl.trace_tensor("b", np.zeros(1))
        hook.step()
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.keys == ["a"]
