"""Cells, runs and cell stats: the per-arm numbers a gate compares.

The statistical rules are `gates.compare`'s (its module doc); these are the values they
read (rows become them in `gates.runs`, `gates.counters` and `gates.arm_cells`). A cell
is (probe, scenario, context, mode, settings); each (arm, block, cell) becomes one `Run`,
the median of its requests (the server run is the unit); a `CellStat` is an arm's runs
in a cell, their geometric mean with its interval; `ArmErrors` counts every request an
arm made in the rows read, failures by kind, with its exact interval. A cell where the
arm failed every request is kept, as a failed cell, so it counts against the arm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from campaign.core.units import context_label, num
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
    (`gates.error_limit.error_rule`), not by the point rate, which at 30 requests is over 5%
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

    `geomean` is the arm's value in the cell: the geometric mean over runs of each run's
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
    geomean: float
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
            "median": self.geomean,  # the key stored verdicts and the pages read
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
        geomean=center,
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
