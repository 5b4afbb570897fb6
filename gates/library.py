"""The rest of the built-in predicates: control, regression guard, best-of, majority,
acceptance rate, holds-at-the-ceiling, attribution, and all_of to combine them.

Each reads canonical rows only (the engine strips greedy ones first), aggregates by
median, and writes its reason in the seed's style, numbers first.
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator

from campaign.schema import GateEntry
from campaign.states import Verdict
from gates.predicates import (
    Selector,
    _Params,
    fmt,
    gain,
    get,
    median_of,
    params_model,
    pct,
    register,
    span,
)
from gates.result import GateResult, pending


# -- control --------------------------------------------------------------------------------


class ControlParams(Selector):
    max_advantage: float = Field(default=0.05, ge=0, description="a control may not beat the subject by more")
    higher_is_better: bool = True
    role: Literal["promote", "control"] = Field(
        default="promote",
        description="promote: pass when no control beats the subjects; control: only characterize (verdict control)",
    )


@register("control", ControlParams)
def control(rows: pd.DataFrame, gate: GateEntry, p: ControlParams) -> GateResult:
    """Subjects against control arms ("T promoted; U just control, no advantage > 5%")."""
    if not gate.baseline:
        return pending("control needs control arms in baseline")
    values: dict[str, float] = {}
    for arm in [*gate.subjects, *gate.baseline]:
        v = median_of(rows, p, arm)
        if v is None:
            return pending(f"no canonical {p.metric} for {arm} yet")
        values[arm] = v
    best_subject = max(gate.subjects, key=lambda a: values[a] if p.higher_is_better else -values[a])
    advantages = {c: gain(values[c], values[best_subject], p.higher_is_better) for c in gate.baseline}
    evidence = {"metric": p.metric, "values": values, "advantages": advantages, "max_advantage": p.max_advantage}
    shown = ", ".join(f"{c} {pct(a)}" for c, a in advantages.items())
    if p.role == "control":
        reason = f"{p.metric} " + ", ".join(f"{a} {fmt(values[a])}" for a in gate.subjects)
        reason += f" vs {', '.join(f'{c} {fmt(values[c])}' for c in gate.baseline)}: {shown} over {best_subject}"
        return GateResult(verdict=Verdict.CONTROL, reason=reason, evidence=evidence)
    beating = [c for c, a in advantages.items() if a > p.max_advantage]
    if beating:
        return GateResult(
            verdict=Verdict.FAIL,
            reason=f"control {'/'.join(beating)} beats {best_subject} on {p.metric} ({shown}): more than {pct(p.max_advantage)}",
            evidence=evidence,
        )
    return GateResult(
        verdict=Verdict.PASS,
        reason=f"{'/'.join(gate.subjects)} promoted; {'/'.join(gate.baseline)} just control, no advantage > {p.max_advantage * 100:.0f}% ({p.metric} {shown})",
        evidence=evidence,
    )


# -- regression guard -----------------------------------------------------------------------


class RegressionGuardParams(Selector):
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
    the warm cache (hit 0%)")."""
    if not gate.baseline:
        return pending("regression_guard needs a baseline arm")
    base_arm = gate.baseline[0]
    base = median_of(rows, p, base_arm)
    if base is None or base == 0:
        return pending(f"no canonical {p.metric} for baseline {base_arm} yet")
    gains, guards, worse = {}, {}, {}
    for arm in gate.subjects:
        v = median_of(rows, p, arm)
        if v is None:
            return pending(f"no canonical {p.metric} for {arm} yet")
        gains[arm] = gain(v, base, p.higher_is_better)
        scen_values = []
        for scen in p.guard_scenarios or [None]:
            g = median_of(rows, Selector(metric=p.guard_metric, probe=p.guard_probe, scenario=scen, context=p.context), arm)
            if g is None:
                return pending(f"no canonical {p.guard_metric}{' ' + scen if scen else ''} for {arm} yet")
            scen_values.append(g)
        guards[arm] = min(scen_values)
        if p.worse_metric:
            ratios = []
            for scen in p.worse_scenarios or [None]:
                sel = Selector(metric=p.worse_metric, probe=p.guard_probe, scenario=scen, context=p.context)
                a, b = median_of(rows, sel, arm), median_of(rows, sel, base_arm)
                if a is not None and b:
                    ratios.append(a / b)
            if ratios:
                worse[arm] = (min(ratios), max(ratios))
    sign = 1 if p.higher_is_better else -1
    head = f"{p.metric} {span([sign * g for g in gains.values()])} vs {base_arm}"
    evidence: dict[str, Any] = {"gains": gains, "guard": guards, "guard_min": p.guard_min, "worse_ratio": worse}
    broken = {a: v for a, v in guards.items() if v < p.guard_min}
    if broken:
        guard_txt = ", ".join(f"{a} {p.guard_metric} {fmt(v)}" for a, v in broken.items())
        extra = ""
        if worse:
            lo = min(r[0] for r in worse.values())
            hi = max(r[1] for r in worse.values())
            extra = f"; {p.worse_metric} {lo:.0f}-{hi:.0f}x worse than {base_arm}" if hi >= 2 else f"; {p.worse_metric} x{lo:.2f}-{hi:.2f} of {base_arm}"
        return GateResult(verdict=Verdict.FAIL, reason=f"{head}, but {guard_txt} (needs >= {fmt(p.guard_min)}){extra}", evidence=evidence)
    if not all(g >= p.min_gain for g in gains.values()):
        return GateResult(verdict=Verdict.FAIL, reason=f"{head}: needs {pct(sign * p.min_gain)}", evidence=evidence)
    return GateResult(verdict=Verdict.PASS, reason=f"{head}; {p.guard_metric} holds (min {fmt(min(guards.values()))})", evidence=evidence)


