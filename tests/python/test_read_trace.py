"""Tests of the bundled stand-alone reader script xdl_trace/tools/read_trace.py."""

import os
import subprocess
import sys

import numpy as np

import trace_file_maker as tm

SCRIPT = os.path.join(tm.REPO, "xdl_trace", "tools", "read_trace.py")
KEYS = ["w", "loss"]


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("read_trace_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_messages_match_the_real_proto():
    script, real = load_script(), tm.pb2()
    for name in ("Header", "Column", "Record", "Meta"):
        mine = getattr(script, name).DESCRIPTOR
        theirs = getattr(real, name).DESCRIPTOR
        assert mine.full_name == theirs.full_name
        for field in mine.fields:
            other = theirs.fields_by_number[field.number]
            assert (field.name, field.type, field.label) == (other.name, other.type, other.label)
        if name != "Record":  # Record's device-tracing fields stay unknown to the script.
            assert {f.number for f in theirs.fields} == {f.number for f in mine.fields}
        else:
            assert {f.number for f in theirs.fields if f.number <= 4} == {1, 2, 3, 4}
    theirs_enum = real.DESCRIPTOR.enum_types_by_name["Type"]
    assert [(v.name, v.number) for v in theirs_enum.values] == [
        (n, i) for i, (n, _) in enumerate(script.DTYPES)
    ]


def test_script_parses_real_serializations_and_keeps_unknown_fields():
    script = load_script()
    rec = tm.simple_records([3])[0]
    rec.host_span.add().gstep = 3
    body = rec.SerializeToString()
    parsed = script.Record()
    parsed.ParseFromString(body)
    assert (parsed.gstep, parsed.lstep, parsed.timestamp) == (3, 3, rec.timestamp)
    np.testing.assert_array_equal(
        script.column_to_array(parsed.column[0]),
        (np.arange(6, dtype=np.float32) + 30).reshape(2, 3),
    )
    assert script.column_to_array(parsed.column[1]) == 1.5
    assert parsed.SerializeToString() == body  # Unknown fields survive a round trip.


def test_script_runs_stand_alone_and_prints_like_the_xdl_reader(tmp_path):
    d = str(tmp_path)
    tm.write_file(f"{d}/train.trace.0.1", KEYS, tm.simple_records(range(3)))
    recs = tm.simple_records(range(3, 5))
    torn = tm.frame(recs[-1].SerializeToString())[:7]
    tm.write_file(f"{d}/train.trace.0.2", KEYS, recs[:1], tail=torn, closed=False)
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['read_trace.py', {d!r}]\n"
        "try:\n"
        f"    runpy.run_path({SCRIPT!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('xdl_trace'))\n"
        "print('LOADED', loaded)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "LOADED []" in out  # Neither the package nor its compiled extension.
    assert out.count("keys: ['w', 'loss']") == 2
    assert "gstep: 0 lstep: 0 timestamp: 1700000000000" in out
    assert "  loss Double[]: 1." in out and "w Float[2, 3]:" in out
    assert "gstep: 3 lstep: 3" in out and "gstep: 4" not in out
    assert "torn final frame at byte offset" in out
    assert "record_count=3" in out and "closed_cleanly=True" in out
    assert "record_count=1" in out and "closed_cleanly=False" in out
    assert out.index("train.trace.0.1") < out.index("train.trace.0.2")


def test_script_options(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    tm.write_file(path, KEYS, tm.simple_records(range(4)), meta=False)
    result = subprocess.run(
        [sys.executable, SCRIPT, path, "--keys", "loss", "--max-records", "2", "--summary"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "meta: (none)" in result.stdout
    assert result.stdout.count("gstep:") == 2
    assert "loss Double[]: min=0.5" in result.stdout and " w " not in result.stdout
