"""The comparison primitive: how every comparative predicate reads its numbers.

A verdict is what a user ships on, so the numbers behind it follow five rules, all here:

1. **Cells, never pooled.** A cell is (probe, scenario, context, mode). An arm's numbers
   are taken per cell; a gate that names no context compares per context and every
   context must pass. Subject and baseline are compared only on the cells both have; no
   common cell leaves the gate `pending`, naming what each arm has.
2. **n and an interval.** Each cell carries its samples' n, median and the exact
   order-statistic interval of the median (`gates.intervals`). A derived summary row
   (trial -1, one per attempt) is not a sample: the primitive reads the per-request
   samples the probe stored beside it, named by dropping `_median` from the summary's
   name (`ttft_later_median_s` -> `ttft_later_s`, `decode_tps_median` -> `decode_tps`).
   Only where no samples exist are the summary rows themselves read, one per attempt,
   and the n says so.
3. **Errors count.** Each cell carries the error rate its probe stored (`requests`,
   `requests_failed`, `requests_failed_<kind>`; see `arms.probes.base.record_errors`).
   Failed requests never enter latency samples, so an arm that fails a third of its
   requests can look fast: a subject over `max_error_rate` cannot pass, whatever its
   latency says. A baseline over it cannot make a subject fail (its own failures are left
   out of its numbers), so a fail against it becomes inconclusive.
4. **A gain with an interval.** When both arms ran the same interleaved repeats (A B A B
   ...) and there are at least `min_n` of them, the gain's interval is the order-statistic
   interval of the per-repeat gains (paired: drift hits both sides alike). Otherwise it is
   every gain between the two medians' intervals (unpaired; it covers the true gain at
   least as often as both intervals cover their medians). A gain whose interval straddles
   the threshold is `inconclusive`, and so is one with n below `min_n`.
5. **Every baseline is used.** A subject is compared with each baseline arm, and must
   clear the threshold against each; the reason lists every pair.

Evidence (`Outcome.evidence()`) lists exactly the cells, n, intervals and error rates a
verdict came from, so the gate page can show what the gate read and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from campaign.states import SUMMARY_TRIAL, Verdict
from campaign.units import context_label, num, pct
from gates.intervals import CONFIDENCE, MEDIAN_METHOD, median_interval

DEFAULT_MIN_N = 3
DEFAULT_MAX_ERROR_RATE = 0.05
EPS = 1e-9

PAIRED = "paired by interleaved repeat"
UNPAIRED = "unpaired, from the two medians' intervals"


class Selector(BaseModel):
    """Which rows a predicate reads: a metric, optionally narrowed by probe/scenario/context."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    probe: str | None = None
    scenario: str | None = None
    context: int | None = None


class Rigor(BaseModel):
    """What every comparative predicate takes: the least n, the most errors."""

    model_config = ConfigDict(extra="forbid")

    min_n: int = Field(default=DEFAULT_MIN_N, ge=1, description="fewer samples in a cell than this is inconclusive")
    max_error_rate: float = Field(
        default=DEFAULT_MAX_ERROR_RATE, ge=0, le=1, description="a subject failing more of its requests than this cannot pass"
    )


# -- cells ---------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Cell:
    probe: str
    scenario: str
    context: int
    mode: str

    def key(self) -> str:
        return f"{self.probe}/{self.scenario}@{context_label(self.context)}"


