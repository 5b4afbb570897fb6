"""The comparison primitive: how every comparative predicate reads its numbers.

A verdict is a claim with an error rate, so the numbers behind it follow these rules
(how rows become cells and runs is `gates.cells` and `gates.arm_cells`, the estimators
`gates.blockstats`, what a claim is held to `gates.rigor`, the error limit
`gates.error_limit`, how claims combine into a gate's verdict `gates.claims`):

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from campaign.core.states import Verdict
from campaign.core.units import context_label, num, pct
from gates import blockstats
from gates.arm_cells import cell_stats
from gates.blockstats import Estimate
from gates.cells import Cell, CellStat, Selector
from gates.claims import gate_p, holm_fails, worst
from gates.energy_validity import ENERGY_METRICS, block_caveats, device_refusal
from gates.error_limit import error_note, flaky, subject_errors
from gates.intervals import MEDIAN_METHOD
from gates.rigor import Rigor, ci_label, is_sequential, runs_note

# -- formatting -----------------------------------------------------------------------------


def fmt_stat(stat: CellStat) -> str:
    """'0.97 [0.95, 0.99] 95% CI, 5 runs x 30 requests'; '0.97, 1 run x 30 requests' where
    one run gives no interval."""
    if not stat.runs:
        return stat.size()
    if stat.n < 2:
        return f"{num(stat.geomean)}, {stat.size()}"
    lo, hi = num(stat.low), num(stat.high)
    if lo == hi == num(stat.geomean):
        return f"{num(stat.geomean)}, {stat.size()}"
    return f"{num(stat.geomean)} [{lo}, {hi}] {ci_label(stat.confidence, is_sequential(stat))}, {stat.size()}"


def need_text(threshold: float, higher_is_better: bool) -> str:
    if threshold == 0:
        return "any gain"
    return f"{pct(threshold)} or more" if higher_is_better else f"{pct(-threshold)} or lower"


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
            return f"{self.subject.arm} {num(self.subject.geomean)} ({pct(c)}, {none}: {how}, {self.subject.size()})"
        return f"{self.subject.arm} {num(self.subject.geomean)} ({pct(c)} [{pct(lo)}, {pct(hi)}] {ci_label(self.subject.confidence, seq)}, {how}, {self.subject.size()})"

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
    unmatched: str = ""  # non-empty: inconclusive, the arms ran at different settings (or devices)
    caveats: list[str] = field(default_factory=list)  # what the verdict rests on that it must say

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
                f"{where + ' ' if where else ''}{', '.join(c.text() for c in cmps)} vs {base} {num(cmps[0].baseline.geomean)}"
            )
        out = f"{self.metric}: {'; '.join(parts)}" if parts else self.metric
        if need:
            out += f"; needs {need_text(self.threshold, self.higher_is_better)}"
        said = list(dict.fromkeys(n for c in self.comparisons for n in c.notes)) if notes else []
        if self.unmatched:
            said.append(self.unmatched)
        if notes:
            said.extend(self.caveats)
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
            **({"caveats": self.caveats} if self.caveats else {}),
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
    if sel.metric in ENERGY_METRICS:
        arms = list(dict.fromkeys([*subjects, *baselines]))
        unmatched.append(device_refusal(rows, arms))
        out.caveats = block_caveats(rows, arms)
    out.unmatched = "; ".join(dict.fromkeys(u for u in unmatched if u))
    if holm:
        holm_fails(out.comparisons, rigor)
    return out
