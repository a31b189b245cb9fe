"""Damage found, never served as data: a Header cut short under a closed Meta, a flipped bit
(record checksums), a damaged Meta, a rank's missing, absent or copied files and restarted attempts
(verify, info); also a callback that ends its own hook, and key names the CLI prints escaped.
Issue 24 ("Hardening, second pass"); each test was written before its fix."""

import glob
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import xdl_trace as xdl
from conftest import error_exit, run_python as run
from xdl_trace import errors
from xdl_trace.read.reader import open_trace

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READ_TRACE = os.path.join(REPO, "xdl_trace", "tools", "read_trace.py")


def cli(*args):
    return run("-m", "xdl_trace", *args)


def write_steps(out_dir, steps=5, key="w"):
    """Traces `key` (float32 [3, 4] of ones) for `steps` steps; returns the data file."""
    xdl.clear()
    w = np.ones((3, 4), np.float32)
    xdl.trace_tensor(key, w)
    with xdl.TraceHook({"output_dir": out_dir, "on_error": "raise"}) as hook:
        for step in range(steps):
            hook.step(gstep=step)
    (path,) = glob.glob(os.path.join(out_dir, "train.trace.0.*[0-9]"))
    return path


# --- Row 1: a data file cut inside its Header while its closed Meta counts records ------------


def test_a_header_cut_short_under_a_closed_meta_is_an_error_for_every_reader(tmp_path):
    out = str(tmp_path)
    path = write_steps(out)
    os.truncate(path, 10)
    with pytest.raises(errors.TraceIOError, match="Header frame is cut short"):
        list(open_trace(out).records())
    for command in (
        ["find-nan", out],
        ["info", out],
        ["dump", out],
        ["export", out, "-o", str(tmp_path / "x.npz")],
    ):
        result = cli(*command)
        assert result.returncode == error_exit(command[0]), (command, result.stdout, result.stderr)
        assert "Header frame is cut short" in result.stderr, (command, result.stderr)
        assert "no NaN or Inf" not in result.stdout
    verified = cli("verify", out)
    assert verified.returncode == 1 and "Header frame is cut short" in verified.stdout
    printed = run(READ_TRACE, out)
    assert printed.returncode == 1 and "corrupt at byte offset 0" in printed.stderr


# --- Row 3: per-record and Meta checksums ----------------------------------------------------


def flip_a_value_to_inf(path):
    """1.0 -> +inf in the last record (0x3f800000 -> 0x7f800000), as one flipped bit does."""
    data = bytearray(open(path, "rb").read())
    at = data.rfind(b"\x00\x00\x80\x3f")
    data[at + 3] ^= 0x40
    open(path, "wb").write(bytes(data))
    return at


def test_a_flipped_bit_in_a_tensor_is_an_error_not_data(tmp_path):
    out = str(tmp_path)
    path = write_steps(out)
    flip_a_value_to_inf(path)
    with pytest.raises(errors.TraceIOError, match="record checksum mismatch"):
        list(open_trace(out).records())
    for command in (
        ["find-nan", out],
        ["export", out, "-o", str(tmp_path / "x.npz")],
        ["dump", out],
    ):
        result = cli(*command)
        assert result.returncode == error_exit(command[0]), (command, result.stdout, result.stderr)
        assert "record checksum mismatch" in result.stderr, (command, result.stderr)
    assert cli("verify", out).returncode == 1
    printed = run(READ_TRACE, path)
    assert printed.returncode == 1 and "record checksum mismatch" in printed.stderr
    # The opt-out (a hot path that trusts its disk) reads the damaged value.
    values = [r.columns["w"] for r in open_trace(out, verify_checksums=False).records()]
    assert np.isinf(values[-1]).sum() == 1
    unchecked = run(READ_TRACE, "--no-checksums", path)
    assert unchecked.returncode == 0, unchecked.stderr


def test_records_carry_a_checksum_that_protobuf_parses_and_xdl_readers_skip(tmp_path, pb):
    path = write_steps(str(tmp_path), steps=2)
    data = open(path, "rb").read()
    (header_len,) = np.frombuffer(data[:4], "<u4")
    at = 4 + int(header_len)
    (length,) = np.frombuffer(data[at : at + 4], "<u4")
    body = data[at + 4 : at + 4 + int(length)]
    record = pb.Record.FromString(body)
    assert body[-6:-4] == b"\x85\x01"  # Field 16, fixed32, last.
    sys.path.insert(0, os.path.dirname(READ_TRACE))
    import read_trace

    assert record.crc32c == read_trace.crc32c(body[:-6])
    # A reader generated from XDL's trace.proto (fields 1-4) skips it.
    assert read_trace.Record.FromString(body).gstep == record.gstep