@dataclass
class CellStat:
    """One arm's numbers in one cell."""

    arm: str
    cell: Cell
    metric: str
    sample_metric: str
    basis: str  # "samples", or "summary rows (one per attempt)"
    values: list[float]
    median: float
    low: float
    high: float
    coverage: float
    unit: str = ""
    by_repeat: dict[int, float] = field(default_factory=dict)
    requests: int | None = None
    failed: int | None = None
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    retried: int | None = None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def error_rate(self) -> float | None:
        if self.requests:
            return (self.failed or 0) / self.requests
        return None

    def evidence(self, role: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {
            "arm": self.arm, "role": role, "metric": self.metric, "samples": self.sample_metric, "basis": self.basis,
            "probe": self.cell.probe, "scenario": self.cell.scenario, "context": self.cell.context, "mode": self.cell.mode,
            "unit": self.unit, "n": self.n, "median": self.median, "low": self.low, "high": self.high,
            "coverage": round(self.coverage, 4), "error_rate": self.error_rate, "requests": self.requests,
            "failed": self.failed, "errors_by_kind": dict(self.errors_by_kind),
        }
        if self.retried:
            out["retried"] = self.retried
        if self.by_repeat:
            out["repeats"] = len(self.by_repeat)
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
    return Cell(str(row[0]), str(row[1]), int(row[2]), str(row[3]))


def _grouped(rows: pd.DataFrame) -> dict[Cell, pd.DataFrame]:
    if rows.empty:
        return {}
    keys = pd.DataFrame({
        "probe": _col(rows, "probe", ""), "scenario": _col(rows, "scenario", ""),
        "context": _col(rows, "context", 0), "mode": _col(rows, "mode", ""),
    })
    out: dict[Cell, pd.DataFrame] = {}
    for key, index in keys.groupby(list(keys.columns), sort=True, observed=True).groups.items():
        out[_cell_of(key)] = rows.loc[index]
    return out


def cell_stats(rows: pd.DataFrame, sel: Selector, arm: str, scenario: str | None = None) -> dict[Cell, CellStat]:
    """The arm's numbers for the selector, one `CellStat` per cell (see the module doc)."""
    if rows.empty:
        return {}
    rows = rows.loc[rows["arm_id"] == arm]  # once: every lookup below is within this arm
    chosen = _match(rows, arm, sel.metric, sel, scenario)
    trial = _col(chosen, "trial", 0)
    samples = _grouped(chosen[trial >= 0])
    summaries = _grouped(chosen[trial == SUMMARY_TRIAL])
    alt = sample_metric_of(sel.metric)
    alt_cells: dict[Cell, pd.DataFrame] = {}
    if alt and any(c not in samples for c in summaries):
        alt_rows = _match(rows, arm, alt, sel, scenario)
        alt_cells = _grouped(alt_rows[_col(alt_rows, "trial", 0) >= 0])
    out: dict[Cell, CellStat] = {}
    for cell in sorted(set(samples) | set(summaries)):
        if cell in samples:
            part, sample_metric, basis = samples[cell], sel.metric, "samples"
        elif cell in alt_cells:
            part, sample_metric, basis = alt_cells[cell], str(alt), "samples"
        else:
            part, sample_metric, basis = summaries[cell], sel.metric, "summary rows (one per attempt)"
        out[cell] = _stat(rows, arm, cell, sel.metric, sample_metric, basis, part)
    return out


def _stat(rows: pd.DataFrame, arm: str, cell: Cell, metric: str, sample_metric: str, basis: str, part: pd.DataFrame) -> CellStat:
    values = sorted(float(v) for v in part["value"])
    low, high, coverage = median_interval(values)
    by_repeat: dict[int, float] = {}
    if "repeat" in part:
        by_repeat = {int(r): float(v.median()) for r, v in part.groupby("repeat")["value"]}
        if len(by_repeat) < 2:
            by_repeat = {}
    units = [u for u in _col(part, "unit", "") if u]
    stat = CellStat(
        arm=arm, cell=cell, metric=metric, sample_metric=sample_metric, basis=basis, values=values,
        median=float(pd.Series(values).median()), low=low, high=high, coverage=coverage,
        unit=str(units[0]) if units else "", by_repeat=by_repeat,
    )
    _attach_errors(stat, rows)
    return stat


def _prefixes(metric: str) -> list[str]:
    """'baseline_ttft_later_median_s' -> ['baseline_ttft_later_median_', ..., 'baseline_', '']:
    a phase's metrics carry its prefix, and so do its error counts."""
    parts = metric.split("_")
    return ["_".join(parts[:i]) + "_" for i in range(len(parts) - 1, 0, -1)] + [""]


def _attach_errors(stat: CellStat, rows: pd.DataFrame) -> None:
    """Requests, failures per kind and retries stored in the stat's cell (any attempt)."""
    c = stat.cell
    mask = (rows["arm_id"] == stat.arm) & (_col(rows, "probe", "") == c.probe) & (_col(rows, "scenario", "") == c.scenario)
    mask &= (_col(rows, "context", 0) == c.context) & (_col(rows, "mode", "") == c.mode) & (_col(rows, "trial", 0) >= SUMMARY_TRIAL)
    here = rows.loc[mask]
    if here.empty:
        return
    names = set(here["metric"])
    for prefix in _prefixes(stat.metric):
        if f"{prefix}requests" in names:
            break
    else:
        return
    total = lambda name: int(here.loc[here["metric"] == name, "value"].sum())  # noqa: E731
    stat.requests = total(f"{prefix}requests")
    stat.failed = total(f"{prefix}requests_failed")
    stat.retried = total(f"{prefix}requests_retried") if f"{prefix}requests_retried" in names else None
    kind_prefix = f"{prefix}requests_failed_"
    stat.errors_by_kind = {
        name[len(kind_prefix):]: total(name) for name in sorted(names) if name.startswith(kind_prefix) and total(name)
    }


# -- formatting -----------------------------------------------------------------------------


def fmt_stat(stat: CellStat) -> str:
    """'0.97 [0.95, 0.99]', or just '1.00' when the whole interval reads the same."""
    lo, hi = num(stat.low), num(stat.high)
    return num(stat.median) if lo == hi == num(stat.median) else f"{num(stat.median)} [{lo}, {hi}]"


def need_text(threshold: float, higher_is_better: bool) -> str:
    if threshold == 0:
        return "any gain"
    return f"{pct(threshold)} or more" if higher_is_better else f"{pct(-threshold)} or lower"


# -- comparisons ---------------------------------------------------------------------------


@dataclass
class Comparison:
    """Subject against one baseline in one cell; `gain` is oriented (positive = better)."""

    subject: CellStat
    baseline: CellStat
    higher_is_better: bool
    threshold: float
    gain: float
    low: float
    high: float
    method: str
    pairs: int
    coverage: float
    n_ok: bool
    subject_flaky: bool
    baseline_flaky: bool
    verdict: Verdict = Verdict.INCONCLUSIVE
    notes: list[str] = field(default_factory=list)

    @property
    def change(self) -> tuple[float, float, float]:
        """(change, low, high) as the reader sees it: value / baseline - 1."""
        if self.higher_is_better:
            return self.gain, self.low, self.high
        return -self.gain, -self.high, -self.low

    def text(self) -> str:
        """'C 162 (+135% [+120%, +150%])'."""
        c, lo, hi = self.change
        return f"{self.subject.arm} {num(self.subject.median)} ({pct(c)} [{pct(lo)}, {pct(hi)}])"

    def evidence(self) -> dict[str, Any]:
        c, lo, hi = self.change
        return {
            "subject": self.subject.arm, "baseline": self.baseline.arm, "cell": self.subject.cell.key(),
            "context": self.subject.cell.context, "scenario": self.subject.cell.scenario,
            "change": c, "change_low": lo, "change_high": hi, "gain": self.gain, "threshold": self.threshold,
            "method": self.method, "pairs": self.pairs, "coverage": round(self.coverage, 4),
            "verdict": str(self.verdict), "notes": list(self.notes),
        }


def oriented_gain(value: float, base: float, higher_is_better: bool) -> float:
    return (value - base) / base if higher_is_better else (base - value) / base


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return math.inf if a > 0 else (-math.inf if a < 0 else 0.0)
    return a / b


def flaky(stat: CellStat, rigor: Rigor) -> bool:
    rate = stat.error_rate
    return rate is not None and rate > rigor.max_error_rate + EPS


def error_note(stat: CellStat, rigor: Rigor) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in stat.errors_by_kind.items())
    return f"{stat.arm} error rate {num(stat.error_rate)} > {num(rigor.max_error_rate)}" + (f" ({kinds})" if kinds else "")


