"""Tests of xdl_trace.read.reader on files written with protobuf directly (and by the real tracer when built)."""

import gc
import os
import warnings

import numpy as np
import pytest

import trace_file_maker as tm
from xdl_trace import errors
from xdl_trace.read.reader import TornTailWarning, bfloat16_to_float32, open_trace

KEYS = ["w", "loss"]


def all_records(trace, **kwargs):
    return list(trace.records(**kwargs))


def test_every_dtype_reads_back_as_zero_copy_read_only_views(tmp_path):
    values = [
        np.arange(6, dtype=dt).reshape(2, 3)
        for dt in (
            np.int8,
            np.int16,
            np.int32,
            np.int64,
            np.float32,
            np.float64,
            np.uint8,
            np.uint16,
            np.uint32,
            np.uint64,
            np.float16,
        )
    ]
    values.append(np.array([True, False, True]))
    keys = [f"k{i}:{v.dtype}" for i, v in enumerate(values)]
    byte_col = tm.column(np.arange(4, dtype=np.uint8), wire_dtype=tm.BYTE)
    bf16 = np.array([0x3F80, 0xC000], dtype=np.uint16)  # 1.0, -2.0
    bf16_col = tm.column(bf16, wire_dtype=tm.BFLOAT16)
    rec = tm.record(5, values + [byte_col, bf16_col, np.float32(2.5)])
    path = tmp_path / "train.trace.0.1"
    tm.write_file(str(path), keys + ["byte", "bf16", "scalar"], [rec])

    # raw: bfloat16 as its bits, a view like every other column (by default it is widened to
    # float32, a copy: test_reader_summaries.py).
    trace = open_trace(str(path), raw=True)
    (r,) = all_records(trace)
    gstep, lstep, timestamp, columns = r
    assert (gstep, lstep, timestamp) == (5, 5, 1_700_000_000_005)
    for key, expected in zip(keys, values):
        got = columns[key]
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(columns["byte"], np.arange(4, dtype=np.uint8))
    assert columns["bf16"].dtype == np.uint16
    np.testing.assert_array_equal(bfloat16_to_float32(columns["bf16"]), [1.0, -2.0])
    assert columns["scalar"].shape == () and columns["scalar"] == np.float32(2.5)
    schema = trace.schema()
    assert schema["bf16"] == ("bfloat16", (2,)) and schema["byte"] == ("byte", (4,))
    assert schema["scalar"] == ("float32", ())

    mapping = trace.files[0].open().mapping
    for array in columns.values():
        assert not array.flags.writeable
        assert np.shares_memory(array, mapping)  # A view of the mmap, not a copy.
        with pytest.raises(ValueError):
            array[...] = 0


def test_arrays_keep_the_mapping_alive(tmp_path):
    path = tmp_path / "train.trace.0.1"
    tm.write_file(str(path), KEYS, tm.simple_records(range(3)))
    trace = open_trace(str(path))
    arrays = [r.columns["w"] for r in trace]
    del trace
    gc.collect()
    os.remove(path)  # The mapping outlives the directory entry too.
    for g, a in enumerate(arrays):
        np.testing.assert_array_equal(a, (np.arange(6, dtype=np.float32) + g * 10).reshape(2, 3))