def test_a_damaged_meta_is_not_trusted_for_pruning(tmp_path, pb):
    out = str(tmp_path)
    path = write_steps(out, steps=6)
    meta_path = path + ".meta"
    content = open(meta_path, "rb").read()
    meta = pb.Meta.FromString(content)
    assert meta.meta_crc32c != 0
    lying = pb.Meta.FromString(content)
    lying.gstep_begin = 64 + meta.gstep_begin  # One flipped bit: begin > end.
    # With its checksum (now wrong) the Meta is refused; without one, its impossible range is.
    with_crc = lying.SerializeToString()
    lying.ClearField("meta_crc32c")
    without_crc = lying.SerializeToString()
    for damaged in (with_crc, without_crc):
        open(meta_path, "wb").write(damaged)
        trace = open_trace(out)
        assert trace.files[0].meta is None and trace.files[0].meta_error
        assert [r.gstep for r in trace.records(gsteps=(2, 3))] == [2, 3]
        assert cli("verify", out).returncode == 1


# --- Row 6: a callback calling hook.end() or hook.flush() ------------------------------------


@pytest.mark.parametrize("call", ["end", "flush"])
def test_a_callback_ending_or_flushing_its_own_hook_is_refused_not_hung(tmp_path, call):
    script = textwrap.dedent(
        f"""
        import numpy as np, xdl_trace as xdl
        from xdl_trace import errors
        hook = xdl.TraceHook({{"output_dir": {str(tmp_path)!r}, "on_error": "raise"}})
        def cb():
            hook.{call}()
            return np.float32(1)
        xdl.trace_callback("cb", cb)
        hook.begin()
        try:
            hook.step(gstep=0)
            print("no error")
        except Exception as e:
            print("refused:", type(e).__name__, e)
        hook.end()
        print("ended", hook.stats()["records_written"] if hasattr(hook, "stats") else "")
        """
    )
    result = run("-c", script, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout, result.stdout
    assert f"TraceHook.{call}() called from inside this hook's own step()" in result.stdout
    assert "ended" in result.stdout
    assert cli("verify", str(tmp_path)).returncode == 0


# --- Row 12: key names printed raw; a headerless file's message -------------------------------


def test_the_cli_escapes_control_characters_in_key_names(tmp_path):
    out = str(tmp_path)
    key = "w\x1b[31mRED\nFAIL  forged"
    write_steps(out, steps=1, key=key)
    for command in (["info", out], ["dump", out]):
        result = cli(*command)
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout
        assert "w\\x1b[31mRED\\x0aFAIL  forged" in result.stdout
        assert not any(line.startswith("FAIL") for line in result.stdout.splitlines())


def test_a_missing_key_of_a_headerless_file_says_so(tmp_path):
    path = str(tmp_path / "train.trace.0.1")
    open(path, "wb").write(b"\x05\x00")
    with pytest.raises(KeyError, match="ends inside its Header frame"):
        list(open_trace(path).records(keys=["w"]))


# --- Row 10: gaps in a rank's files, absent ranks, a file copied under another name ---------


def write_rolled(out_dir, steps=12, world_size=None, rank=0):
    """Traces w (float32 [3, 4]) rolling over every few records; returns the data files."""
    xdl.clear()
    w = np.ones((3, 4), np.float32)
    xdl.trace_tensor("w", w)
    old = os.environ.get("WORLD_SIZE")
    if world_size is not None:
        os.environ["WORLD_SIZE"] = str(world_size)
    try:
        config = {"output_dir": out_dir, "rank": rank, "fsync": False, "max_file_m_size": 0.0002}
        with xdl.TraceHook(dict(config, on_error="raise")) as hook:
            for step in range(steps):
                hook.step(gstep=step)
    finally:
        if world_size is not None:
            if old is None:
                del os.environ["WORLD_SIZE"]
            else:
                os.environ["WORLD_SIZE"] = old
    return sorted(
        glob.glob(os.path.join(out_dir, f"train.trace.{rank}.*[0-9]")),
        key=lambda p: int(p.rsplit(".", 1)[1]),
    )


def test_a_missing_file_in_a_ranks_sequence_fails_verify_and_shows_in_info(tmp_path):
    out = str(tmp_path)
    files = write_rolled(out)
    assert len(files) >= 4
    assert cli("verify", out).returncode == 0
    os.remove(files[2])
    os.remove(files[2] + ".meta")
    result = cli("verify", out)
    assert result.returncode == 1, result.stdout
    assert "rank 0: no file #3 (its files run #1..#" in result.stdout, result.stdout
    info = cli("info", out)
    assert "missing: " in info.stdout and "no file #3" in info.stdout, info.stdout


def test_absent_ranks_of_a_run_that_says_its_world_size_fail_verify(tmp_path):
    out = str(tmp_path)
    write_rolled(out, steps=2, world_size=4)
    result = cli("verify", out)
    assert result.returncode == 1
    assert "world size 4 but no file of rank 1, 2, 3" in result.stdout, result.stdout


@pytest.mark.parametrize("copy_to", ["train.trace.0.7", "train.trace.5.2"])
def test_a_file_copied_under_another_index_or_rank_fails_verify(tmp_path, copy_to):
    import shutil

    out = str(tmp_path)
    files = write_rolled(out, steps=6)
    shutil.copy(files[1], os.path.join(out, copy_to))
    shutil.copy(files[1] + ".meta", os.path.join(out, copy_to + ".meta"))
    result = cli("verify", out)
    assert result.returncode == 1
    assert "the Meta says rank 0 file_index 2 but the file is named rank" in result.stdout
    assert f"FAIL  {copy_to}" in result.stdout, result.stdout


# --- Row 9: restarted attempts under one run id ---------------------------------------------


def test_restarted_attempts_under_one_run_id_are_detected_and_warned(tmp_path):
    import warnings

    out = str(tmp_path)
    for first, last in ((0, 5), (3, 8)):  # Killed after 5, resumed from a checkpoint at 3.
        script = textwrap.dedent(
            f"""
            import numpy as np, xdl_trace as xdl
            w = np.ones(3, np.float32)
            xdl.trace_tensor("w", w)
            with xdl.TraceHook({{"output_dir": {out!r}, "on_error": "raise"}}) as hook:
                for step in range({first}, {last}):
                    hook.step(gstep=step)
            """
        )
        env = dict(os.environ, PYTHONPATH=REPO, TORCHELASTIC_RUN_ID="job-1")
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
        assert done.returncode == 0, done.stderr
    (run,) = xdl.runs(out)
    assert run.attempts == 2, run
    assert "2 attempts under one run id" in run.describe()
    from xdl_trace.read.trace_runs import RestartedRunWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        open_trace(out)
    assert any(issubclass(w.category, RestartedRunWarning) for w in caught)
    info = cli("info", out)
    assert "2 attempts under one run id" in info.stdout, info.stdout
    # One attempt: no warning.
    single = str(tmp_path / "single")
    write_steps(single)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RestartedRunWarning)
        open_trace(single)