# -- best of ----------------------------------------------------------------------------------


class BestOfParams(Selector):
    higher_is_better: bool = True
    label: str = Field(default="", description="how the reason names the ranking, e.g. 'decode 32K'")


@register("best_of", BestOfParams)
def best_of(rows: pd.DataFrame, gate: GateEntry, p: BestOfParams) -> GateResult:
    """The first subject must rank first among subjects and baseline ("best decode 32K")."""
    arms = [*gate.subjects, *gate.baseline]
    values = {}
    for arm in arms:
        v = median_of(rows, p, arm)
        if v is None:
            return pending(f"no canonical {p.metric} for {arm} yet")
        values[arm] = v
    ranking = sorted(arms, key=lambda a: values[a], reverse=p.higher_is_better)
    candidate = gate.subjects[0]
    label = p.label or p.metric
    evidence = {"values": values, "ranking": ranking}
    runner = next(a for a in ranking if a != candidate) if len(ranking) > 1 else None
    after = f"; next {runner} {fmt(values[runner])}" if runner else ""
    if ranking[0] == candidate:
        return GateResult(verdict=Verdict.PASS, reason=f"{candidate} best {label}: {fmt(values[candidate])}{after}", evidence=evidence)
    return GateResult(
        verdict=Verdict.FAIL,
        reason=f"{candidate} {fmt(values[candidate])} is not the best {label}: {ranking[0]} {fmt(values[ranking[0]])}",
        evidence=evidence,
    )


# -- majority (tool loop) -------------------------------------------------------------------------


class MajorityParams(_Params):
    metric: str = "tool_loop_pass"
    probe: str | None = "tool-loop"
    min_ratio: float = Field(default=0.5, ge=0, le=1, description="pass when passes/total exceeds this (strict)")


def passes_of(rows: pd.DataFrame, arm: str, p: MajorityParams) -> tuple[int, int] | None:
    if rows.empty:
        return None
    mask = (rows["arm_id"] == arm) & (rows["metric"] == p.metric) & (rows["trial"] >= 0)
    if p.probe:
        mask &= rows["probe"] == p.probe
    values = rows.loc[mask, "value"]
    if values.empty:
        return None
    return int((values > 0.5).sum()), int(len(values))


@register("majority", MajorityParams)
def majority(rows: pd.DataFrame, gate: GateEntry, p: MajorityParams) -> GateResult:
    """Majority of trials right ("tool loop 2/3")."""
    results = {}
    for arm in gate.subjects:
        r = passes_of(rows, arm, p)
        if r is None:
            return pending(f"no canonical tool-loop trials for {arm} yet")
        results[arm] = r
    ok = all(k / n > p.min_ratio for k, n in results.values())
    shown = ", ".join(f"{a} {k}/{n}" for a, (k, n) in results.items())
    return GateResult(
        verdict=Verdict.PASS if ok else Verdict.FAIL,
        reason=f"tool loop {shown}" + ("" if ok else f"; needs more than {p.min_ratio:.0%}"),
        evidence={"passes": {a: list(r) for a, r in results.items()}},
    )