def test_directory_groups_ranks_and_orders_files_by_index(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(0, 4)))
    tm.write_file(f"{d}/train.trace.0.2", KEYS, tm.simple_records(range(4, 8)))
    tm.write_file(f"{d}/train.trace.0.10", KEYS, tm.simple_records(range(8, 10)))
    tm.write_file(f"{d}/train.trace.1.1", KEYS, tm.simple_records(range(0, 10, 3), seed=100))
    tm.write_file(f"{d}/test.trace.0.1", KEYS, tm.simple_records([42]))
    tm.write_file(f"{d}/train.other.0.1", KEYS, tm.simple_records([7]))
    (tmp_path / "train.trace.0.1.meta.tmp").write_bytes(b"junk")

    trace = open_trace(d)
    assert trace.ranks == [0, 1]
    assert trace.keys == KEYS
    assert [os.path.basename(f.path) for f in trace.files] == [
        "train.trace.0.1",
        "train.trace.0.2",
        "train.trace.0.10",
        "train.trace.1.1",
    ]
    assert [r.gstep for r in trace.records(ranks=[0])] == list(range(10))

    merged = [(r.gstep, r.rank) for r in trace]  # Merged across ranks by gstep.
    assert merged == sorted(merged)
    assert len(merged) == 10 + 4

    assert [r.gstep for r in open_trace(d, prefix="test")] == [42]
    assert [r.gstep for r in open_trace(d, name="other")] == [7]
    with pytest.raises(FileNotFoundError, match="train.trace"):
        open_trace(d, name="missing")
    with pytest.raises(FileNotFoundError):
        open_trace(str(tmp_path / "nope"))


def test_select_keys_and_gsteps(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(0, 50)))
    tm.write_file(f"{d}/train.trace.0.2", KEYS, tm.simple_records(range(50, 100)))
    trace = open_trace(d)

    rs = all_records(trace, keys=["loss"], gsteps=(45, 54))
    assert [r.gstep for r in rs] == list(range(45, 55))
    assert all(list(r.columns) == ["loss"] for r in rs)
    assert [r.gstep for r in trace.records(gsteps=range(10, 30, 7))] == [10, 17, 24]
    assert [r.gstep for r in trace.records(gsteps=[99, 3, 60])] == [3, 60, 99]
    assert [r.gstep for r in trace.records(gsteps=(None, 2))] == [0, 1, 2]
    assert [r.gstep for r in trace.records(gsteps=slice(98, None))] == [98, 99]
    with pytest.raises(KeyError, match="nope"):
        all_records(trace, keys=["nope"])


def test_gstep_selection_skips_whole_files_by_meta(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(0, 10)))
    good = tm.write_file(f"{d}/train.trace.0.2", KEYS, tm.simple_records(range(10, 20)))
    # Corrupt the body of file 2 behind its Meta's back: reading it would raise,
    # so a selection outside its gstep range proves the file was skipped.
    broken = bytearray(good)
    broken[-30:] = b"\xff" * 30
    (tmp_path / "train.trace.0.2").write_bytes(bytes(broken))
    trace = open_trace(d)
    assert [r.gstep for r in trace.records(gsteps=(2, 4))] == [2, 3, 4]
    assert trace.stack("loss", gsteps=(0, 9)).shape == (10,)
    with pytest.raises(errors.TraceIOError):
        all_records(trace, gsteps=(15, 16))


def test_stack_one_key_over_steps(tmp_path):
    d = str(tmp_path)
    recs = tm.simple_records(range(0, 6))
    tm.write_file(f"{d}/train.trace.0.1", KEYS, recs[:3])
    tm.write_file(f"{d}/train.trace.0.2", KEYS, recs[3:])
    trace = open_trace(d)
    w = trace.stack("w")
    assert w.shape == (6, 2, 3) and w.dtype == np.float32
    np.testing.assert_array_equal(w, np.stack([r.columns["w"] for r in trace]))
    steps, loss = trace.stack("loss", gsteps=(2, 4), return_gsteps=True)
    np.testing.assert_array_equal(steps, [2, 3, 4])
    np.testing.assert_array_equal(loss, [1.0, 1.5, 2.0])
    assert w.flags.writeable  # A copy, owned by the caller.


