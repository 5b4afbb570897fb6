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
    also_metric: str | None = Field(default=None, description="the gain must also show on this metric")
    also_probe: str | None = None
    also_scenario: str | None = None
    also_min_gain: float = 0.0
    also_higher_is_better: bool = True


def gain(value: float, base: float, higher_is_better: bool) -> float:
    return (value - base) / base if higher_is_better else (base - value) / base


def per_repeat(rows: pd.DataFrame, sel: Selector, arm: str) -> dict[int, float]:
    """Median per interleaved repeat, for paired intervals."""
    if rows.empty or "repeat" not in rows:
        return {}
    mask = (rows["arm_id"] == arm) & (rows["metric"] == sel.metric)
    if sel.probe:
        mask &= rows["probe"] == sel.probe
    if sel.scenario:
        mask &= rows["scenario"] == sel.scenario
    if sel.context is not None:
        mask &= rows["context"] == sel.context
    if sel.scenario != "summary":
        mask &= rows["trial"] >= 0
    return {int(r): float(v.median()) for r, v in rows.loc[mask].groupby("repeat")["value"]}


def paired_interval(rows: pd.DataFrame, sel: Selector, arm: str, base_arm: str, higher_is_better: bool) -> tuple[float, float] | None:
    """Range of the gain over repeats run interleaved (A B A B ...); None with < 2 pairs."""
    a, b = per_repeat(rows, sel, arm), per_repeat(rows, sel, base_arm)
    pairs = [gain(a[r], b[r], higher_is_better) for r in sorted(set(a) & set(b)) if b[r]]
    if len(pairs) < 2:
        return None
    if len(pairs) >= 10:
        return percentile_pair(pairs)
    return min(pairs), max(pairs)


def percentile_pair(values: list[float]) -> tuple[float, float]:
    data = sorted(values)
    lo = data[int(0.1 * (len(data) - 1))]
    hi = data[int(round(0.9 * (len(data) - 1)))]
    return lo, hi


def span(values: list[float]) -> str:
    """'+14-24%' for several subjects, '+14%' for one (the seed's style)."""
    lo, hi = min(values), max(values)
    if abs(hi - lo) < 0.005:
        return pct(lo)
    if lo * hi > 0:
        small, large = sorted((abs(lo), abs(hi)))
        return f"{'+' if lo > 0 else '-'}{small * 100:.0f}-{large * 100:.0f}%"
    return f"{pct(lo)}..{pct(hi)}"


@register("relative_improvement", RelativeParams)
def relative_improvement(rows: pd.DataFrame, gate: GateEntry, p: RelativeParams) -> GateResult:
    """Subjects must beat the baseline by at least `min_gain` on one metric (median), and,
    if `also_metric` is set, show at least `also_min_gain` there too ("decode +14-24%, but
    no 10% of total time"). With interleaved repeats, a gain whose range over the repeats
    straddles the threshold is inconclusive rather than a pass or a fail."""
    if not gate.baseline:
        return pending("relative_improvement needs a baseline arm")
    base_arm = gate.baseline[0]
    base = median_of(rows, p, base_arm)
    if base is None or base == 0:
        return pending(f"no canonical {p.metric} for baseline {base_arm} yet")
    gains: dict[str, float] = {}
    values: dict[str, float] = {base_arm: base}
    intervals: dict[str, tuple[float, float]] = {}
    for arm in gate.subjects:
        value = median_of(rows, p, arm)
        if value is None:
            return pending(f"no canonical {p.metric} for {arm} yet")
        values[arm] = value
        gains[arm] = gain(value, base, p.higher_is_better)
        interval = paired_interval(rows, p, arm, base_arm, p.higher_is_better)
        if interval is not None:
            intervals[arm] = interval
    ok = all(g >= p.min_gain for g in gains.values())
    sign = 1 if p.higher_is_better else -1
    parts = ", ".join(f"{arm} {fmt(values[arm])} ({pct(sign * g)})" for arm, g in gains.items())
    if p.min_gain == 0:
        need = "any gain"
    else:
        need = f"{pct(p.min_gain)} or more" if p.higher_is_better else f"{pct(-p.min_gain)} or lower"
    reason = f"{p.metric}: {parts} vs {base_arm} {fmt(base)}; needs {need}"
    evidence: dict[str, Any] = {"metric": p.metric, "baseline": base_arm, "values": values, "gains": gains, "min_gain": p.min_gain}
    if intervals:
        evidence["intervals"] = {a: list(i) for a, i in intervals.items()}
        straddle = [a for a, (lo, hi) in intervals.items() if lo < p.min_gain <= hi]
        if straddle:
            shown = ", ".join(f"{a} {pct(sign * intervals[a][0])}..{pct(sign * intervals[a][1])}" for a in straddle)
            return GateResult(
                verdict=Verdict.INCONCLUSIVE,
                reason=f"{reason}; over interleaved repeats the gain ranges {shown}, straddling the threshold",
                evidence=evidence,
            )
    if ok and p.also_metric:
        also = Selector(metric=p.also_metric, probe=p.also_probe, scenario=p.also_scenario, context=p.context)
        also_base = median_of(rows, also, base_arm)
        if also_base is None or also_base == 0:
            return pending(f"no canonical {p.also_metric} for baseline {base_arm} yet")
        also_gains = {}
        for arm in gate.subjects:
            v = median_of(rows, also, arm)
            if v is None:
                return pending(f"no canonical {p.also_metric} for {arm} yet")
            also_gains[arm] = gain(v, also_base, p.also_higher_is_better)
        evidence["also"] = {"metric": p.also_metric, "gains": also_gains, "min_gain": p.also_min_gain}
        also_sign = 1 if p.also_higher_is_better else -1
        main = f"{p.metric} {span([sign * g for g in gains.values()])}"
        seen = f"{p.also_metric} {span([also_sign * g for g in also_gains.values()])}"
        if not all(g >= p.also_min_gain for g in also_gains.values()):
            need_also = pct(also_sign * p.also_min_gain)
            return GateResult(verdict=Verdict.FAIL, reason=f"{main}, but {seen} vs {base_arm}: no {need_also.lstrip('+-')} of {p.also_metric}", evidence=evidence)
        reason = f"{main} and {seen} vs {base_arm}"
    return GateResult(verdict=Verdict.PASS if ok else Verdict.FAIL, reason=reason, evidence=evidence)


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
    partial_scenarios: list[str] = Field(default_factory=list, description="reported beside, not required (partial allowed)")


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
    partial: dict[str, dict[str, float]] = {}
    for arm in gate.subjects:
        for scen in p.partial_scenarios:
            value = median_of(rows, p, arm, scen)
            if value is not None:
                partial.setdefault(scen, {})[arm] = value
    if failures:
        reason = f"{p.metric} misses {p.op} {fmt(p.value)}: {', '.join(failures)} ({shown})"
    else:
        reason = f"{p.metric} {p.op} {fmt(p.value)} holds: {shown}"
    for scen, vals in partial.items():
        lo, hi = min(vals.values()), max(vals.values())
        reason += f"; {scen} partial ({fmt(lo)}-{fmt(hi)})" if hi - lo > 0.005 else f"; {scen} partial ({fmt(lo)})"
    return GateResult(
        verdict=Verdict.FAIL if failures else Verdict.PASS,
        reason=reason,
        evidence={"metric": p.metric, "op": p.op, "threshold": p.value, "observed": observed, "partial": partial},
    )


from gates import library  # noqa: E402,F401  (registers the rest of the built-in predicates)