def compare_cells(s: CellStat, b: CellStat, higher_is_better: bool, threshold: float, rigor: Rigor) -> Comparison:
    """One subject against one baseline in one cell; verdict for "gain >= threshold"."""
    gain = oriented_gain(s.median, b.median, higher_is_better)
    pairs = sorted(r for r in set(s.by_repeat) & set(b.by_repeat) if b.by_repeat[r])
    if len(pairs) >= rigor.min_n:
        per = [oriented_gain(s.by_repeat[r], b.by_repeat[r], higher_is_better) for r in pairs]
        low, high, coverage = median_interval(per)
        method = f"{PAIRED} ({len(pairs)} repeats)"
    else:
        if higher_is_better:
            low, high = _ratio(s.low, b.high) - 1, _ratio(s.high, b.low) - 1
        else:
            low, high = 1 - _ratio(s.high, b.low), 1 - _ratio(s.low, b.high)
        coverage = s.coverage * b.coverage
        method = UNPAIRED if not pairs else f"{UNPAIRED} ({len(pairs)} interleaved repeats are too few to pair)"
        pairs = []
    cmp = Comparison(
        subject=s, baseline=b, higher_is_better=higher_is_better, threshold=threshold, gain=gain, low=low, high=high,
        method=method, pairs=len(pairs), coverage=coverage,
        n_ok=s.n >= rigor.min_n and b.n >= rigor.min_n,
        subject_flaky=flaky(s, rigor), baseline_flaky=flaky(b, rigor),
    )
    cmp.verdict, cmp.notes = judge_gain(cmp, rigor)
    return cmp