def test_stack_many_ragged_keeps_each_steps_shape(tmp_path):
    """An activation of a last, smaller batch: stack names the shapes it met; a ragged
    stack gives the steps flattened with their shapes (bfloat16 widened as always), and no
    shapes for a key of one shape. A change of dtype or number of dimensions is still an
    error."""
    path = str(tmp_path / "train.trace.0.1")
    bf16 = np.array([0x3F80, 0xC000, 0x4000, 0x3F80], dtype=np.uint16)  # 1, -2, 2, 1
    recs = [
        tm.record(g, [np.full((n, 2), g, np.float32), tm.column(bf16[:n], wire_dtype=tm.BFLOAT16)])
        for g, n in ((0, 2), (1, 2), (2, 1))
    ]
    tm.write_file(path, ["act", "half"], recs)
    trace = open_trace(path)
    with pytest.raises(
        ValueError, match=r"'act' changes dtype or shape at gstep 2.*float32\[1, 2\]"
    ):
        trace.stack("act")
    stacked = trace.stack_many(["act", "half"], ragged=True)
    steps, act, shapes = stacked["act"]
    np.testing.assert_array_equal(steps, [0, 1, 2])
    np.testing.assert_array_equal(shapes, [[2, 2], [2, 2], [1, 2]])
    parts = np.split(act, np.cumsum(shapes.prod(1))[:-1])
    assert [p.reshape(s).tolist() for p, s in zip(parts, shapes)] == [
        np.full((n, 2), g).tolist() for g, n in ((0, 2), (1, 2), (2, 1))
    ]
    _, half, half_shapes = stacked["half"]
    assert half.dtype == np.float32 and half.tolist() == [1, -2, 1, -2, 1]
    np.testing.assert_array_equal(half_shapes, [[2], [2], [1]])
    uniform = open_trace(str(tmp_path / "train.trace.0.1")).stack_many(
        ["act"], gsteps=(0, 1), ragged=True
    )
    assert uniform["act"][2] is None and uniform["act"][1].shape == (2, 2, 2)
    tm.write_file(
        path,
        ["act"],
        [tm.record(0, [np.zeros((2, 2), np.float32)]), tm.record(1, [np.zeros(4, np.float32)])],
    )
    with pytest.raises(
        ValueError, match=r"gstep 1.*float32\[2, 2\] to float32\[4\]; a ragged stack keeps"
    ):
        open_trace(path).stack_many(["act"], ragged=True)


def test_stack_skips_empty_once_columns_and_needs_a_rank(tmp_path):
    d = str(tmp_path)
    once = np.arange(3, dtype=np.float32)
    recs = [tm.record(g, [np.float32(g), once if g == 0 else None]) for g in range(3)]
    recs.append(tm.record(3, [np.float32(3), np.zeros(0, np.float32)]))  # xdl_trace's shape [0].
    tm.write_file(f"{d}/train.trace.0.1", ["x", "once"], recs)
    tm.write_file(f"{d}/train.trace.1.1", ["x", "once"], recs)
    trace = open_trace(d)
    with pytest.raises(ValueError, match="rank"):
        trace.stack("x")
    steps, values = trace.stack("once", rank=1, return_gsteps=True)
    np.testing.assert_array_equal(steps, [0])
    np.testing.assert_array_equal(values, [once])
    r = next(iter(trace.records(ranks=[0], gsteps=(2, 2))))
    assert r.columns["once"].shape == (0,) and r.columns["once"].dtype == np.float32


def test_verify_against_meta_checksums(tmp_path):
    d = str(tmp_path)
    data = tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(5)))
    tm.write_file(f"{d}/train.trace.0.2", KEYS, tm.simple_records(range(5, 9)))
    trace = open_trace(d)
    reports = trace.verify()
    assert [r["ok"] for r in reports] == [True, True]
    assert reports[0]["records_counted"] == 5 and reports[0]["crc_actual"] == tm.crc32c(data)

    flipped = bytearray(data)
    flipped[-5] ^= 0x01  # Inside float64 data: decodes fine, checksum does not.
    (tmp_path / "train.trace.0.1").write_bytes(bytes(flipped))
    reports = open_trace(d).verify()
    assert [r["ok"] for r in reports] == [False, True]
    assert "crc32c" in reports[0]["problems"][0]
    assert reports[0]["path"] in reports[0]["problems"][0]


