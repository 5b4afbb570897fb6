"""Cells and runs: how a gate's rows become per-arm numbers it can compare.

The statistical rules are `gates.compare`'s (its module doc); this is what they read.
A cell is (probe, scenario, context, mode, settings); each (arm, block, cell) becomes one
`Run`, the median of its requests (the server run is the unit); a `CellStat` is an arm's
runs in a cell with the interval of their median; `ArmErrors` counts every request an
arm made in the rows read, failures by kind, with its exact interval. A cell where the
arm failed every request is kept, as a failed cell, so it counts against the arm.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from campaign.core import metrics
from campaign.core.states import SampleKind
from campaign.core.units import context_label, num
from campaign.store.samples import kinds
from campaign.store.samples import samples as samples_of
from campaign.store.samples import summaries as summaries_of
from gates import blockstats
from gates.blockstats import Estimate
from gates.intervals import CONFIDENCE, median_interval, rate_interval


class Selector(BaseModel):
    """Which rows a predicate reads: a metric, optionally narrowed by probe/scenario/context."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    probe: str | None = None
    scenario: str | None = None
    context: int | None = None

    def selector(self) -> Selector:
        """Just the selector fields of a params model that extends this one (as `Rigor.of`):
        what `cell_stats` and `compare` read, without the predicate's own fields."""
        return Selector(metric=self.metric, probe=self.probe, scenario=self.scenario, context=self.context)


# -- cells and runs ---------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Cell:
    probe: str
    scenario: str
    context: int
    mode: str
    settings: str = ""  # hash of the item's resolved parameters: runs at other settings are another cell

    def key(self) -> str:
        return f"{self.probe}/{self.scenario}@{context_label(self.context)}"

    def loose(self) -> tuple[str, str, int, str]:
        return (self.probe, self.scenario, self.context, self.mode)


@dataclass(frozen=True)
class Run:
    """One arm's one server run in one cell: the median of its requests there."""

    block: str
    item: str
    attempt: int
    value: float
    requests: int
    order: int | None = None
    recipe: str = ""


@dataclass(frozen=True)
class ArmErrors:
    """Every request of one arm in the rows a gate reads, every probe, cell and turn, with
    the exact interval of its failure rate: the error limit is decided by it
    (`gates.compare.error_rule`), not by the point rate, which at 30 requests is over 5%
    with 2 failures of a true 4%."""

    arm: str
    requests: int
    failed: int
    kinds: dict[str, int]

    @property
    def rate(self) -> float | None:
        return self.failed / self.requests if self.requests else None

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
        """The exact (Clopper-Pearson) interval of the rate: each end a one-sided bound at
        (1 - confidence) / 2 ("surely over" when the lower end is above a limit)."""
        if not self.requests:
            return None
        return rate_interval(self.failed, self.requests, confidence)

    @property
    def upper(self) -> float | None:
        """The exact upper bound of the rate at 95%."""
        found = self.interval()
        return found[1] if found else None

    @property
    def lower(self) -> float | None:
        """The exact lower bound of the rate at 95%."""
        found = self.interval()
        return found[0] if found else None

    def text(self, confidence: float = CONFIDENCE) -> str:
        """'A failed 8/30 requests (0.267 [0.123, 0.459] 95% CI): http_503 8'."""
        kinds = ", ".join(f"{k} {v}" for k, v in self.kinds.items())
        found = self.interval(confidence)
        shown = f" [{num(found[0])}, {num(found[1])}] {confidence:.0%} CI" if found else ""
        return f"{self.arm} failed {self.failed}/{self.requests} requests ({num(self.rate)}{shown})" + (
            f": {kinds}" if kinds else ""
        )


