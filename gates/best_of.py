"""The best-of predicate: the first subject must rank first among the subjects and the
baseline arms ("best decode 32K"), per common cell.

Its comparisons (the candidate against each other arm) are read through the comparison
primitive (`gates.compare`); the reason is in the seed's style, numbers first.
"""

from __future__ import annotations

import math

import pandas as pd
from pydantic import Field

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import pct
from gates import compare, shared_cells
from gates.cells import Selector
from gates.claims import holm_fails, worst
from gates.error_limit import subject_errors
from gates.registry import PredicateSpec, register
from gates.result import GateResult
from gates.rigor import Rigor, ci_label


class BestOfParams(Selector, Rigor):
    higher_is_better: bool = True
    label: str = Field(default="", description="how the reason names the ranking, e.g. 'decode 32K'")


def best_of(rows: pd.DataFrame, gate: GateEntry, p: BestOfParams) -> GateResult:
    """The first subject must rank first among subjects and baseline ("best decode 32K"),
    per common cell, beating each other arm with its gain's whole interval above 0; an
    arm that beats it beyond doubt fails it; anything between is inconclusive."""
    rigor = p.of()
    sel = p.selector()
    arms = [*gate.subjects, *gate.baseline]
    stats, missing = shared_cells.arm_stats(rows, sel, arms, rigor.confidence, rigor.sequential)
    if missing:
        return missing
    candidate = gate.subjects[0]
    others = [a for a in dict.fromkeys(arms) if a != candidate]
    shaky = shared_cells.unreliable(stats, others, rigor)
    label_text = p.label or p.metric
    cells = shared_cells.shared_by_all(stats)
    where = compare.cell_labeller(cells)
    comparisons, verdicts, parts, notes = [], [], [], []
    ranking: dict[str, list[str]] = {}
    per_cell = {
        cell: [
            compare.compare_cells(stats[candidate][cell], stats[o][cell], p.higher_is_better, 0.0, rigor)
            for o in others
        ]
        for cell in cells
    }
    holm_fails([c for cmps in per_cell.values() for c in cmps], rigor)  # "beaten beyond doubt" over every cell and arm
    for cell in cells:
        order = sorted(
            stats,
            key=lambda a: (
                (stats[a][cell].geomean if stats[a][cell].runs else -math.inf) * (1 if p.higher_is_better else -1)
            ),
            reverse=True,
        )
        ranking[cell.key()] = order
        mine = stats[candidate][cell]
        cell_cmps = per_cell[cell]
        comparisons += cell_cmps
        ruled = None if mine.all_failed else subject_errors(mine, rigor)
        if mine.all_failed:
            verdicts.append(Verdict.FAIL)
            notes.append(f"{candidate} failed every request at {cell.key()}: cannot pass")
        elif ruled is not None:
            verdicts.append(ruled[0])
            notes.append(ruled[1])
        elif shaky:
            verdicts.append(Verdict.INCONCLUSIVE)
            notes += [f"{n}: its numbers cannot decide" for n in shaky]
        elif any(c.statistical and c.verdict == Verdict.FAIL for c in cell_cmps):
            verdicts.append(Verdict.FAIL)
        elif not all(c.statistical for c in cell_cmps):
            verdicts.append(Verdict.INCONCLUSIVE)
            notes += [n for c in cell_cmps for n in c.notes]
        elif all(c.verdict == Verdict.PASS for c in cell_cmps):
            verdicts.append(Verdict.PASS)
        else:
            verdicts.append(Verdict.INCONCLUSIVE)
            close = [c for c in cell_cmps if c.verdict != Verdict.PASS]
            tied = [c.estimate is not None and c.estimate.on_bound(c.bound) for c in close]
            notes += [compare.tie_note(c) for c, tie in zip(close, tied) if tie]
            if not all(tied):
                notes.append(
                    f"{candidate} vs {'/'.join(c.baseline.arm for c, tie in zip(close, tied) if not tie)}: the CIs overlap"
                )
        runner = next((a for a in order if a != candidate), None)
        prefix = where(cell)
        prefix = f"{prefix} " if prefix else ""
        if order[0] == candidate:
            nxt = ""
            if runner:
                cmp = next(c for c in cell_cmps if c.baseline.arm == runner)
                change, lo, hi = cmp.change
                nxt = f"; next {runner} {compare.fmt_stat(stats[runner][cell])} ({candidate} {pct(change)} [{pct(lo)}, {pct(hi)}] {ci_label(rigor.confidence, rigor.sequential)})"
            parts.append(f"{prefix}{candidate} best {label_text}: {compare.fmt_stat(mine)}{nxt}")
        else:
            parts.append(
                f"{prefix}{candidate} {compare.fmt_stat(mine)} is not the best {label_text}: {order[0]} {compare.fmt_stat(stats[order[0]][cell])}"
            )
    verdict = worst(verdicts)
    reason = "; ".join(parts) + (("; " + "; ".join(dict.fromkeys(notes))) if notes else "")
    evidence = shared_cells.comparisons_evidence(
        comparisons, rigor, p.metric, {"ranking": ranking, "candidate": candidate}
    )
    return GateResult(verdict=verdict, reason=reason, evidence=evidence)


register(PredicateSpec("best_of", best_of, BestOfParams))
