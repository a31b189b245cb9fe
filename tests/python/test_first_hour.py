"""The first hour, third pass (issue 34): no silent traps. A step's values handed at the step
(hook.step(values=...), xdl.log), warnings for registrations by reference that cannot be what
the user meant, a failing callback that empties its own column only, a gstep that repeats or
goes back, guessed hook arguments pointed to the right ones, SIGTERM closing the trace, a full
disk counted and said."""

import csv
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import cli, errors

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def warn_cfg(out_dir):
    return {"output_dir": out_dir, "on_error": "warn", "fsync": False}


# --- item 2: a step's values handed at the step ------------------------------------------------


def test_step_values_trace_a_loss_rebound_each_step(cfg, read_trace):
    xdl.trace_value("loss")
    with xdl.TraceHook(cfg, filter=xdl.Every(2)) as hook:
        for step in range(6):
            loss = np.float32(step * 1.5)  # A new object each step: no closure needed.
            hook.step(values={"loss": loss})
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [0, 2, 4]
    assert [float(c) for c in trace.column("loss")] == [0.0, 3.0, 6.0]


def test_log_hands_values_for_the_next_step_only(warn_cfg, read_trace):
    xdl.trace_value("loss")
    xdl.trace_value("acc", scope="eval")
    hook = xdl.TraceHook(warn_cfg)
    with pytest.warns(RuntimeWarning, match=r"'loss'.*no value was handed for this step"):
        with hook:
            xdl.log({"loss": 0.5})
            hook.step()
            hook.step()  # Nothing handed: an empty column, counted, never the stale 0.5.
    (trace,) = read_trace(warn_cfg["output_dir"])
    assert [c.tolist() for c in trace.column("loss")] == [0.5, []]
    assert hook.stats()["column_errors"] == 1


def test_a_value_key_not_registered_names_trace_value(cfg):
    xdl.trace_value("loss")
    with pytest.raises(errors.NotFoundError, match=r"'acc' not registered with xdl.trace_value"):
        xdl.log({"acc": 1.0})
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(LookupError, match=r"trace_value keys: 'loss'"):
            hook.step(values={"acc": 1.0})


def test_a_scoped_hook_takes_its_values_by_the_names_trace_value_was_given(tmp_path):
    """A train hook and an eval hook (scopes "train" and "eval"): hook.step(values={"loss": ...})
    is the key trace_value("loss", scope="train") made, train/loss. Before: every step of both
    hooks wrote empty columns, and end() said the steps "failed and were not written"."""
    xdl.trace_value("loss", scope="train")
    xdl.trace_value("loss", scope="eval")  # The same name in two scopes: each hook its own.
    xdl.trace_value("acc", scope="eval")
    out = str(tmp_path / "run")
    train = xdl.TraceHook(output_dir=out, scope="train", on_error="raise")
    evaluate = xdl.TraceHook(output_dir=out, scope="eval", output_file_name="eval")
    with train, evaluate:
        for step in range(4):
            train.step(values={"loss": np.float32(step)})
            if step % 2:
                evaluate.step(gstep=step, values={"loss": np.float32(-step), "eval/acc": 0.5})
    assert xdl.open_trace(out).stack("train/loss").tolist() == [0, 1, 2, 3]
    evaluated = xdl.open_trace(out, name="eval")
    assert evaluated.stack("eval/loss").tolist() == [-1, -3]
    assert evaluated.stack("eval/acc").tolist() == [0.5, 0.5]


def test_a_scoped_hooks_name_wins_over_a_default_scope_key_of_that_name(tmp_path):
    """A default-scope train hook and an eval hook, both with a "loss": the eval hook's
    values={"loss": ...} is eval/loss. Before: it was handed to the default scope's loss (a
    full key of that name exists), eval/loss was empty at every eval step, and the eval loss
    waited to be traced as the train loss of the next train step not handed one."""
    xdl.trace_value("loss")
    xdl.trace_value("loss", scope="eval")
    out = str(tmp_path / "run")
    train = xdl.TraceHook(output_dir=out, on_error="raise")
    evaluate = xdl.TraceHook(output_dir=out, scope="eval", is_training=False, on_error="raise")
    with train, evaluate:
        train.step(gstep=0, values={"loss": np.float32(1)})
        evaluate.step(gstep=0, values={"loss": np.float32(-1)})
        train.step(gstep=1, values={"loss": np.float32(2)})
    assert xdl.open_trace(out).stack("loss").tolist() == [1, 2]
    assert xdl.open_trace(out, prefix="test").stack("eval/loss").tolist() == [-1]


