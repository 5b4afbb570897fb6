"""The predicate library. A predicate is registered by name with a pydantic params model;
campaign files name it and pass params, which are validated when the file is loaded.

Every predicate receives canonical rows only (see `engine.canonical_only`), aggregates
by median, and writes its reason in the seed's style: the numbers first, then the rule.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from campaign.schema import GateEntry
from campaign.states import Verdict
from gates.result import GateResult, pending

Predicate = Callable[[pd.DataFrame, GateEntry, Any], GateResult]

_REGISTRY: dict[str, tuple[Predicate, type[BaseModel]]] = {}


def register(name: str, params: type[BaseModel]) -> Callable[[Predicate], Predicate]:
    """Register a predicate (built-in or a user's own) under a name campaign files use."""

    def deco(fn: Predicate) -> Predicate:
        _REGISTRY[name] = (fn, params)
        return fn

    return deco


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Predicate:
    return _REGISTRY[name][0]


def params_model(name: str) -> type[BaseModel]:
    return _REGISTRY[name][1]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Selector(_Params):
    """Which rows a predicate reads: a metric, optionally narrowed by probe/scenario/context."""

    metric: str
    probe: str | None = None
    scenario: str | None = None
    context: int | None = None


def select(rows: pd.DataFrame, sel: Selector, arm: str, scenario: str | None = None) -> pd.Series:
    if rows.empty:
        return pd.Series(dtype=float)
    mask = (rows["arm_id"] == arm) & (rows["metric"] == sel.metric)
    if sel.probe:
        mask &= rows["probe"] == sel.probe
    scen = scenario if scenario is not None else sel.scenario
    if scen:
        mask &= rows["scenario"] == scen
    if sel.context is not None:
        mask &= rows["context"] == sel.context
    if "trial" in rows and scen != "summary":
        mask &= rows["trial"] >= 0  # per-trial rows only, unless a summary row is asked for
    return rows.loc[mask, "value"].astype(float)


def median_of(rows: pd.DataFrame, sel: Selector, arm: str, scenario: str | None = None) -> float | None:
    values = select(rows, sel, arm, scenario)
    return None if values.empty else float(values.median())


def fmt(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def pct(value: float) -> str:
    return f"{value * 100:+.0f}%"


# -- relative improvement ---------------------------------------------------------------


class RelativeParams(Selector):
    min_gain: float = Field(description="minimum relative gain, 0.10 = +10%")
    higher_is_better: bool = True


@register("relative_improvement", RelativeParams)
def relative_improvement(rows: pd.DataFrame, gate: GateEntry, p: RelativeParams) -> GateResult:
    """Subjects must beat the baseline by at least `min_gain` on one metric (median)."""
    if not gate.baseline:
        return pending("relative_improvement needs a baseline arm")
    base_arm = gate.baseline[0]
    base = median_of(rows, p, base_arm)
    if base is None or base == 0:
        return pending(f"no canonical {p.metric} for baseline {base_arm} yet")
    gains: dict[str, float] = {}
    values: dict[str, float] = {base_arm: base}
    for arm in gate.subjects:
        value = median_of(rows, p, arm)
        if value is None:
            return pending(f"no canonical {p.metric} for {arm} yet")
        values[arm] = value
        gains[arm] = (value - base) / base if p.higher_is_better else (base - value) / base
    ok = all(g >= p.min_gain for g in gains.values())
    sign = 1 if p.higher_is_better else -1
    parts = ", ".join(f"{arm} {fmt(values[arm])} ({pct(sign * g)})" for arm, g in gains.items())
    need = f"{pct(p.min_gain)} or more" if p.higher_is_better else f"{pct(-p.min_gain)} or lower"
    reason = f"{p.metric}: {parts} vs {base_arm} {fmt(base)}; needs {need}"
    return GateResult(
        verdict=Verdict.PASS if ok else Verdict.FAIL,
        reason=reason,
        evidence={"metric": p.metric, "baseline": base_arm, "values": values, "gains": gains, "min_gain": p.min_gain},
    )


# -- threshold ------------------------------------------------------------------------

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


class ThresholdParams(Selector):
    op: Literal[">=", ">", "<=", "<"] = ">="
    value: float
    scenarios: list[str] = Field(default_factory=list, description="each must hold; empty = all rows together")


@register("threshold", ThresholdParams)
def threshold(rows: pd.DataFrame, gate: GateEntry, p: ThresholdParams) -> GateResult:
    """Each subject's median must satisfy `metric op value` (per scenario if named)."""
    check = _OPS[p.op]
    scenarios: list[str | None] = list(p.scenarios) or [None]
    observed: dict[str, dict[str, float]] = {}
    failures: list[str] = []
    for arm in gate.subjects:
        for scen in scenarios:
            value = median_of(rows, p, arm, scen)
            label = scen or p.metric
            if value is None:
                return pending(f"no canonical {p.metric}{' ' + scen if scen else ''} for {arm} yet")
            observed.setdefault(arm, {})[label] = value
            if not check(value, p.value):
                failures.append(f"{arm} {label} {fmt(value)}")
    shown = "; ".join(
        f"{arm} " + ", ".join(f"{k} {fmt(v)}" for k, v in vals.items()) for arm, vals in observed.items()
    )
    if failures:
        reason = f"{p.metric} misses {p.op} {fmt(p.value)}: {', '.join(failures)} ({shown})"
    else:
        reason = f"{p.metric} {p.op} {fmt(p.value)} holds: {shown}"
    return GateResult(
        verdict=Verdict.FAIL if failures else Verdict.PASS,
        reason=reason,
        evidence={"metric": p.metric, "op": p.op, "threshold": p.value, "observed": observed},
    )


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
