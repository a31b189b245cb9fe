"""xdl.diff and `xdl-trace diff` on runs written by the tracer: identical runs, one element changed
at step 150, tolerance, NaN bits, runs of different length, keys and dtypes, summaries, a run still
being written, and the tensor digest (order-independent, exact)."""

import json
import os
import shutil

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace import _core, cli
from xdl_trace.read import report_charts
from xdl_trace.read.reader import TornTailWarning

STEPS = 200


def write_run(
    out, steps=STEPS, change=None, nan=False, dtype=np.float32, extra_key=False, s_summary="stats"
):
    """w: float32[100] (a value), s: float64[4] (a stats summary). `change`: from that step on,
    element 7 of w drifts by 1e-3 per step."""
    xdl.clear()
    w = np.zeros(100, dtype)
    s = np.zeros(4, np.float64)
    xdl.trace_variable("w", w)
    xdl.trace_tensor("s", s, summary=s_summary)
    if extra_key:
        xdl.trace_tensor("extra", np.zeros(2, np.float32))
    with xdl.TraceHook({"output_dir": str(out), "on_error": "raise", "fsync": False}) as hook:
        for step in range(steps):
            w[:] = np.sin(np.arange(100) + step).astype(dtype)
            if nan:
                w[3] = np.float32("nan")
            if change is not None and step >= change:
                w[7] += dtype(1e-3) * (step - change + 1)
            s[:] = step
            hook.step()
    xdl.clear()
    return str(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    return {
        "a": write_run(root / "a"),
        "b": write_run(root / "b"),
        "changed": write_run(root / "changed", change=150),
    }


def test_same_run_twice_is_identical(runs, capsys):
    result = xdl.diff(runs["a"], runs["b"])
    assert result.identical
    assert {k.key: k.basis for k in result.keys} == {"w": "values", "s": "summaries"}
    assert all(k.steps_compared == STEPS for k in result.keys)
    assert cli.main(["diff", runs["a"], runs["b"]]) == 0
    assert "identical: 2 key(s) over 200 step pair(s)" in capsys.readouterr().out


def test_one_element_changed_at_step_150_is_found_there(runs, capsys):
    result = xdl.diff(runs["a"], runs["changed"])
    assert not result.identical
    (w,) = result.differing
    assert w.key == "w" and w.basis == "values"
    assert w.first["gstep"] == 150
    assert w.first["differing"] == 1 and w.first["elements"] == 100
    assert w.first["first_index"] == 7
    assert w.first["max_abs"] == pytest.approx(1e-3, rel=1e-3)
    assert w.first["max_ulp"] > 0
    assert w.last["gstep"] == STEPS - 1 and w.last["max_abs"] == pytest.approx(0.05, rel=1e-3)
    assert [p["gstep"] for p in w.growth][0] == 150 and len(w.growth) > 2  # It grows.
    assert w.steps_differing == STEPS - 150
    assert cli.main(["diff", runs["a"], runs["changed"]]) == 1
    out = capsys.readouterr().out
    assert "run B differs from run A from gstep 150 in w" in out
    assert cli.main(["diff", runs["a"], runs["changed"], "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["identical"] is False and data["keys"][0]["first"]["gstep"] == 150


def test_tolerance_and_selections(runs, capsys):
    assert xdl.diff(runs["a"], runs["changed"], atol=0.06).identical
    partly = xdl.diff(runs["a"], runs["changed"], atol=0.0105)  # Passed from step 160 on.
    assert partly.differing[0].first["gstep"] == 160
    assert xdl.diff(runs["a"], runs["changed"], gsteps=(0, 149)).identical
    assert xdl.diff(runs["a"], runs["changed"], keys="s").identical
    assert cli.main(["diff", runs["a"], runs["changed"], "--keys", "s"]) == 0
    assert cli.main(["diff", runs["a"], runs["changed"], "--gsteps", "140:160"]) == 1
    assert "from gstep 150" in capsys.readouterr().out
    with pytest.raises(ValueError, match="rtol and atol"):
        xdl.diff(runs["a"], runs["b"], rtol=-1)
    with pytest.raises(ValueError, match=r"ranks \[0\] selected: comparing ranks needs two"):
        xdl.diff(runs["a"])
    # An error exits 2 (1 says the runs differ), as diff(1) does.
    assert cli.main(["diff", runs["a"], "--ranks"]) == 2
    assert "comparing ranks needs two or more" in capsys.readouterr().err
    # A pattern that matches no key is an error, as for every other command (it said
    # "identical: 0 key(s) ... compared by nothing" and exited 0: a typo passed a CI check).
    with pytest.raises(KeyError, match=r"no key matches 'lsos' \(keys: "):
        xdl.diff(runs["a"], runs["changed"], keys="lsos")
    assert cli.main(["diff", runs["a"], runs["changed"], "--keys", "lsos"]) == 2
    assert "no key matches 'lsos'" in capsys.readouterr().err
    # So is a gstep range that holds no record of either run (it said identical over 0 steps).
    with pytest.raises(ValueError, match=r"no record in the gsteps selected: \(5000, 6000\)"):
        xdl.diff(runs["a"], runs["changed"], gsteps=(5000, 6000))
    assert cli.main(["diff", runs["a"], runs["changed"], "--gsteps", "5000:6000"]) == 2


def test_runs_of_different_length_keys_and_dtypes(runs, tmp_path, capsys):
    short = write_run(tmp_path / "short", steps=150)
    result = xdl.diff(runs["a"], short)
    assert not result.identical and not result.differing  # Values agree where both have them.
    (steps,) = result.steps
    assert steps["only_a"] == 50 and steps["only_a_gsteps"][:2] == [150, 151]
    assert cli.main(["diff", runs["a"], short]) == 1
    assert "50 gstep(s) only in A" in capsys.readouterr().out

    extra = write_run(tmp_path / "extra", extra_key=True)
    result = xdl.diff(runs["a"], extra)
    assert result.only_b == ["extra"] and not result.differing and not result.identical

    half = write_run(tmp_path / "half", dtype=np.float16)
    result = xdl.diff(runs["a"], half)
    (w,) = result.differing
    assert w.first["gstep"] == 0 and "float32[100] vs float16[100]" in w.structural
    assert cli.main(["diff", runs["a"], half]) == 1
    assert "structural: w" in capsys.readouterr().out


def test_values_meet_stats_as_their_stats(runs, tmp_path):
    values = write_run(tmp_path / "values", s_summary=None)
    result = xdl.diff(runs["a"], values, keys="s")
    assert result.identical and result.keys[0].basis == "summaries"
    reverse = xdl.diff(values, runs["a"], keys="s")
    assert reverse.identical and reverse.keys[0].basis == "summaries"


def test_nan_agrees_with_the_same_nan(tmp_path):
    a = write_run(tmp_path / "a", nan=True)
    b = write_run(tmp_path / "b", nan=True)
    assert xdl.diff(a, b).identical


def test_a_run_being_written_compares_what_is_complete(runs, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(runs["changed"], partial)
    (data,) = [p for p in os.listdir(partial) if not p.endswith(".meta")]
    os.remove(partial / f"{data}.meta")  # The writer has not closed it.
    size = os.path.getsize(partial / data)
    with open(partial / data, "r+b") as f:
        f.truncate(size - 300)  # The writer is inside its last record.
    with pytest.warns(TornTailWarning):
        result = xdl.diff(runs["a"], str(partial))
    (w,) = result.differing
    assert w.first["gstep"] == 150
    assert result.steps[0]["only_a"] == 1 and result.steps[0]["only_a_gsteps"] == [STEPS - 1]


def test_digest_is_exact_and_order_independent():
    x = np.sin(np.arange(1000, dtype=np.float32))
    d = _core.digest(x, 4)  # Wire dtype 4: float32.
    assert d == _core.digest(x.copy(), 4)
    y = x.copy()
    y[500] = np.nextafter(y[500], np.float32(2))  # One ULP.
    assert _core.digest(y, 4) != d
    assert _core.digest(x[::-1].copy(), 4) != d  # The index is in it: a permutation shows.
    # The definition (docs/format.md "Tensor digest"), in numpy: a sum, so any order.
    assert d == reference_digest(x.view(np.uint32))


def reference_digest(bits):
    with np.errstate(over="ignore"):
        x = bits.astype(np.uint64) + (np.arange(1, bits.size + 1, dtype=np.uint64) * PHI)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
        return int(x.sum(dtype=np.uint64))


PHI = np.uint64(0x9E3779B97F4A7C15)


def test_digest_summary_column_and_diff_by_digests(runs, tmp_path, capsys):
    """summary="digest" records float64[2] per step; diff compares digests with digests and a
    value column with a digest column by digesting the values."""
    xdl.clear()

    def write(out, change):
        xdl.clear()
        w = np.zeros(100, np.float32)
        xdl.trace_variable("w", w, summary="digest")
        xdl.trace_tensor("s", np.zeros(4), summary="stats")
        with xdl.TraceHook({"output_dir": str(out), "on_error": "raise", "fsync": False}) as hook:
            for step in range(STEPS):
                w[:] = np.sin(np.arange(100) + step).astype(np.float32)
                if change is not None and step >= change:
                    w[7] += np.float32(1e-3) * (step - change + 1)
                hook.step()
        xdl.clear()
        return str(out)

    digests = write(tmp_path / "digests", None)
    trace = xdl.open_trace(digests)
    assert trace.schema()["w"].kind == "digest"
    gsteps, values = trace.stack_summary("w")
    expected = np.sin(np.arange(100) + 3).astype(np.float32)
    assert int(values[3]) == _core.digest(expected, 4)
    result = xdl.diff(runs["a"], digests, keys="w")  # Values against digests.
    assert result.identical and result.keys[0].basis == "digests"

    changed = write(tmp_path / "digests_changed", 150)
    (w,) = xdl.diff(digests, changed, keys="w").differing
    assert w.basis == "digests" and w.first["gstep"] == 150 and w.first["basis"] == "digests"
    (w,) = xdl.diff(runs["changed"], digests, keys="w").differing
    assert w.first["gstep"] == 150
    assert cli.main(["diff", digests, changed, "--keys", "w"]) == 1
    out = capsys.readouterr().out
    assert "compared by digests (exact; no magnitudes): w" in out

    from xdl_trace.read import report

    (card,) = [c for c in report.build_report([digests])["cards"] if c["key"] == "w"]
    assert card["charts"] == [] and "a digest" in card["text"]  # A checksum is not a curve.


def test_report_of_two_runs_says_where_they_differ(runs):
    from xdl_trace.read import report

    model = report.build_report([runs["a"], runs["changed"]])
    assert "the runs differ from gstep 150 in w" in model["headline"][0]["text"]
    # The page's banner says what it is: no "NaN/Inf" tag on a difference (it had one).
    page = report.render_html(model)
    assert "<p class='news warn'><span class='tag warn'>runs differ</span>" in page
    assert "<span class='tag error'>NaN/Inf</span>" not in page
    (alert,) = [a for a in model["alerts"] if a["kind"] == "runs differ"]
    assert alert["key"] == "w" and alert["gstep"] == 150
    assert "1 of 100 elements differ" in alert["detail"]
    model = report.build_report([runs["a"], runs["b"]])
    assert (
        "the runs agree (2 keys compared by summaries and values)" in model["headline"][0]["text"]
    )


def write_companion_run(out, scale=1.0):
    """gradient/w (stats) with its companion digest/gradient/w (summary="digest"), as
    watch(digest=True) records them: a steady gradient whose digest halves read up to 2^32."""
    xdl.clear()
    g = np.zeros(100, np.float32)
    xdl.trace_tensor("gradient/w", g, summary="stats")
    xdl.trace_tensor("digest/gradient/w", g, summary="digest")
    with xdl.TraceHook({"output_dir": str(out), "on_error": "raise", "fsync": False}) as hook:
        for step in range(40):
            g[:] = scale * np.sin(np.arange(100) + step).astype(np.float32)
            hook.step()
    xdl.clear()
    return str(out)


def test_companion_digest_keys_are_no_values_in_the_report(tmp_path):
    """A digest/<key> column is a checksum: the scan leaves it out of the statistics, so no
    "exploding gradient" (its halves read as numbers reach ~4e9) and no card of its own; its
    key's card says a digest is beside it (it had an alert and a card of curves)."""
    from xdl_trace.read import analysis, report

    run = write_companion_run(tmp_path / "companion")
    scan = analysis.scan_run(run)
    assert scan.keys == ["gradient/w"] and scan.digests == ["digest/gradient/w"]
    model = report.build_report([run])
    assert [a for a in model["alerts"] if "digest" in a["key"]] == []
    assert [a["kind"] for a in model["alerts"]] == []
    (card,) = model["cards"]
    assert card["key"] == "gradient/w" and "exact digest beside it" in card["meta"]


def write_watched_run(out, swap_at=None, digest=True, steps=STEPS, summary="stats"):
    """xdl.watch({"w": ...}) with its default stats (and digest=): w holds whole numbers, and from
    `swap_at` on two of its elements trade places, which leaves every stat bit-identical.
    summary=None keeps w's full values."""
    xdl.clear()
    w = np.zeros(100, np.float32)
    xdl.watch({"w": w}, digest=digest, summary=summary)
    with xdl.TraceHook({"output_dir": str(out), "on_error": "raise", "fsync": False}) as hook:
        for step in range(steps):
            w[:] = np.arange(100) + step
            if swap_at is not None and step >= swap_at:
                w[[3, 7]] = w[[7, 3]]
            hook.step()
    xdl.clear()
    return str(out)


def test_watch_digest_companion_is_folded_into_its_key(tmp_path, capsys):
    """watch's digest/w is compared in place of w's stats (basis "digests"), so a change the
    stats cannot see is found at its step; a run without digests meets one with them on the
    summaries, and the companion is never a key of its own (before: the stats said identical)."""
    a = write_watched_run(tmp_path / "a")
    assert xdl.open_trace(a).keys == ["w", "digest/w"]
    swapped = write_watched_run(tmp_path / "swapped", swap_at=150)
    same = xdl.diff(a, write_watched_run(tmp_path / "b"))
    assert same.identical and [(k.key, k.basis) for k in same.keys] == [("w", "digests")]
    (w,) = xdl.diff(a, swapped).keys
    assert w.key == "w" and w.basis == "digests" and w.first["gstep"] == 150
    # w's stats give both sides' l2 norms: equal, as a swap keeps them (the digest alone
    # cannot tell a permutation from a drift).
    assert (
        w.first["norm_a"]
        == w.first["norm_b"]
        == pytest.approx(np.linalg.norm(np.arange(100) + 150))
    )
    assert cli.main(["diff", a, swapped, "--keys", "w"]) == 1
    out = capsys.readouterr().out
    assert "compared by digests (exact; how much: the L2 columns): w" in out
    assert out.splitlines()[1].split()[-2:] == ["+0%", "+0%"]
    # Asking for the companion asks for its key (it compared nothing and said identical).
    assert [k.key for k in xdl.diff(a, swapped, keys="digest/w").differing] == ["w"]
    plain = write_watched_run(tmp_path / "plain", swap_at=150, digest=False)
    result = xdl.diff(a, plain)
    assert result.only_a == [] and [(k.key, k.basis) for k in result.keys] == [("w", "summaries")]
    assert result.identical  # Equal stats: what summaries can say, and the basis says so.


def test_a_digest_that_differs_says_how_much_by_the_l2_norms_beside_it(tmp_path, capsys):
    """watch's default (stats and digest/K): K differs by digests, and each differing step
    carries both sides' l2 norms from K's stats (before: "-", no magnitude at all); a run that
    kept K's values meets it with the norm computed from them."""

    def run(out, scale_from=None, summary="stats"):
        xdl.clear()
        w = np.zeros(50, np.float32)
        xdl.watch({"w": w}, summary=summary)
        config = {"output_dir": str(out), "on_error": "raise", "fsync": False}
        with xdl.TraceHook(config) as hook:
            for step in range(20):
                w[:] = np.arange(50) + step
                if scale_from is not None and step >= scale_from:
                    w *= np.float32(1 + 0.01 * (step - scale_from + 1))  # 1%, 2%, ... larger.
                hook.step()
        xdl.clear()
        return str(out)

    a, b = run(tmp_path / "a"), run(tmp_path / "b", scale_from=10)
    result = xdl.diff(a, b)
    (w,) = result.differing
    assert w.basis == "digests" and (w.first["gstep"], w.last["gstep"]) == (10, 19)
    expected_a = np.linalg.norm(np.arange(50, dtype=np.float32) + 10)
    assert w.first["norm_a"] == pytest.approx(expected_a, rel=1e-6)
    assert w.first["norm_b"] / w.first["norm_a"] == pytest.approx(1.01, rel=1e-5)
    assert w.last["norm_b"] / w.last["norm_a"] == pytest.approx(1.10, rel=1e-5)
    # How it grows, as values do (before: the first step only): each growth point's gap between
    # the norms passes twice the previous point's; the report charts it relative to A's norm.
    gaps = [abs(p["norm_b"] - p["norm_a"]) for p in w.growth]
    assert w.growth[0]["gstep"] == 10 and len(gaps) >= 3
    assert all(later > 2 * earlier for earlier, later in zip(gaps, gaps[1:]))
    (chart,) = report_charts.divergence_charts(result, "b vs a", "runs")
    assert chart["title"] == "l2 change · b vs a"
    assert chart["x"] == sorted({p["gstep"] for p in w.growth} | {19})
    (line,) = chart["series"]
    assert line["values"][0] == pytest.approx(0.01, rel=1e-4)  # 1% at gstep 10.
    assert line["values"][-1] == pytest.approx(0.10, rel=1e-4)  # 10% at the last.
    assert cli.main(["diff", a, b]) == 1
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[0] == "w" and row[-2:] == ["+1%", "+10%"]
    # Values on side A: the norm is computed from them, as the writer's stats would be.
    (w,) = xdl.diff(run(tmp_path / "values", summary=None), b).differing
    assert w.basis == "digests" and w.first["norm_a"] == pytest.approx(expected_a, rel=1e-6)
    # A digest alone (summary="digest") meets watch's digest/w (before: "a digest vs a stats
    # summary", a structural difference at gstep 0); it says nothing of its own norm.
    (w,) = xdl.diff(run(tmp_path / "d", summary="digest"), b).differing
    assert w.basis == "digests" and not w.structural and w.first["gstep"] == 10
    assert w.first["norm_a"] is None and w.first["norm_b"] is not None


def test_full_values_on_one_side_meet_the_other_side_s_digest(tmp_path):
    """A run that kept w's values against one that kept stats and digest/w: the values are
    digested to meet digest/w (basis "digests"), so the swap the stats cannot see is found at
    its step, from either side (before: stats against stats, "identical")."""
    values = write_watched_run(tmp_path / "values", summary=None)
    assert xdl.open_trace(values).keys == ["w"]
    swapped = write_watched_run(tmp_path / "swapped", swap_at=150)
    for a, b in ((values, swapped), (swapped, values)):
        (w,) = xdl.diff(a, b).keys
        assert (w.key, w.basis, w.first["gstep"]) == ("w", "digests", 150)
    same = xdl.diff(values, write_watched_run(tmp_path / "same"))
    assert same.identical and [(k.key, k.basis) for k in same.keys] == [("w", "digests")]
    plain = write_watched_run(tmp_path / "plain", swap_at=150, digest=False)
    (w,) = xdl.diff(values, plain).keys  # No digest on B: its stats meet A's values' stats.
    assert w.basis == "summaries" and not w.differs


def write_two_ranks(out, replicated=None, ranks=(0, 1)):
    """Ranks 0 and 1 (or `ranks`) of one run: w (trace_variable) equal on all, act (trace_tensor)
    the step + the rank, so act differs per rank from gstep 0."""
    for rank in ranks:
        xdl.clear()
        w, act = np.zeros(10, np.float32), np.zeros(4, np.float32)
        xdl.trace_variable("w", w)
        xdl.trace_tensor("act", act)
        config = {"output_dir": str(out), "on_error": "raise", "fsync": False, "rank": rank}
        with xdl.TraceHook(config, replicated=replicated) as hook:
            for step in range(10):
                w[:] = step
                act[:] = step + rank
                hook.step(gstep=step)
    xdl.clear()
    return str(out)


def test_replicated_declaration_decides_what_ranks_compare(tmp_path, capsys):
    """TraceHook(replicated=) is recorded with the run: the rank comparison (diff --ranks, the
    report's headline) compares exactly the declared keys, none for False, and says which rule
    chose them (before: replicated= was an unknown argument, and activations never compared)."""
    from xdl_trace.read import report

    rule = xdl.diff(write_two_ranks(tmp_path / "rule"))
    assert rule.identical and rule.per_rank == ["act"]
    assert rule.replicated == "replicated by rule: parameters, gradients and optimizer settings"
    (text,) = [h["text"] for h in report.build_report([str(tmp_path / "rule")])["headline"]]
    assert text.endswith("ranks agree (1 key compared by values); " + rule.replicated)

    declared = write_two_ranks(tmp_path / "declared", replicated=["w", "act*"])
    assert xdl.open_trace(declared).run.metadata == {"xdl_trace.replicated": ["w", "act*"]}
    (act,) = xdl.diff(declared).differing
    assert act.key == "act" and act.first["gstep"] == 0
    assert cli.main(["diff", declared, "--ranks"]) == 1
    out = capsys.readouterr().out
    assert "rank 1 differs from rank 0 from gstep 0 in act" in out
    assert "compared across ranks: declared replicated (TraceHook(replicated=)): w, act*" in out

    none = write_two_ranks(tmp_path / "none", replicated=False)
    result = xdl.diff(none)
    assert result.keys == [] and result.per_rank == ["w", "act"]
    (headline,) = report.build_report([none])["headline"]
    assert headline["tag"] == "ranks not compared" and "replicated=)): none" in headline["text"]
    with pytest.raises(ValueError, match="replicated must be"):
        xdl.TraceHook({"output_dir": str(tmp_path / "bad")}, replicated=3)


def test_a_malformed_replicated_entry_is_named_and_the_report_stands(tmp_path, capsys):
    """metadata= may hold the entry replicated= writes, by hand and malformed: diff names it
    (exit 2, an error), and the report says the ranks were not compared, with every chart
    (before: the report failed whole)."""
    from xdl_trace.read import report

    out = str(tmp_path / "run")
    for rank in (0, 1):
        xdl.clear()
        xdl.trace_variable("w", np.zeros(3, np.float32))
        config = {"output_dir": out, "fsync": False, "rank": rank}
        with xdl.TraceHook(config, metadata={"xdl_trace.replicated": "w*"}) as hook:
            for step in range(3):
                hook.step(gstep=step)
    with pytest.raises(ValueError, match="'xdl_trace.replicated' is 'w\\*', not a list of globs"):
        xdl.diff(out)
    assert cli.main(["diff", out, "--ranks"]) == 2
    assert "not a list of globs" in capsys.readouterr().err
    model = report.build_report([out])
    (headline,) = [h for h in model["headline"] if h["tag"] == "ranks not compared"]
    assert headline["severity"] == "error" and "not a list of globs" in headline["text"]
    assert [c["key"] for c in model["cards"]] == ["w"] and model["differences"] == []


def test_ranks_are_compared_in_one_pass_over_rank_0(tmp_path):
    """diff --ranks reads rank 0 once for all the others, in step with them: every byte of the
    run is walked once (before: rank 0 once per other rank), and each rank gets its own result."""
    out = write_two_ranks(tmp_path / "run", replicated=["w", "act"], ranks=(0, 1, 2, 3))
    result = xdl.diff(out)
    # Each rank's record bytes, from diffs of one pair (a pair reads both of its ranks once).
    pair = {(a, b): xdl.diff(out, ranks=[a, b]).bytes_read for a, b in ((0, 1), (0, 2), (1, 2))}
    rank_0 = (pair[0, 1] + pair[0, 2] - pair[1, 2]) / 2
    others = sum(xdl.diff(out, ranks=[0, r]).bytes_read - rank_0 for r in (1, 2, 3))
    assert result.bytes_read == rank_0 + others  # Before: rank 0's bytes three times.
    assert [(k.key, k.rank_b) for k in result.differing] == [("act", 1), ("act", 2), ("act", 3)]
    assert [(s["rank_a"], s["rank_b"], s["compared"]) for s in result.steps] == [
        (0, 1, 10),
        (0, 2, 10),
        (0, 3, 10),
    ]


def write_trained_and_evaluated(out, eval_change_at=None, hook_per_eval=False, evaluate=True):
    """A training hook (w, loss) and its evaluation (scope "eval", test.* files): one eval hook,
    or a hook begun per evaluation (XDL's way: a run each). `eval_change_at`: the eval accuracy
    of that gstep is off by 1e-6."""
    xdl.clear()
    w = np.zeros(8, np.float32)
    xdl.trace_variable("w", w)
    xdl.trace_value("acc", scope="eval")
    config = {"output_dir": str(out), "on_error": "raise", "fsync": False}
    one = (
        None
        if hook_per_eval or not evaluate
        else xdl.TraceHook(config, is_training=False, scope="eval")
    )
    with xdl.TraceHook(config) as train:
        for step in range(40):
            w[:] = np.cos(np.arange(8) + step)
            train.step(gstep=step)
            if evaluate and step % 10 == 9:
                acc = step / 40 + (1e-6 if step == eval_change_at else 0.0)
                if hook_per_eval:
                    with xdl.TraceHook(config, is_training=False, scope="eval", gstep=step) as h:
                        h.step(values={"acc": acc})
                else:
                    one.step(gstep=step, values={"acc": acc})
    if one is not None:
        one.end()
    xdl.clear()
    return str(out)


@pytest.mark.parametrize("hook_per_eval", [False, True], ids=["one_eval_hook", "hook_per_eval"])
def test_two_runs_evaluations_are_compared_with_them(tmp_path, capsys, hook_per_eval):
    """diff A B compares the runs' evaluations (test.* files beside each, paired as the report
    pairs them) as well: training identical and an eval accuracy off at gstep 29 is a difference
    (exit 1), named there; a run without one is said; --keys can take the evaluations' keys
    alone; report A B draws the eval comparison as its own. Before: "identical", exit 0. A hook
    begun per evaluation makes one run per evaluation, read together (TraceReader::OfRuns)."""
    a = write_trained_and_evaluated(tmp_path / "a", hook_per_eval=hook_per_eval)
    b = write_trained_and_evaluated(tmp_path / "b", 29, hook_per_eval=hook_per_eval)
    same = write_trained_and_evaluated(tmp_path / "same", hook_per_eval=hook_per_eval)
    result = xdl.diff(a, b)
    assert result.records_identical and not result.identical
    (acc,) = result.evaluation.keys
    assert (acc.key, acc.first["gstep"], acc.steps_compared) == ("eval/acc", 29, 4)
    assert result.as_dict()["evaluation"]["identical"] is False
    assert cli.main(["diff", a, b]) == 1
    said = capsys.readouterr().out
    assert "identical: 1 key(s) over 40 step pair(s)" in said
    assert "evaluations (test.trace.* beside the runs):" in said
    assert said.rstrip().endswith("run B differs from run A from gstep 29 in eval/acc")
    assert cli.main(["diff", a, same]) == 0
    assert "identical: 1 key(s) over 4 step pair(s), compared by values" in capsys.readouterr().out
    assert cli.main(["diff", a, b, "--keys", "eval/*"]) == 1
    assert capsys.readouterr().out.startswith("evaluations (test.trace.* beside the runs):")
    assert cli.main(["diff", a, b, "--keys", "w"]) == 0  # The evaluations hold no w.
    untested = write_trained_and_evaluated(tmp_path / "untested", evaluate=False)
    assert cli.main(["diff", a, untested]) == 1
    assert "evaluation only in A (test.trace.*)" in capsys.readouterr().out

    # A directory holding two runs, each with its evaluation: the latest one's alone is read
    # (its eval runs' files, not the earlier run's: before, diff's C++ pass read every eval run
    # of the directory when they were several).
    twice = tmp_path / "twice"
    write_trained_and_evaluated(twice, 19, hook_per_eval=hook_per_eval)
    write_trained_and_evaluated(twice, hook_per_eval=hook_per_eval)
    result = xdl.diff(a, str(twice), run_b="latest")
    assert result.identical, result.as_dict()
    assert result.evaluation.keys[0].steps_compared == 4
    # `diff DIR` of a directory of two runs says how to compare them (before: "read them
    # together with --run all", which compares nothing).
    assert cli.main(["diff", str(twice)]) == 2
    said = capsys.readouterr().err
    assert f"compare two of them with `xdl-trace diff {twice} {twice} --run ID --run-b ID`" in said
    first, second = [r.id for r in xdl.runs(str(twice))]
    assert cli.main(["diff", str(twice), str(twice), "--run", first[:8], "--run-b", second]) == 1

    from xdl_trace.read import report

    model = report.build_report([a, b])
    texts = [h["text"] for h in model["headline"]]
    assert "b vs a: the runs agree (1 key compared by values)" in texts
    assert "b · eval vs a · eval: the runs differ from gstep 29 in eval/acc" in texts
