"""An arm's cells: how a gate's rows become one `CellStat` per cell of one arm.

Samples where the cell has them, else the summary rows (one per attempt), else the
samples a summary metric summarises; each cell with its request counters attached, and a
cell where the arm failed every request kept as a failed cell, so it counts against it.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from campaign.store.samples import samples as samples_of
from campaign.store.samples import summaries as summaries_of
from gates.cells import Cell, CellStat, Selector, stat_from_runs
from gates.counters import Counters, arm_errors_from, attach_errors, counters_of
from gates.intervals import CONFIDENCE
from gates.runs import column, runs_by_cell, runs_of


def sample_metric_of(metric: str) -> str | None:
    """The per-request metric a summary metric summarizes, by the probes' naming rule."""
    if "_median" not in metric:
        return None
    return metric.replace("_median", "", 1)


def _match(rows: pd.DataFrame, arm: str, metric: str, sel: Selector, scenario: str | None) -> pd.DataFrame:
    mask = (rows["arm_id"] == arm) & (rows["metric"] == metric)
    if sel.probe:
        mask &= column(rows, "probe", "") == sel.probe
    scen = scenario if scenario is not None else sel.scenario
    if scen:
        mask &= column(rows, "scenario", "") == scen
    if sel.context is not None:
        mask &= column(rows, "context", 0) == sel.context
    return rows.loc[mask]


def _cell_of(row: Any) -> Cell:
    return Cell(str(row[0]), str(row[1]), int(row[2]), str(row[3]), str(row[4]))


def _grouped(rows: pd.DataFrame) -> dict[Cell, pd.DataFrame]:
    if rows.empty:
        return {}
    keys = pd.DataFrame(
        {
            "probe": column(rows, "probe", "").astype(str),
            "scenario": column(rows, "scenario", "").astype(str),
            "context": column(rows, "context", 0),
            "mode": column(rows, "mode", "").astype(str),
            "settings": column(rows, "settings_hash", "").astype(str),
        }
    )
    out: dict[Cell, pd.DataFrame] = {}
    for key, index in keys.groupby(list(keys.columns), sort=True, observed=True).groups.items():
        out[_cell_of(key)] = rows.loc[index]
    return out


def cell_stats(
    rows: pd.DataFrame,
    sel: Selector,
    arm: str,
    scenario: str | None = None,
    confidence: float = CONFIDENCE,
    sequential: bool = False,
) -> dict[Cell, CellStat]:
    """The arm's numbers for the selector, one `CellStat` per cell (see the module doc)."""
    if rows.empty:
        return {}
    rows = rows.loc[rows["arm_id"] == arm]  # once: every lookup below is within this arm
    if rows.empty:
        return {}
    chosen = _match(rows, arm, sel.metric, sel, scenario)
    sampled, summarised = samples_of(chosen), summaries_of(chosen)
    samples = _grouped(sampled)
    summaries = _grouped(summarised)
    alt = sample_metric_of(sel.metric)
    alt_cells: dict[Cell, pd.DataFrame] = {}
    if alt and any(c not in samples for c in summaries):
        alt_rows = _match(rows, arm, alt, sel, scenario)
        alt_cells = _grouped(samples_of(alt_rows))
    counters = counters_of(rows)
    errors = arm_errors_from(arm, counters)
    sample_runs = runs_by_cell(sampled)
    summary_runs = runs_by_cell(summarised)
    out: dict[Cell, CellStat] = {}
    for cell in sorted(set(samples) | set(summaries)):
        if cell in samples:
            part, sample_metric, basis, runs = samples[cell], sel.metric, "samples", sample_runs.get(cell, [])
        elif cell in alt_cells:
            part, sample_metric, basis, runs = alt_cells[cell], str(alt), "samples", runs_of(alt_cells[cell])
        else:
            part, sample_metric, basis, runs = (
                summaries[cell],
                sel.metric,
                "summary rows (one per attempt)",
                summary_runs.get(cell, []),
            )
        units = [u for u in column(part, "unit", "") if u]
        stat = stat_from_runs(
            arm,
            cell,
            sel.metric,
            sample_metric,
            basis,
            runs,
            part["value"],
            confidence,
            str(units[0]) if units else "",
            sequential,
        )
        stat.arm_errors = errors
        attach_errors(stat, counters)
        out[cell] = stat
    for cell, stat in _failed_cells(counters, sel, arm, scenario).items():
        if cell not in out:
            stat.confidence = confidence
            stat.arm_errors = errors
            out[cell] = stat
    return out


def _failed_cells(counters: Counters, sel: Selector, arm: str, scenario: str | None) -> dict[Cell, CellStat]:
    """Cells where the arm sent requests and every one failed: no value, but not absent."""
    out: dict[Cell, CellStat] = {}
    scen = scenario if scenario is not None else sel.scenario
    for key in counters.by_cell:
        probe, scen_k, context, mode, settings = key
        if (
            (sel.probe and probe != sel.probe)
            or (scen and scen_k != scen)
            or (sel.context is not None and context != sel.context)
        ):
            continue
        cell = Cell(probe, scen_k, int(context), mode, settings)
        stat = CellStat(
            arm=arm,
            cell=cell,
            metric=sel.metric,
            sample_metric=sel.metric,
            basis="samples",
            runs=[],
            values=[],
            geomean=math.nan,
            low=math.nan,
            high=math.nan,
            coverage=0.0,
        )
        attach_errors(stat, counters)
        if stat.all_failed:
            out[cell] = stat
    return out
