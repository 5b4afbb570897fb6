"""Claims: what a gate's verdict is combined from, and how a gate combines them.

A comparison (`gates.compare.Comparison`) and a bound on one arm's value (`Claim`,
`check_bound`) each carry a verdict alone, the one-sided p-values of "it holds" and "it
does not", and whether a test made the verdict or a rule. A gate fails when any of its
claims fails, so its fails are Holm-adjusted over all of them (`holm_fails`), and its own
p-values for the campaign's family come from all of them (`gate_p`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from campaign.core.states import Verdict
from campaign.core.units import num
from gates.cells import CellStat
from gates.error_limit import subject_errors
from gates.holm import holm
from gates.rigor import Rigor, ci_label, is_sequential, runs_note


class Judged(Protocol):
    """What a gate's verdict is combined from: a `Claim`, or a `gates.compare.Comparison`."""

    verdict: Verdict
    p_pass: float
    p_fail: float
    statistical: bool
    notes: list[str]

    def unsure_fail(self, m: int, noun: str) -> str: ...


@dataclass
class Claim:
    """One claim a gate's verdict rests on besides its comparisons: a bound on one arm's
    value, a pass rate, a share of requests met. It carries what a `Comparison` carries
    for the gate's rules: its verdict alone, the one-sided p-values of "it holds" and "it
    does not", and whether a test made the verdict or a rule (errors, too few runs), so
    that a gate's Holm over its fail claims (`holm_fails`) and its p-values for the
    campaign's family (`gate_p`) read every part of it alike."""

    what: str  # the claim in a few words, for the reason ("B reuse at cache-probe/identical@4K")
    verdict: Verdict
    p_pass: float = 1.0
    p_fail: float = 1.0
    statistical: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        return "; ".join(self.notes)

    def unsure_fail(self, m: int, noun: str) -> str:
        return f"{self.what} fails alone, but not over {m} {noun} (Holm)"

    def evidence(self) -> dict[str, Any]:
        return {
            "verdict": str(self.verdict),
            "p_pass": self.p_pass,
            "p_fail": self.p_fail,
            "statistical": self.statistical,
        }


def holm_fails(claims: Sequence[Judged], rigor: Rigor, noun: str = "cells") -> int:
    """Holm over a gate's statistical fail claims (its comparisons, and the bounds or rates
    it also rests on): a fail stays only where its adjusted p-value is within alpha, so many
    cells or claims do not make a gate on identical arms fail more often than one. Returns
    the number of claims tested; a fail that does not survive becomes inconclusive, saying
    why, and every p_fail is left adjusted. (The step-down is `gates.holm`; it is only
    called when some fail is in question, and the smallest adjusted p-value is m times the
    smallest raw one either way.) Call it once per gate, over all of its fail claims."""
    tested = [c for c in claims if c.statistical]
    m = len(tested)
    if m < 2:
        return m
    if not any(c.verdict == Verdict.FAIL for c in tested):
        for c in tested:
            c.p_fail = min(1.0, c.p_fail * m)  # a bound on its Holm-adjusted value; exact for the smallest
        return m
    for c, (ok, adj) in zip(tested, holm([c.p_fail for c in tested], rigor.alpha)):
        c.p_fail = float(adj)
        if c.verdict == Verdict.FAIL and not ok:
            c.verdict = Verdict.INCONCLUSIVE
            c.notes = [*c.notes, c.unsure_fail(m, noun)]
    return m


def gate_p(claims: Sequence[Judged]) -> dict[str, Any]:
    """A gate's own p-values for the campaign's family (`gates.family`), from every claim
    its verdict rests on, each Holm-adjusted within the gate by `holm_fails`: a pass needs
    every claim to pass (the largest p_pass), a fail any (the smallest adjusted p_fail).
    Rule-made verdicts (errors, too few runs) carry no p: a rule's fail is not adjusted
    (`statistical_fail` false), and a gate with a claim a rule left open cannot pass."""
    tested = [c for c in claims if c.statistical]
    ruled_fail = any(not c.statistical and c.verdict == Verdict.FAIL for c in claims)
    return {
        "p_pass": max((c.p_pass for c in tested), default=1.0) if tested and len(tested) == len(claims) else 1.0,
        "p_fail": 0.0 if ruled_fail else min((c.p_fail for c in tested), default=1.0),
        "statistical_fail": not ruled_fail,
    }


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """fail > inconclusive > pass: every comparison must pass for the whole to pass."""
    seen = set(verdicts)
    for v in (Verdict.PENDING, Verdict.FAIL, Verdict.INCONCLUSIVE):
        if v in seen:
            return v
    return Verdict.PASS


# -- one arm against a fixed bound -----------------------------------------------------------


def check_bound(stat: CellStat, value: float, higher_is_better: bool, rigor: Rigor) -> Claim:
    """Whether a cell's value clears a fixed bound (`value`; at or above it when
    `higher_is_better`, else at or below), by the one-sided t tests over its runs that
    its CI is the interval of (`gates.blockstats.one_arm`, a confidence sequence when
    sequential): pass when the whole CI clears the bound, fail when none of it does, else
    inconclusive. With no spread between runs the values decide by themselves, and every
    run exactly on the bound decides nothing (`Estimate.p_above`). A subject over the
    error limit (`error_rule`), too few runs or mixed recipes are rules: no p."""
    what = f"{stat.arm} {stat.metric} at {stat.cell.key()}"
    if stat.all_failed:
        return Claim(
            what,
            Verdict.FAIL,
            1.0,
            0.0,
            False,
            [f"{stat.arm} failed every request at {stat.cell.key()} ({stat.failed}/{stat.requests}): cannot pass"],
        )
    rule = subject_errors(stat, rigor)
    if rule is not None:
        return Claim(what, rule[0], 1.0, 0.0 if rule[0] == Verdict.FAIL else 1.0, False, [rule[1]])
    if stat.n < rigor.min_runs:
        return Claim(what, Verdict.INCONCLUSIVE, statistical=False, notes=[runs_note([stat], rigor)])
    if len(stat.recipes) > 1:
        return Claim(
            what,
            Verdict.INCONCLUSIVE,
            statistical=False,
            notes=[f"{stat.arm} ran {len(stat.recipes)} recipes in {', '.join(stat.items)}: not pooled"],
        )
    est = stat.estimate
    if est is None:
        return Claim(what, Verdict.INCONCLUSIVE, statistical=False, notes=["no estimate"])
    bound = (math.log(value) if value > 0 else -math.inf) if est.log else value
    above, below = est.p_above(bound), est.p_below(bound)
    p_pass, p_fail = (above, below) if higher_is_better else (below, above)
    if p_pass <= rigor.alpha:
        return Claim(what, Verdict.PASS, p_pass, p_fail)
    if p_fail <= rigor.alpha:
        return Claim(what, Verdict.FAIL, p_pass, p_fail)
    if est.on_bound(bound):
        note = f"every run of {stat.arm} gave exactly {num(value)}, the bound: no claim either way"
    else:
        note = f"{stat.arm}'s {ci_label(stat.confidence, is_sequential(stat))} [{num(stat.low)}, {num(stat.high)}] straddles the bound"
    return Claim(what, Verdict.INCONCLUSIVE, p_pass, p_fail, notes=[note])
