"""Columns that describe themselves: the Header's column descriptors through the reader (schema
kinds, Record.summary, Trace.stack_summary checked against numpy on the source tensors),
bfloat16 widening, XDL's files reading as before, and `dump` naming summary fields."""

import os
import subprocess
import sys

import numpy as np
import pytest

import trace_file_maker as tm
import xdl_files as xf
import xdl_trace as xdl
from conftest import REPO
from xdl_trace import _core, errors
from xdl_trace._proto import xdl_trace_pb2
from xdl_trace.read.reader import STATS_FIELDS, Histogram, Stats, open_trace

BINS = xdl._core.DEFAULT_HISTOGRAM_BINS


def numpy_stats(x):
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    finite = x[np.isfinite(x)]
    return Stats(
        count=x.size,
        min=finite.min(),
        max=finite.max(),
        mean=finite.mean(),
        std=finite.std(),
        l2=np.sqrt((finite * finite).sum()),
        nan=int(np.isnan(x).sum()),
        inf=int(np.isinf(x).sum()),
    )


def assert_stats_equal(got, expected):
    assert isinstance(got, Stats)
    assert (got.count, got.nan, got.inf) == (expected.count, expected.nan, expected.inf)
    assert isinstance(got.count, int) and isinstance(got.nan, int)
    for field in ("min", "max", "mean", "std", "l2"):
        assert getattr(got, field) == pytest.approx(getattr(expected, field), rel=1e-9), field


def user_sum(array):
    values = array.astype(np.float64)
    return np.float64(values[np.isfinite(values)].sum())


class Scale:
    def __call__(self, array):
        return array * 2


@pytest.fixture
def traced(cfg):
    """Four steps of a run with value, stats, histogram, user-summary, once, callback and
    gradient columns; returns (trace dir, the source tensor at each step, its gradients)."""
    rng = np.random.default_rng(7)
    w = np.zeros((4, 5), dtype=np.float32)
    xdl.trace_variable("w", w)
    xdl.trace_tensor("w_stats", w, summary="stats")
    xdl.trace_tensor("w_hist", w, summary="histogram")
    xdl.trace_tensor("w_sum", w, summary=user_sum)
    xdl.trace_tensor("w_scaled", w, summary=Scale())
    xdl.trace_once("labels", np.arange(3, dtype=np.int64))
    xdl.trace_callback("loss", lambda: np.float32(w[0, 1]))
    xdl.trace_gradient("w", summary="stats")
    # A once-value with a stats summary (the core registry: trace_once takes no summary):
    # empty columns after the first record.
    labels = np.array([1.0, 5.0, 9.0])
    xdl.api.registry().register_array(
        "", "labels_stats", xdl._core.EntryKind.ONCE, labels, -1, "stats"
    )
    sources, grads = [], []
    with xdl.TraceHook(cfg) as hook:
        for step in range(4):
            w[...] = rng.normal(step, 1 + step, size=w.shape)
            if step == 2:
                w[0, 0], w[1, 1], w[2, 2] = np.nan, np.inf, -np.inf
            sources.append(w.copy())
            grads.append(rng.normal(size=(4, 5)).astype(np.float32))
            xdl.send_gradient("w", grads[-1])
            hook.step()
    return cfg["output_dir"], sources, grads


def test_schema_reports_each_column_kind_and_source(traced):
    directory, _, _ = traced
    schema = open_trace(directory).schema()
    kinds = {key: (s.kind, s.source) for key, s in schema.items()}
    assert kinds == {
        "w": ("value", "variable"),
        "w_stats": ("stats", "tensor"),
        "w_hist": ("histogram", "tensor"),
        "w_sum": ("user_summary", "tensor"),
        "w_scaled": ("user_summary", "tensor"),
        "labels": ("value", "once"),
        "loss": ("value", "callback"),
        "gradient/w": ("stats", "gradient"),
        "labels_stats": ("stats", "once"),
    }
    # Still the (dtype, shape) tuple of the first record, as before descriptors.
    assert schema["w"] == ("float32", (4, 5))
    dtype, shape = schema["w_stats"]
    assert (dtype, shape) == ("float64", (8,))
    assert schema["w_hist"] == ("float64", (2 + 2 * BINS,))
    hist = schema["w_hist"].descriptor
    assert hist["histogram_bins"] == BINS and hist["layout_version"] == 1
    assert schema["w_stats"].descriptor["layout_version"] == 1
    assert schema["w"].descriptor["layout_version"] == 0
    # The tensor a summary is computed from: known at Start for registered memory only.
    assert schema["w_stats"].descriptor["input_dtype"] == "float32"
    assert schema["w_stats"].descriptor["input_shape"] == (4, 5)
    assert schema["loss"].descriptor["input_dtype"] is None
    assert schema["gradient/w"].descriptor["input_shape"] is None
    # A user summary is named by its callable.
    assert schema["w_sum"].descriptor["summary_name"] == f"{__name__}.user_sum"
    assert schema["w_scaled"].descriptor["summary_name"] == f"{__name__}.Scale"