# A deterministic loop with a checkpoint every 10 steps: attempt 1 dies at gstep 14 after a NaN
# (flushed, never closed: a crash), attempt 2 resumes from the checkpoint at 10; an uninterrupted
# run is the reference. Only the steps 10..14 differ between the attempts.
_RESUMABLE = """
import os, sys, numpy as np, xdl_trace as xdl
out, first, last, crash = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "crash"
ckpt = os.path.join(out, "ckpt.npy")
w = np.load(ckpt) if first else np.arange(6, dtype=np.float32)
xdl.trace_tensor("w", w)
xdl.trace_value("acc", scope="eval")
hook = xdl.TraceHook({"output_dir": out, "on_error": "raise"})
evaluate = xdl.TraceHook({"output_dir": out, "on_error": "raise"}, is_training=False, scope="eval")
hook.begin()
evaluate.begin()
for step in range(first, last):
    w *= np.float32(1.01)
    if crash and step == 13:
        w[0] = np.nan  # What made attempt 1 die.
    hook.step(gstep=step)
    if step % 10 == 9:
        np.save(ckpt, w)
    if step % 5 == 4:  # Its evaluation: gstep 14 evaluated by both attempts.
        evaluate.step(values={"acc": float(w[1]) + (100 if crash and step == 14 else 0)})
if crash:
    hook.flush()
    evaluate.flush()
    os._exit(3)
evaluate.end()
hook.end()
"""


