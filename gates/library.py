"""The rest of the built-in predicates: control, regression guard, best-of, majority,
acceptance rate, holds-at-the-ceiling, goodput, and all_of to combine them (attribution,
which credits a win to a mechanism, is `gates.attribution`).

Each reads canonical rows only (the engine strips greedy ones first) through the
comparison primitive in `gates.compare` (cells, n, intervals, error rates), and writes its
reason in the seed's style, numbers first.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator

from campaign import metrics
from campaign.samples import kinds
from campaign.schema import GateEntry
from campaign.states import TRACE_SCENARIO_PREFIX, SampleKind, Verdict
from campaign.units import context_label, num, pct
from gates import compare
from gates.cells import Cell, CellStat, Run, Selector, arm_errors, block_of, cell_stats, stat_from_runs
from gates.compare import Rigor
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
            f"{key[0]}/{key[1]}@{context_label(key[2])} ran {who} (their items gave the probe other "
            f"parameters); runs at other settings are not compared",
        )
    have = "; ".join(f"{arm} has {compare.describe_cells(cells)}" for arm, cells in stats.items())
    return pending(f"no cell for {metric} that all of {'/'.join(stats)} share: {have}")


def _arm_stats(
    rows: pd.DataFrame, sel: Selector, arms: list[str], confidence: float, sequential: bool = False,
) -> tuple[dict[str, dict[Cell, CellStat]], GateResult | None]:
    stats = {arm: cell_stats(rows, sel, arm, confidence=confidence, sequential=sequential) for arm in dict.fromkeys(arms)}
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
            stats = cell_stats(rows, guard_sel, arm, scen, confidence=rigor.confidence, sequential=rigor.sequential)
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
                    a_stats, b_stats = cell_stats(rows, wsel, arm), cell_stats(rows, wsel, b)
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
    it made (`gates.arm_errors`). Several arms whose intervals overlap cannot be
    told apart, and the reason says so."""
    results: dict[str, tuple[int, int, float, float]] = {}
    notes: list[str] = []
    verdicts: list[Verdict] = []
    for arm in gate.subjects:
        per_context = passes_of(rows, arm, p)
        if not per_context:
            return pending(f"no canonical tool-loop trials for {arm} yet")
        errors = arm_errors(rows, arm)
        for ctx, (k, n) in sorted(per_context.items()):
            label = arm if len(per_context) == 1 else f"{arm} at {context_label(ctx)}"
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


def _acceptance_runs(rows: pd.DataFrame, arm: str, p: AcceptanceParams) -> tuple[list[Run], int, int]:
    """Per server run: accepted / drafted tokens from the server's counters."""
    mask = rows["arm_id"] == arm
    if p.probe:
        mask &= rows["probe"] == p.probe
    drafts, accepts = metrics.DRAFT_TOKENS.name, metrics.ACCEPTED_TOKENS.name
    part = rows.loc[mask & rows["metric"].isin([drafts, accepts])]
    if part.empty:
        return [], 0, 0
    part = part.assign(_block=block_of(part))
    runs = []
    for block, g in part.groupby("_block", sort=True):
        drafted = float(g.loc[g["metric"] == drafts, "value"].sum())
        accepted = float(g.loc[g["metric"] == accepts, "value"].sum())
        if drafted > 0:
            runs.append(Run(block=str(block), item=str(g["item_key"].iloc[0]) if "item_key" in g else "",
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
        stat = stat_from_runs(arm, Cell(p.probe or "", "server counters", 0, "canonical"), "acceptance_rate",
                                      "accepted_tokens / draft_tokens", "summary rows (one per attempt)", runs,
                                      [r.value for r in runs], rigor.confidence, "ratio", rigor.sequential)
        stat.arm_errors = arm_errors(rows, arm)
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
        cells = cell_stats(rows, sel, arm, confidence=rigor.confidence, sequential=rigor.sequential)
        if not cells:
            return pending(f"no canonical {p.metric} at {p.context} for {arm} yet")
        if len(cells) > 1:
            return pending(f"{arm} has {p.metric} in several cells at {p.context} ({compare.describe_cells(cells)}): name a scenario")
        stats[arm] = next(iter(cells.values()))
        judged[arm] = compare.judge_bound(stats[arm], lambda x: x >= p.min_value, rigor)
    at = p.label or context_label(p.context)
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
        f"{r['arm']}{' at ' + context_label(r['context']) if len(contexts) > 1 else ''} "
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
