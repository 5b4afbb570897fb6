"""The comparison primitive: how every comparative predicate reads its numbers.

A verdict is a claim with an error rate, so the numbers behind it follow these rules, all
here (how rows become cells and runs is `gates.cells`, the estimators `gates.blockstats`):

1. **The server run is the unit.** A queue item's repeats are blocks: in each, every arm
   gets its own server start, in a randomised order (stored on the attempt). Each
   (arm, block, cell) is summarised to one value, the median of its requests (`Run`);
   intervals and tests are over those values, never over requests, which share their
   run's draw. Request-level spreads are shown, never decide.
2. **Cells, never pooled.** A cell is (probe, scenario, context, mode, settings): the
   settings hash of the item's resolved parameters is part of it, so runs at other
   settings are another cell. A gate that names no context compares per context, and
   every context must pass. An arm whose cell mixes recipes (two items running it
   differently) is not compared.
3. **Paired where blocks are shared.** Two arms with at least `min_runs` blocks in common
   are compared paired (t on per-block log ratios); arms that never shared enough blocks
   are compared unpaired (Welch), and the method says so. Fewer than `min_runs` runs on
   either side is inconclusive, and the reason says how many there are and are needed.
4. **Errors at arm level.** An arm's error rate covers every request it made in the rows
   the gate reads (every probe, cell and turn), with its exact interval. A subject surely
   over `max_error_rate` (the interval's lower end above it) fails; one over it at its
   point but not surely cannot pass and is not failed: inconclusive (`error_rule`). A
   baseline or control over it makes the gate inconclusive, never fail for the subject.
   A cell where the arm failed every request counts against it instead of dropping out.
5. **Error rates, measured.** A comparison passes when its CI (at the campaign's
   confidence, 95% by default) lies wholly beyond the threshold, fails when wholly short
   of it: a one-sided test at (1 - confidence) / 2 each way; with no spread between
   runs, a ratio exactly on the threshold in every block is no evidence either way. A
   gate passes only when all its claims pass (no adjustment needed: all must hold); it
   fails when any fails, so its fails are Holm-adjusted over all of them (cells, and the
   guards and bounds it also rests on: `Claim`), and eight contexts fail identical arms
   no more often than one. Across gates, `gates.family` controls the family-wise rate
   (Holm), from each gate's p-values (`gate_p`).

Evidence (`Outcome.evidence()`) lists exactly the cells, runs, items, blocks, attempts,
intervals and error rates a verdict came from.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from campaign.core.states import Verdict
from campaign.core.units import context_label, num, pct
from gates import blockstats
from gates.blockstats import Estimate
from gates.cells import ArmErrors, Cell, CellStat, Selector, cell_stats
from gates.holm import holm
from gates.intervals import CONFIDENCE, MEDIAN_METHOD

DEFAULT_MIN_RUNS = 3
DEFAULT_MAX_ERROR_RATE = 0.05
EPS = 1e-9


def alpha_of(confidence: float) -> float:
    """The one-sided error of each claim (pass, fail) a `confidence` CI decides."""
    return (1.0 - confidence) / 2


def ci_label(confidence: float, sequential: bool = False) -> str:
    """'95% CI', or '95% CS' for a confidence sequence (an interval valid at every block count)."""
    kind = "CS" if sequential else "CI"
    return f"{confidence:.0%} {kind}" if round(confidence * 100, 6).is_integer() else f"{confidence:.1%} {kind}"


def is_sequential(stat: Any) -> bool:
    """Whether a cell stat's or a comparison's interval is a confidence sequence."""
    est = getattr(stat, "estimate", None)
    return bool(est is not None and est.sequential)


class Rigor(BaseModel):
    """What every comparative predicate takes: the least number of server runs, the most
    errors, the confidence (the campaign's unless the gate sets its own)."""

    model_config = ConfigDict(extra="forbid")

    min_runs: int = Field(
        default=DEFAULT_MIN_RUNS,
        ge=2,
        description="fewer server runs (blocks) than this in a cell is inconclusive; 2 is the least a spread can come from",
    )
    max_error_rate: float = Field(
        default=DEFAULT_MAX_ERROR_RATE,
        ge=0,
        le=1,
        description="an arm failing more of its requests than this cannot pass",
    )
    confidence: float = Field(
        default=CONFIDENCE, gt=0.5, lt=1, description="the CI level (set campaign-wide by campaign.confidence)"
    )
    sequential: bool = Field(
        default=False,
        description="intervals are confidence sequences, valid however often they are looked at (set for a gate fed by an "
        "item with max_blocks; set it yourself when you add blocks until a verdict shows)",
    )

    @property
    def alpha(self) -> float:
        return alpha_of(self.confidence)

    def of(self) -> Rigor:
        """Just the rigor fields of a params model that extends this one."""
        return Rigor(
            min_runs=self.min_runs,
            max_error_rate=self.max_error_rate,
            confidence=self.confidence,
            sequential=self.sequential,
        )


# -- formatting -----------------------------------------------------------------------------


def fmt_stat(stat: CellStat) -> str:
    """'0.97 [0.95, 0.99] 95% CI, 5 runs x 30 requests'; '0.97, 1 run x 30 requests' where
    one run gives no interval."""
    if not stat.runs:
        return stat.size()
    if stat.n < 2:
        return f"{num(stat.median)}, {stat.size()}"
    lo, hi = num(stat.low), num(stat.high)
    if lo == hi == num(stat.median):
        return f"{num(stat.median)}, {stat.size()}"
    return f"{num(stat.median)} [{lo}, {hi}] {ci_label(stat.confidence, is_sequential(stat))}, {stat.size()}"


def need_text(threshold: float, higher_is_better: bool) -> str:
    if threshold == 0:
        return "any gain"
    return f"{pct(threshold)} or more" if higher_is_better else f"{pct(-threshold)} or lower"


def runs_note(stats: Iterable[CellStat], rigor: Rigor) -> str:
    short = [f"{s.arm} has {s.n} run{'s' if s.n != 1 else ''}" for s in stats if s.n < rigor.min_runs]
    if not short:
        return ""
    return f"{', '.join(dict.fromkeys(short))}; needs {rigor.min_runs} (blocks, each its own server start): too few to decide"


# -- comparisons ---------------------------------------------------------------------------


@dataclass
class Comparison:
    """Subject against one baseline in one cell; `gain` is oriented (positive = better).

    `p_pass` and `p_fail` are the one-sided p-values of "the gain clears the threshold"
    and "it falls short"; `statistical` is False when the verdict came from a rule (an
    error rate, too few runs) rather than a test."""

    subject: CellStat
    baseline: CellStat
    higher_is_better: bool
    threshold: float
    gain: float
    low: float
    high: float
    method: str
    pairs: int
    coverage: float
    n_ok: bool
    subject_flaky: bool
    baseline_flaky: bool
    p_pass: float = 1.0
    p_fail: float = 1.0
    statistical: bool = True
    bound: float = math.nan  # the threshold on the estimate's own scale (a log ratio, or a difference)
    estimate: Estimate | None = None
    verdict: Verdict = Verdict.INCONCLUSIVE
    notes: list[str] = field(default_factory=list)

    @property
    def change(self) -> tuple[float, float, float]:
        """(change, low, high) as the reader sees it: value / baseline - 1."""
        if self.higher_is_better:
            return self.gain, self.low, self.high
        return -self.gain, -self.high, -self.low

    def text(self) -> str:
        """'C 162 (+135% [+120%, +150%] 95% CI, paired over 5 blocks)'."""
        c, lo, hi = self.change
        if math.isnan(c):
            return f"{self.subject.arm} {fmt_stat(self.subject)}"
        how = f"paired over {self.pairs} blocks" if self.pairs else "unpaired"
        seq = is_sequential(self)
        if math.isinf(lo) or math.isinf(hi) or math.isnan(lo) or math.isnan(hi):
            none = "no CS yet (too few blocks for a confidence sequence to exclude anything)" if seq else "no CI"
            return f"{self.subject.arm} {num(self.subject.median)} ({pct(c)}, {none}: {how}, {self.subject.size()})"
        return f"{self.subject.arm} {num(self.subject.median)} ({pct(c)} [{pct(lo)}, {pct(hi)}] {ci_label(self.subject.confidence, seq)}, {how}, {self.subject.size()})"

    def unsure_fail(self, m: int, noun: str) -> str:
        """The note of a fail that does not survive Holm over the gate's `m` claims."""
        return f"short of the threshold at {self.subject.cell.key()}, but not over {m} {noun} (Holm)"

    def evidence(self) -> dict[str, Any]:
        c, lo, hi = self.change
        return {
            "subject": self.subject.arm,
            "baseline": self.baseline.arm,
            "cell": self.subject.cell.key(),
            "context": self.subject.cell.context,
            "scenario": self.subject.cell.scenario,
            "settings": self.subject.cell.settings,
            "change": c,
            "change_low": lo,
            "change_high": hi,
            "gain": self.gain,
            "threshold": self.threshold,
            "method": self.method,
            "pairs": self.pairs,
            "coverage": round(self.coverage, 4),
            "subject_size": self.subject.size(),
            "baseline_size": self.baseline.size(),
            "p_pass": self.p_pass,
            "p_fail": self.p_fail,
            "statistical": self.statistical,
            "verdict": str(self.verdict),
            "notes": list(self.notes),
        }


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


Judged = Comparison | Claim  # what a gate's verdict is combined from


def oriented_gain(value: float, base: float, higher_is_better: bool) -> float:
    return (value - base) / base if higher_is_better else (base - value) / base


def error_counts(stat: CellStat) -> ArmErrors | None:
    """What an arm's error limit is judged on: every request the arm made in the rows the
    gate reads (`ArmErrors`), else the cell's own request counters; None when neither
    was counted."""
    if stat.arm_errors is not None and stat.arm_errors.requests:
        return stat.arm_errors
    if stat.requests:
        return ArmErrors(stat.arm, stat.requests, stat.failed or 0, dict(stat.errors_by_kind))
    return None


def flaky(stat: CellStat, rigor: Rigor) -> bool:
    """The arm's failure rate is over the limit at its point: a baseline's or a control's
    numbers cannot decide then (the gate is inconclusive, never a fail for the subject)."""
    errors = error_counts(stat)
    return errors is not None and (errors.rate or 0.0) > rigor.max_error_rate + EPS


def error_rule(
    errors: ArmErrors | None, limit: float, confidence: float, consequence: str = "cannot pass"
) -> tuple[Verdict, str] | None:
    """The error limit for an arm whose verdict is claimed (a subject), by the exact
    interval of its failure rate, each end at (1 - confidence) / 2: a fail (a rule, no p)
    only when the rate is surely over `limit` (the lower end above it); inconclusive when
    it is over at its point but not surely; None within it.

    Why not the point rate: at 30 requests a subject failing 4% of them (limit 5%) has 2
    or more failures 34% of the time. Why not also "surely within" for a pass: with no
    failure at all the exact upper end falls under 5% only from 72 requests, more than
    most gated items make, so every pass of a short item would turn inconclusive; a
    subject failing 10% of 30 requests still shows at most 1 failure 18% of the time, and
    nothing here stops that."""
    if errors is None or not errors.requests or (errors.rate or 0.0) <= limit + EPS:
        return None
    found = errors.interval(confidence)
    if found is not None and found[0] > limit + EPS:
        return Verdict.FAIL, f"{errors.text(confidence)} > {num(limit)}: {consequence}"
    return Verdict.INCONCLUSIVE, f"{errors.text(confidence)}: over {num(limit)}, but not surely: cannot decide"


def subject_errors(stat: CellStat, rigor: Rigor, consequence: str = "cannot pass") -> tuple[Verdict, str] | None:
    """`error_rule` for a subject's cell."""
    return error_rule(error_counts(stat), rigor.max_error_rate, rigor.confidence, consequence)


def error_note(stat: CellStat, rigor: Rigor) -> str:
    """'B failed 4/10 requests (0.40 [0.122, 0.738] 95% CI): read_timeout 4 > 0.05'."""
    errors = error_counts(stat)
    if errors is None:
        return f"{stat.arm} error rate {num(stat.error_rate)} > {num(rigor.max_error_rate)}"
    return f"{errors.text(rigor.confidence)} > {num(rigor.max_error_rate)}"


def _bound_log(threshold: float, higher_is_better: bool) -> float:
    """The threshold on the log ratio value / baseline."""
    ratio = 1 + threshold if higher_is_better else 1 - threshold
    return math.log(ratio) if ratio > 0 else -math.inf


def compare_cells(s: CellStat, b: CellStat, higher_is_better: bool, threshold: float, rigor: Rigor) -> Comparison:
    """One subject against one baseline in one cell; verdict for "gain >= threshold"."""
    cmp = Comparison(
        subject=s,
        baseline=b,
        higher_is_better=higher_is_better,
        threshold=threshold,
        gain=math.nan,
        low=math.nan,
        high=math.nan,
        method="",
        pairs=0,
        coverage=0.0,
        n_ok=s.n >= rigor.min_runs and b.n >= rigor.min_runs,
        subject_flaky=flaky(s, rigor),
        baseline_flaky=flaky(b, rigor),
        statistical=False,
    )
    if s.runs and b.runs:
        _estimate(cmp, rigor)
    cmp.verdict, cmp.notes = judge_gain(cmp, rigor)
    return cmp


def _estimate(cmp: Comparison, rigor: Rigor) -> None:
    s, b = cmp.subject, cmp.baseline
    sb = {r.block: r.value for r in s.runs}
    bb = {r.block: r.value for r in b.runs}
    shared = sorted(set(sb) & set(bb))
    if len(shared) >= rigor.min_runs:
        est = blockstats.paired([sb[k] for k in shared], [bb[k] for k in shared], rigor.sequential)
        cmp.pairs = len(shared)
        cmp.method = f"{est.method} ({len(shared)} blocks)"
    else:
        est = blockstats.unpaired([r.value for r in s.runs], [r.value for r in b.runs], rigor.sequential)
        cmp.method = est.method if not shared else f"{est.method}; {len(shared)} shared blocks are too few to pair"
    cmp.estimate = est
    lo, hi = est.interval(rigor.confidence)
    base_mean = sum(bb.values()) / len(bb)
    if est.log:
        ratio, rlo, rhi = math.exp(est.center), blockstats.back(est, lo), blockstats.back(est, hi)
        bound = _bound_log(cmp.threshold, cmp.higher_is_better)
    else:  # raw differences, read relative to the baseline's mean
        scale = base_mean if base_mean else 1.0
        ratio, rlo, rhi = 1 + est.center / scale, 1 + lo / scale, 1 + hi / scale
        bound = (cmp.threshold if cmp.higher_is_better else -cmp.threshold) * scale
    cmp.bound = bound
    if cmp.higher_is_better:
        cmp.gain, cmp.low, cmp.high = ratio - 1, rlo - 1, rhi - 1
        cmp.p_pass, cmp.p_fail = est.p_above(bound), est.p_below(bound)
    else:
        cmp.gain, cmp.low, cmp.high = 1 - ratio, 1 - rhi, 1 - rlo
        cmp.p_pass, cmp.p_fail = est.p_below(bound), est.p_above(bound)
    cmp.coverage = rigor.confidence if est.df > 0 else 0.0
    cmp.statistical = True


def judge_gain(cmp: Comparison, rigor: Rigor) -> tuple[Verdict, list[str]]:
    """The rules, in order: the subject's errors (`error_rule`), the baseline's, mixed
    recipes, the runs, then the test at (1 - confidence) / 2 each way."""
    s, b = cmp.subject, cmp.baseline
    if s.all_failed:
        cmp.statistical, cmp.p_fail, cmp.p_pass = False, 0.0, 1.0
        return Verdict.FAIL, [f"{s.arm} failed every request at {s.cell.key()} ({s.failed}/{s.requests}): cannot pass"]
    rule = subject_errors(s, rigor)
    if rule is not None:
        cmp.statistical, cmp.p_fail, cmp.p_pass = False, 0.0 if rule[0] == Verdict.FAIL else 1.0, 1.0
        return rule[0], [rule[1]]
    if cmp.baseline_flaky or b.all_failed:
        cmp.statistical = False
        what = f"{b.arm} failed every request at {b.cell.key()}" if b.all_failed else error_note(b, rigor)
        return Verdict.INCONCLUSIVE, [f"baseline {what}: its numbers cannot decide"]
    mixed = [x for x in (s, b) if len(x.recipes) > 1]
    if mixed:
        cmp.statistical = False
        return Verdict.INCONCLUSIVE, [
            f"{x.arm} ran {len(x.recipes)} recipes in {', '.join(x.items)}: not pooled" for x in mixed
        ]
    if not cmp.n_ok or not cmp.statistical:
        cmp.statistical = False
        return Verdict.INCONCLUSIVE, [runs_note((s, b), rigor) or "no estimate"]
    if cmp.p_pass <= rigor.alpha:
        return Verdict.PASS, []
    if cmp.p_fail <= rigor.alpha:
        return Verdict.FAIL, []
    if cmp.estimate is not None and cmp.estimate.on_bound(cmp.bound):
        return Verdict.INCONCLUSIVE, [tie_note(cmp)]
    notes = [
        f"{s.arm}'s {'CS' if is_sequential(cmp) else 'CI'} straddles {pct(cmp.threshold if cmp.higher_is_better else -cmp.threshold)}"
    ]
    if cmp.estimate is not None and not math.isnan(cmp.bound):
        # blocks added after this look are read by the confidence sequence (`gates.looks`),
        # so the count is the sequence's, never the fixed design's the user would be misled by
        more = dataclasses.replace(cmp.estimate, sequential=True)
        need = blockstats.blocks_to_decide(more, cmp.bound, rigor.alpha)
        if need is not None:
            notes.append(
                f"at this gain and spread, about {need} blocks in all would decide it (alone, before Holm; "
                "added blocks are read as a confidence sequence)"
            )
        elif cmp.estimate.n_eff == cmp.estimate.n and cmp.estimate.df > 0:
            notes.append(f"at this gain and spread, more than {blockstats.MOST_BLOCKS} blocks would be needed")
    return Verdict.INCONCLUSIVE, notes


def tie_note(cmp: Comparison, claimed: str = "gain") -> str:
    """Why a comparison whose every block gave the same ratio, the threshold's, claims
    nothing: zero spread is no evidence that the arms differ either way (`Estimate.p_above`)."""
    s, b = cmp.subject.arm, cmp.baseline.arm
    if cmp.threshold == 0:
        return f"{s} and {b} gave identical values in every block: no {claimed} to claim"
    return f"{s} vs {b} was exactly {pct(cmp.change[0])} in every block, on the threshold: no claim either way"


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


@dataclass
class Outcome:
    """All comparisons of some subjects against some baselines on one metric."""

    metric: str
    higher_is_better: bool
    threshold: float
    rigor: Rigor
    stats: dict[str, dict[Cell, CellStat]]
    comparisons: list[Comparison] = field(default_factory=list)
    missing: str = ""  # non-empty: pending, and why
    unmatched: str = ""  # non-empty: inconclusive, the arms ran at different settings

    @property
    def verdict(self) -> Verdict:
        if self.missing:
            return Verdict.PENDING
        if self.unmatched:
            return worst([Verdict.INCONCLUSIVE, *(c.verdict for c in self.comparisons)])
        return worst(c.verdict for c in self.comparisons)

    def used_cells(self) -> list[CellStat]:
        seen: dict[tuple[str, Cell], CellStat] = {}
        for c in self.comparisons:
            for stat in (c.subject, c.baseline):
                seen.setdefault((stat.arm, stat.cell), stat)
        return list(seen.values())

    def text(self, need: bool = True, notes: bool = True) -> str:
        """'decode_tps: C 162 (+135% [+120%, +150%] 95% CI, paired over 5 blocks, 5 runs x
        30 requests) vs B 69.0; needs +10% or more', with the cell named where several were
        compared, then (with `notes`) what made it fail or inconclusive."""
        groups: dict[tuple[Cell, str], list[Comparison]] = {}
        for c in self.comparisons:
            groups.setdefault((c.subject.cell, c.baseline.arm), []).append(c)
        label = cell_labeller([c.subject.cell for c in self.comparisons])
        parts = []
        for (cell, base), cmps in groups.items():
            where = label(cell)
            parts.append(
                f"{where + ' ' if where else ''}{', '.join(c.text() for c in cmps)} vs {base} {num(cmps[0].baseline.median)}"
            )
        out = f"{self.metric}: {'; '.join(parts)}" if parts else self.metric
        if need:
            out += f"; needs {need_text(self.threshold, self.higher_is_better)}"
        said = list(dict.fromkeys(n for c in self.comparisons for n in c.notes)) if notes else []
        if self.unmatched:
            said.append(self.unmatched)
        if said:
            out += "; " + "; ".join(said)
        return out

    def evidence(self) -> dict[str, Any]:
        roles: dict[str, str] = {}
        for c in self.comparisons:
            roles.setdefault(c.subject.arm, "subject")
            roles.setdefault(c.baseline.arm, "baseline")
        return {
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "threshold": self.threshold,
            "min_runs": self.rigor.min_runs,
            "max_error_rate": self.rigor.max_error_rate,
            "confidence": self.rigor.confidence,
            "interval_method": SEQUENTIAL_INTERVAL_METHOD if self.rigor.sequential else INTERVAL_METHOD,
            "sequential": self.rigor.sequential,
            "request_interval_method": MEDIAN_METHOD,
            "cells": [s.evidence(roles.get(s.arm, "")) for s in self.used_cells()],
            "comparisons": [c.evidence() for c in self.comparisons],
            **(gate_p(self.comparisons) if self.comparisons else {}),  # no comparison: no claim of the family
            **({"missing": self.missing} if self.missing else {}),
            **({"unmatched": self.unmatched} if self.unmatched else {}),
        }


INTERVAL_METHOD = (
    "t CI over server runs (blocks) of each run's median, on the log scale: paired over shared blocks, "
    "else Welch; fails Holm-adjusted over a gate's cells"
)
SEQUENTIAL_INTERVAL_METHOD = (
    "confidence sequence over server runs (blocks) of each run's median, on the log scale (one-sided safe t: "
    "valid at every block count, so an item may stop when it is settled): paired over shared blocks, else pooled "
    "two-sample; fails Holm-adjusted over a gate's cells"
)


def cell_labeller(cells: Sequence[Cell]) -> Any:
    """Name a cell by what varies among `cells` ('at 16K', 'identical', 'decode at 32K')."""
    vary = {f for f in ("probe", "scenario", "context") if len({getattr(c, f) for c in cells}) > 1}

    def label(cell: Cell) -> str:
        bits = []
        if "probe" in vary:
            bits.append(cell.probe)
        if "scenario" in vary:
            bits.append(cell.scenario)
        if "context" in vary:
            bits.append(f"at {context_label(cell.context)}")
        return " ".join(bits) + (":" if bits else "")

    return label


def describe_cells(stats: dict[Cell, CellStat]) -> str:
    return ", ".join(c.key() for c in sorted(stats)) or "nothing"


def common_cells(stats: dict[str, dict[Cell, CellStat]], arms: Sequence[str]) -> tuple[list[Cell], str]:
    """The cells all `arms` have, and, when some arm has a cell only at other settings
    (a rerun one arm has not finished), the sentence naming the arm that is missing."""
    sets = [set(stats[a]) for a in arms]
    common = sorted(set.intersection(*sets)) if sets else []
    loose = [{c.loose() for c in s} for s in sets]
    shared_loose = set.intersection(*loose) if loose else set()
    missing = []
    for key in sorted(shared_loose):
        have = {a: {c.settings for c in stats[a] if c.loose() == key} for a in arms}
        allset = set.union(*have.values())
        for setting in sorted(allset):
            lacking = [a for a in arms if setting not in have[a]]
            if lacking and not any(c.loose() == key and c.settings == setting for c in common):
                holders = [a for a in arms if setting in have[a]]
                missing.append(
                    f"{'/'.join(lacking)} has no run at the settings {'/'.join(holders)} ran ({setting[:8] or 'unrecorded'}) at "
                    f"{key[0]}/{key[1]}@{context_label(key[2])}: a rerun one arm has not finished?"
                )
    return common, "; ".join(dict.fromkeys(missing))


def compare(
    rows: pd.DataFrame,
    subjects: Sequence[str],
    baselines: Sequence[str],
    sel: Selector,
    *,
    higher_is_better: bool,
    threshold: float,
    rigor: Rigor,
    holm: bool = True,
) -> Outcome:
    """Every subject against every baseline on every cell they share (see the module doc).
    Its fails are Holm-adjusted over the comparisons unless `holm` is false: a gate that
    also rests on other claims adjusts over all of them at once (`holm_fails`)."""
    stats = {
        arm: cell_stats(rows, sel, arm, confidence=rigor.confidence, sequential=rigor.sequential)
        for arm in dict.fromkeys([*subjects, *baselines])
    }
    out = Outcome(metric=sel.metric, higher_is_better=higher_is_better, threshold=threshold, rigor=rigor, stats=stats)
    for arm in [*baselines, *subjects]:
        if not stats[arm]:
            out.missing = f"no canonical {sel.metric} for {arm} yet"
            return out
    unmatched = []
    for s in subjects:
        for b in baselines:
            common, lacking = common_cells(stats, [s, b])
            if lacking:
                unmatched.append(lacking)
            if not common:
                if lacking:
                    continue
                out.missing = f"no common cell for {sel.metric}: {s} has {describe_cells(stats[s])}; {b} has {describe_cells(stats[b])}"
                out.comparisons = []
                return out
            for cell in common:
                out.comparisons.append(
                    compare_cells(stats[s][cell], stats[b][cell], higher_is_better, threshold, rigor)
                )
    out.unmatched = "; ".join(dict.fromkeys(unmatched))
    if holm:
        holm_fails(out.comparisons, rigor)
    return out


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
