"""The load probe's results read back from its stored rows: the curve (one row per run,
by offered rate) and the sweep's answer, for `campaign probe`, its JSON and the report's
page (`reports.load_curve`, which draws the curve).
"""

from __future__ import annotations

import statistics
from typing import Any

from campaign.core import metrics
from campaign.core.states import Mode, SampleKind, is_open_loop
from campaign.store.samples import kind_of

SWEEP_SCENARIO = "sweep"
"""The cell of a sweep's own answer (max_goodput_rps and the rest): not a run."""

CURVE_METRICS = tuple(
    m.name
    for m in (
        metrics.OFFERED_RPS,
        metrics.REQUEST_THROUGHPUT_RPS,
        metrics.GOODPUT_RPS,
        metrics.TARGET_ATTAINMENT,
        metrics.OUTPUT_TPS,
        metrics.TTFT_P50_S,
        metrics.TTFT_P99_S,
        metrics.TPOT_P50_S,
        metrics.TPOT_P99_S,
        metrics.E2E_P99_S,
        metrics.ERROR_RATE,
        metrics.QUEUE_DEPTH_MEAN,
        metrics.QUEUE_DEPTH_MAX,
        metrics.SCHEDULE_LAG_P99_S,
        metrics.IN_FLIGHT_CAP_WAITS,
    )
)


def curve_rows(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (mode, context, run) from stored measurement rows (dicts with metric,
    scenario, mode, context, trial, value): the run's summary numbers, median over repeats,
    ordered by offered rate. The sweep's own cell is not a run and is left out."""
    cells: dict[tuple[str, int, str], dict[str, list[float]]] = {}
    for m in measurements:
        if kind_of(m) != SampleKind.SUMMARY or m["scenario"] == SWEEP_SCENARIO or m["metric"] not in CURVE_METRICS:
            continue
        key = (str(m["mode"]), int(m.get("context", 0)), str(m["scenario"]))
        cells.setdefault(key, {}).setdefault(str(m["metric"]), []).append(float(m["value"]))
    rows = []
    for (mode, context, scenario), values in cells.items():
        if metrics.OFFERED_RPS.name not in values:
            continue
        row: dict[str, Any] = {
            "mode": mode,
            "context": context,
            "scenario": scenario,
            "open_loop": is_open_loop(scenario),
        }
        row.update({metric: statistics.median(v) for metric, v in values.items()})
        rows.append(row)
    return sorted(
        rows, key=lambda r: (r["mode"] != Mode.CANONICAL.value, r["mode"], r["context"], r[metrics.OFFERED_RPS.name])
    )


def sweep_result(measurements: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(mode, context) -> the sweep cell's numbers and sources (max_goodput_rps and the rest)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for m in measurements:
        if m["scenario"] == SWEEP_SCENARIO and kind_of(m) == SampleKind.SUMMARY:
            cell = out.setdefault((str(m["mode"]), int(m.get("context", 0))), {})
            cell[str(m["metric"])] = float(m["value"])
            cell[f"{m['metric']}_source"] = str(m.get("source", ""))
    return out
