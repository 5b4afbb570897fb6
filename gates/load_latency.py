"""The `load_latency` predicate: a latency percentile of one load run's cell.

The q-th percentile of the per-request samples in the cell (`ttft_s`, `tpot_s`, `e2e_s`,
`itl_max_s`, ...; failed requests are in the error rate, not the samples), one per server
run, with the CI over runs; the distribution-free interval of the pooled quantile
(`gates.intervals.quantile_interval`) is shown as the request-level spread. A run with
few requests makes its p99 mostly its largest value, and the reason says how many
requests a run needs. A ceiling (`max_value`), a cut against each baseline arm
(`min_gain`, lower is better), or both; judged as every load gate is (`gates.load_judge`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pandas as pd
from pydantic import Field

from campaign.core import metrics
from campaign.core.states import SampleKind
from campaign.store.samples import kinds
from gates.arm_cells import cell_stats
from gates.cells import Cell, CellStat, Selector, stat_from_runs
from gates.intervals import needed_for_upper, quantile_interval
from gates.load_judge import BoundOrGain, judge
from gates.load_validity import client_faults
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.runs import runs_of

QUANTILE_METHOD = "exact order-statistic interval of the quantile (binomial, distribution-free)"


class LoadLatencyParams(BoundOrGain):
    BOUND: ClassVar[tuple[str, str]] = ("max_value", "a ceiling")
    GATE: ClassVar[str] = "load_latency"
    metric: str = Field(
        default=metrics.TTFT_S.name, description="a per-request latency: ttft_s, tpot_s, e2e_s, itl_max_s"
    )
    percentile: float = Field(default=99.0, gt=0, lt=100)
    probe: str = "load"
    scenario: str = Field(description="the run's cell, e.g. 'rate=2'")
    context: int | None = None
    max_value: float | None = Field(
        default=None, gt=0, description="each subject's percentile must stay at or below this"
    )
    min_gain: float | None = Field(
        default=None, description="each subject's percentile must be this much lower than each baseline's (0.2 = -20%)"
    )


def percentile_stats(rows: pd.DataFrame, arm: str, p: LoadLatencyParams) -> dict[Cell, CellStat]:
    """The q-th percentile of the arm's per-request samples per cell: one per server run,
    with the CI over runs; the order-statistic interval of the pooled percentile is kept
    as the request-level spread. Error counts as the primitive attaches them."""
    q = p.percentile / 100
    out: dict[Cell, CellStat] = {}
    sel = Selector(metric=p.metric, probe=p.probe, scenario=p.scenario, context=p.context)
    mine = (
        rows.loc[(rows["arm_id"] == arm) & (rows["metric"] == p.metric) & (kinds(rows) == SampleKind.SAMPLE)]
        if not rows.empty
        else rows
    )
    for cell, stat in cell_stats(rows, sel, arm, confidence=p.confidence, sequential=p.sequential).items():
        if stat.basis != "samples" or not stat.runs:
            if stat.all_failed:
                out[cell] = stat
            continue  # summary rows are not requests: no percentile of them
        part = mine.loc[
            (mine["probe"] == cell.probe) & (mine["scenario"] == cell.scenario) & (mine["context"] == cell.context)
        ]
        if "settings_hash" in part:
            part = part.loc[part["settings_hash"].astype(str) == cell.settings]
        runs = runs_of(
            part, lambda g: float(g["value"].astype(float).quantile(q))
        )  # linear, as arms.measures.percentile
        low, high, coverage = quantile_interval(stat.values, q)
        new = stat_from_runs(
            arm,
            cell,
            f"{p.metric} p{p.percentile:g}",
            p.metric,
            "samples",
            runs,
            stat.values,
            p.confidence,
            stat.unit,
            p.sequential,
        )
        new.request_low, new.request_high, new.request_coverage = low, high, coverage
        new.requests, new.failed, new.errors_by_kind, new.retried, new.arm_errors = (
            stat.requests,
            stat.failed,
            stat.errors_by_kind,
            stat.retried,
            stat.arm_errors,
        )
        out[cell] = new
    return out


def load_latency(rows: pd.DataFrame, gate: Any, p: LoadLatencyParams) -> GateResult:
    """A latency percentile at a rate: a ceiling, a cut against the baseline, or both."""
    if rows.empty:
        return pending(f"no canonical {p.metric} for {'/'.join(gate.subjects)} yet")
    rigor = p.of()
    arms = list(dict.fromkeys([*gate.subjects, *(gate.baseline if p.min_gain is not None else [])]))
    stats = {arm: percentile_stats(rows, arm, p) for arm in arms}
    q = p.percentile / 100

    def unbounded(stat: CellStat) -> str:
        per_run = min((r.requests for r in stat.runs), default=0)
        if stat.runs and per_run < needed_for_upper(q):
            return f"{stat.arm}'s runs have {per_run} requests each: a p{p.percentile:g} of so few is mostly its largest value (needs >= {needed_for_upper(q)} for a bound)"
        return ""

    what = f"{p.metric} p{p.percentile:g} at {p.scenario}"
    result = judge(
        gate,
        stats,
        metric=p.metric,
        what=what,
        higher_is_better=False,
        bound=p.max_value,
        min_gain=p.min_gain,
        rigor=rigor,
        note=unbounded,
        faults=lambda arm, cell: client_faults(rows, arm, p, cell),
    )
    method = "t CI over server runs of each run's percentile, log scale"
    evidence = {
        **result.evidence,
        "interval_method": method,
        "request_interval_method": QUANTILE_METHOD,
        "percentile": p.percentile,
    }
    return result.model_copy(update={"evidence": evidence, "method": method})


register(PredicateSpec("load_latency", load_latency, LoadLatencyParams))