def test_a_value_handed_as_none_is_a_step_without_one_as_meant(cfg, tmp_path):
    """An eval metric handed every 3rd step, None between (as wandb.log takes a metric at some
    steps only): no warning, no error counted; its column is empty there, and the readers take
    its dtype and shape from the first step holding it. Before: each None was a "tracing
    failed" warning and a column error, and schema()/info/export took the first record's empty
    column (float32 [0]), so CSV export left the metric out as a vector."""
    xdl.trace_value("loss")
    xdl.trace_value("val_acc")
    hook = xdl.TraceHook(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with hook:
            for step in range(6):
                acc = 0.25 * step if step % 3 == 2 else None
                hook.step(values={"loss": 1.0 / (step + 1), "val_acc": acc})
    assert hook.stats()["column_errors"] == 0
    trace = xdl.open_trace(cfg["output_dir"])
    assert trace.schema()["val_acc"][:2] == ("float64", ())
    gsteps, values = trace.stack("val_acc", return_gsteps=True)
    assert gsteps.tolist() == [2, 5] and values.tolist() == [0.5, 1.25]
    out = str(tmp_path / "m.csv")
    cli.main(["export", cfg["output_dir"], "-o", out])
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["val_acc"] for r in rows] == ["", "", "0.5", "", "", "1.25"]


def test_a_value_handed_under_an_unknown_name_is_no_failed_step(warn_cfg, read_trace):
    """A typo in values={} is warned once; the step is traced and the value it left out is the
    empty column it writes: end() no longer says the steps "failed and were not written"."""
    xdl.trace_value("loss")
    hook = xdl.TraceHook(warn_cfg)
    with pytest.warns(RuntimeWarning) as said:
        with hook:
            for _ in range(3):
                hook.step(values={"lsos": 1.0})
    messages = [str(w.message) for w in said]
    assert sum("'lsos' not registered with xdl.trace_value" in m for m in messages) == 1
    (summary,) = [m for m in messages if "column(s) were written empty" in m]
    assert "failed and were not written" not in summary, summary
    stats = hook.stats()
    assert (stats["step_errors"], stats["column_errors"], stats["records_written"]) == (0, 3, 3)


def test_a_torch_loss_handed_at_the_step_is_each_steps_value(cfg, read_trace):
    torch = pytest.importorskip("torch")
    w = torch.ones(3, requires_grad=True)
    xdl.trace_value("loss")
    with xdl.TraceHook(cfg) as hook:
        for step in range(3):
            loss = (w * (step + 1)).sum()
            loss.backward()
            hook.step(values={"loss": loss})
    (trace,) = read_trace(cfg["output_dir"])
    assert [float(c) for c in trace.column("loss")] == [3.0, 6.0, 9.0]


@pytest.mark.parametrize(
    "value, what",
    [
        (np.float32(0.5), r"a 0-d value \(float32\)"),
        (np.array(0.5), r"a 0-d value \(ndarray\)"),
        (0.5, r"a 0-d value \(float\)"),
    ],
)
def test_registering_a_0d_value_by_reference_warns(value, what):
    with pytest.warns(RuntimeWarning, match=what + r".*hook.step\(values=") as record:
        xdl.trace_tensor("loss", value)
    assert record[0].filename == __file__  # Points at the user's line.


