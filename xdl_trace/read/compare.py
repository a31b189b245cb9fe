"""``xdl.diff``: where two runs, or two ranks of one run, part ways, key by key.

    result = xdl.diff("/tmp/run_a", "/tmp/run_b")      # two runs: rank r against rank r
    result = xdl.diff("/tmp/ddp_run")                  # one run: every rank against rank 0
    if not result.identical:
        first = result.keys[0]                         # sorted by first divergence
        print(first.key, first.first["gstep"], first.first["max_abs"])

The comparison itself runs in C++ (``_core.diff_runs``, cpp/src/analysis/run_diff.h): both sides
read once, in step by gstep (the rank comparison reads rank 0 once for all the others), each
pair of records compared in place, so memory is bounded by the largest record, not the run.
Exact by default (bit for bit: the same NaN bits agree); ``rtol`` / ``atol`` compare as
``numpy.isclose`` with side A as the reference (any NaN agrees with any NaN).

What is compared says what agreement proves (``KeyDiff.basis``, the weakest of its steps):
"values" (the tensors themselves), "digests" (``summary="digest"`` columns, exact but for a 2^-64
chance; a value column meeting a digest column is digested; a differing digest says where, not
by how much; tolerances do not apply) or "summaries" (stats, histograms, user summaries: equal
summaries prove nothing exact).

A companion digest (``watch(..., digest=True)`` records ``digest/K`` beside K) is folded into K:
where K is not a value column on both sides, each side offers K's values or else its
``digest/K``, and when both offer one of them those are compared (values meeting a digest are
digested): the result is K's, basis "digests" (full values > digests > summaries); a companion
is never a key of its own, nor a one-side key when one run recorded digests and the other did
not.

Ranks (one run, ``b`` None): only the keys that data parallelism replicates are compared.
Which: the keys ``keys=`` (globs) names, whatever their source; else the run's declaration
(``TraceHook(replicated=...)``, recorded in its run metadata (_names.REPLICATED_ENTRY):
exactly the keys its globs match, none for False); else the rule: parameters (descriptor source
"variable"), gradients ("gradient", all-reduced by DDP) and optimizer settings (watch(optimizer=)'s
learning rates, ``optimizer/lr``: _names.OPTIMIZER_PART), while activations, the loss and other
per-shard values (sources "tensor", "callback", "once") legitimately differ per rank. The keys
left out are listed in ``per_rank``; ``per_rank=`` globs declare more;
``DiffResult.replicated`` says which of the three chose.
"""

import dataclasses
import fnmatch
import warnings

from .. import _core, _names
from .analysis import digested_key, is_digest, is_optimizer_setting
from .reader import TornTailWarning, open_trace
from .selection import Selection

__all__ = ["diff", "DiffResult", "KeyDiff", "REPLICATED_SOURCES"]

# Descriptor sources that data parallelism keeps equal on every rank (the rank comparison's rule).
REPLICATED_SOURCES = ("variable", "gradient")
_BASES = {0: None, 1: "values", 2: "digests", 3: "summaries"}


@dataclasses.dataclass
class KeyDiff:
    """One key of one pair of sides (``rank_a`` of A against ``rank_b`` of B).

    ``first``/``last``: the first and last differing steps as dicts (gstep, differing, elements,
    first_index, max_abs, max_rel, max_ulp; norm_a and norm_b: where compared by digests, the
    l2 norm of each side's tensor from its stats or values, else None), None when the key
    agrees; ``growth``: the first step, then each whose max_abs (compared by digests:
    ``|norm_b - norm_a|``) passes twice the previous point's; ``structural``: a dtype,
    shape or content that differs ("" when none) from ``structural_gstep``; ``basis``: "values",
    "summaries" or None (no step had a value on both sides)."""

    key: str
    rank_a: int
    rank_b: int
    basis: object
    steps_compared: int
    steps_differing: int
    first: object
    last: object
    growth: list
    structural: str
    structural_gstep: object

    @property
    def differs(self):
        return self.steps_differing > 0

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class DiffResult:
    """What ``diff`` found. ``keys``: every compared key of every rank pair, the differing ones
    first, sorted by first divergence (the earliest first: that is where to look), then the
    agreeing ones; ``only_a``/``only_b``: keys on one side only; ``per_rank``: keys not compared
    across ranks (legitimately per rank); ``steps``: per rank pair, gsteps compared and those on
    one side only (counted, the first ones named); ``ranks_only_a``/``ranks_only_b``: ranks one
    side lacks. ``identical``: nothing differs, structurally or in value."""

    a: str
    b: str
    keys: list
    only_a: list
    only_b: list
    per_rank: list
    steps: list
    ranks_only_a: list
    ranks_only_b: list
    bytes_read: int
    replicated: object = None  # Ranks: what chose the compared keys, in words; None for runs.
    # Runs: their evaluations (test.* files beside each, trace_runs.evaluation_of) compared as a
    # DiffResult of their own; evaluation_only "A" or "B" where one run has one, None where both
    # or neither have.
    evaluation: object = None
    evaluation_only: object = None

    @property
    def differing(self):
        return [k for k in self.keys if k.differs]

    @property
    def identical(self):
        return self.records_identical and not (
            self.evaluation_only or (self.evaluation is not None and not self.evaluation.identical)
        )

    @property
    def records_identical(self):
        """Nothing differs in the records compared (their runs' evaluations aside)."""
        return not (
            self.differing
            or self.only_a
            or self.only_b
            or self.ranks_only_a
            or self.ranks_only_b
            or any(s["only_a"] or s["only_b"] for s in self.steps)
        )

    def as_dict(self):
        """As plain JSON-ready data (what ``xdl-trace diff --json`` prints): an infinite max_abs
        or max_rel (a NaN on one side only; a difference from a 0 of A) is the string "inf"."""
        out = _json_safe(dataclasses.asdict(self))
        out["identical"] = self.identical
        if self.evaluation is not None:
            out["evaluation"]["identical"] = self.evaluation.identical
        return out


