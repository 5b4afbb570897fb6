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
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator
from scipy import special

from campaign.core import metrics
from campaign.core.schema import GateEntry
from campaign.core.states import TRACE_SCENARIO_PREFIX, SampleKind, Verdict
from campaign.core.units import context_label, num, pct
from campaign.store.samples import kinds
from gates import blockstats, compare
from gates.cells import Cell, CellStat, Run, Selector, arm_errors, block_of, cell_stats, stat_from_runs
from gates.compare import Rigor
from gates.intervals import CONFIDENCE, RATE_METHOD, rate_interval, rate_p
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
    rows: pd.DataFrame,
    sel: Selector,
    arms: list[str],
    confidence: float,
    sequential: bool = False,
) -> tuple[dict[str, dict[Cell, CellStat]], GateResult | None]:
    stats = {
        arm: cell_stats(rows, sel, arm, confidence=confidence, sequential=sequential) for arm in dict.fromkeys(arms)
    }
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


def _judge_control(cmp: compare.Comparison, subjects: list[CellStat], shaky: list[str], rigor: Rigor) -> None:
    """One subject's verdict on one comparison, alone, set on it: the comparison is the
    control's advantage, the verdict the subject's, so its own p_pass ("the control surely
    beats the subject by more than max_advantage") is the subject's fail and its p_fail
    ("surely not") the subject's pass. `_control_claim` combines a control's comparisons."""
    mine: list[str] = []
    cmp.p_pass, cmp.p_fail = cmp.p_fail, cmp.p_pass
    dead = [f"{s.arm} failed every request at {s.cell.key()}: cannot be promoted" for s in subjects if s.all_failed]
    ruled = [
        r
        for s in subjects
        if not s.all_failed and (r := compare.subject_errors(s, rigor, "cannot be promoted")) is not None
    ]
    if dead or any(v == Verdict.FAIL for v, _ in ruled):
        v = Verdict.FAIL
        mine = dead + [note for verdict, note in ruled if verdict == Verdict.FAIL]
        cmp.statistical, cmp.p_fail, cmp.p_pass = False, 0.0, 1.0
    elif ruled:
        v, mine = Verdict.INCONCLUSIVE, [note for _, note in ruled]
        cmp.statistical = False
    elif shaky:
        v, mine = Verdict.INCONCLUSIVE, [f"control {n}: its numbers cannot decide" for n in shaky]
        cmp.statistical = False
    elif not cmp.n_ok or not cmp.statistical:
        v, mine = Verdict.INCONCLUSIVE, cmp.notes
        cmp.statistical = False
    elif cmp.p_pass <= rigor.alpha:
        v = Verdict.PASS
    elif cmp.p_fail <= rigor.alpha:
        v = Verdict.FAIL
    else:
        v = Verdict.INCONCLUSIVE
    cmp.verdict, cmp.notes = v, mine


def _control_claim(
    control_arm: str, where: str, cmps: list[compare.Comparison], max_advantage: float, rigor: Rigor
) -> tuple[compare.Claim, compare.Comparison]:
    """One control in one cell against every subject (`cmps`, one each), as one claim,
    and the comparison its verdict rests on (the one the reason shows).

    Pass, "no control beats the best subject by more than max_advantage", holds when it
    holds for ANY subject: a union of the per-subject claims, so each is tested and the
    smallest p is Bonferroni-adjusted over the subjects (which subject is best is not
    chosen from the data). Fail, "the control beats every subject by more", needs each
    subject's fail at alpha (intersection-union: the largest p, no adjustment)."""
    what = f"control {control_arm}{' ' + where.rstrip(':') if where else ''}"
    ruled = [c for c in cmps if not c.statistical]
    if ruled:
        deciding = next((c for c in ruled if c.verdict == Verdict.FAIL), ruled[0])
        return compare.Claim(
            what, deciding.verdict, deciding.p_pass, deciding.p_fail, False, list(deciding.notes)
        ), deciding
    k = len(cmps)
    strongest = min(cmps, key=lambda c: c.p_pass)  # the subject the pass claim rests on
    closest = max(cmps, key=lambda c: c.p_fail)  # the subject the fail claim rests on
    p_pass, p_fail = min(1.0, strongest.p_pass * k), closest.p_fail
    if p_pass <= rigor.alpha:
        return compare.Claim(what, Verdict.PASS, p_pass, p_fail), strongest
    if p_fail <= rigor.alpha:
        return compare.Claim(what, Verdict.FAIL, p_pass, p_fail), closest
    subject = strongest.baseline.arm
    if strongest.estimate is not None and strongest.estimate.on_bound(strongest.bound):
        note = compare.tie_note(strongest, "advantage")
    elif strongest.p_pass <= rigor.alpha:
        note = (
            f"{control_arm}'s advantage over {subject} is within {pct(max_advantage)} alone, but not over the {k} "
            f"subjects (Bonferroni: which is best is not known before the runs)"
        )
    else:
        note = f"{control_arm}'s advantage CI straddles {pct(max_advantage)}"
    return compare.Claim(what, Verdict.INCONCLUSIVE, p_pass, p_fail, notes=[note]), strongest


