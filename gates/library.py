"""The rest of the built-in predicates: control, regression guard, best-of, majority,
acceptance rate, holds-at-the-ceiling, goodput, attribution, and all_of to combine them.

Each reads canonical rows only (the engine strips greedy ones first) through the
comparison primitive in `gates.compare` (cells, n, intervals, error rates), and writes its
reason in the seed's style, numbers first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator

from campaign import metrics
from campaign.samples import kinds
from campaign.schema import GateEntry
from campaign.states import TRACE_SCENARIO_PREFIX, SampleKind, Verdict
from gates import compare
from campaign.units import num, pct
from gates.compare import Cell, CellStat, Rigor, Selector
from gates.intervals import RATE_METHOD, rate_interval
from gates.registry import Params, get, params_model, register
from gates.result import GateResult, pending


# -- control --------------------------------------------------------------------------------


class ControlParams(Selector, Rigor):
    max_advantage: float = Field(default=0.05, ge=0, description="a control may not beat the subject by more")
    higher_is_better: bool = True
    role: Literal["promote", "control"] = Field(
        default="promote",
        description="promote: pass when no control beats the subjects; control: only characterize (verdict control)",
    )


def _common_cells(stats: dict[str, dict[Cell, CellStat]]) -> list[Cell]:
    cells = None
    for per_arm in stats.values():
        cells = set(per_arm) if cells is None else cells & set(per_arm)
    return sorted(cells or [])


def _no_common(metric: str, stats: dict[str, dict[Cell, CellStat]]) -> GateResult:
    """No cell every arm has. When they share a (probe, scenario, context, mode) but
    measured it under other probe settings (an item with another max_tokens), more runs
    will never make them comparable: inconclusive, naming who ran what. Otherwise the
    missing cells may still come: pending."""
    loose = [{c.loose() for c in cells} for cells in stats.values()]
    shared = set.intersection(*loose) if loose else set()
    if shared:
        key = min(shared)
        by_setting: dict[str, list[str]] = {}
        for arm, cells in stats.items():
            for c in cells:
                if c.loose() == key:
                    by_setting.setdefault(c.settings[:8] or "unrecorded", []).append(arm)
        who = "; ".join(f"{'/'.join(arms)} at settings {setting}" for setting, arms in sorted(by_setting.items()))
        return GateResult(
            verdict=Verdict.INCONCLUSIVE,
            reason=f"no cell for {metric} that all of {'/'.join(stats)} measured under the same probe settings: "
            f"{key[0]}/{key[1]}@{compare.context_label(key[2])} ran {who} (their items gave the probe other "
            f"parameters); runs at other settings are not compared",
        )
    have = "; ".join(f"{arm} has {compare.describe_cells(cells)}" for arm, cells in stats.items())
    return pending(f"no cell for {metric} that all of {'/'.join(stats)} share: {have}")


def _arm_stats(
    rows: pd.DataFrame, sel: Selector, arms: list[str], confidence: float, sequential: bool = False,
) -> tuple[dict[str, dict[Cell, CellStat]], GateResult | None]:
    stats = {arm: compare.cell_stats(rows, sel, arm, confidence=confidence, sequential=sequential) for arm in dict.fromkeys(arms)}
    for arm, cells in stats.items():
        if not cells:
            return stats, pending(f"no canonical {sel.metric} for {arm} yet")
    if not _common_cells(stats):
        return stats, _no_common(sel.metric, stats)
    return stats, None


def _unreliable(stats: dict[str, dict[Cell, CellStat]], arms: list[str], rigor: Rigor) -> list[str]:
    """Arms a predicate reads besides its subjects whose errors make their numbers
    unable to decide: named, and the gate inconclusive, never a fail for the subject."""
    out = []
    for arm in dict.fromkeys(arms):
        cells = list(stats.get(arm, {}).values())
        if cells and compare.flaky(cells[0], rigor):
            out.append(compare.error_note(cells[0], rigor))
        elif any(c.all_failed for c in cells):
            out.append(f"{arm} failed every request in {', '.join(c.cell.key() for c in cells if c.all_failed)}")
    return out


def _judge_control(cmp: compare.Comparison, control_arm: str, subjects: list[CellStat], shaky: list[str],
                   p: ControlParams, rigor: Rigor) -> None:
    """The subject's verdict on one comparison, set on it (before Holm): the comparison
    is the control's advantage, the verdict the subject's, so its own p_pass ("the control
    surely beats the subject by more than max_advantage") is the subject's fail and its
    p_fail ("surely not") the subject's pass."""
    mine: list[str] = []
    cmp.p_pass, cmp.p_fail = cmp.p_fail, cmp.p_pass
    if any(compare.flaky(s, rigor) or s.all_failed for s in subjects):
        v = Verdict.FAIL
        mine = [compare.error_note(s, rigor) + ": cannot be promoted" for s in subjects if compare.flaky(s, rigor) or s.all_failed]
        cmp.statistical, cmp.p_fail, cmp.p_pass = False, 0.0, 1.0
    elif shaky:
        v, mine = Verdict.INCONCLUSIVE, [f"control {n}: its numbers cannot decide" for n in shaky]
        cmp.statistical = False
    elif not cmp.n_ok or not cmp.statistical:
        v, mine = Verdict.INCONCLUSIVE, cmp.notes
        cmp.statistical = False
    elif cmp.p_pass <= rigor.alpha:  # exactly max_advantage is no advantage above it
        v = Verdict.PASS
    elif cmp.p_fail <= rigor.alpha:
        v = Verdict.FAIL
    else:
        v, mine = Verdict.INCONCLUSIVE, [f"{control_arm}'s advantage CI straddles {pct(p.max_advantage)}"]
    cmp.verdict, cmp.notes = v, mine


@register("control", ControlParams)
def control(rows: pd.DataFrame, gate: GateEntry, p: ControlParams) -> GateResult:
    """Subjects against control arms ("T promoted; U just control, no advantage > 5%"), per
    common cell: a control's advantage over the best subject, with its interval, must stay
    at or below `max_advantage` (pass); above it the subject fails; straddling it, or with
    n < min_n, the gate is inconclusive."""
    if not gate.baseline:
        return pending("control needs control arms in baseline")
    rigor = p.of()
    sel = p.selector()
    stats, missing = _arm_stats(rows, sel, [*gate.subjects, *gate.baseline], rigor.confidence, rigor.sequential)
    if missing:
        return missing
    cells = _common_cells(stats)
    shaky = _unreliable(stats, [a for a in gate.baseline if a not in gate.subjects], rigor)
    label = compare.cell_labeller(cells)
    comparisons: list[compare.Comparison] = []
    parts: list[str] = []
    for cell in cells:
        subj = [stats[a][cell] for a in gate.subjects]
        best = max(subj, key=lambda s: s.median if p.higher_is_better else -s.median)
        shown = []
        for c in gate.baseline:
            cmp = compare.compare_cells(stats[c][cell], best, p.higher_is_better, p.max_advantage, rigor)
            comparisons.append(cmp)
            change, lo, hi = cmp.change
            shown.append(f"{c} {pct(change)} [{pct(lo)}, {pct(hi)}]")
            _judge_control(cmp, c, subj, shaky, p, rigor)
        where = label(cell)
        parts.append((where + " " if where else "") + ", ".join(shown) + f" over {best.arm} {compare.fmt_stat(best)}")
    compare.holm_fails(comparisons, rigor)
    verdicts = [c.verdict for c in comparisons]
    notes = list(dict.fromkeys(n for c in comparisons for n in c.notes))
    evidence = _evidence(comparisons, rigor, p.metric, {"max_advantage": p.max_advantage, "role": p.role})
    if p.role == "control":
        for key in ("p_pass", "p_fail", "statistical_fail"):
            evidence.pop(key, None)  # characterises only: not a claim of the family
    numbers = f"{p.metric} " + "; ".join(parts)
    tail = ("; " + "; ".join(dict.fromkeys(notes))) if notes else ""
    if p.role == "control":
        subj_txt = ", ".join(f"{a} {compare.fmt_stat(stats[a][c])}" for c in cells for a in gate.subjects)
        ctrl_txt = ", ".join(f"{a} {compare.fmt_stat(stats[a][c])}" for c in cells for a in gate.baseline)
        reason = f"{p.metric} {subj_txt} vs {ctrl_txt}: " + "; ".join(parts) + tail
        return GateResult(verdict=Verdict.CONTROL, reason=reason, evidence=evidence)
    verdict = compare.worst(verdicts)
    if verdict == Verdict.FAIL and not any("cannot be promoted" in n for n in notes):
        beating = sorted({c.subject.arm for c, v in zip(comparisons, verdicts) if v == Verdict.FAIL})
        return GateResult(
            verdict=Verdict.FAIL,
            reason=f"control {'/'.join(beating)} beats {'/'.join(gate.subjects)} by more than {pct(p.max_advantage)} ({numbers}){tail}",
            evidence=evidence,
        )
    if verdict == Verdict.PASS:
        reason = f"{'/'.join(gate.subjects)} promoted; {'/'.join(gate.baseline)} just control, no advantage > {p.max_advantage * 100:.0f}% ({numbers})"
    else:
        reason = f"{'/'.join(gate.subjects)} vs control {'/'.join(gate.baseline)}: {numbers}{tail}"
    return GateResult(verdict=verdict, reason=reason, evidence=evidence)


def _evidence(comparisons: list[compare.Comparison], rigor: Rigor, metric: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Evidence for predicates that build comparisons themselves: the same shape as
    `compare.Outcome.evidence`, so the gate page reads every predicate alike."""
    outcome = compare.Outcome(metric=metric, higher_is_better=True, threshold=0.0, rigor=rigor, stats={}, comparisons=comparisons)
    ev = outcome.evidence()
    ev.pop("higher_is_better")
    ev.pop("threshold")
    return {**ev, **(extra or {})}


# -- regression guard -----------------------------------------------------------------------


class RegressionGuardParams(Selector, Rigor):
    min_gain: float = 0.0
    higher_is_better: bool = False
    guard_metric: str = Field(description="the metric that must not regress, e.g. reuse")
    guard_probe: str | None = None
    guard_scenarios: list[str] = Field(default_factory=list)
    guard_min: float = Field(description="the guard metric's floor (absolute)")
    worse_metric: str | None = Field(default=None, description="also report how much worse this metric got, e.g. warm ttft_s")
    worse_scenarios: list[str] = Field(default_factory=list)


@register("regression_guard", RegressionGuardParams)
def regression_guard(rows: pd.DataFrame, gate: GateEntry, p: RegressionGuardParams) -> GateResult:
    """A gain on one metric that must not cost another ("cuts cold TTFT ~-55%, but zeroes
    the warm cache (hit 0%)"). The gain is compared per common cell against every baseline
    (`gates.compare`); the guard must hold per subject, scenario and context with its whole
    interval. A guard broken beyond doubt fails the gate whatever the gain."""
    if not gate.baseline:
        return pending("regression_guard needs a baseline arm")
    rigor = p.of()
    main = compare.compare(rows, gate.subjects, gate.baseline, p.selector(), higher_is_better=p.higher_is_better, threshold=p.min_gain, rigor=rigor)
    if main.missing:
        return pending(main.missing)
    guard_sel = Selector(metric=p.guard_metric, probe=p.guard_probe, context=p.context)
    guards: list[tuple[CellStat, Verdict, str]] = []
    for arm in gate.subjects:
        for scen in p.guard_scenarios or [None]:
            stats = compare.cell_stats(rows, guard_sel, arm, scen, confidence=rigor.confidence, sequential=rigor.sequential)
            if not stats:
                return pending(f"no canonical {p.guard_metric}{' ' + scen if scen else ''} for {arm} yet")
            for stat in stats.values():
                v, note = compare.judge_bound(stat, lambda x: x >= p.guard_min, rigor)
                guards.append((stat, v, note))
    worse: dict[str, tuple[float, float]] = {}
    if p.worse_metric:
        for arm in gate.subjects:
            ratios = []
            for scen in p.worse_scenarios or [None]:
                wsel = Selector(metric=p.worse_metric, probe=p.guard_probe, scenario=scen, context=p.context)
                for b in gate.baseline:
                    a_stats, b_stats = compare.cell_stats(rows, wsel, arm), compare.cell_stats(rows, wsel, b)
                    ratios += [a_stats[c].median / b_stats[c].median for c in set(a_stats) & set(b_stats) if b_stats[c].median]
            if ratios:
                worse[arm] = (min(ratios), max(ratios))
    evidence: dict[str, Any] = {
        **main.evidence(),
        "guard": {"metric": p.guard_metric, "min": p.guard_min,
                  "cells": [{**s.evidence("subject"), "verdict": str(v)} for s, v, _ in guards]},
        "worse_ratio": worse,
    }
    head = main.text(need=False)
    broken: dict[str, CellStat] = {}
    for stat, v, _ in guards:
        if v == Verdict.FAIL and (stat.arm not in broken or stat.median < broken[stat.arm].median):
            broken[stat.arm] = stat
    if broken:
        guard_txt = ", ".join(f"{a} {p.guard_metric} {compare.fmt_stat(s)}" for a, s in broken.items())
        extra = ""
        if worse:
            lo = min(r[0] for r in worse.values())
            hi = max(r[1] for r in worse.values())
            extra = f"; {p.worse_metric} {lo:.0f}-{hi:.0f}x worse than {'/'.join(gate.baseline)}" if hi >= 2 else f"; {p.worse_metric} x{num(lo)}-{num(hi)} of {'/'.join(gate.baseline)}"
        return GateResult(verdict=Verdict.FAIL, reason=f"{head}, but {guard_txt} (needs >= {num(p.guard_min)}){extra}", evidence=evidence)
    verdict = compare.worst([main.verdict, *(v for _, v, _ in guards)])
    notes = [n for _, _, n in guards if n]
    if verdict == Verdict.PASS:
        low = min(s.median for s, _, _ in guards)
        return GateResult(verdict=verdict, reason=f"{main.text()}; {p.guard_metric} holds (min {num(low)})", evidence=evidence)
    tail = ("; " + "; ".join(dict.fromkeys(notes))) if notes else ""
    return GateResult(verdict=verdict, reason=f"{main.text()}{tail}", evidence=evidence)


# -- best of ----------------------------------------------------------------------------------


class BestOfParams(Selector, Rigor):
    higher_is_better: bool = True
    label: str = Field(default="", description="how the reason names the ranking, e.g. 'decode 32K'")


@register("best_of", BestOfParams)
def best_of(rows: pd.DataFrame, gate: GateEntry, p: BestOfParams) -> GateResult:
    """The first subject must rank first among subjects and baseline ("best decode 32K"),
    per common cell, beating each other arm with its gain's whole interval above 0; an
    arm that beats it beyond doubt fails it; anything between is inconclusive."""
    rigor = p.of()
    sel = p.selector()
    arms = [*gate.subjects, *gate.baseline]
    stats, missing = _arm_stats(rows, sel, arms, rigor.confidence, rigor.sequential)
    if missing:
        return missing
    candidate = gate.subjects[0]
    others = [a for a in dict.fromkeys(arms) if a != candidate]
    shaky = _unreliable(stats, others, rigor)
    label_text = p.label or p.metric
    cells = _common_cells(stats)
    where = compare.cell_labeller(cells)
    comparisons, verdicts, parts, notes = [], [], [], []
    ranking: dict[str, list[str]] = {}
    per_cell = {cell: [compare.compare_cells(stats[candidate][cell], stats[o][cell], p.higher_is_better, 0.0, rigor) for o in others] for cell in cells}
    compare.holm_fails([c for cmps in per_cell.values() for c in cmps], rigor)  # "beaten beyond doubt" over every cell and arm
    for cell in cells:
        order = sorted(stats, key=lambda a: (stats[a][cell].median if stats[a][cell].runs else -math.inf) * (1 if p.higher_is_better else -1), reverse=True)
        ranking[cell.key()] = order
        mine = stats[candidate][cell]
        cell_cmps = per_cell[cell]
        comparisons += cell_cmps
        if compare.flaky(mine, rigor) or mine.all_failed:
            verdicts.append(Verdict.FAIL)
            notes.append(compare.error_note(mine, rigor) + ": cannot pass")
        elif shaky:
            verdicts.append(Verdict.INCONCLUSIVE)
            notes += [f"{n}: its numbers cannot decide" for n in shaky]
        elif any(c.statistical and c.verdict == Verdict.FAIL for c in cell_cmps):
            verdicts.append(Verdict.FAIL)
        elif not all(c.statistical for c in cell_cmps):
            verdicts.append(Verdict.INCONCLUSIVE)
            notes += [n for c in cell_cmps for n in c.notes]
        elif all(c.verdict == Verdict.PASS for c in cell_cmps):
            verdicts.append(Verdict.PASS)
        else:
            verdicts.append(Verdict.INCONCLUSIVE)
            close = [c.baseline.arm for c in cell_cmps if c.verdict != Verdict.PASS]
            notes.append(f"{candidate} vs {'/'.join(close)}: the CIs overlap")
        runner = next((a for a in order if a != candidate), None)
        prefix = where(cell)
        prefix = f"{prefix} " if prefix else ""
        if order[0] == candidate:
            nxt = ""
            if runner:
                cmp = next(c for c in cell_cmps if c.baseline.arm == runner)
                change, lo, hi = cmp.change
                nxt = f"; next {runner} {compare.fmt_stat(stats[runner][cell])} ({candidate} {pct(change)} [{pct(lo)}, {pct(hi)}] {compare.ci_label(rigor.confidence, rigor.sequential)})"
            parts.append(f"{prefix}{candidate} best {label_text}: {compare.fmt_stat(mine)}{nxt}")
        else:
            parts.append(f"{prefix}{candidate} {compare.fmt_stat(mine)} is not the best {label_text}: {order[0]} {compare.fmt_stat(stats[order[0]][cell])}")
    verdict = compare.worst(verdicts)
    reason = "; ".join(parts) + (("; " + "; ".join(dict.fromkeys(notes))) if notes else "")
    evidence = _evidence(comparisons, rigor, p.metric, {"ranking": ranking, "candidate": candidate})
    return GateResult(verdict=verdict, reason=reason, evidence=evidence)


# -- majority (tool loop) -------------------------------------------------------------------------


class MajorityParams(Params):
    metric: str = metrics.TOOL_LOOP_PASS.name
    probe: str | None = "tool-loop"
    min_ratio: float = Field(default=0.5, ge=0, le=1, description="pass when the pass rate exceeds this (strict)")
    max_error_rate: float = Field(default=compare.DEFAULT_MAX_ERROR_RATE, ge=0, le=1)


def passes_of(rows: pd.DataFrame, arm: str, p: MajorityParams) -> dict[int, tuple[int, int]]:
    """Passes and trials per context (never pooled across contexts)."""
    if rows.empty:
        return {}
    mask = (rows["arm_id"] == arm) & (rows["metric"] == p.metric) & (kinds(rows) == SampleKind.SAMPLE)
    if p.probe:
        mask &= rows["probe"] == p.probe
    part = rows.loc[mask]
    return {int(ctx): (int((g["value"] > 0.5).sum()), int(len(g))) for ctx, g in part.groupby("context")}


@register("majority", MajorityParams)
def majority(rows: pd.DataFrame, gate: GateEntry, p: MajorityParams) -> GateResult:
    """Majority of trials right ("tool loop 2/3"), per context, with the exact
    (Clopper-Pearson) interval of each pass rate: pass when the whole interval is above
    `min_ratio`, fail when it is at or below it, inconclusive between -- which is where 3
    trials always land (2/3 has [0.09, 0.99]). The arm's error rate covers every request
    it made (`gates.compare.arm_errors`). Several arms whose intervals overlap cannot be
    told apart, and the reason says so."""
    results: dict[str, tuple[int, int, float, float]] = {}
    notes: list[str] = []
    verdicts: list[Verdict] = []
    for arm in gate.subjects:
        per_context = passes_of(rows, arm, p)
        if not per_context:
            return pending(f"no canonical tool-loop trials for {arm} yet")
        errors = compare.arm_errors(rows, arm)
        for ctx, (k, n) in sorted(per_context.items()):
            label = arm if len(per_context) == 1 else f"{arm} at {compare.context_label(ctx)}"
            lo, hi = rate_interval(k, n)
            results[label] = (k, n, lo, hi)
            if errors.rate is not None and errors.rate > p.max_error_rate + compare.EPS:
                verdicts.append(Verdict.FAIL)
                notes.append(f"{errors.text()} > {num(p.max_error_rate)}: cannot pass")
            elif lo > p.min_ratio + compare.EPS:
                verdicts.append(Verdict.PASS)
            elif hi <= p.min_ratio + compare.EPS:
                verdicts.append(Verdict.FAIL)
            else:
                verdicts.append(Verdict.INCONCLUSIVE)
                notes.append(f"{n} trials cannot tell {label}'s rate from {p.min_ratio:.0%}")
    labels = list(results)
    overlaps = [
        f"{a}/{b}" for i, a in enumerate(labels) for b in labels[i + 1:]
        if results[a][2] <= results[b][3] and results[b][2] <= results[a][3]
    ]
    if overlaps:
        notes.append(f"intervals overlap ({', '.join(overlaps)}): these trials cannot tell the arms apart")
    shown = ", ".join(f"{a} {k}/{n} [{num(lo)}, {num(hi)}] 95% CI" for a, (k, n, lo, hi) in results.items())
    verdict = compare.worst(verdicts)
    reason = f"tool loop {shown}"
    if verdict == Verdict.FAIL and not any("cannot pass" in x for x in notes):
        reason += f"; needs more than {p.min_ratio:.0%}"
    if notes:
        reason += "; " + "; ".join(dict.fromkeys(notes))
    return GateResult(
        verdict=verdict,
        reason=reason,
        evidence={
            "passes": {a: [k, n] for a, (k, n, _, _) in results.items()},
            "rate_intervals": {a: [lo, hi] for a, (_, _, lo, hi) in results.items()},
            "interval_method": RATE_METHOD, "min_ratio": p.min_ratio,
        },
    )


# -- acceptance rate (speculation) ----------------------------------------------------------------


class AcceptanceParams(Rigor):
    min_rate: float = Field(default=0.6, ge=0, le=1)
    probe: str | None = None


def _acceptance_runs(rows: pd.DataFrame, arm: str, p: AcceptanceParams) -> tuple[list[compare.Run], int, int]:
    """Per server run: accepted / drafted tokens from the server's counters."""
    mask = rows["arm_id"] == arm
    if p.probe:
        mask &= rows["probe"] == p.probe
    drafts, accepts = metrics.DRAFT_TOKENS.name, metrics.ACCEPTED_TOKENS.name
    part = rows.loc[mask & rows["metric"].isin([drafts, accepts])]
    if part.empty:
        return [], 0, 0
    part = part.assign(_block=compare.block_of(part))
    runs = []
    for block, g in part.groupby("_block", sort=True):
        drafted = float(g.loc[g["metric"] == drafts, "value"].sum())
        accepted = float(g.loc[g["metric"] == accepts, "value"].sum())
        if drafted > 0:
            runs.append(compare.Run(block=str(block), item=str(g["item_key"].iloc[0]) if "item_key" in g else "",
                                    attempt=int(g["attempt_id"].iloc[0]) if "attempt_id" in g else 0,
                                    value=accepted / drafted, requests=int(drafted)))
    drafted_all = int(part.loc[part["metric"] == drafts, "value"].sum())
    accepted_all = int(part.loc[part["metric"] == accepts, "value"].sum())
    return runs, drafted_all, accepted_all


@register("acceptance_rate", AcceptanceParams)
def acceptance_rate(rows: pd.DataFrame, gate: GateEntry, p: AcceptanceParams) -> GateResult:
    """Accepted / drafted tokens from the server's counters ("MTP acceptance ~0.8"), as
    every other predicate reads numbers: one rate per server run, a CI over runs, at
    least `min_runs` of them, and the arm's error rate over every request it made (an arm
    over `max_error_rate` cannot pass). Pass when the whole CI is at or above `min_rate`,
    fail when it is wholly below, inconclusive between."""
    rigor = p.of()
    parts, verdicts, notes, cells = [], [], [], []
    # a trace replay's prompts are words drawn at random for each hash id: acceptance on
    # them says nothing about real text, so its counters are not read here
    replay = rows["scenario"].astype(str).str.startswith(TRACE_SCENARIO_PREFIX) if not rows.empty else None
    replayed = rows.loc[replay] if replay is not None else rows
    rows = rows.loc[~replay] if replay is not None else rows
    for arm in gate.subjects:
        if rows.empty and not replayed.empty:
            runs, drafted, _ = _acceptance_runs(replayed, arm, p)
            if drafted:
                return GateResult(
                    verdict=Verdict.INCONCLUSIVE,
                    reason=f"{arm}'s draft counters come only from trace replays, whose prompts are random words: acceptance "
                           "on random text says nothing about real text; measure it with real prompts (a dataset workload, "
                           "or decode/agent-load on the model's own kind of text)",
                    evidence={"replay_runs": len(runs), "replay_drafted": drafted, "min_rate": p.min_rate},
                )
        if rows.empty:
            return pending(f"no draft counters for {arm} yet")
        runs, drafted, accepted = _acceptance_runs(rows, arm, p)
        if not drafted:
            return pending(f"{arm} drafted no tokens (speculation off, or no counters)")
        stat = compare.stat_from_runs(arm, Cell(p.probe or "", "server counters", 0, "canonical"), "acceptance_rate",
                                      "accepted_tokens / draft_tokens", "summary rows (one per attempt)", runs,
                                      [r.value for r in runs], rigor.confidence, "ratio", rigor.sequential)
        stat.arm_errors = compare.arm_errors(rows, arm)
        v, note = compare.judge_bound(stat, lambda x: x >= p.min_rate - compare.EPS, rigor)
        verdicts.append(v)
        if note:
            notes.append(note)
        parts.append(f"{arm} {compare.fmt_stat(stat)} ({accepted}/{drafted} drafted tokens)")
        cells.append({**stat.evidence("subject"), "verdict": str(v), "drafted": drafted, "accepted": accepted})
    verdict = compare.worst(verdicts)
    reason = "draft acceptance " + ", ".join(parts) + ("" if verdict == Verdict.PASS else f"; needs >= {num(p.min_rate)}")
    if notes:
        reason += "; " + "; ".join(dict.fromkeys(notes))
    return GateResult(
        verdict=verdict, reason=reason,
        evidence={"acceptance": {c["arm"]: c["median"] for c in cells}, "min_rate": p.min_rate, "cells": cells,
                  "min_runs": p.min_runs, "max_error_rate": p.max_error_rate, "confidence": p.confidence,
                  "interval_method": compare.INTERVAL_METHOD},
    )


# -- holds at the ceiling ------------------------------------------------------------------------


class CeilingParams(Rigor):
    metric: str = metrics.DECODE_TPS.name
    probe: str | None = "decode"
    context: int = Field(description="the ceiling context, e.g. 262144")
    min_value: float = Field(description="subjects must hold at least this at the ceiling")
    label: str = ""


@register("holds_at_ceiling", CeilingParams)
def holds_at_ceiling(rows: pd.DataFrame, gate: GateEntry, p: CeilingParams) -> GateResult:
    """Subjects hold `min_value` at the ceiling context, each median's whole interval at or
    above it; baseline arms are shown beside, and called collapsed when theirs is wholly
    below ("V 6.1 / Y 8.7 collapse; L 15.4 / T 14.1 / S 14.2 hold")."""
    rigor = p.of()
    sel = Selector(metric=p.metric, probe=p.probe, context=p.context)
    stats: dict[str, CellStat] = {}
    judged: dict[str, tuple[Verdict, str]] = {}
    for arm in [*gate.subjects, *gate.baseline]:
        cells = compare.cell_stats(rows, sel, arm, confidence=rigor.confidence, sequential=rigor.sequential)
        if not cells:
            return pending(f"no canonical {p.metric} at {p.context} for {arm} yet")
        if len(cells) > 1:
            return pending(f"{arm} has {p.metric} in several cells at {p.context} ({compare.describe_cells(cells)}): name a scenario")
        stats[arm] = next(iter(cells.values()))
        judged[arm] = compare.judge_bound(stats[arm], lambda x: x >= p.min_value, rigor)
    at = p.label or compare.context_label(p.context)
    subj = " / ".join(f"{a} {compare.fmt_stat(stats[a])}" for a in gate.subjects)
    others = " / ".join(f"{a} {compare.fmt_stat(stats[a])}" for a in gate.baseline)
    collapse = [a for a in gate.baseline if judged[a][0] == Verdict.FAIL]
    evidence = {
        "values": {a: s.median for a, s in stats.items()}, "min_value": p.min_value, "context": p.context,
        "min_runs": p.min_runs, "max_error_rate": p.max_error_rate, "confidence": p.confidence, "interval_method": compare.INTERVAL_METHOD,
        "cells": [{**s.evidence("subject" if a in gate.subjects else "baseline"), "verdict": str(judged[a][0])} for a, s in stats.items()],
    }
    verdict = compare.worst(judged[a][0] for a in gate.subjects)
    notes = [judged[a][1] for a in gate.subjects if judged[a][1]]
    tail = ("; " + "; ".join(notes)) if notes else ""
    if verdict == Verdict.FAIL:
        fail = [a for a in gate.subjects if judged[a][0] == Verdict.FAIL]
        return GateResult(verdict=verdict, reason=f"at {at}: {' / '.join(f'{a} {compare.fmt_stat(stats[a])}' for a in fail)} below {num(p.min_value)} {p.metric}{tail}", evidence=evidence)
    reason = f"at {at}: {subj} " + ("hold" if verdict == Verdict.PASS else "undecided") + f" >= {num(p.min_value)}"
    if others:
        reason += f"; {others}" + (" collapse" if collapse and len(collapse) == len(gate.baseline) else "")
    return GateResult(verdict=verdict, reason=reason + tail, evidence=evidence)


# -- all of --------------------------------------------------------------------------------------


class Check(Params):
    predicate: str
    params: dict[str, Any] = Field(default_factory=dict)
    subjects: list[str] | None = None
    baseline: list[str] | None = None
    report_only: bool = Field(default=False, description="shown in the reason, does not decide the verdict")

    @model_validator(mode="after")
    def _known(self) -> Check:
        if self.predicate == "all_of":
            raise ValueError("all_of cannot nest all_of")
        try:
            model = params_model(self.predicate)
        except KeyError:
            raise ValueError(f"unknown predicate {self.predicate!r}") from None
        model.model_validate(self.params)
        return self


class AllOfParams(Params):
    checks: list[Check] = Field(min_length=1)


@register("all_of", AllOfParams)
def all_of(rows: pd.DataFrame, gate: GateEntry, p: AllOfParams) -> GateResult:
    """Several predicates that must all pass ("L beats K on total time; MTP acceptance ~0.8;
    tool loop 2/3"); the reason joins theirs."""
    parts, evidence, verdicts = [], {}, []
    claims: list[tuple[Verdict, dict[str, Any]]] = []
    for i, check in enumerate(p.checks):
        deciding = not check.report_only
        sub = gate.model_copy(update={
            "subjects": check.subjects or gate.subjects,
            "baseline": gate.baseline if check.baseline is None else check.baseline,
            "predicate": check.predicate, "params": check.params,
        })
        result = get(check.predicate)(rows, sub, params_model(check.predicate).model_validate(check.params))
        if deciding:
            verdicts.append(result.verdict)
            if "p_pass" in result.evidence:
                claims.append((result.verdict, result.evidence))
        parts.append(result.reason)
        evidence[f"{i}:{check.predicate}"] = {"verdict": result.verdict, **result.evidence}
    if claims:  # the whole is one claim of the family: all must pass (largest p), any may fail (Bonferroni)
        evidence["p_pass"] = max(float(e["p_pass"]) for _, e in claims)
        evidence["p_fail"] = min(1.0, min(float(e["p_fail"]) for _, e in claims) * len(claims))
        evidence["statistical_fail"] = all(e.get("statistical_fail", True) for v, e in claims if v == Verdict.FAIL)
    for v in (Verdict.PENDING, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.CONTROL):
        if v in verdicts:
            return GateResult(verdict=v, reason="; ".join(parts), evidence=evidence)
    return GateResult(verdict=Verdict.PASS, reason="; ".join(parts), evidence=evidence)


# -- goodput -------------------------------------------------------------------------------------


class GoodputParams(Params):
    metric: str = metrics.TTFT_S.name
    probe: str | None = None
    scenario_pattern: str | None = Field(
        default=None, description="regular expression the scenario must match, e.g. 'c\\d+-t[1-9]' (agent-load later turns)"
    )
    context: int | None = None
    target: float = Field(description="the latency a request must meet, e.g. 2.0 (s)")
    lower_is_better: bool = True
    min_share: float = Field(default=0.9, ge=0, le=1, description="share of requests that must meet the target")
    min_n: int = Field(default=compare.DEFAULT_MIN_RUNS, ge=1, description="fewer requests than this is inconclusive")


@register("goodput", GoodputParams)
def goodput(rows: pd.DataFrame, gate: GateEntry, p: GoodputParams) -> GateResult:
    """A latency target met by at least `min_share` of requests, failed requests counting
    as misses (their per-request `errors` rows): "ttft_s <= 2.00 for 93% [82%, 99%] of 45
    requests". Per arm and context (never pooled); the share carries its exact
    (Clopper-Pearson) interval: pass when the whole interval reaches `min_share`, fail
    when none of it does, inconclusive between."""
    pattern = re.compile(p.scenario_pattern) if p.scenario_pattern else None
    results: list[dict[str, Any]] = []
    verdicts: list[Verdict] = []
    for arm in gate.subjects:
        if rows.empty:
            return pending(f"no canonical {p.metric} for {arm} yet")
        mask = (rows["arm_id"] == arm) & (kinds(rows) == SampleKind.SAMPLE)
        if p.probe:
            mask &= rows["probe"] == p.probe
        if p.context is not None:
            mask &= rows["context"] == p.context
        if pattern is not None:
            mask &= rows["scenario"].astype(str).map(lambda sc: bool(pattern.fullmatch(sc)))
        mine = rows.loc[mask]
        values = mine[mine["metric"] == p.metric]
        if values.empty:
            return pending(f"no canonical {p.metric} for {arm} yet")
        for context, part in mine.groupby("context"):
            vals = part.loc[part["metric"] == p.metric, "value"].astype(float)
            failed = int(part["metric"].isin([metrics.ERRORS.name, metrics.NOT_RUN.name]).sum())  # not_run: a stalled server never got it
            met = int((vals <= p.target).sum() if p.lower_is_better else (vals >= p.target).sum())
            total = len(vals) + failed
            lo, hi = rate_interval(met, total)
            if total < p.min_n:
                v = Verdict.INCONCLUSIVE
            elif lo >= p.min_share - compare.EPS:
                v = Verdict.PASS
            elif hi < p.min_share - compare.EPS:
                v = Verdict.FAIL
            else:
                v = Verdict.INCONCLUSIVE
            verdicts.append(v)
            results.append({"arm": arm, "context": int(context), "met": met, "requests": total, "failed": failed,
                            "share": met / total, "low": lo, "high": hi, "verdict": str(v)})
    contexts = {r["context"] for r in results}
    op = "<=" if p.lower_is_better else ">="
    parts = [
        f"{r['arm']}{' at ' + compare.context_label(r['context']) if len(contexts) > 1 else ''} "
        f"{r['share']:.0%} [{r['low']:.0%}, {r['high']:.0%}] of {r['requests']} requests ({r['failed']} failed)"
        for r in results
    ]
    reason = f"{p.metric} {op} {num(p.target)} for " + ", ".join(parts) + f"; needs {p.min_share:.0%}"
    short = [f"{r['arm']} n={r['requests']}" for r in results if r["requests"] < p.min_n]
    if short:
        reason += f"; {', '.join(short)} < {p.min_n}: too few to decide"
    verdict = compare.worst(verdicts)
    if verdict == Verdict.INCONCLUSIVE and not short:
        reason += "; the interval straddles it"
    return GateResult(
        verdict=verdict, reason=reason,
        evidence={"metric": p.metric, "target": p.target, "op": op, "min_share": p.min_share, "interval_method": RATE_METHOD,
                  "goodput": results, "failures_count_as_misses": True},
    )


# -- attribution: which mechanism earned the win, by ablation ----------------------------------------


class AttributionParams(Rigor):
    claim: str = Field(description="the mechanism credited with the win, e.g. 'cache' or 'slots'")
    ablation: str | None = Field(
        default=None,
        description="an arm listed in baseline: the subject's recipe with the claimed mechanism switched off",
    )
    metric: str = metrics.TTFT_LATER_MEDIAN_S.name
    probe: str = "agent-load"
    scenario: str | None = "summary"
    context: int | None = None
    lower_is_better: bool = True
    min_gain: float = Field(default=0.2, description="the win must be at least this large to credit anything")
    counter_scenario: str = "load"
    min_hits: int = Field(default=1, ge=1)


def _counter(rows: pd.DataFrame, arm: str, metric: str, probe: str, scenario: str) -> tuple[float, str] | None:
    """A counter delta summed over the arm's attempts, with the unit it was stored in."""
    if rows.empty:
        return None
    mask = (rows["arm_id"] == arm) & (rows["metric"] == metric) & (rows["probe"] == probe) & (rows["scenario"] == scenario)
    part = rows.loc[mask]
    if part.empty:
        return None
    units = sorted({str(u) for u in part["unit"]}) if "unit" in part else [""]
    if len(units) > 1:
        return None  # never add requests to tokens
    return float(part["value"].sum()), units[0]


def _counters(rows: pd.DataFrame, arm: str, p: AttributionParams) -> dict[str, Any] | None:
    hits = _counter(rows, arm, metrics.CACHE_HITS.name, p.probe, p.counter_scenario)
    lookups = _counter(rows, arm, metrics.CACHE_LOOKUPS.name, p.probe, p.counter_scenario)
    if hits is None or lookups is None or hits[1] != lookups[1]:
        return None
    return {"hits": hits[0], "lookups": lookups[0], "unit": hits[1] or "count"}


def _counter_text(arm: str, c: dict[str, Any] | None) -> str:
    if c is None:
        return f"{arm} reports no cache counters"
    return f"cache {int(c['hits'])} hits in {int(c['lookups'])} lookups ({c['unit']}) on {arm}"


def _counters_compared(counters: dict[str, dict[str, Any] | None]) -> str:
    """Hits side by side, but only between arms that count in the same unit."""
    by_unit: dict[str, list[str]] = {}
    for arm, c in counters.items():
        if c is not None:
            by_unit.setdefault(c["unit"], []).append(f"{arm} {int(c['hits'])}")
    parts = [f"hits ({unit}): {', '.join(v)}" for unit, v in by_unit.items() if len(v) > 1]
    if len(by_unit) > 1:
        parts.append(f"not compared across units ({', '.join(sorted(by_unit))})")
    return "; ".join(parts)


@register("attribution", AttributionParams)
def attribution(rows: pd.DataFrame, gate: GateEntry, p: AttributionParams) -> GateResult:
    """Which mechanism earned a win, decided by ablation (seed 000: "the win was four slots,
    not the prefix cache").

    The win is the subject against the baseline arms other than the ablation (intervals,
    error rates and n as in `gates.compare`). With an ablation arm (the subject's recipe
    with the claimed mechanism off) the mechanism is credited (`pass`) only when switching
    it off costs the win: the subject beats its ablation by at least `min_gain` (the gain's
    whole interval), the ablation does not itself keep the win, and, for the cache, its
    counters do not say it never hit (then the difference came from elsewhere, such as load
    drifting between runs, and the verdict is inconclusive). When the ablation
    keeps the win (its own gain over the baseline clears `min_gain`) and switching off
    costs less than that, the claim fails. Anything between -- the mechanism worth part of
    the win -- is inconclusive.

    Without an ablation arm the verdict is never `pass`: counters (cache hits, with their
    unit) can only argue by elimination ("0 hits: the cache did no work"), so that argument
    is reported, labelled as such, with the verdict `inconclusive`.
    """
    rigor = p.of()
    subject = gate.subjects[0]
    if p.ablation is not None and p.ablation not in gate.baseline:
        return pending(f"ablation arm {p.ablation} must be listed in the gate's baseline")
    reference = [b for b in gate.baseline if b != p.ablation] or list(gate.baseline)
    if not reference:
        return pending("attribution needs a baseline arm")
    # the ablation may be the baseline itself: the subject differs from it only by the
    # mechanism (llama.cpp S3 vs S1: slots), so the win is what switching it off costs
    sole = p.ablation is not None and reference == [p.ablation]
    sel = Selector(metric=p.metric, probe=p.probe, scenario=p.scenario, context=p.context)
    hib = not p.lower_is_better
    win = compare.compare(rows, [subject], reference, sel, higher_is_better=hib, threshold=p.min_gain, rigor=rigor)
    if win.missing:
        return pending(win.missing)
    arms = [subject, *reference, *([p.ablation] if p.ablation else [])]
    counters = {a: _counters(rows, a, p) for a in arms}
    evidence: dict[str, Any] = {
        **win.evidence(), "claim": p.claim, "subject": subject, "reference": reference, "ablation": p.ablation,
        "counters": counters,
    }
    counter_txt = _counter_text(subject, counters[subject])
    compared = _counters_compared(counters)
    if compared:
        counter_txt += f" ({compared})"
    head = win.text()
    if win.verdict == Verdict.FAIL:
        return GateResult(verdict=Verdict.FAIL, reason=f"{head}: no win to credit to anything", evidence=evidence)
    if win.verdict != Verdict.PASS:
        return GateResult(verdict=Verdict.INCONCLUSIVE, reason=f"{head}: the win itself is not established", evidence=evidence)
    if p.ablation is None:
        return GateResult(verdict=Verdict.INCONCLUSIVE, reason=f"{head}; {_elimination(p, subject, counters[subject])}; {counter_txt}", evidence=evidence)
    no_hits = p.claim == "cache" and (counters[subject] is None or counters[subject]["hits"] < p.min_hits)
    made = ("reports no cache counters" if counters[subject] is None else f"made {int(counters[subject]['hits'])} cache hits") if no_hits else ""
    claim = _Claim(p, subject, p.ablation, reference, sel, rigor, win, evidence, head, counter_txt, no_hits, made)
    return _credit_sole(claim) if sole else _credit_by_ablation(rows, claim)


@dataclass(frozen=True)
class _Claim:
    """What deciding a credit by ablation reads: the gate's parameters, the arms, the
    established win (`head` its words), the evidence so far and the subject's counters
    (`no_hits`: a cache claim whose cache never hit, `made` says so)."""

    p: AttributionParams
    subject: str
    ablation: str
    reference: list[str]
    sel: Selector
    rigor: Rigor
    win: compare.Outcome
    evidence: dict[str, Any]
    head: str
    counter_txt: str
    no_hits: bool
    made: str

    def result(self, verdict: Verdict, reason: str) -> GateResult:
        return GateResult(verdict=verdict, reason=f"{reason}; {self.counter_txt}", evidence=self.evidence)


def _credit_sole(c: _Claim) -> GateResult:
    """The ablation is the only baseline: the subject differs from it by the mechanism
    alone, so switching it off costs the whole win, unless a cache that never hit did no
    work (the difference came from elsewhere)."""
    if c.no_hits:
        return c.result(Verdict.INCONCLUSIVE, f"{c.head}; but {c.subject} {c.made}: the cache cannot be credited (drift between runs?)")
    return c.result(Verdict.PASS, f"{c.head}; {c.ablation} is {c.subject} with {c.p.claim} off, so switching it off costs "
                                  f"the whole win: the win was the {c.p.claim}")


def _credit_by_ablation(rows: pd.DataFrame, c: _Claim) -> GateResult:
    """The ablation beside other baselines: credited when switching the mechanism off
    costs the win (subject vs ablation) and the ablation does not keep it (ablation vs
    the reference); failed when the ablation keeps it and costs less; else inconclusive."""
    p, subject, ablation, evidence = c.p, c.subject, c.ablation, c.evidence
    hib = not p.lower_is_better
    kept = compare.compare(rows, [ablation], c.reference, c.sel, higher_is_better=hib, threshold=p.min_gain, rigor=c.rigor)
    cost = compare.compare(rows, [subject], [ablation], c.sel, higher_is_better=hib, threshold=p.min_gain, rigor=c.rigor)
    if kept.missing or cost.missing:
        return pending(kept.missing or cost.missing, **evidence)
    evidence["ablation_vs_reference"] = kept.evidence()
    evidence["subject_vs_ablation"] = cost.evidence()
    off = f"{ablation} ({p.claim} off)"
    numbers = f"{c.head}; {off}: {kept.text(need=False).split(': ', 1)[1]}; {subject} vs {ablation}: {cost.text(need=False).split(': ', 1)[1]}"
    ablation_stats = [s for s in kept.used_cells() if s.arm == ablation]
    if any(compare.flaky(s, c.rigor) for s in ablation_stats):
        note = "; ".join(compare.error_note(s, c.rigor) for s in ablation_stats if compare.flaky(s, c.rigor))
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; ablation {note}: its numbers leave its failures out")
    if kept.verdict == Verdict.PASS:
        if cost.verdict == Verdict.PASS:
            return c.result(Verdict.INCONCLUSIVE, f"{numbers}; switching the {p.claim} off costs {subject} some of it, "
                                                  f"but {ablation} still wins: the {p.claim} is only part of the win")
        # the claim fails on the ablation's own win: that comparison's p is the fail's
        evidence.update(p_fail=kept.evidence().get("p_pass", 1.0), statistical_fail=True)
        return c.result(Verdict.FAIL, f"{numbers}; switching the {p.claim} off keeps the win: the win was not the {p.claim}")
    if cost.verdict == Verdict.PASS and kept.verdict != Verdict.FAIL:
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; switching the {p.claim} off costs the win, but whether {ablation} "
                                              f"keeps it is undecided: the credit waits on the ablation's own result")
    if cost.verdict == Verdict.PASS and c.no_hits:
        # the counters contradict the ablation: a cache that never hit did no work
        return c.result(Verdict.INCONCLUSIVE, f"{numbers}; switching the cache off costs the win, but {subject} {c.made}: "
                                              f"the difference is not the cache's doing (drift between runs?)")
    if cost.verdict == Verdict.PASS:
        evidence["p_pass"] = max(c.win.evidence()["p_pass"], cost.evidence()["p_pass"], kept.evidence()["p_fail"])
        return c.result(Verdict.PASS, f"{numbers}; switching the {p.claim} off costs the win: the win was the {p.claim}")
    notes = list(dict.fromkeys(n for comparison in (*kept.comparisons, *cost.comparisons) for n in comparison.notes))
    tail = f"; {'; '.join(notes)}" if notes else ""
    return c.result(Verdict.INCONCLUSIVE, f"{numbers}; the ablation does not decide it: switching the {p.claim} off costs "
                                          f"neither surely the {need(p)} win nor surely less while {ablation} keeps it{tail}")


def need(p: AttributionParams) -> str:
    return pct(-p.min_gain if p.lower_is_better else p.min_gain)


def _elimination(p: AttributionParams, subject: str, c: dict[str, Any] | None) -> str:
    """The argument from counters alone, labelled: it can rule a cache out, never credit."""
    label = "by elimination only (no ablation arm)"
    if c is None:
        return f"{label}: {subject} reports no cache counters, so not even that can be argued"
    if p.claim == "cache":
        if c["hits"] < p.min_hits:
            return f"{label}: the cache made {int(c['hits'])} hits, so it did no work on {subject}; an ablation arm would decide it"
        return f"{label}: the cache hit, but only an ablation arm can say whether the hits earned the win"
    if p.claim == "slots":
        if c["hits"] < p.min_hits:
            return f"{label}: the cache made {int(c['hits'])} hits, which leaves the slots; an ablation arm would decide it"
        return f"{label}: slots and cache both worked; only an ablation arm can credit one of them"
    return f"{label}: counters cannot credit {p.claim}; name an ablation arm"
