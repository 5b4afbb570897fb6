"""How the load gates (`gates.load_goodput`, `gates.load_latency`) judge their cells.

Both read through the comparison primitive (`gates.compare`) and follow its rules: one
cell (probe, scenario, context, mode) per arm, never pooled across cells; each number
carries n and an interval; an arm failing more than `max_error_rate` of its requests
cannot pass; fewer than `min_runs` server runs is inconclusive; a bound or a gain whose
interval straddles the threshold is inconclusive; every subject against every baseline
arm. A gate asks for a bound on the subject, a gain over the baseline, or both; any cell
a gate reads with a run that did not measure the server alone (`gates.load_validity`)
makes it inconclusive.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import model_validator

from campaign.core.states import Verdict
from campaign.core.units import num
from gates import compare
from gates.cells import Cell, CellStat
from gates.claims import Claim, Judged, check_bound, gate_p, holm_fails, worst
from gates.compare import Comparison
from gates.error_limit import flaky, subject_errors
from gates.load_validity import ClientValidity
from gates.result import GateResult, pending
from gates.rigor import Rigor, runs_note


class BoundOrGain(ClientValidity):
    """A load gate asks for a bound on the subject (`BOUND`: a floor or a ceiling), a gain
    over the baseline (`min_gain`), or both; neither is a file mistake, said when loaded."""

    BOUND: ClassVar[tuple[str, str]] = ("", "")  # (field, what it is)
    GATE: ClassVar[str] = ""
    if TYPE_CHECKING:  # each gate's params declare it, with its own description
        min_gain: float | None

    @model_validator(mode="after")
    def _something(self) -> Self:
        field, what = self.BOUND
        if getattr(self, field) is None and self.min_gain is None:
            raise ValueError(f"{self.GATE} needs {field} ({what}), min_gain (against the baseline), or both")
        return self


def _against_zero(s: CellStat, b: CellStat, rigor: Rigor) -> Comparison:
    """A baseline that carried nothing within the targets: any goodput the subject surely
    has beats it (no relative gain can be computed against 0)."""
    cmp = Comparison(
        subject=s,
        baseline=b,
        higher_is_better=True,
        threshold=0.0,
        gain=math.inf if s.geomean > 0 else 0.0,
        low=math.inf if s.low > 0 else 0.0,
        high=math.inf if s.high > 0 else 0.0,
        method="against a baseline of 0",
        pairs=0,
        coverage=s.coverage,
        n_ok=s.n >= rigor.min_runs,
        subject_flaky=flaky(s, rigor),
        baseline_flaky=flaky(b, rigor),
        statistical=False,
    )
    if (ruled := subject_errors(s, rigor)) is not None:
        cmp.verdict, cmp.notes = ruled[0], [ruled[1]]
    elif not cmp.n_ok:
        cmp.verdict, cmp.notes = Verdict.INCONCLUSIVE, [runs_note([s], rigor)]
    elif s.low > 0:
        cmp.verdict, cmp.notes = Verdict.PASS, [f"{b.arm} carried nothing within the targets"]
    else:
        cmp.verdict, cmp.notes = Verdict.INCONCLUSIVE, [f"{b.arm} carried nothing, and {s.arm}'s interval reaches 0"]
    return cmp


def judge(
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
    the worst verdict of all decides (`worst`). Any of them failing fails the gate,
    so their fails are Holm-adjusted together, and the gate's p-values for the campaign's
    family come from all of them (`gate_p`). A cell whose runs did not measure
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
    checked: list[tuple[CellStat, Claim]] = []
    if bound is not None:
        checked, part = _judge_bounds(gate, stats, what, higher_is_better, bound, rigor, note)
        parts.append(part)
    comparisons: list[Comparison] = []
    if min_gain is not None:
        gains = _judge_gains(gate, stats, metric, what, higher_is_better, min_gain, rigor)
        if isinstance(gains, GateResult):
            return gains
        comparisons = gains
    claims: list[Judged] = [*(c for _, c in checked), *comparisons]
    holm_fails(claims, rigor, "claims (bounds and gains)")
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
    read = [
        {**c, "faults": flagged[key]} if (key := (c["arm"], c["probe"], c["scenario"], c["context"])) in flagged else c
        for c in bounds + compared
    ]  # each cell says which of its runs did not measure the server alone
    evidence.update({"cells": read, "bound": bound, "what": what})  # every cell read, once
    if claims:
        evidence.update(gate_p(claims))
    return GateResult(verdict=worst(verdicts), reason=reason, evidence=evidence)


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
) -> tuple[list[tuple[CellStat, Claim]], str]:
    """Each subject cell against the bound (`check_bound`), and the words. A cell
    whose runs bound another quantity than the one asked for (`note`) never passes: its
    pass claim is withdrawn (p_pass 1), its fail claim stands."""
    checked: list[tuple[CellStat, Claim]] = []
    label = compare.cell_labeller([c for arm in gate.subjects for c in stats[arm]])
    shown = []
    for arm in gate.subjects:
        for cell, stat in stats[arm].items():
            claim = check_bound(stat, bound, higher_is_better, rigor)
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
                if base.geomean == 0 and higher_is_better:
                    comparisons.append(_against_zero(subject, base, rigor))
                elif base.geomean == 0:
                    return pending(f"{b} {metric} is 0 at {cell.key()}: no relative change can be computed")
                else:
                    comparisons.append(compare.compare_cells(subject, base, higher_is_better, min_gain, rigor))
    return comparisons