def test_record_summary_equals_numpy_on_the_source_tensors(traced):
    directory, sources, grads = traced
    records = list(open_trace(directory).records())
    assert len(records) == 4
    for step, (record, source) in enumerate(zip(records, sources)):
        assert_stats_equal(record.summary("w_stats"), numpy_stats(source))
        edges, counts = record.summary("w_hist")
        finite = source[np.isfinite(source)].astype(np.float64)
        np_counts, np_edges = np.histogram(finite, bins=BINS)
        np.testing.assert_allclose(edges, np_edges, rtol=1e-12)
        np.testing.assert_array_equal(counts, np_counts)
        assert counts.dtype == np.int64 and counts.sum() == finite.size
        # A user summary is its own array.
        assert record.summary("w_sum") == pytest.approx(user_sum(source))
        np.testing.assert_array_equal(record.summary("w_scaled"), source * 2)
        assert_stats_equal(record.summary("gradient/w"), numpy_stats(grads[step]))
        if step == 0:
            assert_stats_equal(record.summary("labels_stats"), numpy_stats([1.0, 5.0, 9.0]))
        else:
            assert record.summary("labels_stats") is None  # Once: an empty column.
        # The raw column stays XDL's float64[8].
        raw = record.columns["w_stats"]
        assert raw.dtype == np.float64 and raw.shape == (8,)
        assert tuple(raw[[0, 6, 7]]) == tuple(
            float(v) for v in record.summary("w_stats")[0:1] + record.summary("w_stats")[6:]
        )
    assert records[2].summary("w_stats").nan == 1 and records[2].summary("w_stats").inf == 2


def test_summary_of_a_value_column_is_a_clear_error(traced):
    directory, _, _ = traced
    record = next(iter(open_trace(directory).records()))
    for key in ("w", "labels", "loss"):
        with pytest.raises(errors.InvalidArgumentError) as info:
            record.summary(key)
        assert isinstance(info.value, ValueError)
        message = str(info.value)
        assert f"'{key}'" in message and "not a summary" in message
        assert record.path in message
    with pytest.raises(KeyError):
        record.summary("nope")


def test_stack_summary_names_fields_over_steps(traced):
    directory, sources, _ = traced
    trace = open_trace(directory)
    gsteps, stats = trace.stack_summary("w_stats")
    assert list(gsteps) == [0, 1, 2, 3]
    assert isinstance(stats, Stats) and stats.max.shape == (4,)
    for step, source in enumerate(sources):
        expected = numpy_stats(source)
        assert stats.count[step] == expected.count and stats.nan[step] == expected.nan
        assert stats.max[step] == pytest.approx(expected.max)
        assert stats.std[step] == pytest.approx(expected.std)
    gsteps, hist = trace.stack_summary("w_hist", gsteps=(1, 2))
    assert isinstance(hist, Histogram) and list(gsteps) == [1, 2]
    assert hist.edges.shape == (2, BINS + 1) and hist.counts.shape == (2, BINS)
    np.testing.assert_array_equal(hist.counts[0], np.histogram(sources[1], bins=BINS)[0])
    gsteps, once = trace.stack_summary("labels_stats")
    assert list(gsteps) == [0] and once.max.tolist() == [9.0]  # Empty columns left out.
    with pytest.raises(errors.InvalidArgumentError, match="'w' is a value"):
        trace.stack_summary("w")


def test_a_newer_summary_layout_is_refused_by_name(tmp_path):
    header = xdl_trace_pb2.Header(key=["s"])
    header.column.add(content=xdl_trace_pb2.ColumnDescriptor.STATS, layout_version=2)
    path = str(tmp_path / "train.trace.0.1")
    with open(path, "wb") as f:
        f.write(tm.frame(header.SerializeToString()))
        f.write(tm.frame(tm.record(1, [np.arange(8.0)]).SerializeToString()))
    (record,) = open_trace(path).records()
    assert record.columns["s"].shape == (8,)  # Still readable raw.
    with pytest.raises(errors.InvalidArgumentError, match="layout version 2 .* knows \\(1\\)"):
        record.summary("s")


def test_bfloat16_is_widened_unless_raw(tmp_path):
    bits = np.array([[0x3F80, 0xC000], [0x7F80, 0x4049]], dtype=np.uint16)  # 1, -2, inf, ~3.14
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    path = str(tmp_path / "train.trace.0.1")
    recs = [tm.record(g, [tm.column(bits, wire_dtype=tm.BFLOAT16)]) for g in range(3)]
    tm.write_file(path, ["b"], recs)

    trace = open_trace(path)
    assert trace.schema()["b"] == ("bfloat16", (2, 2))  # The wire dtype.
    record = next(iter(trace.records()))
    assert record.columns["b"].dtype == np.float32
    np.testing.assert_array_equal(record.columns["b"], widened)
    assert not record.columns["b"].flags.writeable
    stacked = trace.stack("b")
    assert stacked.dtype == np.float32 and stacked.shape == (3, 2, 2)
    np.testing.assert_array_equal(stacked[2], widened)

    for raw_trace, raw in ((open_trace(path, raw=True), None), (trace, True)):
        record = next(iter(raw_trace.records(raw=raw)))
        assert record.columns["b"].dtype == np.uint16
        np.testing.assert_array_equal(record.columns["b"], bits)
        mapping = raw_trace.files[0].open().mapping
        assert np.shares_memory(record.columns["b"], mapping)  # Zero-copy, as before.
        stacked = raw_trace.stack("b", raw=raw)
        assert stacked.dtype == np.uint16
        np.testing.assert_array_equal(stacked[0], bits)