# -- acceptance rate (speculation) ----------------------------------------------------------------


class AcceptanceParams(_Params):
    min_rate: float = Field(default=0.6, ge=0, le=1)
    probe: str | None = None


@register("acceptance_rate", AcceptanceParams)
def acceptance_rate(rows: pd.DataFrame, gate: GateEntry, p: AcceptanceParams) -> GateResult:
    """Accepted / drafted tokens from the server's counters ("MTP acceptance ~0.8")."""
    rates = {}
    for arm in gate.subjects:
        mask = rows["arm_id"] == arm if not rows.empty else None
        if mask is None:
            return pending(f"no draft counters for {arm} yet")
        if p.probe:
            mask &= rows["probe"] == p.probe
        drafted = rows.loc[mask & (rows["metric"] == "draft_tokens"), "value"].sum()
        accepted = rows.loc[mask & (rows["metric"] == "accepted_tokens"), "value"].sum()
        if not drafted:
            return pending(f"{arm} drafted no tokens (speculation off, or no counters)")
        rates[arm] = float(accepted / drafted)
    ok = all(r >= p.min_rate for r in rates.values())
    shown = ", ".join(f"{a} {r:.2f}" for a, r in rates.items())
    return GateResult(
        verdict=Verdict.PASS if ok else Verdict.FAIL,
        reason=f"draft acceptance {shown}" + ("" if ok else f"; needs >= {p.min_rate:.2f}"),
        evidence={"acceptance": rates, "min_rate": p.min_rate},
    )


# -- holds at the ceiling ------------------------------------------------------------------------


class CeilingParams(_Params):
    metric: str = "decode_tps"
    probe: str | None = "decode"
    context: int = Field(description="the ceiling context, e.g. 262144")
    min_value: float = Field(description="subjects must hold at least this at the ceiling")
    label: str = ""


@register("holds_at_ceiling", CeilingParams)
def holds_at_ceiling(rows: pd.DataFrame, gate: GateEntry, p: CeilingParams) -> GateResult:
    """Subjects hold `min_value` at the ceiling context; baseline arms are shown beside
    ("V 6.1 / Y 8.7 collapse; L 15.4 / T 14.1 / S 14.2 hold")."""
    sel = Selector(metric=p.metric, probe=p.probe, context=p.context)
    values = {}
    for arm in [*gate.subjects, *gate.baseline]:
        v = median_of(rows, sel, arm)
        if v is None:
            return pending(f"no canonical {p.metric} at {p.context} for {arm} yet")
        values[arm] = v
    at = p.label or (f"{p.context // 1024}K" if p.context >= 1024 else str(p.context))
    fail = [a for a in gate.subjects if values[a] < p.min_value]
    subj = " / ".join(f"{a} {fmt(values[a])}" for a in gate.subjects)
    others = " / ".join(f"{a} {fmt(values[a])}" for a in gate.baseline)
    collapse = [a for a in gate.baseline if values[a] < p.min_value]
    evidence = {"values": values, "min_value": p.min_value, "context": p.context}
    if fail:
        return GateResult(verdict=Verdict.FAIL, reason=f"at {at}: {' / '.join(f'{a} {fmt(values[a])}' for a in fail)} below {fmt(p.min_value)} {p.metric}", evidence=evidence)
    reason = f"at {at}: {subj} hold >= {fmt(p.min_value)}"
    if others:
        reason += f"; {others}" + (" collapse" if collapse and len(collapse) == len(gate.baseline) else "")
    return GateResult(verdict=Verdict.PASS, reason=reason, evidence=evidence)


# -- all of --------------------------------------------------------------------------------------


class Check(_Params):
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


class AllOfParams(_Params):
    checks: list[Check] = Field(min_length=1)


@register("all_of", AllOfParams)
def all_of(rows: pd.DataFrame, gate: GateEntry, p: AllOfParams) -> GateResult:
    """Several predicates that must all pass ("L beats K on total time; MTP acceptance ~0.8;
    tool loop 2/3"); the reason joins theirs."""
    parts, evidence, verdicts = [], {}, []
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
        parts.append(result.reason)
        evidence[f"{i}:{check.predicate}"] = {"verdict": result.verdict, **result.evidence}
    for v in (Verdict.PENDING, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.CONTROL):
        if v in verdicts:
            return GateResult(verdict=v, reason="; ".join(parts), evidence=evidence)
    return GateResult(verdict=Verdict.PASS, reason="; ".join(parts), evidence=evidence)


