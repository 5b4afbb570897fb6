"""The regression guard: a gain on one metric that must not cost another ("cuts cold TTFT
~-55%, but zeroes the warm cache (hit 0%)").

The gain is read through the comparison primitive (`gates.compare`), the guard as a bound
on each subject's value (`gates.claims.check_bound`); the reason is in the seed's style,
numbers first.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import Field

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import num
from gates import compare
from gates.arm_cells import cell_stats
from gates.cells import CellStat, Selector
from gates.claims import Claim, Judged, check_bound, gate_p, holm_fails, worst
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import Rigor


class RegressionGuardParams(Selector, Rigor):
    min_gain: float = 0.0
    higher_is_better: bool = False
    guard_metric: str = Field(description="the metric that must not regress, e.g. reuse")
    guard_probe: str | None = None
    guard_scenarios: list[str] = Field(default_factory=list)
    guard_min: float = Field(description="the guard metric's floor (absolute)")
    worse_metric: str | None = Field(
        default=None, description="also report how much worse this metric got, e.g. warm ttft_s"
    )
    worse_scenarios: list[str] = Field(default_factory=list)


def regression_guard(rows: pd.DataFrame, gate: GateEntry, p: RegressionGuardParams) -> GateResult:
    """A gain on one metric that must not cost another ("cuts cold TTFT ~-55%, but zeroes
    the warm cache (hit 0%)"). The gain is compared per common cell against every baseline
    (`gates.compare`); the guard must hold per subject, scenario and context with its whole
    interval. A guard broken beyond doubt fails the gate whatever the gain.

    The gate fails when any of its claims does (a comparison short of the gain, a guard
    surely below its floor), so its fails are Holm-adjusted over all of them together, and
    the p_fail it carries to the campaign's family is the one of the claim that failed it:
    a guard's fail is the guard's own one-arm test, not the gain's."""
    if not gate.baseline:
        return pending("regression_guard needs a baseline arm")
    rigor = p.of()
    main = compare.compare(
        rows,
        gate.subjects,
        gate.baseline,
        p.selector(),
        higher_is_better=p.higher_is_better,
        threshold=p.min_gain,
        rigor=rigor,
        holm=False,
    )
    if main.missing:
        return pending(main.missing)
    guard_sel = Selector(metric=p.guard_metric, probe=p.guard_probe, context=p.context)
    checked: list[tuple[CellStat, Claim]] = []
    for arm in gate.subjects:
        for scen in _or_every(p.guard_scenarios):
            stats = cell_stats(rows, guard_sel, arm, scen, confidence=rigor.confidence, sequential=rigor.sequential)
            if not stats:
                return pending(f"no canonical {p.guard_metric}{' ' + scen if scen else ''} for {arm} yet")
            checked += [(stat, check_bound(stat, p.guard_min, True, rigor)) for stat in stats.values()]
    claims: list[Judged] = [*main.comparisons, *(c for _, c in checked)]
    holm_fails(claims, rigor, "claims (comparisons and guards)")
    guards = [(stat, c.verdict, c.note) for stat, c in checked]
    worse: dict[str, tuple[float, float]] = {}
    if p.worse_metric:
        for arm in gate.subjects:
            ratios = []
            for scen in _or_every(p.worse_scenarios):
                wsel = Selector(metric=p.worse_metric, probe=p.guard_probe, scenario=scen, context=p.context)
                for b in gate.baseline:
                    a_stats, b_stats = cell_stats(rows, wsel, arm), cell_stats(rows, wsel, b)
                    ratios += [
                        a_stats[c].geomean / b_stats[c].geomean
                        for c in set(a_stats) & set(b_stats)
                        if b_stats[c].geomean
                    ]
            if ratios:
                worse[arm] = (min(ratios), max(ratios))
    evidence: dict[str, Any] = {
        **main.evidence(),
        "guard": {
            "metric": p.guard_metric,
            "min": p.guard_min,
            "cells": [{**s.evidence("subject"), **c.evidence()} for s, c in checked],
        },
        "worse_ratio": worse,
        **gate_p(claims),
    }
    head = main.text(need=False)
    broken: dict[str, CellStat] = {}
    for stat, v, _ in guards:
        if v == Verdict.FAIL and (stat.arm not in broken or stat.geomean < broken[stat.arm].geomean):
            broken[stat.arm] = stat
    if broken:
        guard_txt = ", ".join(f"{a} {p.guard_metric} {compare.fmt_stat(s)}" for a, s in broken.items())
        extra = ""
        if worse:
            lo = min(r[0] for r in worse.values())
            hi = max(r[1] for r in worse.values())
            extra = (
                f"; {p.worse_metric} {lo:.0f}-{hi:.0f}x worse than {'/'.join(gate.baseline)}"
                if hi >= 2
                else f"; {p.worse_metric} x{num(lo)}-{num(hi)} of {'/'.join(gate.baseline)}"
            )
        return GateResult(
            verdict=Verdict.FAIL,
            reason=f"{head}, but {guard_txt} (needs >= {num(p.guard_min)}){extra}",
            evidence=evidence,
        )
    verdict = worst([main.verdict, *(v for _, v, _ in guards)])
    notes = [n for _, _, n in guards if n]
    if verdict == Verdict.PASS:
        low = min(s.geomean for s, _, _ in guards)
        return GateResult(
            verdict=verdict, reason=f"{main.text()}; {p.guard_metric} holds (min {num(low)})", evidence=evidence
        )
    tail = ("; " + "; ".join(dict.fromkeys(notes))) if notes else ""
    return GateResult(verdict=verdict, reason=f"{main.text()}{tail}", evidence=evidence)


def _or_every(scenarios: list[str]) -> list[str | None]:
    """The scenarios named, or None (every cell) when none is."""
    return [*scenarios] or [None]


register(PredicateSpec("regression_guard", regression_guard, RegressionGuardParams))