def test_bfloat16_traced_from_torch_is_widened(cfg):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    t = torch.tensor([1.0, -2.5, 3.0e10], dtype=torch.bfloat16)
    xdl.trace_tensor("b", t)
    xdl.trace_tensor("b_stats", t, summary="stats")
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    trace = open_trace(cfg["output_dir"])
    assert trace.schema()["b_stats"].descriptor["input_dtype"] == "bfloat16"
    (record,) = trace.records()
    np.testing.assert_array_equal(record.columns["b"], t.float().numpy())
    assert_stats_equal(record.summary("b_stats"), numpy_stats(t.float().numpy()))


def test_an_xdl_file_reads_as_before_without_descriptors(tmp_path):
    keys = ["w", "loss"]
    xf.write_xdl_run(str(tmp_path), keys, xf.xdl_steps(3))
    trace = open_trace(str(tmp_path))
    assert trace.files[0].columns is None
    schema = trace.schema()
    assert all(s.kind is None and s.descriptor is None for s in schema.values())
    assert schema["w"] == trace.schema()["w"][:2]  # Plain (dtype, shape).
    records = list(trace.records())
    assert len(records) == 3
    assert records[0].descriptors is None
    for key in keys:
        assert records[0].columns[key].size > 0
        with pytest.raises(errors.InvalidArgumentError, match="written by XDL"):
            records[0].summary(key)


def test_descriptors_are_ignored_by_a_keys_only_header_reader(traced):
    """An XDL reader knows Header field 1 only; our Header parses with such a schema."""
    directory, _, _ = traced
    path = open_trace(directory).files[0].path
    data = open(path, "rb").read()
    length = int.from_bytes(data[:4], "little")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="xdl_keys_only.proto", package="xdl_only")
    message = proto.message_type.add(name="Header")
    message.field.add(name="key", number=1, type=9, label=3)  # repeated string key = 1
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    factory = message_factory.MessageFactory(pool)
    header_class = factory.GetPrototype(pool.FindMessageTypeByName("xdl_only.Header"))
    header = header_class.FromString(data[4 : 4 + length])
    assert list(header.key) == open_trace(directory).keys


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "xdl_trace", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_dump_prints_summaries_by_name_not_count_as_max(cfg):
    x = np.arange(20, dtype=np.float32) / 4  # max 4.75, count 20
    xdl.trace_tensor("x", x, summary="stats")
    xdl.trace_tensor("h", x, summary="histogram")
    xdl.trace_tensor("d", x, summary="digest")
    xdl.trace_tensor("v", x)
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    digest = f"digest {_core.digest(x, 4):016x}"  # Its 64 bits, not min/max/mean of two halves.
    for extra in ([], ["--summary"]):
        result = run_cli("dump", cfg["output_dir"], *extra)
        assert result.returncode == 0, result.stderr
        line = next(l for l in result.stdout.splitlines() if l.strip().startswith("x "))
        assert "stats count=20 min=0 max=4.75 mean=2.375" in line
        assert "max=20" not in line
        hist = next(l for l in result.stdout.splitlines() if l.strip().startswith("h "))
        assert f"histogram {BINS} bins over [0, 4.75]" in hist
        assert f"  d float64[2]: {digest}" in result.stdout, result.stdout
    value = next(l for l in result.stdout.splitlines() if l.strip().startswith("v "))
    assert "min=0 max=4.75 mean=2.375" in value


def test_cli_stats_fields_are_the_readers():
    from xdl_trace import cli

    assert cli.STATS_FIELDS == STATS_FIELDS == Stats._fields


def test_read_trace_script_names_summary_fields(cfg):
    """The stand-alone tools/read_trace.py reads the descriptors with the descriptor set beside it."""
    x = np.arange(20, dtype=np.float32) / 4
    xdl.trace_tensor("x", x, summary="stats")
    xdl.trace_tensor("v", np.arange(8, dtype=np.float64))  # A float64[8] value: not stats.
    xdl.trace_tensor("d", x, summary="digest")
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    script = os.path.join(REPO, "xdl_trace", "tools", "read_trace.py")
    result = subprocess.run(
        [sys.executable, script, cfg["output_dir"], "--summary"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("x Double[8]: stats count=20 min=0 max=4.75 mean=2.375" in l for l in lines)
    assert any("v Double[8]: min=0 max=7 mean=3.5" in l for l in lines)
    assert f"  d Double[2]: digest {_core.digest(x, 4):016x}" in lines, lines