def test_registering_a_computed_torch_tensor_warns_and_a_parameter_does_not():
    torch = pytest.importorskip("torch")
    w = torch.nn.Parameter(torch.ones(3))
    with pytest.warns(RuntimeWarning, match=r"'loss': a torch tensor computed by the step"):
        xdl.trace_tensor("loss", (w * 2).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xdl.trace_variable("w", w)
        xdl.trace_variable("temperature", torch.nn.Parameter(torch.tensor(1.0)))  # 0-d, in place
        xdl.trace_tensor("x", np.zeros(3))
        xdl.trace_once("config", np.float64(3))  # Traced once: a 0-d value is what is meant.


# --- item 6: a failing callback empties its own column -----------------------------------------


@pytest.mark.parametrize("bad, returned", [(None, "NoneType"), ({"a": 1}, "dict")])
def test_a_callback_returning_a_non_array_empties_its_column_only(
    warn_cfg, read_trace, bad, returned
):
    xdl.trace_tensor("w", np.arange(3.0))
    xdl.trace_callback("bad", lambda: bad)
    xdl.trace_callback("good", lambda: np.float32(7))
    hook = xdl.TraceHook(warn_cfg)
    with pytest.warns(RuntimeWarning) as record:
        with hook:
            for _ in range(3):
                assert hook.step() is True
    messages = [str(w.message) for w in record]
    assert any(f"'bad' returned {returned}" in m and "column is empty" in m for m in messages)
    assert any("3 column(s) were written empty" in m for m in messages)  # end()'s summary
    (trace,) = read_trace(warn_cfg["output_dir"])
    assert trace.gsteps() == [0, 1, 2]
    assert [c.tolist() for c in trace.column("w")] == [[0.0, 1.0, 2.0]] * 3
    assert [c.tolist() for c in trace.column("good")] == [7.0] * 3
    assert [c.size for c in trace.column("bad")] == [0, 0, 0]
    stats = hook.stats()
    assert stats["column_errors"] == 3 and stats["step_errors"] == 0
    assert "'bad'" in stats["last_step_error"]


def test_a_failing_callback_under_on_error_raise_still_raises(cfg, read_trace):
    xdl.trace_callback("bad", lambda: None)
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(errors.CallbackError, match="'bad' returned NoneType"):
            hook.step()


# --- item 8: a gstep that repeats or goes back --------------------------------------------------


def test_a_gstep_that_repeats_warns_once(cfg):
    xdl.trace_tensor("w", np.zeros(2))
    with xdl.TraceHook(cfg, filter=xdl.Every(10)) as hook:
        with pytest.warns(RuntimeWarning, match=r"gstep=0\): gstep repeats.*twice per") as rec:
            for step in range(30):
                hook.step(gstep=step)  # Twice per iteration.
                hook.step(gstep=step)
    assert len([w for w in rec if "gstep" in str(w.message)]) == 1
    assert rec[0].filename == __file__


def test_a_gstep_that_goes_back_warns_and_a_fixed_gstep_does_not(cfg):
    xdl.trace_tensor("w", np.zeros(2))
    with xdl.TraceHook(cfg) as hook:
        hook.step(gstep=5)
        with pytest.warns(RuntimeWarning, match=r"gstep=3\): gstep goes back \(after 5\)"):
            hook.step(gstep=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xdl.TraceHook(dict(cfg, output_dir=cfg["output_dir"] + "-eval"), gstep=100) as hook:
            for _ in range(3):
                hook.step()


# --- item 9: guessed hook arguments ------------------------------------------------------------


@pytest.mark.parametrize(
    "guess, hint",
    [
        ({"every": 10}, r"'every' \(did you mean filter=xdl.Every\(N\)\?\)"),
        ({"every_n_steps": 10}, r"'every_n_steps' \(did you mean filter=xdl.Every\(N\)\?\)"),
        ({"log_dir": "x"}, r"'log_dir' \(did you mean output_dir=\?\)"),
        ({"name": "run1"}, r"'name' \(did you mean metadata=\{'name': ...\}\?\)"),
        ({"flush_secs": 5}, r"'flush_secs' \(did you mean meta_interval_s=\?\)"),
        ({"filtr": 5}, r"'filtr' \(did you mean 'filter'\?\)"),
    ],
)
def test_guessed_hook_arguments_point_to_the_right_ones(out_dir, guess, hint):
    with pytest.raises(ValueError, match=hint) as info:
        xdl.TraceHook(output_dir=out_dir, **guess)
    assert "TraceHook's own arguments: config, is_training, gstep, filter, scope, metadata" in str(
        info.value
    )


@pytest.mark.parametrize("argument", ["metadata", "replicated", "filter"])
def test_a_hook_argument_put_in_the_config_says_where_it_goes(out_dir, argument):
    # Before: "unknown config key(s) 'metadata' (did you mean 'metadata'?)".
    with pytest.raises(ValueError) as info:
        xdl.TraceHook({"output_dir": out_dir, argument: None})
    assert f"'{argument}' (an argument of TraceHook: TraceHook(config, {argument}=...))" in str(
        info.value
    )


# --- item 5: SIGTERM closes the trace ----------------------------------------------------------

_SIGTERM_SCRIPT = """
import os, signal, sys, time
import numpy as np
sys.path.insert(0, {repo!r})
import xdl_trace as xdl
if {user_handler!r}:
    def handler(signum, frame):
        print("user handler ran", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, handler)
xdl.trace_tensor("w", np.zeros(4))
with xdl.TraceHook(output_dir={out!r}, fsync=False) as hook:
    for step in range(100000):
        hook.step()
        if step == 20:
            print("ready", flush=True)
        time.sleep(0.001)
"""


@pytest.mark.parametrize("user_handler, status", [(False, 143), (True, 3)])
def test_sigterm_closes_the_trace_and_chains_the_users_handler(out_dir, pb, user_handler, status):
    script = _SIGTERM_SCRIPT.format(repo=REPO, out=out_dir, user_handler=user_handler)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert ("user handler ran" in out) == user_handler
    metas = [f for f in os.listdir(out_dir) if f.endswith(".meta")]
    assert metas, os.listdir(out_dir)
    for name in metas:
        meta = pb.Meta()
        meta.ParseFromString(open(os.path.join(out_dir, name), "rb").read())
        assert meta.closed_cleanly, name


# --- item 3: a full disk is counted and said ---------------------------------------------------

_FULL_DISK_SCRIPT = """
import resource, signal, sys, warnings
import numpy as np
sys.path.insert(0, {repo!r})
import xdl_trace as xdl
# A file-size limit stands in for a full disk: writes past 64 KB fail (EFBIG, SIGXFSZ ignored).
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
xdl.trace_tensor("w", np.ones(4096, np.float32))  # 16 KB a record
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with xdl.TraceHook(output_dir={out!r}, fsync=False) as hook:
        for step in range(40):
            hook.step()
stats = hook.stats()
print(stats["records_written"], stats["records_dropped"])
for w in caught:
    print("WARNING", w.message)
"""


def test_a_full_disk_is_counted_in_end_and_in_the_meta(out_dir, pb, capsys):
    script = _FULL_DISK_SCRIPT.format(repo=REPO, out=out_dir)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    written, dropped = map(int, lines[0].split())
    assert written >= 1 and dropped >= 1 and written + dropped == 40
    end_warning = [line for line in lines if "record(s) were dropped, not written" in line]
    assert len(end_warning) == 1, lines
    assert f"{dropped} record(s) were dropped, not written" in end_warning[0]
    assert "traced step(s) failed" not in end_warning[0]  # The close failed, not a step.
    assert "closing the trace failed" in end_warning[0]
    # The Meta, written after the failure, says what was written and what was lost; the cut
    # frame is cut off, so the file ends at its last complete record and verifies.
    (data,) = [f for f in os.listdir(out_dir) if not f.endswith(".meta")]
    meta = pb.Meta()
    meta.ParseFromString(open(os.path.join(out_dir, data + ".meta"), "rb").read())
    assert (meta.record_count, meta.dropped_records) == (written, dropped)
    assert meta.data_bytes == os.path.getsize(os.path.join(out_dir, data))
    assert not meta.closed_cleanly
    from xdl_trace import cli

    assert cli.main(["verify", out_dir]) == 0
    assert cli.main(["info", out_dir]) == 0
    assert f"{dropped} records dropped" in capsys.readouterr().out


# --- item 7: device tracers that did not start, and typos --------------------------------------


def test_a_device_tracer_that_did_not_start_warns_or_raises(cfg, monkeypatch, tmp_path):
    monkeypatch.setenv("XDL_TRACE_PLUGIN_PATH", str(tmp_path))  # Found or not: never "ok" here
    xdl.trace_tensor("x", np.arange(3.0))
    hook = xdl.TraceHook(dict(cfg, on_error="warn", device_tracers=["cupti"]))
    if hook.stats().get("device_tracers"):
        pytest.skip("a device tracer is running: this machine has a GPU")
    with pytest.warns(RuntimeWarning, match=r"config 'device_tracers': cupti: (unavailable|error)"):
        with hook:
            hook.step()
    assert hook.stats()["steps_traced"] == 1  # Traced without it.
    with pytest.raises(errors.FailedPreconditionError, match=r"config 'device_tracers': cupti"):
        xdl.TraceHook(dict(cfg, device_tracers=["cupti"])).begin()


def test_a_misspelt_device_tracer_gets_did_you_mean_and_no_doubled_path(cfg):
    with pytest.raises(errors.NotFoundError) as info:
        xdl.TraceHook(dict(cfg, device_tracers=["cuptii"])).begin()
    message = str(info.value)
    assert message.startswith("device_tracers: 'cuptii' (did you mean 'cupti'?): ")
    assert "xdl_trace/xdl_trace" not in message


# --- item 4: ranks started by hand ---------------------------------------------------------------

_RANK_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {repo!r})
import xdl_trace as xdl
xdl.trace_tensor("w", np.zeros(2))
with xdl.TraceHook(output_dir={out!r}, fsync=False, metadata={{"lr": 0.1}}) as hook:
    for _ in range(3):
        hook.step()
"""


def _start_rank(out_dir, rank, world_size, port="29500"):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE", "XDL_TRACE_RUN_ID")
        and not k.startswith("OMPI_")
    }
    env.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="10.0.0.1")
    env["MASTER_PORT"] = port
    script = _RANK_SCRIPT.format(repo=REPO, out=out_dir)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)


def test_ranks_started_by_hand_share_a_run(out_dir):
    for rank in (0, 1):  # Two processes, no launcher job id: one run.
        _start_rank(out_dir, rank, 2)
    (run,) = xdl.runs(out_dir)
    assert run.ranks == [0, 1] and run.world_size == 2
    for rank in (0, 1):  # Started again: the second run, again shared.
        _start_rank(out_dir, rank, 2)
    assert [r.ranks for r in xdl.runs(out_dir)] == [[0, 1], [0, 1]]


def test_an_incomplete_run_is_flagged_naming_xdl_trace_run_id(out_dir, capsys):
    from xdl_trace import cli

    _start_rank(out_dir, 0, 2)
    _start_rank(out_dir, 1, 2, port="29501")  # Another rendezvous: another run.
    assert cli.main(["info", out_dir, "--run", "latest"]) == 0
    out = capsys.readouterr().out
    assert "incomplete: 1 of 2 ranks" in out and "XDL_TRACE_RUN_ID" in out
    with pytest.warns(RuntimeWarning, match=r"holds 1 of 2 ranks \(1\).*XDL_TRACE_RUN_ID"):
        xdl.open_trace(out_dir, run="latest")
    with pytest.raises(errors.RunChoiceError) as info:
        xdl.open_trace(out_dir)
    assert str(info.value).count('metadata: {"lr": 0.1}') == 2  # Item 12: each run's metadata.


# --- item 12: smaller ones ---------------------------------------------------------------------


def test_a_str_value_says_what_was_expected():
    with pytest.raises(
        TypeError, match=r"'note': unsupported value of type str \(expected a numpy"
    ):
        xdl.trace_tensor("note", "hello")


def test_find_nan_on_a_filtered_run_says_the_last_clean_traced_gstep(cfg, capsys):
    from xdl_trace import cli

    w = np.ones(3)
    xdl.trace_tensor("w", w)
    with xdl.TraceHook(cfg, filter=xdl.Every(4)) as hook:
        for step in range(20):
            if step == 10:
                w[0] = np.nan  # Between the traced gsteps 8 and 12.
            hook.step(gstep=step)
    assert cli.main(["find-nan", cfg["output_dir"]]) == 1
    out = capsys.readouterr().out
    assert (
        "w: first at gstep 12 (rank 0, lstep 12): 1 NaN, 0 Inf; 2 record(s) affected; last "
        "clean traced gstep 8, so it appeared between 8 and 12" in out
    ), out


def test_find_nan_on_an_unfiltered_run_names_no_range(cfg, capsys):
    from xdl_trace import cli

    w = np.ones(3)
    xdl.trace_tensor("w", w)
    with xdl.TraceHook(cfg) as hook:
        for step in range(6):
            if step == 3:
                w[0] = np.inf
            hook.step(gstep=step)
    assert cli.main(["find-nan", cfg["output_dir"]]) == 1
    out = capsys.readouterr().out
    assert "first at gstep 3" in out and "last clean" not in out, out


def test_the_docs_say_both_command_forms_once_per_page():
    for page in ("report.md", "device-tracing.md", "python.md"):
        text = open(os.path.join(REPO, "docs", page)).read()
        assert "xdl-trace " in text
        assert "python3 -m xdl_trace" in text, page


# --- item 10: info on a live or killed run -------------------------------------------------------


def test_info_on_a_killed_run_shows_the_scanned_records_not_the_stale_meta(out_dir, capsys):
    from xdl_trace import cli

    script = f"""
import os, sys
import numpy as np
sys.path.insert(0, {REPO!r})
import xdl_trace as xdl
xdl.trace_tensor("w", np.ones(4))
hook = xdl.TraceHook(output_dir={out_dir!r}, fsync=False, meta_interval_s=0, write_mode="inline")
hook.begin()
for step in range(30):
    hook.step()
    if step == 4:
        hook.flush()  # The last Meta: 5 records.
os._exit(0)  # Each step wrote its record (inline); the process dies unclosed.
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert cli.main(["info", out_dir]) == 0
    out = capsys.readouterr().out
    assert "30 records (Meta, not final, says 5)" in out, out
    assert "scanning found 30 complete records" in out
    (run_line,) = [line for line in out.splitlines() if "not closed cleanly" in line]
    # One statement: the scan's count, not the stale Meta's "gsteps 0..4  5 records".
    assert "30 records found by scanning (the Meta is not final; gsteps ?)" in run_line, out
    assert "5 records" not in run_line and "gsteps 0..4" not in run_line
    # verify checks the Meta's 5 and says what follows it (each record checked by its crc32c).
    assert cli.main(["verify", out_dir]) == 0
    out = capsys.readouterr().out
    assert ": 5 records, crc32c " in out and ", then 25 records (" in out, out
    assert "bytes) written after the Meta, their record checksums ok" in out, out


def test_info_on_a_run_killed_before_its_first_meta_says_no_no_records(out_dir, capsys):
    from xdl_trace import cli

    script = f"""
import os, sys
import numpy as np
sys.path.insert(0, {REPO!r})
import xdl_trace as xdl
xdl.trace_tensor("w", np.ones(4))
hook = xdl.TraceHook(output_dir={out_dir!r}, fsync=False, write_mode="inline")
hook.begin()
for step in range(12):
    hook.step()
os._exit(0)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert cli.main(["info", out_dir]) == 0
    out = capsys.readouterr().out
    (run_line,) = [line for line in out.splitlines() if "not closed cleanly" in line]
    assert "no records" not in run_line and "0 records" not in run_line, out
    assert "12 records found by scanning" in run_line, out


def test_info_shows_a_summary_column_as_what_it_summarises(cfg, capsys):
    from xdl_trace import cli

    xdl.trace_tensor("0.weight", np.ones((8, 1, 3, 3), np.float32), summary="stats")
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    assert cli.main(["info", cfg["output_dir"]]) == 0
    out = capsys.readouterr().out
    assert "  0.weight  stats of float32[8, 1, 3, 3] (stored as float64[8])" in out, out
    assert cli.main(["info", cfg["output_dir"], "--json"]) == 0
    import json

    (key,) = json.loads(capsys.readouterr().out)["keys"]
    assert key["kind"] == "stats" and key["summary_of"] == {
        "dtype": "float32",
        "shape": [8, 1, 3, 3],
    }


def test_info_before_the_first_record_describes_the_keys_from_the_header(cfg, capsys):
    """A run that stopped before its first traced step (an error in the first batch) has no
    record to read each key's column from: the Header still says what each key is."""
    from xdl_trace import cli

    xdl.trace_tensor("w", np.ones((8, 3), np.float16))
    xdl.trace_tensor("0.weight", np.ones((8, 1, 3, 3), np.float32), summary="histogram")
    xdl.trace_callback("loss", lambda: 1.0)
    with xdl.TraceHook(cfg):
        pass
    assert cli.main(["info", cfg["output_dir"]]) == 0
    out = capsys.readouterr().out
    assert "keys (3, from the Header: no record yet):" in out, out
    assert "  w  float16[8, 3]\n" in out, out  # Was "w  ??".
    assert "  0.weight  histogram of float32[8, 1, 3, 3]\n" in out, out
    assert "  loss  not declared at start\n" in out, out
    assert cli.main(["info", cfg["output_dir"], "--json"]) == 0
    import json

    keys = {k["key"]: k for k in json.loads(capsys.readouterr().out)["keys"]}
    assert keys["w"] == {"key": "w", "dtype": "float16", "shape": [8, 3]}
    assert keys["0.weight"]["summary_of"] == {"dtype": "float32", "shape": [8, 1, 3, 3]}
    assert keys["0.weight"]["dtype"] is None  # The stored row: no record says it.


def test_a_run_without_a_world_size_says_so_not_of_question_mark():
    from xdl_trace.read.trace_runs import Run

    info = {
        "world_size": 0,
        "hostname": "h",
        "pid": 1,
        "argv": [],
        "version": "",
        "metadata_json": "",
    }
    run = Run(
        {
            "run_id": "cpp",
            "ranks": [0],
            "run_infos": [info],
            "start_time_ms": 0,
            "end_time_ms": 0,
            "gsteps": (0, 9),
            "records": 10,
            "files": [0],
            "closed_cleanly": True,
        }
    )
    line = run.describe()
    assert "ranks 0 (world size not recorded)" in line and "of ?" not in line, line


# --- item 11: dump shows a readable time -------------------------------------------------------


def test_dump_shows_each_records_time_in_utc_beside_epoch_ms(cfg, capsys):
    from xdl_trace import cli

    xdl.trace_tensor("w", np.zeros(2))
    with xdl.TraceHook(cfg) as hook:
        hook.step()
    assert cli.main(["dump", cfg["output_dir"]]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("rank: ")]
    ms = int(line.split("timestamp: ")[1].split()[0])
    import datetime

    utc = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    assert f"({utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z)" in line  # ISO 8601.


@pytest.mark.parametrize(
    "gstep", ["5", 3.7, float("nan"), 2**70, True], ids=["str", "3.7", "nan", "2**70", "True"]
)
def test_a_gstep_that_is_no_int64_is_refused_before_anything_changes(cfg, gstep):
    """Before: "5" was read as 5 and 3.7 as 3 (silently another step), and 2**70 failed in the
    core with the binding's 'incompatible function arguments' (warned as a failed step)."""
    xdl.trace_tensor("a", np.zeros(2, np.float32))
    with xdl.TraceHook(cfg) as hook:
        with pytest.raises(
            errors.InvalidArgumentError, match=r"hook.step\(gstep=\): .*(no integer|outside int64)"
        ):
            hook.step(gstep=gstep)
        assert hook.step() and hook.stats()["steps_seen"] == 1  # The refused call counted nothing.
    with pytest.raises(errors.InvalidArgumentError, match=r"TraceHook\(gstep=\)"):
        xdl.TraceHook(cfg, gstep="7")


def test_a_gstep_of_numpy_torch_or_a_whole_float_is_that_step(cfg, read_trace):
    torch = pytest.importorskip("torch")
    xdl.trace_tensor("a", np.zeros(2, np.float32))
    with xdl.TraceHook(cfg) as hook:
        for gstep in (np.int64(1), torch.tensor(2), 3.0, np.float32(4)):
            hook.step(gstep=gstep)
    (trace,) = read_trace(cfg["output_dir"])
    assert trace.gsteps() == [1, 2, 3, 4]


def test_a_scope_written_with_a_trailing_slash_is_that_scope(cfg):
    """TensorFlow's name scopes end in '/': scope="eval/" made the key "eval//acc" before."""
    xdl.trace_tensor("acc", np.zeros(1, np.float32), scope="eval/")
    assert xdl.keys("eval") == xdl.keys("/eval/") == ["eval/acc"]
    with xdl.TraceHook(cfg, scope="eval/") as hook:
        hook.step()
    assert xdl.open_trace(cfg["output_dir"]).keys == ["eval/acc"]


def test_an_eval_hook_given_no_gstep_stamps_the_training_step_it_evaluates(tmp_path):
    """README's eval hook, stepped after each evaluation with no gstep: its records carry the
    gstep of the training run of this process in that directory (19, 39, 59), several eval
    batches one gstep without a "gstep repeats" warning; before: 0, 1, 2, drawn at the start of
    the training axis. A given gstep wins; before the training run's first step, or in a
    directory no training hook writes, the local count as before; a new training run begins
    without the previous run's step."""
    out = str(tmp_path / "run")
    xdl.clear()
    xdl.trace_value("loss")
    xdl.trace_value("acc", scope="eval")
    config = {"output_dir": out, "on_error": "raise", "fsync": False}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # No "gstep repeats" warning.
        with xdl.TraceHook(config) as train, xdl.TraceHook(
            config, is_training=False, scope="eval"
        ) as evaluate:
            evaluate.step(values={"acc": 0.0})  # Before any training step: lstep 0.
            for step in range(60):
                train.step(gstep=1000 + step if step >= 50 else step, values={"loss": 1.0})
                if step % 20 == 19:
                    for batch in range(2):  # Two eval batches, one gstep.
                        evaluate.step(values={"acc": step + batch / 10})
            evaluate.step(gstep=7, values={"acc": 7.0})  # Given: it wins.
    trace = xdl.open_trace(out).evaluation()
    got = [(r.gstep, r.lstep, float(r.columns["eval/acc"])) for r in trace.records()]
    assert sorted(got) == sorted(
        [(0, 0, 0.0), (19, 1, 19.0), (19, 2, 19.1), (39, 3, 39.0), (39, 4, 39.1)]
        + [(1059, 5, 59.0), (1059, 6, 59.1), (7, 7, 7.0)]
    )
    # A second training run into the directory: its evaluation before its first step is not
    # stamped with the first run's last gstep.
    with xdl.TraceHook(config) as train, xdl.TraceHook(
        config, is_training=False, scope="eval"
    ) as evaluate:
        evaluate.step(values={"acc": 1.0})
        train.step(values={"loss": 1.0})
    second = xdl.open_trace(out, run="latest").evaluation()
    assert [r.gstep for r in second.records()] == [0]
    elsewhere = str(tmp_path / "elsewhere")  # No training hook writes there.
    with xdl.TraceHook(
        dict(config, output_dir=elsewhere), is_training=False, scope="eval"
    ) as evaluate:
        for _ in range(2):
            evaluate.step(values={"acc": 1.0})
    assert [r.gstep for r in xdl.open_trace(elsewhere, prefix="test").records()] == [0, 1]
    xdl.clear()
