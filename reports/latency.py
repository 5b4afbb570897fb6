"""Per-request latency on an arm's page: percentiles and the distribution, per cell.

Why beside the medians: a gate reads a median (or one percentile) per server run, but a
person tuning a server asks about the tail, and two arms with one median can differ by
seconds at p99. So every cell (probe, scenario, context, mode) gets its request count
and p50 / p90 / p99 of TTFT, TPOT and end-to-end time, and a TTFT distribution chart
(share of requests at or under a time) per cell.

A percentile of fewer requests than it needs is shown and marked: 99th percentiles of
20 requests are the largest one (`gates.intervals.needed_for_upper` says how many it
takes to bound one from above). The rows are the newest attempt's per-request samples,
pooled over that attempt's server runs; the gate pages hold the intervals over runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from markupsafe import Markup

from campaign.core import metrics
from campaign.core.states import Mode, SampleKind
from campaign.store.samples import kinds
from gates.intervals import needed_for_upper
from reports import charts
from reports.data import canonical_first

METRICS = (metrics.TTFT_S.name, metrics.TPOT_S.name, metrics.E2E_S.name)  # per-request times, in seconds
QUANTILES = (0.5, 0.9, 0.99)
CELL = ["probe", "scenario", "context", "mode"]


@dataclass(frozen=True)
class LatencyRow:
    probe: str
    scenario: str
    context: int
    mode: str
    metric: str
    n: int
    p50: float
    p90: float
    p99: float
    p99_short: bool  # too few requests for the p99 to be more than the largest one


@dataclass(frozen=True)
class ArmLatency:
    rows: list[LatencyRow]
    chart: Markup | None
    p99_needs: int


def rows_of(frame: pd.DataFrame, arm_id: str) -> pd.DataFrame:
    if frame.empty:
        return frame
    mask = (frame["arm_id"] == arm_id) & (kinds(frame) == SampleKind.SAMPLE) & frame["metric"].isin(METRICS)
    return frame[mask]


def table(samples: pd.DataFrame) -> list[LatencyRow]:
    if samples.empty:
        return []
    needs = needed_for_upper(0.99)
    out = []
    for key, part in samples.groupby([*CELL, "metric"], sort=True, observed=True):
        probe, scenario, context, mode, metric = (str(k) for k in key)
        values = part["value"].astype(float)
        p50, p90, p99 = (float(values.quantile(q)) for q in QUANTILES)
        out.append(
            LatencyRow(
                probe, scenario, int(float(context)), mode, metric, len(values), p50, p90, p99, len(values) < needs
            )
        )
    modes = canonical_first(sorted({r.mode for r in out}))
    order = {m: i for i, m in enumerate(modes)}
    return sorted(out, key=lambda r: (order[r.mode], r.probe, r.context, r.scenario, METRICS.index(r.metric)))


def distribution_chart(samples: pd.DataFrame, chart_id: str) -> Markup | None:
    """TTFT as a cumulative share of requests, one step line per cell (canonical only:
    greedy is a diagnostic, and doubling the lines would hide the tails being compared)."""
    ttft = (
        samples[(samples["metric"] == metrics.TTFT_S.name) & (samples["mode"] == Mode.CANONICAL.value)]
        if not samples.empty
        else samples
    )
    if ttft.empty:
        return None
    series = []
    for i, (key, part) in enumerate(ttft.groupby(["probe", "scenario", "context"], sort=True, observed=True)):
        probe, scenario, context = (str(k) for k in key)
        values = sorted(float(v) for v in part["value"])
        n = len(values)
        points = [(values[0], 0.0)] + [(v, (j + 1) / n) for j, v in enumerate(values)]
        name = f"{probe}{' ' + scenario if scenario else ''} @ {int(float(context))} (n={n})"
        series.append((name, points, i))
    return charts.xy_chart(
        chart_id,
        "TTFT distribution per cell (canonical): share of requests at or under a time",
        series,
        x_title="TTFT (s)",
        y_title="share of requests",
    )


def build(frame: pd.DataFrame, arm_id: str, chart_id: str) -> ArmLatency:
    samples = rows_of(frame, arm_id)
    return ArmLatency(table(samples), distribution_chart(samples, chart_id), needed_for_upper(0.99))
