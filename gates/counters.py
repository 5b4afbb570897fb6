"""Request counters: how many requests an arm made and how many failed, by kind.

Probes write one set of counters per cell and phase (`arms.probes.failures.record_errors`);
the error limit (`gates.error_limit`) is judged on an arm's totals (`ArmErrors`), and each
cell's own counts are attached to its stat for the pages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from campaign.core import metrics
from campaign.core.states import SampleKind
from campaign.store.samples import kinds
from gates.cells import ArmErrors, CellStat
from gates.runs import column

# the tally `arms.probes.failures.record_errors` writes, under any phase's prefix
_REQUESTS = re.compile(rf"^(?:.+_)?{metrics.REQUESTS.name}$")
_FAILED = re.compile(rf"^(?:.+_)?{metrics.REQUESTS_FAILED.name}$")
_KIND = re.compile(rf"^(?:.+_)?{metrics.FAILED_KIND_PREFIX}(.+)$")
_CELL_COLS = ("probe", "scenario", "context", "mode", "settings_hash")


@dataclass(frozen=True)
class Counters:
    """One arm's request counters (summary rows named *requests*), totalled per cell key
    (probe, scenario, context, mode, settings) and metric, with each kind's label."""

    by_cell: dict[tuple[Any, ...], dict[str, float]]
    kind_labels: dict[str, str]


def counters_of(mine: pd.DataFrame) -> Counters:
    if mine.empty:
        return Counters({}, {})
    names = mine["metric"].astype(str)
    part = mine.loc[(kinds(mine) == SampleKind.SUMMARY) & names.str.contains(metrics.REQUESTS.name, regex=False)]
    if part.empty:
        return Counters({}, {})
    keys = pd.DataFrame({c: column(part, c, 0 if c == "context" else "") for c in _CELL_COLS})
    for c in ("probe", "scenario", "mode", "settings_hash"):
        keys[c] = keys[c].astype(str)
    keys["context"] = keys["context"].astype(int)
    keys["metric"] = part["metric"].astype(str)
    totals = part["value"].astype(float).groupby([keys[c] for c in keys.columns], sort=False, observed=True).sum()
    by_cell: dict[tuple[Any, ...], dict[str, float]] = {}
    for key, value in totals.items():
        by_cell.setdefault(tuple(key[:-1]), {})[str(key[-1])] = float(value)
    labels: dict[str, str] = {}
    sources = column(part, "source", "").astype(str)
    for metric, source in zip(keys["metric"], sources):
        if metric not in labels and _KIND.match(metric):
            labels[metric] = source or _KIND.match(metric).group(1)  # type: ignore[union-attr]
    return Counters(by_cell, labels)


def arm_errors_from(arm: str, counters: Counters) -> ArmErrors:
    requests = failed = 0
    kinds: dict[str, int] = {}
    for totals in counters.by_cell.values():
        for metric, value in totals.items():
            if _REQUESTS.match(metric):
                requests += int(value)
            elif _FAILED.match(metric):
                failed += int(value)
            elif metric in counters.kind_labels and value:
                label = counters.kind_labels[metric]
                kinds[label] = kinds.get(label, 0) + int(value)
    return ArmErrors(arm, requests, failed, dict(sorted(kinds.items(), key=lambda kv: -kv[1])))


def arm_errors(rows: pd.DataFrame, arm: str) -> ArmErrors:
    """Every request counter of `arm` in `rows` (`arms.probes.failures.record_errors`
    writes one set per cell and phase): requests, failures, failures per kind."""
    if rows.empty:
        return ArmErrors(arm, 0, 0, {})
    return arm_errors_from(arm, counters_of(rows.loc[rows["arm_id"] == arm]))


def _prefixes(metric: str) -> list[str]:
    """'baseline_ttft_later_median_s' -> ['baseline_ttft_later_median_', ..., 'baseline_', '']:
    a phase's metrics carry its prefix, and so do its error counts."""
    parts = metric.split("_")
    return ["_".join(parts[:i]) + "_" for i in range(len(parts) - 1, 0, -1)] + [""]


def attach_errors(stat: CellStat, counters: Counters) -> None:
    """Requests, failures per kind and retries stored in the stat's cell (any attempt)."""
    c = stat.cell
    totals = counters.by_cell.get((c.probe, c.scenario, c.context, c.mode, c.settings))
    if not totals:
        return
    for prefix in _prefixes(stat.metric):
        if f"{prefix}{metrics.REQUESTS.name}" in totals:
            break
    else:
        return
    retried = f"{prefix}{metrics.REQUESTS_RETRIED.name}"
    stat.requests = int(totals[f"{prefix}{metrics.REQUESTS.name}"])
    stat.failed = int(totals.get(f"{prefix}{metrics.REQUESTS_FAILED.name}", 0))
    stat.retried = int(totals[retried]) if retried in totals else None
    kind_prefix = f"{prefix}{metrics.FAILED_KIND_PREFIX}"
    stat.errors_by_kind = {
        name[len(kind_prefix) :]: int(v) for name, v in sorted(totals.items()) if name.startswith(kind_prefix) and v
    }
