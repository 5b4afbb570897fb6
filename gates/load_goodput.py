"""The `load_goodput` predicate: goodput at a rate, or a sweep's maximum.

goodput_rps = requests that met every target / the window the load was offered over
(`arms.workloads.load_stats`); failures count as misses. The window is fixed by the
schedule, so the share met is the only random part: the interval is the exact met /
window of each server run, and the CI over runs (requests of one run share its draw, so
they are never the unit). Scenario `sweep` reads `max_goodput_rps`, whose source names
the run it came from; that run's counts give the interval. A floor (`min_rps`), a gain
over each baseline arm (`min_gain`), or both; judged as every load gate is
(`gates.load_judge`). A gate "at a rate" names the run's scenario (`rate=2`,
`poisson=2`, `concurrency=8`, or `sweep`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import pandas as pd
from pydantic import Field

from campaign.core import metrics
from campaign.core.states import SampleKind
from campaign.core.units import num
from campaign.store.samples import kinds
from gates.arm_cells import cell_stats
from gates.cells import Cell, CellStat, Selector, stat_from_runs
from gates.counters import arm_errors
from gates.load_judge import BoundOrGain, judge
from gates.load_validity import SWEEP, client_faults
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.runs import block_of, runs_of


class LoadGoodputParams(BoundOrGain):
    BOUND: ClassVar[tuple[str, str]] = ("min_rps", "a floor")
    GATE: ClassVar[str] = "load_goodput"
    probe: str = "load"
    scenario: str = Field(
        default=SWEEP, description="a run's cell ('rate=2', 'concurrency=8') or 'sweep' for its max_goodput_rps"
    )
    context: int | None = None
    min_rps: float | None = Field(default=None, ge=0, description="each subject's goodput must reach this (req/s)")
    min_gain: float | None = Field(
        default=None, description="each subject must beat each baseline arm by this (0.2 = +20%)"
    )


def _summary(rows: pd.DataFrame, arm: str, probe: str, scenario: str, context: int | None) -> pd.DataFrame:
    mask = (
        (rows["arm_id"] == arm)
        & (rows["probe"] == probe)
        & (rows["scenario"] == scenario)
        & (kinds(rows) == SampleKind.SUMMARY)
    )
    if context is not None:
        mask &= rows["context"] == context
    return rows.loc[mask]


def _goodput_stat(
    rows: pd.DataFrame, arm: str, p: LoadGoodputParams, scenario: str, label: str
) -> dict[Cell, CellStat]:
    """Goodput per cell of one run's scenario: one value per server run (requests that met
    every target / the run's window), with the CI over runs (module doc)."""
    out: dict[Cell, CellStat] = {}
    part = _summary(rows, arm, p.probe, scenario, p.context)
    if part.empty:
        return out
    counts = cell_stats(
        rows,
        Selector(metric=metrics.REQUESTS_MET.name, probe=p.probe, scenario=scenario, context=p.context),
        arm,
        confidence=p.confidence,
        sequential=p.sequential,
    )
    for (context, mode), cell_rows in part.groupby(["context", "mode"], observed=True):
        total = lambda frame, metric: float(frame.loc[frame["metric"] == metric, "value"].sum())  # noqa: E731
        met, offered, window = (
            int(total(cell_rows, metrics.REQUESTS_MET.name)),
            int(total(cell_rows, metrics.REQUESTS.name)),
            total(cell_rows, metrics.WINDOW_S.name),
        )
        if not offered or window <= 0:
            continue
        settings = str(cell_rows["settings_hash"].iloc[0]) if "settings_hash" in cell_rows else ""
        cell = Cell(p.probe, scenario, int(context), str(mode), settings)

        def per_run(g: pd.DataFrame, total: Any = total) -> float:
            w = total(g, metrics.WINDOW_S.name)
            return total(g, metrics.REQUESTS_MET.name) / w if w > 0 else math.nan

        runs = [
            replace(r, requests=int(total(cell_rows[block_of(cell_rows) == r.block], metrics.REQUESTS.name)))
            for r in runs_of(
                cell_rows[cell_rows["metric"].isin([metrics.REQUESTS_MET.name, metrics.WINDOW_S.name])], per_run
            )
        ]
        stat = stat_from_runs(
            arm,
            cell,
            label,
            "requests met every target / window",
            "samples",
            runs,
            [r.value for r in runs],
            p.confidence,
            "req/s",
            p.sequential,
        )
        stat.basis = f"{met} of {offered} requests over {num(window)} s"
        base = next((c for c in counts.values() if c.cell.loose() == cell.loose()), None)
        if base is not None:
            stat = replace(
                stat,
                requests=base.requests,
                failed=base.failed,
                errors_by_kind=base.errors_by_kind,
                retried=base.retried,
            )
        stat.arm_errors = arm_errors(rows, arm)
        out[cell] = stat
    return out