def judge_gain(cmp: Comparison, rigor: Rigor) -> tuple[Verdict, list[str]]:
    """The rules, in order: errors, n, interval vs threshold, then the baseline's errors."""
    notes: list[str] = []
    s, b = cmp.subject, cmp.baseline
    if cmp.subject_flaky:
        return Verdict.FAIL, [error_note(s, rigor) + ": cannot pass"]
    if not cmp.n_ok:
        short = [f"{x.arm} n={x.n}" for x in (s, b) if x.n < rigor.min_n]
        return Verdict.INCONCLUSIVE, [f"{', '.join(short)} < {rigor.min_n}: too few to decide"]
    if cmp.low >= cmp.threshold - EPS:
        verdict = Verdict.PASS
    elif cmp.high < cmp.threshold - EPS:
        verdict = Verdict.FAIL
    else:
        verdict = Verdict.INCONCLUSIVE
        notes.append(f"{s.arm}'s interval straddles {pct(cmp.threshold if cmp.higher_is_better else -cmp.threshold)}")
    if cmp.baseline_flaky:
        if verdict == Verdict.FAIL:
            verdict = Verdict.INCONCLUSIVE
            notes.append(f"baseline {error_note(b, rigor)}: its failures are left out of its numbers")
        else:
            notes.append(f"baseline {error_note(b, rigor)}")
    return verdict, notes


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """fail > inconclusive > pass: every comparison must pass for the whole to pass."""
    seen = set(verdicts)
    for v in (Verdict.PENDING, Verdict.FAIL, Verdict.INCONCLUSIVE):
        if v in seen:
            return v
    return Verdict.PASS


@dataclass
class Outcome:
    """All comparisons of some subjects against some baselines on one metric."""

    metric: str
    higher_is_better: bool
    threshold: float
    rigor: Rigor
    stats: dict[str, dict[Cell, CellStat]]
    comparisons: list[Comparison] = field(default_factory=list)
    missing: str = ""  # non-empty: pending, and why

    @property
    def verdict(self) -> Verdict:
        if self.missing:
            return Verdict.PENDING
        return worst(c.verdict for c in self.comparisons)

    def used_cells(self) -> list[CellStat]:
        seen: dict[tuple[str, Cell], CellStat] = {}
        for c in self.comparisons:
            for stat in (c.subject, c.baseline):
                seen.setdefault((stat.arm, stat.cell), stat)
        return list(seen.values())

    def text(self, need: bool = True) -> str:
        """'decode_tps: C 162 (+135% [+120%, +150%]) vs B 69.0; needs +10% or more', with the
        cell named where several were compared, then what made it fail or inconclusive."""
        groups: dict[tuple[Cell, str], list[Comparison]] = {}
        for c in self.comparisons:
            groups.setdefault((c.subject.cell, c.baseline.arm), []).append(c)
        label = cell_labeller([c.subject.cell for c in self.comparisons])
        parts = []
        for (cell, base), cmps in groups.items():
            where = label(cell)
            parts.append(f"{where + ' ' if where else ''}{', '.join(c.text() for c in cmps)} vs {base} {num(cmps[0].baseline.median)}")
        out = f"{self.metric}: {'; '.join(parts)}"
        if need:
            out += f"; needs {need_text(self.threshold, self.higher_is_better)}"
        notes = list(dict.fromkeys(n for c in self.comparisons for n in c.notes))
        if notes:
            out += "; " + "; ".join(notes)
        return out

    def evidence(self) -> dict[str, Any]:
        roles: dict[str, str] = {}
        for c in self.comparisons:
            roles.setdefault(c.subject.arm, "subject")
            roles.setdefault(c.baseline.arm, "baseline")
        return {
            "metric": self.metric, "higher_is_better": self.higher_is_better, "threshold": self.threshold,
            "min_n": self.rigor.min_n, "max_error_rate": self.rigor.max_error_rate, "confidence": CONFIDENCE,
            "interval_method": MEDIAN_METHOD,
            "cells": [s.evidence(roles.get(s.arm, "")) for s in self.used_cells()],
            "comparisons": [c.evidence() for c in self.comparisons],
            **({"missing": self.missing} if self.missing else {}),
        }