@register("control", ControlParams)
def control(rows: pd.DataFrame, gate: GateEntry, p: ControlParams) -> GateResult:
    """Subjects against control arms ("T promoted; U just control, no advantage > 5%"), per
    common cell: each control is compared with every subject, and the subjects are
    promoted (pass) when no control's advantage over the best of them can exceed
    `max_advantage` (`_control_claim`: Bonferroni over the subjects); a control surely
    ahead of every subject by more fails them; otherwise, or with fewer than `min_runs`
    runs, the gate is inconclusive. The controls' fails are Holm-adjusted over controls
    and cells."""
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
    subjects = list(dict.fromkeys(gate.subjects))
    comparisons: list[compare.Comparison] = []
    claims: list[tuple[str, Cell, compare.Claim, compare.Comparison]] = []
    parts: list[str] = []
    for cell in cells:
        subj = [stats[a][cell] for a in subjects]
        shown = []
        for c in gate.baseline:
            cmps = [compare.compare_cells(stats[c][cell], s, p.higher_is_better, p.max_advantage, rigor) for s in subj]
            for cmp in cmps:
                _judge_control(cmp, subj, shaky, rigor)
            comparisons += cmps
            claim, deciding = _control_claim(c, label(cell), cmps, p.max_advantage, rigor)
            claims.append((c, cell, claim, deciding))
            change, lo, hi = deciding.change
            shown.append(
                f"{c} {pct(change)} [{pct(lo)}, {pct(hi)}] over {deciding.baseline.arm} {compare.fmt_stat(deciding.baseline)}"
            )
        where = label(cell)
        parts.append((where + " " if where else "") + ", ".join(shown))
    compare.holm_fails([claim for _, _, claim, _ in claims], rigor, "controls and cells")
    verdicts = [claim.verdict for _, _, claim, _ in claims]
    notes = list(dict.fromkeys(n for _, _, claim, _ in claims for n in claim.notes))
    if len(subjects) > 1 and p.role == "promote":
        notes.append(
            f"each control tested against each of the {len(subjects)} subjects (a pass needs one, Bonferroni; a fail all)"
        )
    evidence = _evidence(
        comparisons,
        rigor,
        p.metric,
        {
            "max_advantage": p.max_advantage,
            "role": p.role,
            "claims": [
                {"control": c, "cell": cell.key(), "subject": d.baseline.arm, **claim.evidence()}
                for c, cell, claim, d in claims
            ],
            **compare.gate_p([claim for _, _, claim, _ in claims]),
        },
    )
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
        beating = sorted({c for c, _, claim, _ in claims if claim.verdict == Verdict.FAIL})
        return GateResult(
            verdict=Verdict.FAIL,
            reason=f"control {'/'.join(beating)} beats {'/'.join(gate.subjects)} by more than {pct(p.max_advantage)} ({numbers}){tail}",
            evidence=evidence,
        )
    if verdict == Verdict.PASS:
        reason = f"{'/'.join(gate.subjects)} promoted; {'/'.join(gate.baseline)} just control, no advantage > {p.max_advantage * 100:.0f}% ({numbers}){tail}"
    else:
        reason = f"{'/'.join(gate.subjects)} vs control {'/'.join(gate.baseline)}: {numbers}{tail}"
    return GateResult(verdict=verdict, reason=reason, evidence=evidence)


