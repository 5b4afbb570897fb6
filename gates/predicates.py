"""The general predicates: relative improvement, context change, equivalence and
threshold (every other predicate has a module named by what it judges; `gates.catalog`
lists them all). A user's plugin registers its own the same way, with
`gates.registry.register(PredicateSpec(name, judge, Params))`.

Every predicate receives canonical rows only (see `engine.canonical_only`) and reads its
numbers through `gates.compare`: per cell (probe, scenario, context, mode), with n, the
interval of each median and each cell's error rate, so that a pass is one the numbers
support. Reasons are in the seed's style: the numbers first (with their intervals), then
the rule, then whatever made the verdict fail or stay inconclusive.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import pandas as pd
from pydantic import Field

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import context_label, num
from gates import compare
from gates.arm_cells import cell_stats
from gates.cells import CellStat, Selector
from gates.claims import Claim, check_bound, gate_p, holm_fails, worst
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import Rigor
from gates.runs import block_of

# -- relative improvement ---------------------------------------------------------------


class RelativeParams(Selector, Rigor):
    min_gain: float = Field(description="minimum relative gain, 0.10 = +10%")
    higher_is_better: bool = True
    also_metric: str | None = Field(default=None, description="the gain must also show on this metric")
    also_probe: str | None = None
    also_scenario: str | None = None
    also_min_gain: float = 0.0
    also_higher_is_better: bool = True


def relative_improvement(rows: pd.DataFrame, gate: GateEntry, p: RelativeParams) -> GateResult:
    """Every subject must beat every baseline arm by at least `min_gain`, on every cell they
    share, with the gain's whole interval above the threshold (`gates.compare`); with
    `also_metric`, the same must hold there too ("decode +14-24%, but no 10% of total
    time"). Contexts are compared one by one, never pooled."""
    if not gate.baseline:
        return pending("relative_improvement needs a baseline arm")
    rigor = p.of()
    main = compare.compare(
        rows,
        gate.subjects,
        gate.baseline,
        p.selector(),
        higher_is_better=p.higher_is_better,
        threshold=p.min_gain,
        rigor=rigor,
        holm=not p.also_metric,
    )
    if main.missing:
        return pending(main.missing, **main.evidence())
    also: compare.Outcome | None = None
    if p.also_metric:
        also_sel = Selector(metric=p.also_metric, probe=p.also_probe, scenario=p.also_scenario, context=p.context)
        also = compare.compare(
            rows,
            gate.subjects,
            gate.baseline,
            also_sel,
            higher_is_better=p.also_higher_is_better,
            threshold=p.also_min_gain,
            rigor=rigor,
            holm=False,
        )
        if also.missing:
            return pending(also.missing, **main.evidence(), how=_how(gate))
        holm_fails([*main.comparisons, *also.comparisons], rigor)  # a fail on either metric fails the gate
    evidence: dict[str, Any] = {**main.evidence(), "how": _how(gate)}
    reason = main.text()
    verdict = main.verdict
    if also is not None:
        evidence["also"] = also.evidence()
        evidence.update(gate_p([*main.comparisons, *also.comparisons]))
        joint = worst([verdict, also.verdict])
        if verdict == Verdict.PASS and also.verdict == Verdict.FAIL:
            reason = f"{reason}, but {also.text()}"
        else:
            reason = f"{reason}; {also.text()}"
        verdict = joint
    return GateResult(verdict=verdict, reason=reason, evidence=evidence)


def _how(gate: GateEntry) -> str:
    if len(gate.baseline) > 1:
        return f"each subject against each baseline ({', '.join(gate.baseline)}): all must pass"
    return "each subject against the baseline, per common cell: all must pass"


# -- one arm across contexts ----------------------------------------------------------------


class ContextChangeParams(Selector, Rigor):
    context: int = Field(
        ge=1, description='the context (tokens) of the cell judged: "8K is X% slower than 4K" judges 8192'
    )
    baseline_context: int = Field(ge=1, description="the context it is compared with, on the same arm (4096)")
    min_gain: float = Field(
        description="the least gain at `context` over `baseline_context`: -0.10 = at most 10% worse, 0 = at least as good"
    )
    higher_is_better: bool = True


def context_change(rows: pd.DataFrame, gate: GateEntry, p: ContextChangeParams) -> GateResult:
    """Each subject at `context` against itself at `baseline_context` ("8K decodes within
    10% of 4K"), as `relative_improvement` judges two arms: per common cell, over runs,
    paired by block -- a run that measured both contexts on one server start is its own
    pair, so the restart noise cancels. No baseline arm: the arm is its own baseline."""
    if gate.baseline:
        return pending("context_change compares each subject with itself at baseline_context: leave baseline empty")
    if p.context == p.baseline_context:
        return pending("context_change needs two different contexts")
    here, there = context_label(p.context), context_label(p.baseline_context)
    sel = Selector(metric=p.metric, probe=p.probe, scenario=p.scenario, context=None)
    rigor = p.of()
    merged: compare.Outcome | None = None
    for arm in gate.subjects:
        mine = rows[rows["arm_id"] == arm]
        # the same cell at both contexts: only the arm's name says which context it is
        subject, baseline = f"{arm}@{here}", f"{arm}@{there}"
        at, base = mine[mine["context"] == p.context], mine[mine["context"] == p.baseline_context]
        relabelled = pd.concat(
            [at.assign(arm_id=subject, context=0), _same_settings(base, at).assign(arm_id=baseline, context=0)],
            ignore_index=True,
        )
        one = compare.compare(
            relabelled,
            [subject],
            [baseline],
            sel,
            higher_is_better=p.higher_is_better,
            threshold=p.min_gain,
            rigor=rigor,
            holm=False,
        )
        if one.missing:
            return pending(one.missing, how=_across(here, there))
        if merged is None:
            merged = one
        else:
            merged.stats.update(one.stats)
            merged.comparisons += one.comparisons
            merged.unmatched = "; ".join(x for x in (merged.unmatched, one.unmatched) if x)
    assert merged is not None  # a gate has at least one subject
    holm_fails(merged.comparisons, rigor)  # every subject's claims, one family
    evidence: dict[str, Any] = {
        **merged.evidence(),
        "context": p.context,
        "baseline_context": p.baseline_context,
        "how": _across(here, there),
    }
    return GateResult(verdict=merged.verdict, reason=merged.text(), evidence=evidence)


def _same_settings(base: pd.DataFrame, at: pd.DataFrame) -> pd.DataFrame:
    """`base` with each run's settings named as the run's at the other context: a probe
    run's settings hash covers its context, so the two contexts of one server start would
    never share a cell. Runs are matched by block, so a rerun at other settings (other
    hashes in both contexts) stays apart."""
    if "settings_hash" not in base or base.empty or at.empty:
        return base
    blocks_at, blocks_base = block_of(at), block_of(base)
    own = {b: h for b, h in zip(blocks_at, at["settings_hash"].astype(str))}
    renamed = [own.get(b, h) for b, h in zip(blocks_base, base["settings_hash"].astype(str))]
    return base.assign(settings_hash=renamed)


def _across(here: str, there: str) -> str:
    return f"each subject at {here} against itself at {there}, per common cell, paired by block (one server start measured both)"


# -- equivalence ("within X%") ------------------------------------------------------------


class EquivalenceParams(Selector, Rigor):
    margin: float = Field(
        gt=0, lt=1, description="the arms count as equivalent when the ratio stays within 1 +- margin (0.05 = 5%)"
    )


def equivalence(rows: pd.DataFrame, gate: GateEntry, p: EquivalenceParams) -> GateResult:
    """ "Within X%": every subject's value stays within 1 +- margin of every baseline's, by
    two one-sided tests (TOST) on the log ratio over runs -- pass when both "not below
    1 - margin" and "not above 1 + margin" are shown at (1 - confidence) / 2, i.e. the
    whole CI lies inside the margin; fail when the whole CI lies outside it; else
    inconclusive. Never a pass from a CI that is merely wide."""
    if not gate.baseline:
        return pending("equivalence needs a baseline arm")
    rigor = p.of()
    main = compare.compare(
        rows, gate.subjects, gate.baseline, p.selector(), higher_is_better=True, threshold=0.0, rigor=rigor
    )
    if main.missing:
        return pending(main.missing, **main.evidence())
    lower, upper = math.log(1 - p.margin), math.log(1 + p.margin)
    for c in main.comparisons:
        est = c.estimate
        if not c.statistical or est is None:
            continue
        scale = 1.0
        if not est.log:
            base = [r.value for r in c.baseline.runs]
            scale = sum(base) / len(base) if base else 1.0
            lo_b, hi_b = -p.margin * scale, p.margin * scale
        else:
            lo_b, hi_b = lower, upper
        c.p_pass = max(est.p_above(lo_b), est.p_below(hi_b))
        c.p_fail = min(1.0, 2 * min(est.p_below(lo_b), est.p_above(hi_b)))
        if c.p_pass <= rigor.alpha:
            c.verdict, c.notes = Verdict.PASS, []
        elif c.p_fail <= rigor.alpha:
            c.verdict, c.notes = (
                Verdict.FAIL,
                [f"{c.subject.arm} differs from {c.baseline.arm} by more than {num(p.margin * 100)}%"],
            )
        else:
            c.verdict, c.notes = Verdict.INCONCLUSIVE, [f"{c.subject.arm}'s CI reaches beyond +-{num(p.margin * 100)}%"]
    holm_fails(main.comparisons, rigor)
    main.threshold = 0.0
    reason = main.text(need=False) + f"; needs within +-{num(p.margin * 100)}% (two one-sided tests)"
    return GateResult(
        verdict=main.verdict,
        reason=reason,
        evidence={**main.evidence(), "margin": p.margin, "how": "TOST on the log ratio over runs"},
    )


# -- threshold ------------------------------------------------------------------------


class ThresholdParams(Selector, Rigor):
    op: Literal[">=", ">", "<=", "<"] = ">="
    value: float
    scenarios: list[str] = Field(default_factory=list, description="each must hold; empty = every cell of the selector")
    partial_scenarios: list[str] = Field(
        default_factory=list, description="reported beside, not required (partial allowed)"
    )


def threshold(rows: pd.DataFrame, gate: GateEntry, p: ThresholdParams) -> GateResult:
    """Each subject's median must satisfy `metric op value` in each named scenario and each
    context (never pooled): pass when the median's whole interval does, fail when none of
    it does, inconclusive when it straddles the value or n < min_n."""
    rigor = p.of()
    sel = p.selector()
    scenarios: list[str | None] = list(p.scenarios) or [None]
    claims: list[tuple[CellStat, Claim]] = []
    for arm in gate.subjects:
        for scen in scenarios:
            stats = cell_stats(rows, sel, arm, scen, confidence=rigor.confidence, sequential=rigor.sequential)
            if not stats:
                return pending(f"no canonical {p.metric}{' ' + scen if scen else ''} for {arm} yet")
            claims += [(stat, check_bound(stat, p.value, p.op in (">=", ">"), rigor)) for stat in stats.values()]
    holm_fails([c for _, c in claims], rigor)  # any cell failing fails the gate
    judged = [(stat, c.verdict, c.note) for stat, c in claims]
    contexts = {s.cell.context for s, _, _ in judged}

    def label(stat: CellStat) -> str:
        """The scenario (when the gate names scenarios) and the context (when several)."""
        bits = [stat.cell.scenario] if p.scenarios else []
        if len(contexts) > 1:
            bits.append(f"at {context_label(stat.cell.context)}")
        return " ".join(bits) or p.metric

    by_arm: dict[str, list[str]] = {}
    for stat, _, _ in judged:
        by_arm.setdefault(stat.arm, []).append(f"{label(stat)} {compare.fmt_stat(stat)}")
    shown = "; ".join(f"{arm} " + ", ".join(vals) for arm, vals in by_arm.items())
    verdict = worst(v for _, v, _ in judged)
    failures = [f"{s.arm} {label(s)} {num(s.geomean)}" for s, v, _ in judged if v == Verdict.FAIL]
    notes = list(dict.fromkeys(n for _, _, n in judged if n))
    if verdict == Verdict.FAIL:
        reason = f"{p.metric} misses {p.op} {num(p.value)}: {', '.join(failures)} ({shown})"
    elif verdict == Verdict.PASS:
        reason = f"{p.metric} {p.op} {num(p.value)} holds: {shown}"
    else:
        reason = f"{p.metric} {p.op} {num(p.value)} undecided: {shown}"
    if notes:
        reason += "; " + "; ".join(notes)
    partial: dict[str, dict[str, float]] = {}
    for arm in gate.subjects:
        for scen in p.partial_scenarios:
            for stat in cell_stats(
                rows, sel, arm, scen, confidence=rigor.confidence, sequential=rigor.sequential
            ).values():
                partial.setdefault(scen, {})[arm] = stat.geomean
    for scen, vals in partial.items():
        lo, hi = min(vals.values()), max(vals.values())
        reason += f"; {scen} partial ({num(lo)}-{num(hi)})" if hi - lo > 0.005 else f"; {scen} partial ({num(lo)})"
    return GateResult(
        verdict=verdict,
        reason=reason,
        evidence={
            "metric": p.metric,
            "op": p.op,
            "threshold": p.value,
            "min_runs": p.min_runs,
            "max_error_rate": p.max_error_rate,
            "confidence": p.confidence,
            "interval_method": compare.INTERVAL_METHOD,
            "cells": [{**s.evidence("subject"), **c.evidence()} for s, c in claims],
            "partial": partial,
            **gate_p([c for _, c in claims]),
        },
    )


register(PredicateSpec("relative_improvement", relative_improvement, RelativeParams))
register(PredicateSpec("context_change", context_change, ContextChangeParams))
register(PredicateSpec("equivalence", equivalence, EquivalenceParams))
register(PredicateSpec("threshold", threshold, ThresholdParams))