def goodput_stats(rows: pd.DataFrame, arm: str, p: LoadGoodputParams) -> dict[Cell, CellStat]:
    """The arm's goodput per cell; for `sweep`, its max_goodput_rps read through the run it
    came from (or, when its attempts' maxima came from different runs, the maxima
    themselves, one per attempt, with the median's interval)."""
    if p.scenario != SWEEP:
        return _goodput_stat(rows, arm, p, p.scenario, metrics.GOODPUT_RPS.name)
    sweep = _summary(rows, arm, p.probe, SWEEP, p.context)
    maxima = sweep[sweep["metric"] == metrics.MAX_GOODPUT_RPS.name]
    if "settings_hash" not in maxima:
        maxima = maxima.assign(settings_hash="")
    out: dict[Cell, CellStat] = {}
    for (context, mode, settings), part in maxima.groupby(["context", "mode", "settings_hash"], observed=True):
        cell = Cell(p.probe, SWEEP, int(context), str(mode), str(settings))
        sources = sorted({str(s) for s in part["source"]})
        if len(sources) == 1 and sources[0]:
            step = LoadGoodputParams(
                probe=p.probe,
                scenario=sources[0],
                context=int(context),
                min_rps=0,
                confidence=p.confidence,
                sequential=p.sequential,
            )
            found = next(
                (
                    st
                    for c, st in _goodput_stat(
                        rows, arm, step, sources[0], f"{metrics.MAX_GOODPUT_RPS.name} (at {sources[0]})"
                    ).items()
                    if c.loose() == (p.probe, sources[0], int(context), str(mode)) and c.settings == str(settings)
                ),
                None,
            )
            if found is not None:
                out[cell] = replace(found, cell=cell)
                continue
        # the maxima came from different runs (each block's own rates): one per run
        by_attempt = cell_stats(
            rows,
            Selector(metric=metrics.MAX_GOODPUT_RPS.name, probe=p.probe, scenario=SWEEP, context=int(context)),
            arm,
            confidence=p.confidence,
            sequential=p.sequential,
        )
        if cell in by_attempt:
            out[cell] = by_attempt[cell]
    return out


def load_goodput(rows: pd.DataFrame, gate: Any, p: LoadGoodputParams) -> GateResult:
    """Goodput at a rate, or a sweep's maximum: a floor, a gain over the baseline, or both
    (see the module doc for the interval)."""
    if rows.empty:
        return pending(f"no canonical load runs for {'/'.join(gate.subjects)} yet")
    rigor = p.of()
    arms = list(dict.fromkeys([*gate.subjects, *(gate.baseline if p.min_gain is not None else [])]))
    stats = {arm: goodput_stats(rows, arm, p) for arm in arms}
    metric = metrics.MAX_GOODPUT_RPS.name if p.scenario == SWEEP else metrics.GOODPUT_RPS.name
    what = metric if p.scenario == SWEEP else f"{metric} at {p.scenario}"
    result = judge(
        gate,
        stats,
        metric=metric,
        what=what,
        higher_is_better=True,
        bound=p.min_rps,
        min_gain=p.min_gain,
        rigor=rigor,
        faults=lambda arm, cell: client_faults(rows, arm, p, cell),
    )
    method = "t CI over server runs of each run's goodput (met / window), log scale"
    evidence = {**result.evidence, "interval_method": method, "failures_count_as_misses": True}
    return result.model_copy(update={"evidence": evidence, "method": method})


register(PredicateSpec("load_goodput", load_goodput, LoadGoodputParams))