def _json_safe(value):
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and value == float("inf"):
        return "inf"
    return value


def _matches(key, patterns):
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def _patterns(globs):
    if globs is None:
        return None
    return [p for p in globs.split(",") if p] if isinstance(globs, str) else list(globs)


def _companions(schema):
    """{K: "digest/K"} of a schema's companion digests (a digest column beside a key K)."""
    out = {}
    for key, entry in schema.items():
        of = digested_key(key) if is_digest(entry) else None
        if of is not None and of in schema:
            out[of] = key
    return out


def _compared_columns(key, schema_a, schema_b, companions_a, companions_b):
    """The columns compared for key K, (side A's, side B's): on each side K where it holds K's
    values or digest (summary="digest"), else its companion digest/K where it has one; when a
    side has neither (a summary without a digest), K on both (summaries meet)."""
    picked = []
    for schema, companions in ((schema_a, companions_a), (schema_b, companions_b)):
        if (schema[key].kind or "value") in ("value", "digest"):
            picked.append(key)
        elif key in companions:
            picked.append(companions[key])
        else:
            return key, key
    return tuple(picked)


def has_norms(point):
    """Whether a differing step (a KeyDiff point) knows both sides' l2 norms."""
    return point.get("norm_a") is not None and point.get("norm_b") is not None


def norm_change(point):
    """How B's l2 norm differs from A's at a step compared by digests ("+0.012%"; "-" where
    either is unknown): what says how much where the digests say only that."""
    if not has_norms(point):
        return "-"
    a, b = point["norm_a"], point["norm_b"]
    if a == 0:
        return "0" if b == 0 else f"0->{b:.3g}"
    percent = 100 * (b - a) / a
    return f"{percent:+.0f}%" if abs(percent) >= 10 else f"{percent:+.2g}%"


def _norm_column(key, column, schema):
    """Side's stats column of key K where it compares K's digest companion (xdl.watch's K and
    digest/K): its l2 norms say how much a differing digest differs; "" where it has none."""
    return key if column != key and getattr(schema[key], "kind", None) == "stats" else ""


def _run_ids(trace):
    return None if trace.run_ids is None else list(trace.run_ids)


