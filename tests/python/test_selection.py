"""Tests of xdl_trace.read.selection: the one Selection value and the readers that take it.

Checked when made, keywords turned into it by Selection.of, and each reader given a Selection
reads what its keywords read."""

import dataclasses

import numpy as np
import pytest

import xdl_trace as xdl
from xdl_trace.read import analysis, report, timeline
from xdl_trace.read.selection import Selection, gstep_window


def test_selection_is_checked_and_normalized_when_made():
    sel = Selection(keys="loss", gsteps=(g for g in (9, 3, 3, 5)), ranks=[np.int64(1), 0])
    assert sel.gsteps == [3, 5, 9] and sel.ranks == (1, 0)
    assert sel.window() == (3, 9, [3, 5, 9]) == gstep_window([9, 5, 3])
    assert Selection(gsteps=(4, None)).window() == (4, None, None)
    assert Selection(gsteps=range(0, 10, 5)).window() == (0, 5, [0, 5])
    with pytest.raises(ValueError, match="cannot have a step"):
        Selection(gsteps=slice(0, 10, 2))
    with pytest.raises(ValueError):
        Selection(ranks=["x"])
    # The CLI's text handed to the library, a step that is no integer: named, never read as
    # the characters "1", ":", "3" (before: "invalid literal for int() ... ':'") or as 1.
    with pytest.raises(ValueError, match=r"gsteps='1:3': give \(begin, end\), a range"):
        Selection(gsteps="1:3")
    with pytest.raises(ValueError, match=r"gsteps=\[1.5\]: each must be an integer"):
        Selection(gsteps=[1.5])
    with pytest.raises(ValueError, match=r"gsteps=\(1.5, 3\): begin and end must be integers"):
        Selection(gsteps=(1.5, 3))
    with pytest.raises(ValueError, match=r"ranks='0,1': give ranks"):
        Selection(ranks="0,1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        sel.run = "latest"


def test_of_takes_keywords_in_place_of_the_fields():
    base = Selection(keys="w", gsteps=(1, 5), run="all")
    assert Selection.of(None, keys=None, gsteps=(0, 1)) == Selection(gsteps=(0, 1))
    assert Selection.of(base) is base
    assert Selection.of(base, ranks=[2], run=None) == Selection(
        keys="w", gsteps=(1, 5), ranks=(2,), run="all"
    )
    assert base.replace(run=None).run is None
    with pytest.raises(TypeError, match="no field rank"):
        Selection.of(None, rank=0)
    with pytest.raises(TypeError, match="must be a Selection"):
        Selection.of({"keys": "w"})


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("selection") / "run")
    xdl.clear()
    state = {"v": np.zeros(16, np.float32)}
    xdl.trace_tensor("v", lambda: state["v"])
    xdl.trace_callback("loss", lambda: np.float32(state["v"].sum()))
    for rank in (0, 1):
        with xdl.TraceHook({"output_dir": out, "rank": rank, "on_error": "raise"}) as hook:
            for step in range(30):
                state["v"] = np.linspace(-1, 1, 16, dtype=np.float32) * (step + rank)
                hook.step(gstep=step)
    xdl.clear()
    return out


def test_readers_given_a_selection_read_what_the_keywords_read(two_ranks):
    sel = Selection(keys=["loss"], gsteps=[3, 4, 20], ranks=[1])
    trace = xdl.open_trace(two_ranks)
    by_value = [(r.rank, r.gstep, float(r.columns["loss"])) for r in trace.records(selection=sel)]
    by_keywords = [
        (r.rank, r.gstep, float(r.columns["loss"]))
        for r in trace.records(keys=["loss"], gsteps=[3, 4, 20], ranks=[1])
    ]
    assert by_value == by_keywords and [g for _, g, _ in by_value] == [3, 4, 20]
    glob = Selection(keys="lo*", gsteps=(5, 9), ranks=[0])
    scan = analysis.scan_run(two_ranks, selection=glob)
    assert scan.keys == ["loss"] and scan.ranks == [0] and scan.gstep_range == (5, 9)
    assert analysis.scan_run(two_ranks, selection=glob, gsteps=(0, 2)).gstep_range == (0, 2)
    model = report.build_report(two_ranks, selection=glob)
    assert model["runs"][0]["gsteps"] == [5, 9] and model["runs"][0]["ranks"] == [0]
    info = timeline.build_timeline(two_ranks, selection=Selection(gsteps=(5, 9), ranks=[1]))
    assert info["otherData"]["gsteps"] == [5, 9] and info["otherData"]["ranks"] == 1