def test_torn_final_frame_is_reported(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    recs = tm.simple_records(range(4))
    full = tm.write_file(path, KEYS, recs, meta=False)
    last = len(full) - len(tm.frame(recs[-1].SerializeToString()))
    for cut in (last + 1, last + 3, last + 4, len(full) - 1):
        with open(path, "wb") as f:
            f.write(full[:cut])
        trace = open_trace(path)
        with pytest.warns(TornTailWarning, match=f"byte offset {last}"):
            got = [r.gstep for r in trace]
        assert got == [0, 1, 2]
        assert trace.torn_tails == {path: last}


def test_crash_after_meta_leaves_verifiable_prefix(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    recs = tm.simple_records(range(6))
    extra = tm.frame(recs[5].SerializeToString())
    tm.write_file(path, KEYS, recs[:5], closed=False, tail=extra + extra[:9])
    trace = open_trace(path)
    (report,) = trace.verify()
    assert report["ok"] and report["torn_tail"]
    assert report["unverified_tail_bytes"] == len(extra) + 9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTailWarning)
        assert [r.gstep for r in trace] == [0, 1, 2, 3, 4, 5]


def test_corruption_raises_naming_file_and_offset_after_good_records(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    recs = tm.simple_records(range(3))
    bad = tm.record(3, [np.zeros((2, 3), np.float32), np.float64(0)])
    bad.column[0].data = b"short"
    data = tm.write_file(path, KEYS, recs + [bad], meta=False)
    bad_offset = len(data) - len(tm.frame(bad.SerializeToString()))
    seen = []
    with pytest.raises(errors.TraceIOError) as info:
        for r in open_trace(path):
            seen.append(r.gstep)
    assert seen == [0, 1, 2]
    message = str(info.value)
    assert path in message and "byte offset" in message
    assert int(message.split("byte offset ")[1].split(":")[0]) >= bad_offset
    assert isinstance(info.value, OSError)


def test_unknown_record_fields_are_exposed_raw(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    rec = tm.simple_records([1])[0]
    span = rec.host_span.add()
    span.start_ns, span.end_ns, span.gstep = 10, 20, 1
    tm.write_file(path, KEYS, [rec])
    (r,) = list(open_trace(path))
    assert r.columns["loss"] == 0.5
    ((number, wire_type, payload),) = r.extra
    assert (number, wire_type) == (6, 2)
    parsed = type(span)()
    parsed.ParseFromString(payload)
    assert (parsed.start_ns, parsed.end_ns, parsed.gstep) == (10, 20, 1)


def test_reads_what_the_real_tracer_writes(tmp_path):
    xdl = pytest.importorskip("xdl_trace")
    if not hasattr(xdl, "TraceHook"):
        pytest.skip("xdl_trace.TraceHook is not available in this build")
    xdl.clear()
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    xdl.trace_tensor("w", w)
    xdl.trace_tensor("loss", lambda: np.float64(w.sum()))
    xdl.trace_once("cfg", np.arange(3))
    with xdl.TraceHook({"output_dir": str(tmp_path), "max_file_m_size": 0.0005}) as hook:
        for step in range(20):
            w += 1
            hook.step(gstep=step)
    xdl.clear()
    trace = open_trace(str(tmp_path))
    assert trace.keys == ["w", "loss", "cfg"]
    assert len(trace.files) > 1  # Rolled over.
    rs = list(trace)
    assert [r.gstep for r in rs] == list(range(20))
    np.testing.assert_array_equal(rs[-1].columns["w"], w)
    np.testing.assert_array_equal(trace.stack("loss"), [r.columns["loss"] for r in rs])
    np.testing.assert_array_equal(trace.stack("cfg"), [np.arange(3)])  # Once: first step only.
    assert rs[1].columns["cfg"].size == 0
    assert all(r["ok"] for r in trace.verify())


def test_stack_many_reads_all_keys_in_one_pass(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(0, 3)))
    tm.write_file(f"{d}/train.trace.0.2", KEYS, tm.simple_records(range(3, 5)))
    trace = open_trace(d)
    stacked = trace.stack_many(gsteps=range(0, 5, 2))
    assert list(stacked) == KEYS
    steps, w = stacked["w"]
    np.testing.assert_array_equal(steps, [0, 2, 4])
    np.testing.assert_array_equal(w[:, 0, 0], [0.0, 20.0, 40.0])
    np.testing.assert_array_equal(stacked["loss"][1], [0.0, 1.0, 2.0])


def test_meta_dict_carries_every_field_of_the_proto(tmp_path):
    path = str(tmp_path / "train.trace.0.3")
    overrides = {"run_id": "run-7", "rank": 0, "file_index": 3, "dropped_records": 2}
    tm.write_file(path, KEYS, tm.simple_records(range(4)), meta_overrides=overrides)
    expected = tm.pb2().Meta()
    with open(path + ".meta", "rb") as f:
        expected.ParseFromString(f.read())
    (info,) = open_trace(path).files
    # Built from the .proto by reflection: every field, in field order, no hand list.
    assert list(info.meta) == [f.name for f in expected.DESCRIPTOR.fields]
    for name, value in info.meta.items():
        assert value == getattr(expected, name) and type(value) is type(getattr(expected, name))
    assert info.open().meta == info.meta
    assert info.meta_error is None

    (tmp_path / "train.trace.0.3.meta").write_bytes(b"\xff\xff")
    (broken,) = open_trace(path).files
    assert broken.meta is None and "not a serialized Meta" in broken.meta_error
    os.remove(path + ".meta")
    (missing,) = open_trace(path).files
    assert missing.meta is None and missing.meta_error == f"{path}.meta: no such file"


def test_a_torn_tail_met_by_stack_is_reported_once_with_its_offset(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    recs = tm.simple_records(range(4))
    full = tm.write_file(path, KEYS, recs, meta=False)
    last = len(full) - len(tm.frame(recs[-1].SerializeToString()))
    with open(path, "wb") as f:
        f.write(full[: last + 6])
    trace = open_trace(path)
    with pytest.warns(TornTailWarning, match=f"byte offset {last}"):
        steps, loss = trace.stack("loss", return_gsteps=True)
    np.testing.assert_array_equal(steps, [0, 1, 2])
    assert trace.torn_tails == {path: last}
    with warnings.catch_warnings():
        warnings.simplefilter("error", TornTailWarning)  # Once per trace.
        assert [r.gstep for r in trace] == [0, 1, 2]


def test_records_merge_ranks_in_order_with_keys_named_per_selection(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records([0, 2, 4]))
    tm.write_file(f"{d}/train.trace.1.1", KEYS, tm.simple_records([1, 2, 3]))
    tm.write_file(f"{d}/train.trace.2.1", KEYS, tm.simple_records([0]))
    trace = open_trace(d)
    got = [(r.gstep, r.rank, list(r.columns)) for r in trace.records(keys=("loss", "w"))]
    assert [(g, rank) for g, rank, _ in got] == [
        (0, 0),
        (0, 2),
        (1, 1),
        (2, 0),
        (2, 1),
        (3, 1),
        (4, 0),
    ]
    assert all(names == ["loss", "w"] for _, _, names in got)
    r = next(iter(trace.records(ranks=[1], gsteps=[3])))
    assert (r.gstep, r.rank, r.path) == (3, 1, f"{d}/train.trace.1.1")
    assert r.offset > 0 and r.columns["loss"] == 1.5
    progress = []
    assert len(list(trace.records(keys=[], on_progress=progress.append))) == 7
    frames = sum(f.size - f.open().first_record_offset for f in trace.files)
    assert sum(progress) == frames