def diff(
    a,
    b=None,
    keys=None,
    gsteps=None,
    ranks=None,
    rtol=0.0,
    atol=0.0,
    per_rank=None,
    prefix="train",
    name="trace",
    run=None,
    run_b=None,
    selection=None,
    attempts=None,
):
    """Compares run `b` with run `a` (rank r with rank r), or with `b` None the ranks of `a`
    (every rank of `ranks`, default all, against the lowest). Returns a ``DiffResult``.

    keys: glob patterns (a list or one comma-separated string) of the keys compared; gsteps: as
    ``Selection``; rtol/atol: a tolerance (both 0: exact); per_rank: globs of keys that
    legitimately differ per rank (the rank comparison leaves them out; see the module
    docstring); run/run_b: which run of each directory (as ``open_trace``; run_b defaults to
    run); attempts: of a restarted run, "latest" (None) or "all" (as ``open_trace``).

    Two training runs (prefix "train") whose directories hold their evaluations (test.* files
    their processes wrote, as the report pairs them) have those compared too, with the same
    selection: ``DiffResult.evaluation``. `keys` must match a key of either."""
    sel = Selection.of(selection, keys=keys, gsteps=gsteps, ranks=ranks, run=run, attempts=attempts)
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0, not {rtol} and {atol}")
    trace_a = open_trace(a, prefix=prefix, name=name, run=sel.run, attempts=sel.attempts)
    same = b is None
    trace_b = (
        trace_a
        if same
        else open_trace(b, prefix=prefix, name=name, run=run_b or sel.run, attempts=sel.attempts)
    )
    evaluation, evaluation_only = None, None
    if not same and prefix == "train":
        eval_a, eval_b = trace_a.evaluation(), trace_b.evaluation()
        if eval_a is not None and eval_b is not None:
            evaluation = _diff_traces(eval_a, eval_b, sel, rtol, atol, per_rank, must_match=False)
        elif eval_a is not None or eval_b is not None:
            evaluation_only = "A" if eval_b is None else "B"
    result = _diff_traces(
        trace_a,
        trace_b,
        sel,
        rtol,
        atol,
        per_rank,
        must_match=evaluation is None or not evaluation.keys,
    )
    result.evaluation = evaluation if evaluation is not None and evaluation.keys else None
    result.evaluation_only = evaluation_only
    return result


