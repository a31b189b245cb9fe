"""SIGKILL a writer at random moments: every reader returns every record a Meta covered.

A writer (the Python hook, small files so it rolls over, a short Meta interval) runs in a
subprocess and is killed with SIGKILL at a random moment, with fsync off and on. After each
kill the files are checked on their own (frames parsed here, Meta with protobuf), then
through open_trace, `python -m xdl_trace verify` and tools/read_trace.py. The seed is
printed with any failure; XDL_KILL_SEED=<seed> replays a run.
"""

import os
import random
import re
import signal
import struct
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import xdl_trace as xdl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READ_TRACE = os.path.join(REPO, "xdl_trace", "tools", "read_trace.py")
KILLS_PER_MODE = 12  # Two modes (fsync off, on): 24 kills.
DATA_FILE = re.compile(r"^train\.trace\.0\.(\d+)$")

WRITER = """
import sys, time
import numpy as np
sys.path.insert(0, {repo!r})
import xdl_trace as xdl

x = np.zeros(256, dtype=np.float32)  # Read in place at each step: x == gstep.
xdl.trace_tensor("x", x)
hook = xdl.TraceHook({{"output_dir": sys.argv[1], "fsync": sys.argv[2] == "1", "on_error": "raise",
                      "max_file_m_size": 0.02, "meta_interval_s": 0.005}})
hook.begin()
step = 0
while True:
    x[:] = step
    hook.step(gstep=step)
    if step == 0:
        print("ready", flush=True)
    step += 1
    time.sleep(0.0005)
"""


def _frames(data):
    """The complete frames of `data` and the offset where each ends."""
    frames, ends, offset = [], [], 0
    while offset + 4 <= len(data):
        (n,) = struct.unpack_from("<I", data, offset)
        if offset + 4 + n > len(data):
            break
        frames.append(data[offset + 4 : offset + 4 + n])
        offset += 4 + n
        ends.append(offset)
    return frames, ends


def _kill_writer(out, fsync, rng):
    """Starts a writer into `out` and SIGKILLs it at a random moment; returns the delay."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(repo=REPO), out, "1" if fsync else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if rng.random() < 0.2:
            delay = rng.uniform(0.0, 0.4)  # Anywhere: import, begin, first file, writing.
        else:
            line = proc.stdout.readline()  # Writing: wait until the first step is traced.
            assert line == "ready\n", f"writer did not start: {line!r} {proc.stderr.read()}"
            delay = rng.uniform(0.0, 0.25)
        time.sleep(delay)
        assert proc.poll() is None, f"writer exited early: {proc.stderr.read()}"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    return delay


def _check(out, pb):
    """Every reader returns every record the Metas cover."""
    names = (
        sorted((int(m.group(1)), name) for name in os.listdir(out) if (m := DATA_FILE.match(name)))
        if os.path.isdir(out)
        else []
    )
    covered, covered_gstep = 0, -1
    for _, name in names:
        path = os.path.join(out, name)
        data = open(path, "rb").read()
        frames, ends = _frames(data)
        records = max(len(frames) - 1, 0)  # After the Header.
        if not os.path.exists(path + ".meta"):
            # The first Meta is written right after the Header, before any record.
            assert records == 0, f"{name}: {records} records and no Meta"
            continue
        meta = pb.Meta()
        meta.ParseFromString(open(path + ".meta", "rb").read())
        assert meta.data_bytes <= len(data), f"{name}: Meta claims {meta.data_bytes} bytes"
        assert meta.data_bytes in ends, f"{name}: Meta ends mid-frame at {meta.data_bytes}"
        assert ends.index(meta.data_bytes) == meta.record_count, f"{name}: Meta record_count"
        assert records >= meta.record_count
        covered += meta.record_count
        if meta.record_count:
            covered_gstep = max(covered_gstep, meta.gstep_end)
    if covered == 0 and not any(
        len(_frames(open(os.path.join(out, n), "rb").read())[0]) > 1 for _, n in names
    ):
        return 0  # Killed before any record: nothing to read.

    # open_trace: complete records, gsteps contiguous from 0, x == gstep.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TornTailWarning for the last file.
        records = list(xdl.open_trace(out).records())
    gsteps = [r.gstep for r in records]
    assert gsteps == list(range(len(gsteps))), f"open_trace gsteps {gsteps[:5]}...{gsteps[-5:]}"
    assert len(gsteps) >= covered and len(gsteps) > covered_gstep
    for r in records:
        assert np.all(r["x"] == r.gstep), f"record {r.gstep}: x is {r['x'][:3]}"

    # The CLI: no corruption. A torn tail is fine, and so is a header-only file whose Meta was
    # never written (the kill came between the two): verify calls it unverifiable, exit 0.
    cli = subprocess.run(
        [sys.executable, "-m", "xdl_trace", "verify", out],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, f"verify:\n{cli.stdout}{cli.stderr}"

    # The stand-alone script: the same records, and no temp file taken for data.
    script = subprocess.run(
        [sys.executable, READ_TRACE, "--summary", out], capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0, script.stdout[-2000:] + script.stderr
    listed = re.findall(r"^== (.*)$", script.stdout, re.M)
    assert all(DATA_FILE.match(os.path.basename(p)) for p in listed), listed
    assert [int(g) for g in re.findall(r"^gstep: (\d+)", script.stdout, re.M)] == gsteps
    return len(gsteps)


@pytest.mark.parametrize("fsync", [False, True], ids=["fsync_off", "fsync_on"])
def test_sigkill_at_random_moments_loses_no_covered_record(tmp_path, pb, fsync):
    seed = int(os.environ.get("XDL_KILL_SEED", time.time_ns() % 2**32))
    rng = random.Random(seed)
    started = time.monotonic()
    read = 0
    for kill in range(KILLS_PER_MODE):
        out = str(tmp_path / f"kill{kill}")
        delay = _kill_writer(out, fsync, rng)
        try:
            read += _check(out, pb)
        except AssertionError as e:
            raise AssertionError(
                f"XDL_KILL_SEED={seed} fsync={fsync} kill {kill} after {delay:.3f} s "
                f"({out}): {e}"
            ) from e
        assert time.monotonic() - started < 60, f"XDL_KILL_SEED={seed}: too slow"
    assert read > 0, f"XDL_KILL_SEED={seed}: no kill came after a record was written"