def _evidence(
    comparisons: list[compare.Comparison], rigor: Rigor, metric: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Evidence for predicates that build comparisons themselves: the same shape as
    `compare.Outcome.evidence`, so the gate page reads every predicate alike."""
    outcome = compare.Outcome(
        metric=metric, higher_is_better=True, threshold=0.0, rigor=rigor, stats={}, comparisons=comparisons
    )
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
    worse_metric: str | None = Field(
        default=None, description="also report how much worse this metric got, e.g. warm ttft_s"
    )
    worse_scenarios: list[str] = Field(default_factory=list)


@register("regression_guard", RegressionGuardParams)
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
    checked: list[tuple[CellStat, compare.Claim]] = []
    for arm in gate.subjects:
        for scen in p.guard_scenarios or [None]:
            stats = cell_stats(rows, guard_sel, arm, scen, confidence=rigor.confidence, sequential=rigor.sequential)
            if not stats:
                return pending(f"no canonical {p.guard_metric}{' ' + scen if scen else ''} for {arm} yet")
            checked += [(stat, compare.check_bound(stat, p.guard_min, True, rigor)) for stat in stats.values()]
    claims: list[compare.Judged] = [*main.comparisons, *(c for _, c in checked)]
    compare.holm_fails(claims, rigor, "claims (comparisons and guards)")
    guards = [(stat, c.verdict, c.note) for stat, c in checked]
    worse: dict[str, tuple[float, float]] = {}
    if p.worse_metric:
        for arm in gate.subjects:
            ratios = []
            for scen in p.worse_scenarios or [None]:
                wsel = Selector(metric=p.worse_metric, probe=p.guard_probe, scenario=scen, context=p.context)
                for b in gate.baseline:
                    a_stats, b_stats = cell_stats(rows, wsel, arm), cell_stats(rows, wsel, b)
                    ratios += [
                        a_stats[c].median / b_stats[c].median for c in set(a_stats) & set(b_stats) if b_stats[c].median
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
        **compare.gate_p(claims),
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
    verdict = compare.worst([main.verdict, *(v for _, v, _ in guards)])
    notes = [n for _, _, n in guards if n]
    if verdict == Verdict.PASS:
        low = min(s.median for s, _, _ in guards)
        return GateResult(
            verdict=verdict, reason=f"{main.text()}; {p.guard_metric} holds (min {num(low)})", evidence=evidence
        )
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
    per_cell = {
        cell: [
            compare.compare_cells(stats[candidate][cell], stats[o][cell], p.higher_is_better, 0.0, rigor)
            for o in others
        ]
        for cell in cells
    }
    compare.holm_fails(
        [c for cmps in per_cell.values() for c in cmps], rigor
    )  # "beaten beyond doubt" over every cell and arm
    for cell in cells:
        order = sorted(
            stats,
            key=lambda a: (
                (stats[a][cell].median if stats[a][cell].runs else -math.inf) * (1 if p.higher_is_better else -1)
            ),
            reverse=True,
        )
        ranking[cell.key()] = order
        mine = stats[candidate][cell]
        cell_cmps = per_cell[cell]
        comparisons += cell_cmps
        ruled = None if mine.all_failed else compare.subject_errors(mine, rigor)
        if mine.all_failed:
            verdicts.append(Verdict.FAIL)
            notes.append(f"{candidate} failed every request at {cell.key()}: cannot pass")
        elif ruled is not None:
            verdicts.append(ruled[0])
            notes.append(ruled[1])
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
            close = [c for c in cell_cmps if c.verdict != Verdict.PASS]
            tied = [c.estimate is not None and c.estimate.on_bound(c.bound) for c in close]
            notes += [compare.tie_note(c) for c, tie in zip(close, tied) if tie]
            if not all(tied):
                notes.append(
                    f"{candidate} vs {'/'.join(c.baseline.arm for c, tie in zip(close, tied) if not tie)}: the CIs overlap"
                )
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
            parts.append(
                f"{prefix}{candidate} {compare.fmt_stat(mine)} is not the best {label_text}: {order[0]} {compare.fmt_stat(stats[order[0]][cell])}"
            )
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
    confidence: float = Field(
        default=CONFIDENCE, gt=0.5, lt=1, description="the CI level (set campaign-wide by campaign.confidence)"
    )


def passes_of(rows: pd.DataFrame, arm: str, p: MajorityParams) -> dict[tuple[int, str], tuple[int, int]]:
    """Passes and trials per cell, (context, settings): never pooled across contexts, nor
    across the settings the trials were measured under (`gates.cells.Cell`)."""
    if rows.empty:
        return {}
    mask = (rows["arm_id"] == arm) & (rows["metric"] == p.metric) & (kinds(rows) == SampleKind.SAMPLE)
    if p.probe:
        mask &= rows["probe"] == p.probe
    part = rows.loc[mask]
    keys = [part["context"].astype(int), _column(part, "settings_hash", "")]
    return {
        (int(ctx), str(settings)): (int((g["value"] > 0.5).sum()), int(len(g)))
        for (ctx, settings), g in part.groupby(keys)
    }


@register("majority", MajorityParams)
def majority(rows: pd.DataFrame, gate: GateEntry, p: MajorityParams) -> GateResult:
    """Majority of trials right ("tool loop 2/3"), per cell (context and settings), with the
    exact (Clopper-Pearson) interval of each pass rate: pass when the whole interval is
    above `min_ratio`, fail when it is at or below it, inconclusive between -- which is
    where 3 trials always land (2/3 has [0.09, 0.99]). Each trial is its own draw of the
    model's sampling, so trials (not server runs) are the unit here, and each cell's
    p-values are the exact binomial tails at `min_ratio` (`gates.intervals.rate_p`); any
    cell failing fails the gate (Holm over the cells), and the gate joins the campaign's
    family. The arm's error rate covers every request it made (`gates.arm_errors`).
    Several arms whose intervals overlap cannot be told apart, and the reason says so."""
    results: dict[str, tuple[int, int, float, float]] = {}
    cells: list[tuple[str, int, str, compare.Claim]] = []
    alpha = compare.alpha_of(p.confidence)
    for arm in gate.subjects:
        per_cell = passes_of(rows, arm, p)
        if not per_cell:
            return pending(f"no canonical tool-loop trials for {arm} yet")
        errors = arm_errors(rows, arm)
        contexts = {ctx for ctx, _ in per_cell}
        for (ctx, settings), (k, n) in sorted(per_cell.items()):
            label = arm if len(contexts) == 1 else f"{arm} at {context_label(ctx)}"
            if len(per_cell) > len(contexts):
                label += f" (settings {settings[:8] or 'unrecorded'})"
            lo, hi = rate_interval(k, n, p.confidence)
            results[label] = (k, n, lo, hi)
            above, below = rate_p(k, n, p.min_ratio)
            ruled = compare.error_rule(errors, p.max_error_rate, p.confidence)
            if ruled is not None:
                claim = compare.Claim(label, ruled[0], 1.0, 0.0 if ruled[0] == Verdict.FAIL else 1.0, False, [ruled[1]])
            elif above <= alpha:
                claim = compare.Claim(label, Verdict.PASS, above, below)
            elif below <= alpha:
                claim = compare.Claim(label, Verdict.FAIL, above, below)
            else:
                claim = compare.Claim(
                    label,
                    Verdict.INCONCLUSIVE,
                    above,
                    below,
                    notes=[f"{n} trials cannot tell {label}'s rate from {p.min_ratio:.0%}"],
                )
            cells.append((label, ctx, settings, claim))
    claims = [c for *_, c in cells]
    compare.holm_fails(claims, Rigor(confidence=p.confidence), "cells")
    notes = [n for c in claims for n in c.notes]
    labels = list(results)
    overlaps = [
        f"{a}/{b}"
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if results[a][2] <= results[b][3] and results[b][2] <= results[a][3]
    ]
    if overlaps:
        notes.append(f"intervals overlap ({', '.join(overlaps)}): these trials cannot tell the arms apart")
    ci = compare.ci_label(p.confidence)
    shown = ", ".join(f"{a} {k}/{n} [{num(lo)}, {num(hi)}] {ci}" for a, (k, n, lo, hi) in results.items())
    verdict = compare.worst(c.verdict for c in claims)
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
            "claims": [
                {"label": label, "context": ctx, "settings": settings, **c.evidence()}
                for label, ctx, settings, c in cells
            ],
            "interval_method": RATE_METHOD,
            "min_ratio": p.min_ratio,
            "confidence": p.confidence,
            **compare.gate_p(claims),
        },
    )


# -- acceptance rate (speculation) ----------------------------------------------------------------


class AcceptanceParams(Rigor):
    min_rate: float = Field(default=0.6, ge=0, le=1)
    probe: str | None = None


def _acceptance_cells(rows: pd.DataFrame, arm: str, p: AcceptanceParams) -> dict[Cell, tuple[list[Run], int, int]]:
    """Per cell (probe, context and the settings the counters were measured under: never
    pooled), per server run: accepted / drafted tokens from the server's counters, with
    the cell's drafted and accepted totals."""
    mask = rows["arm_id"] == arm
    if p.probe:
        mask &= rows["probe"] == p.probe
    drafts, accepts = metrics.DRAFT_TOKENS.name, metrics.ACCEPTED_TOKENS.name
    part = rows.loc[mask & rows["metric"].isin([drafts, accepts])]
    if part.empty:
        return {}
    part = part.assign(
        _block=block_of(part),
        _probe=_column(part, "probe", ""),
        _settings=_column(part, "settings_hash", ""),
        _context=part["context"].astype(int) if "context" in part else 0,
    )
    out: dict[Cell, tuple[list[Run], int, int]] = {}
    for (probe, context, settings), cell_rows in part.groupby(["_probe", "_context", "_settings"], sort=True):
        runs = []
        for block, g in cell_rows.groupby("_block", sort=True):
            drafted = float(g.loc[g["metric"] == drafts, "value"].sum())
            accepted = float(g.loc[g["metric"] == accepts, "value"].sum())
            if drafted > 0:
                runs.append(
                    Run(
                        block=str(block),
                        item=str(g["item_key"].iloc[0]) if "item_key" in g else "",
                        attempt=int(g["attempt_id"].iloc[0]) if "attempt_id" in g else 0,
                        value=accepted / drafted,
                        requests=int(drafted),
                    )
                )
        drafted_all = int(cell_rows.loc[cell_rows["metric"] == drafts, "value"].sum())
        accepted_all = int(cell_rows.loc[cell_rows["metric"] == accepts, "value"].sum())
        if drafted_all:
            out[Cell(str(probe), "server counters", int(context), "canonical", str(settings))] = (
                runs,
                drafted_all,
                accepted_all,
            )
    return out


@register("acceptance_rate", AcceptanceParams)
def acceptance_rate(rows: pd.DataFrame, gate: GateEntry, p: AcceptanceParams) -> GateResult:
    """Accepted / drafted tokens from the server's counters ("MTP acceptance ~0.8"), as
    every other predicate reads numbers: per cell (probe, context and settings, never
    pooled), one rate per server run, a CI over runs, at least `min_runs` of them, and the
    arm's error rate over every request it made (an arm over `max_error_rate` cannot
    pass). Pass when the whole CI is at or above `min_rate`, fail when it is wholly below,
    inconclusive between (`compare.check_bound`); any cell failing fails the gate (Holm
    over the cells), and the gate joins the campaign's family."""
    rigor = p.of()
    parts: list[str] = []
    checked: list[tuple[CellStat, compare.Claim, int, int]] = []
    # a trace replay's prompts are words drawn at random for each hash id: acceptance on
    # them says nothing about real text, so its counters are not read here
    replay = rows["scenario"].astype(str).str.startswith(TRACE_SCENARIO_PREFIX) if not rows.empty else None
    replayed = rows.loc[replay] if replay is not None else rows
    rows = rows.loc[~replay] if replay is not None else rows
    for arm in gate.subjects:
        if rows.empty and not replayed.empty:
            replay_cells = _acceptance_cells(replayed, arm, p)
            drafted = sum(d for _, d, _ in replay_cells.values())
            if drafted:
                return GateResult(
                    verdict=Verdict.INCONCLUSIVE,
                    reason=f"{arm}'s draft counters come only from trace replays, whose prompts are random words: acceptance "
                    "on random text says nothing about real text; measure it with real prompts (a dataset workload, "
                    "or decode/agent-load on the model's own kind of text)",
                    evidence={
                        "replay_runs": sum(len(r) for r, _, _ in replay_cells.values()),
                        "replay_drafted": drafted,
                        "min_rate": p.min_rate,
                    },
                )
        if rows.empty:
            return pending(f"no draft counters for {arm} yet")
        found = _acceptance_cells(rows, arm, p)
        if not found:
            return pending(f"{arm} drafted no tokens (speculation off, or no counters)")
        errors = arm_errors(rows, arm)
        label = compare.cell_labeller(list(found))
        for cell, (runs, drafted, accepted) in found.items():
            stat = stat_from_runs(
                arm,
                cell,
                "acceptance_rate",
                "accepted_tokens / draft_tokens",
                "summary rows (one per attempt)",
                runs,
                [r.value for r in runs],
                rigor.confidence,
                "ratio",
                rigor.sequential,
            )
            stat.arm_errors = errors
            checked.append((stat, compare.check_bound(stat, p.min_rate, True, rigor), drafted, accepted))
            where = label(cell).rstrip(":")
            if len(found) > 1 and not where:
                where = f"settings {cell.settings[:8] or 'unrecorded'}"
            parts.append(
                f"{arm}{' ' + where if where else ''} {compare.fmt_stat(stat)} ({accepted}/{drafted} drafted tokens)"
            )
    claims = [c for _, c, _, _ in checked]
    compare.holm_fails(claims, rigor, "cells")
    verdict = compare.worst(c.verdict for c in claims)
    reason = (
        "draft acceptance " + ", ".join(parts) + ("" if verdict == Verdict.PASS else f"; needs >= {num(p.min_rate)}")
    )
    notes = [n for c in claims for n in c.notes]
    if notes:
        reason += "; " + "; ".join(dict.fromkeys(notes))
    cells = [
        {**stat.evidence("subject"), **c.evidence(), "drafted": drafted, "accepted": accepted}
        for stat, c, drafted, accepted in checked
    ]
    return GateResult(
        verdict=verdict,
        reason=reason,
        evidence={
            "acceptance": {c["arm"]: c["median"] for c in cells},
            "min_rate": p.min_rate,
            "cells": cells,
            "min_runs": p.min_runs,
            "max_error_rate": p.max_error_rate,
            "confidence": p.confidence,
            "interval_method": compare.INTERVAL_METHOD,
            **compare.gate_p(claims),
        },
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
    checked: dict[str, compare.Claim] = {}
    for arm in [*gate.subjects, *gate.baseline]:
        cells = cell_stats(rows, sel, arm, confidence=rigor.confidence, sequential=rigor.sequential)
        if not cells:
            return pending(f"no canonical {p.metric} at {p.context} for {arm} yet")
        if len(cells) > 1:
            return pending(
                f"{arm} has {p.metric} in several cells at {p.context} ({compare.describe_cells(cells)}): name a scenario"
            )
        stats[arm] = next(iter(cells.values()))
        checked[arm] = compare.check_bound(stats[arm], p.min_value, True, rigor)
    claims = [checked[a] for a in dict.fromkeys(gate.subjects)]  # the baseline arms are shown beside: no claim
    compare.holm_fails(claims, rigor, "subjects")
    judged = {a: (c.verdict, c.note) for a, c in checked.items()}
    at = p.label or context_label(p.context)
    subj = " / ".join(f"{a} {compare.fmt_stat(stats[a])}" for a in gate.subjects)
    others = " / ".join(f"{a} {compare.fmt_stat(stats[a])}" for a in gate.baseline)
    collapse = [a for a in gate.baseline if judged[a][0] == Verdict.FAIL]
    evidence = {
        "values": {a: s.median for a, s in stats.items()},
        "min_value": p.min_value,
        "context": p.context,
        "min_runs": p.min_runs,
        "max_error_rate": p.max_error_rate,
        "confidence": p.confidence,
        "interval_method": compare.INTERVAL_METHOD,
        "cells": [
            {**s.evidence("subject" if a in gate.subjects else "baseline"), **checked[a].evidence()}
            for a, s in stats.items()
        ],
        **compare.gate_p(claims),
    }
    verdict = compare.worst(judged[a][0] for a in gate.subjects)
    notes = [judged[a][1] for a in gate.subjects if judged[a][1]]
    tail = ("; " + "; ".join(notes)) if notes else ""
    if verdict == Verdict.FAIL:
        fail = [a for a in gate.subjects if judged[a][0] == Verdict.FAIL]
        return GateResult(
            verdict=verdict,
            reason=f"at {at}: {' / '.join(f'{a} {compare.fmt_stat(stats[a])}' for a in fail)} below {num(p.min_value)} {p.metric}{tail}",
            evidence=evidence,
        )
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
    confidence: float = Field(
        default=CONFIDENCE,
        gt=0.5,
        lt=1,
        description="the level at which a check's fail fails the whole, over its deciding checks (set campaign-wide by campaign.confidence)",
    )


@register("all_of", AllOfParams)
def all_of(rows: pd.DataFrame, gate: GateEntry, p: AllOfParams) -> GateResult:
    """Several predicates that must all pass ("L beats K on total time; MTP acceptance ~0.8;
    tool loop 2/3"); the reason joins theirs.

    The whole is one claim of the campaign's family: it passes when every deciding check
    does (the largest p_pass), and fails when any does, so a check's statistical fail
    fails the whole only where it survives Bonferroni over the deciding checks that carry
    p-values (the smallest p_fail times their number); one that does not leaves the
    whole inconclusive, saying so. A check that fails by a rule, or carries no p-value,
    fails the whole outright."""
    parts, evidence, verdicts = [], {}, []
    claims: list[tuple[str, Verdict, dict[str, Any]]] = []
    ruled = False
    for i, check in enumerate(p.checks):
        deciding = not check.report_only
        sub = gate.model_copy(
            update={
                "subjects": check.subjects or gate.subjects,
                "baseline": gate.baseline if check.baseline is None else check.baseline,
                "predicate": check.predicate,
                "params": check.params,
            }
        )
        result = get(check.predicate)(rows, sub, params_model(check.predicate).model_validate(check.params))
        if deciding:
            verdicts.append(result.verdict)
            if "p_pass" in result.evidence:
                claims.append((check.predicate, result.verdict, result.evidence))
            elif result.verdict == Verdict.FAIL:
                ruled = True
        parts.append(result.reason)
        evidence[f"{i}:{check.predicate}"] = {"verdict": result.verdict, **result.evidence}
    notes: list[str] = []
    if claims:
        k = len(claims)
        evidence["p_pass"] = max(float(e["p_pass"]) for _, _, e in claims)
        evidence["p_fail"] = min(1.0, min(float(e["p_fail"]) for _, _, e in claims) * k)
        ruled = ruled or not all(e.get("statistical_fail", True) for _, v, e in claims if v == Verdict.FAIL)
        evidence["statistical_fail"] = not ruled
        if ruled:
            evidence["p_fail"] = 0.0
        elif Verdict.FAIL in verdicts and evidence["p_fail"] > compare.alpha_of(p.confidence):
            failing = [name for name, v, _ in claims if v == Verdict.FAIL]
            notes.append(
                f"{'/'.join(failing)} fails alone, but not over the {k} deciding checks (Bonferroni, p {evidence['p_fail']:.3f})"
            )
            verdicts = [Verdict.INCONCLUSIVE if v == Verdict.FAIL else v for v in verdicts]
    reason = "; ".join([*parts, *notes])
    for v in (Verdict.PENDING, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.CONTROL):
        if v in verdicts:
            return GateResult(verdict=v, reason=reason, evidence=evidence)
    return GateResult(verdict=Verdict.PASS, reason=reason, evidence=evidence)


# -- goodput -------------------------------------------------------------------------------------


class GoodputParams(Params):
    metric: str = metrics.TTFT_S.name
    probe: str | None = None
    scenario_pattern: str | None = Field(
        default=None,
        description="regular expression the scenario must match, e.g. 'c\\d+-t[1-9]' (agent-load later turns)",
    )
    context: int | None = None
    target: float = Field(description="the latency a request must meet, e.g. 2.0 (s)")
    lower_is_better: bool = True
    min_share: float = Field(default=0.9, ge=0, le=1, description="share of requests that must meet the target")
    min_n: int = Field(
        default=compare.DEFAULT_MIN_RUNS, ge=1, description="fewer requests than this in a cell is inconclusive"
    )
    min_runs: int = Field(
        default=compare.DEFAULT_MIN_RUNS,
        ge=2,
        description="fewer server runs (blocks) than this in a cell is inconclusive; 2 is the least a spread can come from",
    )
    confidence: float = Field(
        default=CONFIDENCE, gt=0.5, lt=1, description="the CI level (set campaign-wide by campaign.confidence)"
    )
    sequential: bool = Field(
        default=False,
        description="the t interval over runs is a confidence sequence, valid however often it is looked at (set for a gate "
        "fed by an item with max_blocks)",
    )


GOODPUT_METHOD = (
    "t CI over server runs of each run's share of requests met (failures count as misses), on the probit scale "
    "(continuity-corrected): the share in a typical run; widened to at least the Clopper-Pearson interval of the pooled requests"
)


@dataclass(frozen=True)
class Share:
    """One arm's share of requests meeting the target in one cell (`share_of`): the share
    in a typical server run with its interval and p-values, and the pooled counts."""

    arm: str
    cell: Cell
    run_shares: tuple[float, ...]
    met: int
    requests: int
    failed: int
    share: float
    low: float
    high: float
    p_pass: float
    p_fail: float

    @property
    def runs(self) -> int:
        return len(self.run_shares)


def share_of(arm: str, cell: Cell, per_run: list[tuple[int, int]], failed: int, p: GoodputParams) -> Share:
    """The share met in one cell, from each server run's (met, requests).

    The requests of one run share its start's speed, so the run is the unit: the claim is
    the share in a typical run (as every gate's value is a typical run's), tested by the t
    interval over the runs' shares on the probit scale, where a run's latency shift moves
    its share by an amount that is normal when the shift is (each share continuity-
    corrected, (met + 1/2) / (requests + 1), so a run that met every request has a finite
    one). On the plain scale the mean of the runs' shares is no such test: shares near 1
    are skewed, and 5 runs that happen to miss a slow start pass a share at the bound
    13-26% of the time when the runs' shift is as large as the requests' spread (within
    4% on the probit scale; measured on generated runs at 30 requests each). The share of
    all requests of all runs (a mean over runs) cannot be bounded from so few runs
    without assuming how rare a slow start is. The interval is widened to at least the
    exact interval of the pooled requests, so runs that happen to agree never give a
    narrower one than their requests would as independent trials; its p-values are the
    larger of the two tests' each way, each deciding alike with its interval."""
    shares = tuple(m / n for m, n in per_run)
    met, total = sum(m for m, _ in per_run), sum(n for _, n in per_run)
    probits = [float(special.ndtri((m + 0.5) / (n + 1))) for m, n in per_run]
    k = len(probits)
    mean = sum(probits) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in probits) / (k - 1)) if k > 1 else math.nan
    est = blockstats.Estimate(
        mean, sd / math.sqrt(k) if k > 1 else math.nan, k - 1, k, False, GOODPUT_METHOD, p.sequential, float(k)
    )
    t_lo, t_hi = (float(special.ndtr(x)) for x in est.interval(p.confidence))
    b_lo, b_hi = rate_interval(met, total, p.confidence)
    b_above, b_below = rate_p(met, total, p.min_share)
    bound = float(special.ndtri(p.min_share)) if 0 < p.min_share < 1 else (-math.inf if p.min_share <= 0 else math.inf)
    p_pass, p_fail = max(est.p_above(bound), b_above), max(est.p_below(bound), b_below)
    return Share(
        arm,
        cell,
        shares,
        met,
        total,
        failed,
        float(special.ndtr(mean)),
        min(t_lo, b_lo),
        max(t_hi, b_hi),
        p_pass,
        p_fail,
    )