def _diff_traces(trace_a, trace_b, sel, rtol, atol, per_rank, must_match=True):
    """``diff`` of two opened traces (the same one: its ranks). must_match=False: key patterns
    or gsteps that select nothing give a result without keys, not an error (an evaluation whose
    keys the selection leaves out)."""
    same = trace_b is trace_a
    schema_a, schema_b = trace_a.schema(), trace_b.schema()
    companions_a, companions_b = _companions(schema_a), _companions(schema_b)
    folded = set(companions_a.values()) | set(companions_b.values())
    patterns = _patterns(sel.keys)

    def wanted(schema, companions):  # The keys asked for, companions folded into their keys
        # (asking for digest/K asks for K).
        return [
            k
            for k in schema
            if k not in folded
            and (
                patterns is None
                or _matches(k, patterns)
                or (k in companions and _matches(companions[k], patterns))
            )
        ]

    wanted_a, wanted_b = wanted(schema_a, companions_a), wanted(schema_b, companions_b)
    # A selection that holds nothing is an error (a typo is not "identical"), naming the runs.
    where = trace_a.path if same else f"{trace_a.path} and {trace_b.path}"
    if patterns is not None and not wanted_a and not wanted_b and must_match:
        keys = ", ".join(dict.fromkeys(list(schema_a) + list(schema_b)))
        raise KeyError(f"{where}: no key matches {sel.keys!r} (keys: {keys})")
    only_a = [k for k in wanted_a if k not in schema_b]
    only_b = [k for k in wanted_b if k not in schema_a]
    common = [k for k in wanted_a if k in schema_b]
    per_rank_keys, replicated = [], None
    if same:
        declared = _patterns(per_rank) or []
        replicated_globs = _declared_replicated(trace_a)
        # What chooses the compared keys (in words, and as a test of a key and its source).
        if patterns is not None:
            replicated = "the keys asked for"
            replicates = lambda key, source: True  # noqa: E731
        elif replicated_globs is not None:
            replicated = "declared replicated (TraceHook(replicated=)): " + (
                ", ".join(replicated_globs) or "none"
            )
            replicates = lambda key, source: _matches(key, replicated_globs)  # noqa: E731
        else:
            replicated = "replicated by rule: parameters, gradients and optimizer settings"
            replicates = lambda key, source: (  # noqa: E731
                source is None or source in REPLICATED_SOURCES or is_optimizer_setting(key)
            )
        per_rank_keys = [
            k for k in common if _matches(k, declared) or not replicates(k, schema_a[k].source)
        ]
        per_rank_set = set(per_rank_keys)  # A set: 100,000 keys stay linear.
        common = [k for k in common if k not in per_rank_set]
    selected = list(sel.ranks) if sel.ranks is not None else None
    ranks_a = [r for r in trace_a.ranks if selected is None or r in selected]
    if same:
        if len(ranks_a) < 2:
            raise ValueError(
                f"{trace_a.path}: ranks {ranks_a} selected: comparing ranks needs two or more "
                "(or give a second run to compare with)"
            )
        calls = [(ranks_a[0], ranks_a[1:])]  # Rank 0 read once, in step with all the others.
        ranks_only_a = ranks_only_b = []
    else:
        ranks_b = [r for r in trace_b.ranks if selected is None or r in selected]
        calls = [(r, [r]) for r in ranks_a if r in ranks_b]
        ranks_only_a = [r for r in ranks_a if r not in ranks_b]
        ranks_only_b = [r for r in ranks_b if r not in ranks_a]
    compared = [
        _compared_columns(k, schema_a, schema_b, companions_a, companions_b) for k in common
    ]
    columns_a = [column for column, _ in compared]
    columns_b = [column for _, column in compared]
    norms_a = [_norm_column(k, c, schema_a) for k, c in zip(common, columns_a)]
    norms_b = [_norm_column(k, c, schema_b) for k, c in zip(common, columns_b)]
    begin, end, steps = sel.window()
    results, step_rows, bytes_read = [], [], 0
    pairs = []  # (rank_a, rank_b, what diff_runs found)
    for rank_a, ranks_b in calls:
        found = _core.diff_runs(
            trace_a.path,
            _run_ids(trace_a),
            rank_a,
            trace_b.path,
            _run_ids(trace_b),
            ranks_b,
            columns_a,
            begin,
            end,
            steps,
            float(rtol),
            float(atol),
            trace_a.prefix,
            trace_a.name,
            excluded_a=[c.path for c in trace_a.copies],  # As the Python reader: left out.
            excluded_b=[c.path for c in trace_b.copies],
            keys_b=columns_b,
            norms_a=norms_a,
            norms_b=norms_b,
            all_attempts_a=trace_a.attempts == "all",
            all_attempts_b=trace_b.attempts == "all",
        )
        pairs += [(rank_a, rank_b, one) for rank_b, one in zip(ranks_b, found)]
    for rank_a, rank_b, found in pairs:
        bytes_read += found["bytes_read"]
        for torn in found["torn_tails"]:  # A run being written: what is complete is compared.
            warnings.warn(str(torn), TornTailWarning, stacklevel=2)
        step_rows.append(
            {
                "rank_a": rank_a,
                "rank_b": rank_b,
                "compared": found["steps_compared"],
                "only_a": found["only_a"],
                "only_b": found["only_b"],
                "only_a_gsteps": list(found["only_a_gsteps"]),
                "only_b_gsteps": list(found["only_b_gsteps"]),
            }
        )
        for key, k in zip(common, found["keys"]):  # In `common`'s order.
            for point in [k["first"], k["last"], *k["growth"]]:
                if point is not None:
                    point["basis"] = _BASES[point["basis"]]
            results.append(
                KeyDiff(
                    key=key,
                    rank_a=rank_a,
                    rank_b=rank_b,
                    basis=_BASES[k["basis"]],
                    steps_compared=k["steps_compared"],
                    steps_differing=k["steps_differing"],
                    first=k["first"],
                    last=k["last"],
                    growth=list(k["growth"]),
                    structural=k["structural"],
                    structural_gstep=k["structural_gstep"] if k["structural"] else None,
                )
            )
    if (
        sel.gsteps is not None
        and must_match
        and not any(r["compared"] or r["only_a"] or r["only_b"] for r in step_rows)
    ):
        raise ValueError(f"{where}: no record in the gsteps selected: {sel.gsteps!r}")
    # Of the keys parting at one gstep, an optimizer's setting first: it explains the rest.
    results.sort(
        key=lambda r: (
            not r.differs,
            (r.first or {}).get("gstep", 0) if r.differs else 0,
            not is_optimizer_setting(r.key),
            r.rank_b,
            r.key,
        )
    )
    return DiffResult(
        a=trace_a.path,
        b=trace_b.path,
        keys=results,
        only_a=only_a,
        only_b=only_b,
        per_rank=per_rank_keys,
        steps=step_rows,
        ranks_only_a=ranks_only_a,
        ranks_only_b=ranks_only_b,
        bytes_read=bytes_read,
        replicated=replicated,
    )


def _declared_replicated(trace):
    """The run's TraceHook(replicated=) globs (a list; [] declares none), or None when it
    declared nothing. ValueError naming the entry when it is not a list of strings."""
    metadata = trace.run.metadata if trace.run is not None else {}
    globs = metadata.get(_names.REPLICATED_ENTRY)
    if globs is None:
        return None
    if not isinstance(globs, list) or not all(isinstance(g, str) for g in globs):
        entry = _names.REPLICATED_ENTRY
        raise ValueError(f"{trace.path}: run metadata {entry!r} is {globs!r}, not a list of globs")
    return globs
