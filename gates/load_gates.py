"""Gates on the `load` probe: goodput at a rate (or a sweep's maximum), and a latency
percentile at a rate.

Both read through the comparison primitive (`gates.compare`) and follow its rules: one
cell (probe, scenario, context, mode) per arm, never pooled across cells, so a gate "at a
rate" names the run's scenario (`rate=2`, `poisson=2`, `concurrency=8`, or `sweep`); each
number carries n and an interval; an arm failing more than `max_error_rate` of its
requests cannot pass; fewer than `min_runs` server runs is inconclusive; a bound or a gain whose interval
straddles the threshold is inconclusive; every subject against every baseline arm.

- `load_goodput`: goodput_rps = requests that met every target / the window the load was
  offered over (`arms.workloads.profiles`); failures count as misses. The window is fixed by the
  schedule, so the share met is the only random part: the interval is the exact
  met / window of each server run, and the CI over runs (requests of one run share its
  draw, so they are never the unit). Scenario `sweep` reads
  `max_goodput_rps`, whose source names the run it came from; that run's counts give the
  interval. A floor (`min_rps`), a gain over each baseline arm (`min_gain`), or both.
- `load_latency`: the q-th percentile of the per-request samples in the cell (`ttft_s`,
  `tpot_s`, `e2e_s`, `itl_max_s`, ...; failed requests are in the error rate, not the
  samples), one per server run, with the CI over runs; the distribution-free interval of
  the pooled quantile (`gates.intervals.quantile_interval`) is shown as the request-level
  spread. A run with few requests makes its p99 mostly its largest value, and the reason
  says how many requests a run needs. A ceiling (`max_value`), a cut against each baseline
  arm (`min_gain`, lower is better), or both.

A verdict needs a valid measurement: an open-loop run in which the client fell behind its
own schedule (`schedule_lag_p99_s` over `max_schedule_lag_s`; a closed loop has no
schedule, its lag is the client's overhead) or whose times fell back from
byte-arrival stamping to read time (`stamp_fallbacks`), or whose client process used
more than `max_client_cpu_share` of a core (`client_cpu_share`, default 0.9: the loop that
stamps every byte had no room), measured the client as much as the server. Any cell a
gate reads with such a run, subject or baseline, makes the gate `inconclusive`, and the reason names the arm, the cell and the run. The default bound,
10 ms, is `benchmarks/load_lag.py`'s: the lag this client keeps under on two cores up to
hundreds of requests per second (its floor is the event loop's 1 ms timer).

Registered by `gates.catalog`; this module imports neither it nor the campaign schema
(a gate is read by its `subjects` and `baseline` only), so it adds no import cycle.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar, Self

import pandas as pd
from pydantic import Field, model_validator

from campaign.core import metrics
from campaign.core.states import SampleKind, Verdict, is_open_loop
from campaign.core.units import num
from campaign.store.samples import kinds
from gates import compare
from gates.cells import Cell, CellStat, Selector, arm_errors, block_of, cell_stats, runs_of, stat_from_runs
from gates.compare import Comparison, Rigor
from gates.intervals import needed_for_upper, quantile_interval
from gates.result import GateResult, pending

SWEEP = "sweep"
DEFAULT_MAX_SCHEDULE_LAG_S = 0.010  # benchmarks/load_lag.py's bound (module doc)
DEFAULT_MAX_CLIENT_CPU_SHARE = 0.9  # of one core: the event loop that stamps every byte had no room left
QUANTILE_METHOD = "exact order-statistic interval of the quantile (binomial, distribution-free)"


class ClientValidity(Rigor):
    """What a load run must show of the client for a gate to read it (module doc)."""

    max_schedule_lag_s: float = Field(
        default=DEFAULT_MAX_SCHEDULE_LAG_S,
        gt=0,
        description="a run whose schedule lag p99 exceeds this measured the client: a gate reading it is inconclusive",
    )
    allow_stamp_fallback: bool = Field(
        default=False,
        description="accept runs whose request times fell back to read time (less exact under load)",
    )
    max_client_cpu_share: float = Field(
        default=DEFAULT_MAX_CLIENT_CPU_SHARE,
        gt=0,
        description="a run whose client used more of a core than this (CPU time / span) may have stamped late: inconclusive",
    )


def client_faults(rows: pd.DataFrame, arm: str, p: ClientValidity, cell: Cell) -> list[str]:
    """Why the arm's runs of one cell (every step's run for a sweep, whose answer rests on
    all its steps) do not measure the server alone, by `run_faults`. Empty when every run
    is valid."""
    mask = (
        (rows["arm_id"] == arm)
        & (rows["probe"] == cell.probe)
        & (kinds(rows) == SampleKind.SUMMARY)
        & (rows["context"] == cell.context)
        & (rows["mode"] == cell.mode)
    )
    if cell.scenario != SWEEP:
        mask &= rows["scenario"] == cell.scenario
    if cell.settings and "settings_hash" in rows:
        mask &= rows["settings_hash"].astype(str) == cell.settings
    return run_faults(rows.loc[mask], arm, p)


def run_faults(part: pd.DataFrame, arm: str, p: ClientValidity | None = None) -> list[str]:
    """Each of `part`'s load runs (summary rows of one arm, by block and scenario) that did
    not measure the server alone, and why (module doc); the report's coverage matrix marks
    them with the same rule at the default bounds."""
    p = p or ClientValidity()
    out = []
    if part.empty:
        return out
    for (block, step), run in part.groupby([block_of(part), part["scenario"]], observed=True):

        def value(metric: str, run: pd.DataFrame = run) -> float:
            return float(run.loc[run["metric"] == metric, "value"].max()) if (run["metric"] == metric).any() else 0.0

        lag, fallen, cpu = (
            value(metrics.SCHEDULE_LAG_P99_S.name),
            value(metrics.STAMP_FALLBACKS.name),
            value(metrics.CLIENT_CPU_SHARE.name),
        )
        if lag > p.max_schedule_lag_s and is_open_loop(
            str(step)
        ):  # a closed loop's lag is its own overhead, no schedule
            out.append(
                f"{arm} {step} (block {block}): the client fell behind its schedule, lag p99 {lag * 1000:.0f} ms > {p.max_schedule_lag_s * 1000:g} ms"
            )
        if cpu > p.max_client_cpu_share:
            out.append(
                f"{arm} {step} (block {block}): the client used {cpu:.0%} of a core (over {p.max_client_cpu_share:.0%}): its stamps may be late"
            )
        if fallen and not p.allow_stamp_fallback:
            out.append(f"{arm} {step} (block {block}): {fallen:.0f} requests' times fell back to read time")
    return out


class _BoundOrGain(ClientValidity):
    """A load gate asks for a bound on the subject (`BOUND`: a floor or a ceiling), a gain
    over the baseline (`min_gain`), or both; neither is a file mistake, said when loaded."""

    BOUND: ClassVar[tuple[str, str]] = ("", "")  # (field, what it is)
    GATE: ClassVar[str] = ""

    @model_validator(mode="after")
    def _something(self) -> Self:
        field, what = self.BOUND
        if getattr(self, field) is None and self.min_gain is None:
            raise ValueError(f"{self.GATE} needs {field} ({what}), min_gain (against the baseline), or both")
        return self


class LoadGoodputParams(_BoundOrGain):
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


class LoadLatencyParams(_BoundOrGain):
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


# -- goodput -------------------------------------------------------------------------------------


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


def _against_zero(s: CellStat, b: CellStat, rigor: Rigor) -> Comparison:
    """A baseline that carried nothing within the targets: any goodput the subject surely
    has beats it (no relative gain can be computed against 0)."""
    cmp = Comparison(
        subject=s,
        baseline=b,
        higher_is_better=True,
        threshold=0.0,
        gain=math.inf if s.median > 0 else 0.0,
        low=math.inf if s.low > 0 else 0.0,
        high=math.inf if s.high > 0 else 0.0,
        method="against a baseline of 0",
        pairs=0,
        coverage=s.coverage,
        n_ok=s.n >= rigor.min_runs,
        subject_flaky=compare.flaky(s, rigor),
        baseline_flaky=compare.flaky(b, rigor),
        statistical=False,
    )
    if (ruled := compare.subject_errors(s, rigor)) is not None:
        cmp.verdict, cmp.notes = ruled[0], [ruled[1]]
    elif not cmp.n_ok:
        cmp.verdict, cmp.notes = Verdict.INCONCLUSIVE, [compare.runs_note([s], rigor)]
    elif s.low > 0:
        cmp.verdict, cmp.notes = Verdict.PASS, [f"{b.arm} carried nothing within the targets"]
    else:
        cmp.verdict, cmp.notes = Verdict.INCONCLUSIVE, [f"{b.arm} carried nothing, and {s.arm}'s interval reaches 0"]
    return cmp


def _judge(
    gate: Any,
    stats: dict[str, dict[Cell, CellStat]],
    *,
    metric: str,
    what: str,
    higher_is_better: bool,
    bound: float | None,
    min_gain: float | None,
    rigor: Rigor,
    note: Any = None,
    faults: Any = None,
) -> GateResult:
    """Bounds per subject cell, then gains against every baseline on every common cell;
    the worst verdict of all decides (`compare.worst`). Any of them failing fails the gate,
    so their fails are Holm-adjusted together, and the gate's p-values for the campaign's
    family come from all of them (`compare.gate_p`). A cell whose runs did not measure
    the server alone (`faults`) makes the gate inconclusive."""
    for arm, cells in stats.items():
        if not cells:
            return pending(f"no canonical {what} for {arm} yet")
    verdicts: list[Verdict] = []
    parts: list[str] = []
    notes: list[str] = []
    flagged = _faulted_cells(stats, faults) if faults is not None else {}
    found = [f for why in flagged.values() for f in why]
    if found:
        verdicts.append(Verdict.INCONCLUSIVE)
        shown = found[:3] + ([f"{len(found) - 3} more"] if len(found) > 3 else [])
        notes.append("not a valid measurement of the server: " + "; ".join(shown))
    checked: list[tuple[CellStat, compare.Claim]] = []
    if bound is not None:
        checked, part = _judge_bounds(gate, stats, what, higher_is_better, bound, rigor, note)
        parts.append(part)
    comparisons: list[Comparison] = []
    if min_gain is not None:
        gains = _judge_gains(gate, stats, metric, what, higher_is_better, min_gain, rigor)
        if isinstance(gains, GateResult):
            return gains
        comparisons = gains
    claims: list[compare.Judged] = [*(c for _, c in checked), *comparisons]
    compare.holm_fails(claims, rigor, "claims (bounds and gains)")
    verdicts += [c.verdict for c in claims]
    notes += [n for _, c in checked for n in c.notes]
    bounds = [{**stat.evidence("subject"), **c.evidence(), "bound": bound} for stat, c in checked]
    if min_gain is not None:
        parts.append(
            compare.Outcome(
                metric=what,
                higher_is_better=higher_is_better,
                threshold=min_gain,
                rigor=rigor,
                stats=stats,
                comparisons=comparisons,
            ).text()
        )
    reason = "; ".join(parts)
    tail = [n for n in dict.fromkeys(notes) if n not in reason]
    if tail:
        reason += "; " + "; ".join(tail)
    outcome = compare.Outcome(
        metric=metric,
        higher_is_better=higher_is_better,
        threshold=min_gain or 0.0,
        rigor=rigor,
        stats=stats,
        comparisons=comparisons,
    )
    evidence = outcome.evidence()
    compared = [
        c
        for c in evidence["cells"]
        if not any(
            c["arm"] == b["arm"] and c["scenario"] == b["scenario"] and c["context"] == b["context"] for b in bounds
        )
    ]
    cells = [
        {**c, "faults": flagged[key]} if (key := (c["arm"], c["probe"], c["scenario"], c["context"])) in flagged else c
        for c in bounds + compared
    ]  # each cell says which of its runs did not measure the server alone
    evidence.update({"cells": cells, "bound": bound, "what": what})  # every cell read, once
    if claims:
        evidence.update(compare.gate_p(claims))
    return GateResult(verdict=compare.worst(verdicts), reason=reason, evidence=evidence)


def _faulted_cells(stats: dict[str, dict[Cell, CellStat]], faults: Any) -> dict[tuple[str, str, str, int], list[str]]:
    """(arm, probe, scenario, context) -> why its runs are not a valid measurement."""
    flagged: dict[tuple[str, str, str, int], list[str]] = {}
    for arm, cells in stats.items():
        for cell in cells:
            why = faults(arm, cell)
            if why:
                flagged.setdefault((arm, cell.probe, cell.scenario, cell.context), []).extend(why)
    return flagged


def _judge_bounds(
    gate: Any,
    stats: dict[str, dict[Cell, CellStat]],
    what: str,
    higher_is_better: bool,
    bound: float,
    rigor: Rigor,
    note: Any,
) -> tuple[list[tuple[CellStat, compare.Claim]], str]:
    """Each subject cell against the bound (`compare.check_bound`), and the words. A cell
    whose runs bound another quantity than the one asked for (`note`) never passes: its
    pass claim is withdrawn (p_pass 1), its fail claim stands."""
    checked: list[tuple[CellStat, compare.Claim]] = []
    label = compare.cell_labeller([c for arm in gate.subjects for c in stats[arm]])
    shown = []
    for arm in gate.subjects:
        for cell, stat in stats[arm].items():
            claim = compare.check_bound(stat, bound, higher_is_better, rigor)
            where = label(cell)
            shown.append(f"{arm}{' ' + where.rstrip(':') if where else ''} {compare.fmt_stat(stat)}")
            if note is not None and (extra := note(stat)):
                claim.notes.append(extra)
                claim.p_pass = 1.0
                if claim.verdict == Verdict.PASS:  # what the runs bound is not the quantile asked for
                    claim.verdict = Verdict.INCONCLUSIVE
            checked.append((stat, claim))
    op = ">=" if higher_is_better else "<="
    return checked, f"{what}: {', '.join(shown)}; needs {op} {num(bound)}"


def _judge_gains(
    gate: Any,
    stats: dict[str, dict[Cell, CellStat]],
    metric: str,
    what: str,
    higher_is_better: bool,
    min_gain: float,
    rigor: Rigor,
) -> list[Comparison] | GateResult:
    """Every subject against every baseline on every common cell (Holm-adjusted by
    `_judge`, with the bounds); pending when a pair shares no cell or a baseline's 0
    leaves no relative change."""
    if not gate.baseline:
        return pending(f"{metric} min_gain needs a baseline arm")
    comparisons: list[Comparison] = []
    for s in gate.subjects:
        for b in gate.baseline:
            common = sorted(set(stats[s]) & set(stats[b]))
            if not common:
                return pending(
                    f"no common cell for {metric}: {s} has {compare.describe_cells(stats[s])}; {b} has {compare.describe_cells(stats[b])}"
                )
            for cell in common:
                subject, base = stats[s][cell], stats[b][cell]
                if base.median == 0 and higher_is_better:
                    comparisons.append(_against_zero(subject, base, rigor))
                elif base.median == 0:
                    return pending(f"{b} {metric} is 0 at {cell.key()}: no relative change can be computed")
                else:
                    comparisons.append(compare.compare_cells(subject, base, higher_is_better, min_gain, rigor))
    return comparisons


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
    result = _judge(
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
    result.evidence.update(
        {
            "interval_method": "t CI over server runs of each run's goodput (met / window), log scale",
            "failures_count_as_misses": True,
        }
    )
    return result


# -- a latency percentile --------------------------------------------------------------------------


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
    result = _judge(
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
    result.evidence.update(
        {
            "interval_method": "t CI over server runs of each run's percentile, log scale",
            "request_interval_method": QUANTILE_METHOD,
            "percentile": p.percentile,
        }
    )
    return result


PREDICATES = {
    "load_goodput": (load_goodput, LoadGoodputParams),
    "load_latency": (load_latency, LoadLatencyParams),
}