@register("goodput", GoodputParams)
def goodput(rows: pd.DataFrame, gate: GateEntry, p: GoodputParams) -> GateResult:
    """A latency target met by at least `min_share` of a typical server run's requests,
    failed requests counting as misses (their per-request `errors` rows): "ttft_s <= 2.00
    for 93% [82%, 99%] 95% CI in a typical run (42/45 requests in 3 runs, 0 failed)". Per
    arm and cell (probe, context and settings: never pooled). The requests of one server
    run share its start's speed, so the run is the unit: one share per run, and the
    interval is over them (`share_of`). Pass when the whole interval reaches `min_share`,
    fail when none of it does, inconclusive between or with fewer than `min_runs` runs or
    `min_n` requests. Any cell failing fails the gate (Holm over the cells); its p-values
    join the campaign's family."""
    pattern = re.compile(p.scenario_pattern) if p.scenario_pattern else None
    alpha = compare.alpha_of(p.confidence)
    judged: list[tuple[Share, compare.Claim]] = []
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
        if not (mine["metric"] == p.metric).any():
            return pending(f"no canonical {p.metric} for {arm} yet")
        values = mine["value"].astype(float)
        frame = pd.DataFrame(
            {
                "probe": _column(mine, "probe", ""),
                "context": mine["context"].astype(int),
                "settings": _column(mine, "settings_hash", ""),
                "block": block_of(mine),
                "value": (values <= p.target) if p.lower_is_better else (values >= p.target),
                "metric": mine["metric"] == p.metric,
                "failed": mine["metric"].isin(
                    [metrics.ERRORS.name, metrics.NOT_RUN.name]
                ),  # not_run: a stalled server never got it
            }
        )
        frame = frame[frame["metric"] | frame["failed"]]
        frame["met"] = frame["metric"] & frame["value"]
        for (probe, context, settings), part in frame.groupby(["probe", "context", "settings"], sort=True):
            counts = part.groupby("block", sort=True)[["met", "metric", "failed"]].sum()
            per_run = [(int(m), int(n) + int(f)) for m, n, f in counts.itertuples(index=False) if int(n) + int(f)]
            if not per_run:
                continue
            cell = Cell(str(probe), p.scenario_pattern or "", int(context), "canonical", str(settings))
            share = share_of(arm, cell, per_run, int(part["failed"].sum()), p)
            judged.append((share, _share_claim(share, p, alpha)))
    claims = [c for _, c in judged]
    compare.holm_fails(claims, Rigor(confidence=p.confidence), "cells")
    contexts = {s.cell.context for s, _ in judged}
    several = len({(s.cell.probe, s.cell.context, s.cell.settings) for s, _ in judged}) > len(contexts)
    op = "<=" if p.lower_is_better else ">="
    ci = compare.ci_label(p.confidence, p.sequential)
    parts = []
    for s, _ in judged:
        where = (f" {s.cell.probe}" if several else "") + (
            f" at {context_label(s.cell.context)}" if len(contexts) > 1 else ""
        )
        where += f" (settings {s.cell.settings[:8]})" if several else ""
        parts.append(
            f"{s.arm}{where} {s.share:.0%} [{s.low:.0%}, {s.high:.0%}] {ci} in a typical run ({s.met}/{s.requests} "
            f"requests in {s.runs} run{'s' if s.runs != 1 else ''}, {s.failed} failed)"
        )
    reason = f"{p.metric} {op} {num(p.target)} for " + ", ".join(parts) + f"; needs {p.min_share:.0%}"
    notes = list(dict.fromkeys(n for c in claims for n in c.notes))
    if notes:
        reason += "; " + "; ".join(notes)
    results = [
        {
            "arm": s.arm,
            "probe": s.cell.probe,
            "context": s.cell.context,
            "settings": s.cell.settings,
            "runs": s.runs,
            "run_shares": list(s.run_shares),
            "met": s.met,
            "requests": s.requests,
            "failed": s.failed,
            "share": s.share,
            "low": s.low,
            "high": s.high,
            **c.evidence(),
        }
        for s, c in judged
    ]
    return GateResult(
        verdict=compare.worst(c.verdict for c in claims),
        reason=reason,
        evidence={
            "metric": p.metric,
            "target": p.target,
            "op": op,
            "min_share": p.min_share,
            "min_runs": p.min_runs,
            "confidence": p.confidence,
            "interval_method": GOODPUT_METHOD,
            "goodput": results,
            "failures_count_as_misses": True,
            **compare.gate_p(claims),
        },
    )