def cell_labeller(cells: Sequence[Cell]) -> Any:
    """Name a cell by what varies among `cells` ('at 16K', 'identical', 'decode at 32K')."""
    vary = {f for f in ("probe", "scenario", "context") if len({getattr(c, f) for c in cells}) > 1}

    def label(cell: Cell) -> str:
        bits = []
        if "probe" in vary:
            bits.append(cell.probe)
        if "scenario" in vary:
            bits.append(cell.scenario)
        if "context" in vary:
            bits.append(f"at {context_label(cell.context)}")
        return " ".join(bits) + (":" if bits else "")

    return label


def describe_cells(stats: dict[Cell, CellStat]) -> str:
    return ", ".join(c.key() for c in sorted(stats)) or "nothing"


def compare(
    rows: pd.DataFrame,
    subjects: Sequence[str],
    baselines: Sequence[str],
    sel: Selector,
    *,
    higher_is_better: bool,
    threshold: float,
    rigor: Rigor,
) -> Outcome:
    """Every subject against every baseline on every cell they share (see the module doc)."""
    stats = {arm: cell_stats(rows, sel, arm) for arm in dict.fromkeys([*subjects, *baselines])}
    out = Outcome(metric=sel.metric, higher_is_better=higher_is_better, threshold=threshold, rigor=rigor, stats=stats)
    for arm in [*baselines, *subjects]:
        if not stats[arm]:
            out.missing = f"no canonical {sel.metric} for {arm} yet"
            return out
    for s in subjects:
        for b in baselines:
            common = sorted(set(stats[s]) & set(stats[b]))
            if not common:
                out.missing = f"no common cell for {sel.metric}: {s} has {describe_cells(stats[s])}; {b} has {describe_cells(stats[b])}"
                out.comparisons = []
                return out
            for cell in common:
                base = stats[b][cell]
                if base.median == 0:
                    out.missing = f"{b} {sel.metric} median is 0 at {cell.key()}: no relative gain can be computed"
                    out.comparisons = []
                    return out
                out.comparisons.append(compare_cells(stats[s][cell], base, higher_is_better, threshold, rigor))
    return out


# -- one arm against a fixed bound -----------------------------------------------------------


def judge_bound(stat: CellStat, holds: Any, rigor: Rigor) -> tuple[Verdict, str]:
    """Whether a cell's median satisfies a bound (`holds(x) -> bool`, a half-line): pass
    when its whole interval does, fail when none of it does, else inconclusive."""
    if flaky(stat, rigor):
        return Verdict.FAIL, error_note(stat, rigor) + ": cannot pass"
    if stat.n < rigor.min_n:
        return Verdict.INCONCLUSIVE, f"{stat.arm} n={stat.n} < {rigor.min_n}: too few to decide"
    lo_ok, hi_ok = bool(holds(stat.low)), bool(holds(stat.high))
    if lo_ok and hi_ok:
        return Verdict.PASS, ""
    if not lo_ok and not hi_ok:
        return Verdict.FAIL, ""
    return Verdict.INCONCLUSIVE, f"{stat.arm}'s interval [{num(stat.low)}, {num(stat.high)}] straddles the bound"