@dataclass
class CellStat:
    """One arm's numbers in one cell: its runs (what decides) and its requests (shown).

    `median` is the arm's value in the cell: the geometric mean over runs of each run's
    median (the arithmetic mean when a value is <= 0), with `low`/`high` its CI over runs.
    `values` are the request-level samples, `request_low`/`request_high` the
    order-statistic interval of their median: a spread to look at, never a verdict.
    """

    arm: str
    cell: Cell
    metric: str
    sample_metric: str
    basis: str  # "samples", or "summary rows (one per attempt)"
    runs: list[Run]
    values: list[float]
    median: float
    low: float
    high: float
    coverage: float
    confidence: float = CONFIDENCE
    unit: str = ""
    request_low: float = math.nan
    request_high: float = math.nan
    request_coverage: float = 0.0
    requests: int | None = None
    failed: int | None = None
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    retried: int | None = None
    arm_errors: ArmErrors | None = None
    estimate: Estimate | None = None

    @property
    def n(self) -> int:
        """Server runs: the unit of every interval."""
        return len(self.runs)

    @property
    def recipes(self) -> set[str]:
        return {r.recipe for r in self.runs if r.recipe}

    @property
    def items(self) -> list[str]:
        return sorted({r.item for r in self.runs})

    @property
    def error_rate(self) -> float | None:
        if self.arm_errors is not None and self.arm_errors.requests:
            return self.arm_errors.rate
        if self.requests:
            return (self.failed or 0) / self.requests
        return None

    @property
    def all_failed(self) -> bool:
        """The arm sent requests in this cell and none of them succeeded."""
        return not self.runs and bool(self.requests) and (self.failed or 0) >= (self.requests or 0)

    def size(self) -> str:
        """'5 runs x 30 requests' (the request count per run, or its range); for summary
        rows, '3 runs x 48 requests, a summary each' where the runs' request tallies are
        known, else '4 runs, a summary each'."""
        if not self.runs:
            return f"0 runs ({self.failed or 0}/{self.requests or 0} requests failed)" if self.requests else "0 runs"
        per = sorted({r.requests for r in self.runs})
        each = str(per[0]) if len(per) == 1 else f"{per[0]}-{per[-1]}"
        runs = f"{self.n} run{'s' if self.n != 1 else ''}"
        if self.basis == "samples":
            return f"{runs} x {each} requests"
        return f"{runs}, a summary each" if per == [1] else f"{runs} x {each} requests, a summary each"

    def evidence(self, role: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {
            "arm": self.arm,
            "role": role,
            "metric": self.metric,
            "samples": self.sample_metric,
            "basis": self.basis,
            "probe": self.cell.probe,
            "scenario": self.cell.scenario,
            "context": self.cell.context,
            "mode": self.cell.mode,
            "settings": self.cell.settings,
            "unit": self.unit,
            "n": self.n,
            "runs": self.n,
            "size": self.size(),
            "requests_per_run": [r.requests for r in self.runs],
            "run_values": [r.value for r in self.runs],
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "coverage": round(self.coverage, 4),
            "confidence": self.confidence,
            "request_low": self.request_low,
            "request_high": self.request_high,
            "request_coverage": round(self.request_coverage, 4),
            "items": self.items,
            "blocks": [r.block for r in self.runs],
            "attempts": [r.attempt for r in self.runs],
            "orders": [r.order for r in self.runs],
            "recipes": sorted(self.recipes),
            "error_rate": self.error_rate,
            "requests": self.requests,
            "failed": self.failed,
            "errors_by_kind": dict(self.errors_by_kind),
            "method": self.estimate.method if self.estimate else "",
        }
        if self.arm_errors is not None:
            out["arm_requests"] = self.arm_errors.requests
            out["arm_failed"] = self.arm_errors.failed
            out["arm_error_upper"] = self.arm_errors.upper
            out["arm_error_lower"] = self.arm_errors.lower
        if self.retried:
            out["retried"] = self.retried
        return out


def sample_metric_of(metric: str) -> str | None:
    """The per-request metric a summary metric summarizes, by the probes' naming rule."""
    if "_median" not in metric:
        return None
    return metric.replace("_median", "", 1)


def _col(rows: pd.DataFrame, name: str, default: Any) -> pd.Series:
    return rows[name] if name in rows else pd.Series(default, index=rows.index)


def _match(rows: pd.DataFrame, arm: str, metric: str, sel: Selector, scenario: str | None) -> pd.DataFrame:
    mask = (rows["arm_id"] == arm) & (rows["metric"] == metric)
    if sel.probe:
        mask &= _col(rows, "probe", "") == sel.probe
    scen = scenario if scenario is not None else sel.scenario
    if scen:
        mask &= _col(rows, "scenario", "") == scen
    if sel.context is not None:
        mask &= _col(rows, "context", 0) == sel.context
    return rows.loc[mask]


def _cell_of(row: Any) -> Cell:
    return Cell(str(row[0]), str(row[1]), int(row[2]), str(row[3]), str(row[4]))


def _grouped(rows: pd.DataFrame) -> dict[Cell, pd.DataFrame]:
    if rows.empty:
        return {}
    keys = pd.DataFrame(
        {
            "probe": _col(rows, "probe", "").astype(str),
            "scenario": _col(rows, "scenario", "").astype(str),
            "context": _col(rows, "context", 0),
            "mode": _col(rows, "mode", "").astype(str),
            "settings": _col(rows, "settings_hash", "").astype(str),
        }
    )
    out: dict[Cell, pd.DataFrame] = {}
    for key, index in keys.groupby(list(keys.columns), sort=True, observed=True).groups.items():
        out[_cell_of(key)] = rows.loc[index]
    return out


_NO_TEXT = ("", "nan", "None", "<NA>")  # an empty text cell, however the frame holds it


def block_of(rows: pd.DataFrame) -> pd.Series:
    """Each row's block: the server start it was measured on. A chained attempt on a kept
    server ran on the start of the attempt that started it (`server_block`, that
    attempt's block): rows of several items from one start are one run, so a gate reading
    those items counts the start once, and pairs arms by start, not by item. Else its
    attempt's own `block_id`; else (item, repeat), for rows stored before block ids."""
    ids = _col(rows, "block_id", "").astype(str).fillna("")
    own = ids.where(
        ~ids.isin(_NO_TEXT),
        _col(rows, "item_key", "").astype(str) + "/b" + _col(rows, "repeat", 0).astype(int).astype(str),
    )
    start = _col(rows, "server_block", "").astype(str).fillna("")
    return start.where(~start.isin(_NO_TEXT), own)


def runs_of(part: pd.DataFrame, value: Any = None) -> list[Run]:
    """One `Run` per block of `part` (one cell of one arm): the median of its values, or
    `value(frame)` for another per-run statistic (a percentile, a goodput)."""
    if part.empty:
        return []
    if value is None:  # the median: the one-groupby path every gate takes (`_runs_by_cell`)
        return [r for runs in _runs_by_cell(part).values() for r in runs]
    frame = pd.DataFrame(
        {
            "_block": block_of(part).to_numpy(),
            "value": part["value"].astype(float).to_numpy(),
            "item": _col(part, "item_key", "").astype(str).to_numpy(),
            "attempt": _col(part, "attempt_id", 0).to_numpy(),
            "order": _col(part, "block_order", None).to_numpy(),
            "recipe": _col(part, "recipe_hash", "").astype(str).to_numpy(),
        }
    )
    groups = frame.groupby("_block", sort=True)
    centers = pd.Series({b: float(value(part.loc[(block_of(part) == b).to_numpy()])) for b in groups.groups})
    first = groups[["item", "attempt", "order", "recipe"]].first()
    sizes = groups.size()
    out = []
    for block in first.index:
        v = float(centers[block])
        if math.isnan(v):
            continue
        f = first.loc[block]
        order = f["order"]
        out.append(
            Run(
                block=str(block),
                item=str(f["item"]),
                attempt=int(f["attempt"]),
                value=v,
                requests=int(sizes[block]),
                order=None if order is None or (isinstance(order, float) and math.isnan(order)) else int(order),
                recipe=str(f["recipe"] or "") if str(f["recipe"]) != "nan" else "",
            )
        )
    return out


def _runs_by_cell(part: pd.DataFrame) -> dict[Cell, list[Run]]:
    """`runs_of` for every cell of `part` in one groupby (the hot path of every gate)."""
    if part.empty:
        return {}
    frame = pd.DataFrame(
        {
            "probe": _col(part, "probe", "").astype(str).to_numpy(),
            "scenario": _col(part, "scenario", "").astype(str).to_numpy(),
            "context": _col(part, "context", 0).astype(int).to_numpy(),
            "mode": _col(part, "mode", "").astype(str).to_numpy(),
            "settings": _col(part, "settings_hash", "").astype(str).to_numpy(),
            "_block": block_of(part).to_numpy(),
            "value": part["value"].astype(float).to_numpy(),
            "item": _col(part, "item_key", "").astype(str).to_numpy(),
            "attempt": _col(part, "attempt_id", 0).to_numpy(),
            "order": pd.to_numeric(_col(part, "block_order", math.nan), errors="coerce").to_numpy(dtype=float),
            "recipe": _col(part, "recipe_hash", "").astype(str).to_numpy(),
        }
    )
    keys = ["probe", "scenario", "context", "mode", "settings", "_block"]
    groups = frame.groupby(keys, sort=True)
    agg = groups.agg(
        value=("value", "median"),
        requests=("value", "size"),
        item=("item", "first"),
        attempt=("attempt", "first"),
        order=("order", "first"),
        recipe=("recipe", "first"),
    )
    out: dict[Cell, list[Run]] = {}
    for key, row in zip(agg.index, agg.itertuples(index=False)):
        if math.isnan(row.value):
            continue
        cell = Cell(str(key[0]), str(key[1]), int(key[2]), str(key[3]), str(key[4]))
        recipe = "" if row.recipe in ("", "nan", "None") else str(row.recipe)
        out.setdefault(cell, []).append(
            Run(
                block=str(key[5]),
                item=str(row.item),
                attempt=int(row.attempt),
                value=float(row.value),
                requests=int(row.requests),
                order=None if math.isnan(row.order) else int(row.order),
                recipe=recipe,
            )
        )
    return out


def value_of(est: blockstats.Estimate, confidence: float) -> tuple[float, float, float]:
    """(value, low, high) of one arm in one cell from its runs' estimate: the geometric
    mean of the run values (arithmetic where one is <= 0) with its CI over runs."""
    lo, hi = est.interval(confidence)
    return blockstats.back(est, est.center), blockstats.back(est, lo), blockstats.back(est, hi)


def cell_value(run_values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """A cell's value as every gate reads it, from its runs' values (each run's median):
    what the report's charts and tables and the export show, so one cell has one number."""
    if not run_values:
        return math.nan, math.nan, math.nan
    return value_of(blockstats.one_arm([float(v) for v in run_values]), confidence)


def stat_from_runs(
    arm: str,
    cell: Cell,
    metric: str,
    sample_metric: str,
    basis: str,
    runs: list[Run],
    values: Sequence[float],
    confidence: float,
    unit: str = "",
    sequential: bool = False,
) -> CellStat:
    """A cell's stat from its runs: the geometric mean of the run values with its t CI
    (a confidence sequence when `sequential`)."""
    vals = sorted(float(v) for v in values)
    rlo = rhi = math.nan
    rcov = 0.0
    if vals:
        rlo, rhi, rcov = median_interval(vals, confidence)
    if runs:
        est = blockstats.one_arm([r.value for r in runs], sequential)
        center, low, high = value_of(est, confidence)
        coverage = confidence if len(runs) >= 2 else 0.0
    else:
        est, center, low, high, coverage = None, math.nan, math.nan, math.nan, 0.0
    return CellStat(
        arm=arm,
        cell=cell,
        metric=metric,
        sample_metric=sample_metric,
        basis=basis,
        runs=runs,
        values=vals,
        median=center,
        low=low,
        high=high,
        coverage=coverage,
        confidence=confidence,
        unit=unit,
        request_low=rlo,
        request_high=rhi,
        request_coverage=rcov,
        estimate=est,
    )


# the tally `arms.probes.failures.record_errors` writes, under any phase's prefix
_REQUESTS = re.compile(rf"^(?:.+_)?{metrics.REQUESTS.name}$")
_FAILED = re.compile(rf"^(?:.+_)?{metrics.REQUESTS_FAILED.name}$")
_KIND = re.compile(rf"^(?:.+_)?{metrics.FAILED_KIND_PREFIX}(.+)$")
_CELL_COLS = ("probe", "scenario", "context", "mode", "settings_hash")


@dataclass(frozen=True)
class _Counters:
    """One arm's request counters (summary rows named *requests*), totalled per cell key
    (probe, scenario, context, mode, settings) and metric, with each kind's label."""

    by_cell: dict[tuple[Any, ...], dict[str, float]]
    kind_labels: dict[str, str]


def _counters(mine: pd.DataFrame) -> _Counters:
    if mine.empty:
        return _Counters({}, {})
    names = mine["metric"].astype(str)
    part = mine.loc[(kinds(mine) == SampleKind.SUMMARY) & names.str.contains(metrics.REQUESTS.name, regex=False)]
    if part.empty:
        return _Counters({}, {})
    keys = pd.DataFrame({c: _col(part, c, 0 if c == "context" else "") for c in _CELL_COLS})
    for c in ("probe", "scenario", "mode", "settings_hash"):
        keys[c] = keys[c].astype(str)
    keys["context"] = keys["context"].astype(int)
    keys["metric"] = part["metric"].astype(str)
    totals = part["value"].astype(float).groupby([keys[c] for c in keys.columns], sort=False, observed=True).sum()
    by_cell: dict[tuple[Any, ...], dict[str, float]] = {}
    for key, value in totals.items():
        by_cell.setdefault(tuple(key[:-1]), {})[str(key[-1])] = float(value)
    labels: dict[str, str] = {}
    sources = _col(part, "source", "").astype(str)
    for metric, source in zip(keys["metric"], sources):
        if metric not in labels and _KIND.match(metric):
            labels[metric] = source or _KIND.match(metric).group(1)  # type: ignore[union-attr]
    return _Counters(by_cell, labels)


def _arm_errors_from(arm: str, counters: _Counters) -> ArmErrors:
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
    return _arm_errors_from(arm, _counters(rows.loc[rows["arm_id"] == arm]))


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
    counters = _counters(rows)
    errors = _arm_errors_from(arm, counters)
    sample_runs = _runs_by_cell(sampled)
    summary_runs = _runs_by_cell(summarised)
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
        units = [u for u in _col(part, "unit", "") if u]
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
        _attach_errors(stat, counters)
        out[cell] = stat
    for cell, stat in _failed_cells(counters, sel, arm, scenario).items():
        if cell not in out:
            stat.confidence = confidence
            stat.arm_errors = errors
            out[cell] = stat
    return out


def _failed_cells(counters: _Counters, sel: Selector, arm: str, scenario: str | None) -> dict[Cell, CellStat]:
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
            median=math.nan,
            low=math.nan,
            high=math.nan,
            coverage=0.0,
        )
        _attach_errors(stat, counters)
        if stat.all_failed:
            out[cell] = stat
    return out


def _prefixes(metric: str) -> list[str]:
    """'baseline_ttft_later_median_s' -> ['baseline_ttft_later_median_', ..., 'baseline_', '']:
    a phase's metrics carry its prefix, and so do its error counts."""
    parts = metric.split("_")
    return ["_".join(parts[:i]) + "_" for i in range(len(parts) - 1, 0, -1)] + [""]


def _attach_errors(stat: CellStat, counters: _Counters) -> None:
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