def _resumable(out, first, last, crash=False, run_id="job-7"):
    env = dict(os.environ, PYTHONPATH=REPO, XDL_TRACE_RUN_ID=run_id)
    args = [out, str(first), str(last), "crash" if crash else "ok"]
    done = subprocess.run(
        [sys.executable, "-c", _RESUMABLE, *args], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == (3 if crash else 0), done.stderr


def test_a_resumed_run_reads_each_gstep_from_the_attempt_that_wrote_it_last(tmp_path):
    import warnings

    from xdl_trace import dask as xdl_dask
    from xdl_trace.read import analysis, report, serve
    from xdl_trace.read.trace_runs import RestartedRunWarning

    resumed, reference = str(tmp_path / "resumed"), str(tmp_path / "reference")
    os.makedirs(resumed)
    _resumable(resumed, 0, 15, crash=True)
    live = serve.LiveRun(resumed)  # xdl-trace serve, watching as the job restarts.
    assert live.update() and live.scan.records == {0: 15}
    _resumable(resumed, 10, 30)
    _resumable(reference, 0, 30, run_id="reference")
    (run,) = xdl.runs(resumed)
    assert run.attempts == 2
    assert run.resumes == [{"rank": 0, "attempt": 2, "gstep": 10}]
    assert "attempt 2 resumed at gstep 10" in run.describe()

    with pytest.warns(RestartedRunWarning, match="attempt 2 resumed at gstep 10"):
        trace = open_trace(resumed)
    # Its evaluation, restarted with it under the same run id: gstep 14 from attempt 2, and
    # the warning says whose attempts these are (before: a second "run job-7" warning, another
    # gstep).
    with pytest.warns(RestartedRunWarning, match=r"job-7 \(eval files, test\.\*\): .* gstep 14"):
        evaluated = trace.evaluation().stack("eval/acc", return_gsteps=True)
    assert list(evaluated[0]) == [4, 9, 14, 19, 24, 29]
    np.testing.assert_array_equal(
        evaluated[1], open_trace(reference).evaluation().stack("eval/acc")
    )
    assert [f.superseded_from for f in trace.files] == [10, None]
    gsteps, values = trace.stack("w", return_gsteps=True)
    assert list(gsteps) == list(range(30))  # Each once, in order: no zigzag back to 10.
    expected = open_trace(reference).stack("w")
    np.testing.assert_array_equal(values, expected)  # Attempt 2's 10..14, not the crash's.
    assert [r.gstep for r in trace.records()] == list(range(30))
    # A resume that reproduces the uninterrupted run is what diff proves.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RestartedRunWarning)
        assert xdl.diff(resumed, reference).identical
        # The crash's NaN is superseded: the curves and find-nan read attempt 2's steps.
        assert xdl.find_nan(resumed) == []
        scan = analysis.scan_run(resumed)
        assert scan.records == {0: 30} and scan.rows["w"] == 30
        static = report.build_report(resumed)
        facts, its_evaluation = static["runs"]
        assert facts["records"] == 30  # Read, not the Metas' 35.
        assert its_evaluation["records"] == 6
        # Dask plans each file's share: the same 30 steps.
        frame = xdl_dask.to_dataframe(resumed, keys=["w"]).compute()
        assert sorted(frame["gstep"]) == list(range(30))
        assert list(xdl_dask.to_array(resumed, "w").compute()[:, 1]) == list(expected[:, 1])
        # Serve reads the run again once an attempt resumed: its page is the static one.
        assert live.update() and live.scan.records == {0: 30}
        trained = report.build_report(resumed, keys="w")["cards"]  # Its evaluation left out.
        assert report.model_of([live.scan], [live.run], writing=[False])["cards"] == trained
        assert facts["restarts"].startswith("2 attempts under one run id: attempt 2 resumed at")
        # attempts="all" reads what the crashed attempt traced before it died.
        every = open_trace(resumed, attempts="all")
        assert [r.gstep for r in every.records()] == list(range(15)) + list(range(10, 30))
        (nan,) = xdl.find_nan(resumed, selection=xdl.Selection(attempts="all"))
        assert (nan["key"], nan["gstep"], nan["nan"]) == ("w", 13, 1)
    assert cli("diff", resumed, reference).returncode == 0
    found = cli("find-nan", resumed, "--attempts", "all")
    assert found.returncode == 1 and "13" in found.stdout, found.stdout
    info = cli("info", resumed)
    assert "train.trace.0.1  (superseded from gstep 10 by a later attempt)" in info.stdout
    # The run's line counts the crashed attempt's records by scanning and the closed one's
    # by its Meta (before: the scanned file's 15 alone).
    assert "35 records found by scanning" in info.stdout, info.stdout
    with pytest.raises(ValueError, match="attempts must be 'latest' or 'all'"):
        open_trace(resumed, attempts="first")