def _share_claim(s: Share, p: GoodputParams, alpha: float) -> compare.Claim:
    """One cell's share as a claim of the gate: too few runs or requests is a rule (no p)."""
    what = s.arm + (f" at {context_label(s.cell.context)}" if s.cell.context else "")
    if s.runs < p.min_runs or s.requests < p.min_n:
        short = f"{s.runs} run{'s' if s.runs != 1 else ''}" if s.runs < p.min_runs else f"{s.requests} requests"
        need = f"{p.min_runs} (blocks, each its own server start)" if s.runs < p.min_runs else f"{p.min_n} requests"
        return compare.Claim(
            what,
            Verdict.INCONCLUSIVE,
            statistical=False,
            notes=[f"{what} has {short}; needs {need}: too few to decide"],
        )
    if s.p_pass <= alpha:
        return compare.Claim(what, Verdict.PASS, s.p_pass, s.p_fail)
    if s.p_fail <= alpha:
        return compare.Claim(what, Verdict.FAIL, s.p_pass, s.p_fail)
    return compare.Claim(
        what, Verdict.INCONCLUSIVE, s.p_pass, s.p_fail, notes=[f"{s.arm}'s interval straddles {p.min_share:.0%}"]
    )


def _column(rows: pd.DataFrame, name: str, default: Any) -> pd.Series:
    return rows[name].astype(str) if name in rows else pd.Series(default, index=rows.index)