# -- attribution: which mechanism earned the win ---------------------------------------------

class AttributionParams(_Params):
    claim: Literal["cache", "slots"] = Field(description="the mechanism credited with the win")
    metric: str = "ttft_later_median_s"
    probe: str = "agent-load"
    lower_is_better: bool = True
    min_gain: float = Field(default=0.2, description="the win must be at least this large to credit anything")
    counter_scenario: str = "load"
    min_hits: int = Field(default=1, ge=1)


def _counter(rows: pd.DataFrame, arm: str, metric: str, probe: str, scenario: str) -> float | None:
    if rows.empty:
        return None
    mask = (rows["arm_id"] == arm) & (rows["metric"] == metric) & (rows["probe"] == probe) & (rows["scenario"] == scenario)
    values = rows.loc[mask, "value"]
    return None if values.empty else float(values.sum())


@register("attribution", AttributionParams)
def attribution(rows: pd.DataFrame, gate: GateEntry, p: AttributionParams) -> GateResult:
    """Credit the prefix cache only if it actually hit (seed 000: "the win was four slots,
    not the prefix cache" -- 32 lookups, 32 misses)."""
    if not gate.baseline:
        return pending("attribution needs a baseline arm")
    subject, base_arm = gate.subjects[0], gate.baseline[0]
    sel = Selector(metric=p.metric, probe=p.probe, scenario="summary")
    s_val = _summary(rows, sel, subject)
    b_val = _summary(rows, sel, base_arm)
    if s_val is None or b_val is None or b_val == 0:
        missing = subject if s_val is None else base_arm
        return pending(f"no canonical {p.metric} for {missing} yet")
    gain = (b_val - s_val) / b_val if p.lower_is_better else (s_val - b_val) / b_val
    hits = _counter(rows, subject, "cache_hits", p.probe, p.counter_scenario)
    lookups = _counter(rows, subject, "cache_lookups", p.probe, p.counter_scenario)
    base_hits = _counter(rows, base_arm, "cache_hits", p.probe, p.counter_scenario)
    base_lookups = _counter(rows, base_arm, "cache_lookups", p.probe, p.counter_scenario)
    evidence = {
        "metric": p.metric, "subject": subject, "baseline": base_arm, "values": {subject: s_val, base_arm: b_val},
        "gain": gain, "cache_hits": {subject: hits, base_arm: base_hits}, "cache_lookups": {subject: lookups, base_arm: base_lookups},
        "claim": p.claim,
    }
    head = f"{subject} {p.metric} {fmt(s_val)} vs {base_arm} {fmt(b_val)} ({pct(-gain if p.lower_is_better else gain)})"
    if gain < p.min_gain:
        return GateResult(verdict=Verdict.FAIL, reason=f"{head}: no win of {pct(p.min_gain)} to credit to anything", evidence=evidence)
    if hits is None or lookups is None:
        return GateResult(
            verdict=Verdict.INCONCLUSIVE,
            reason=f"{head}, but {subject} reports no cache counters: cannot tell the cache from the slots",
            evidence=evidence,
        )
    counters = f"cache {int(hits)} hits in {int(lookups)} lookups"
    if p.claim == "cache":
        if hits >= p.min_hits:
            return GateResult(verdict=Verdict.PASS, reason=f"{head}; {counters}: the cache did work", evidence=evidence)
        return GateResult(
            verdict=Verdict.FAIL,
            reason=f"{head}, but {counters}: the win was the slots, not the prefix cache",
            evidence=evidence,
        )
    if hits < p.min_hits:
        return GateResult(verdict=Verdict.PASS, reason=f"{head} with {counters}: slot affinity did the work", evidence=evidence)
    return GateResult(
        verdict=Verdict.INCONCLUSIVE,
        reason=f"{head}; {counters}: slots and cache both worked, the win cannot be credited to slots alone",
        evidence=evidence,
    )


def _summary(rows: pd.DataFrame, sel: Selector, arm: str) -> float | None:
    if rows.empty:
        return None
    mask = (rows["arm_id"] == arm) & (rows["metric"] == sel.metric) & (rows["scenario"] == "summary")
    if sel.probe:
        mask &= rows["probe"] == sel.probe
    values = rows.loc[mask, "value"]
    return None if values.empty else float(values.median())
