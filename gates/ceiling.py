"""The holds-at-the-ceiling predicate: subjects hold `min_value` at the ceiling context,
baseline arms shown beside ("V 6.1 / Y 8.7 collapse; L 15.4 / T 14.1 / S 14.2 hold").

Each arm's value there is a bound judged by `gates.claims.check_bound`.
"""

from __future__ import annotations

import pandas as pd
from pydantic import Field

from campaign.core import metrics
from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import context_label, num
from gates import compare
from gates.arm_cells import cell_stats
from gates.cells import CellStat, Selector
from gates.claims import Claim, check_bound, gate_p, holm_fails, worst
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import Rigor


class CeilingParams(Rigor):
    metric: str = metrics.DECODE_TPS.name
    probe: str | None = "decode"
    context: int = Field(description="the ceiling context, e.g. 262144")
    min_value: float = Field(description="subjects must hold at least this at the ceiling")
    label: str = ""


def holds_at_ceiling(rows: pd.DataFrame, gate: GateEntry, p: CeilingParams) -> GateResult:
    """Subjects hold `min_value` at the ceiling context, each median's whole interval at or
    above it; baseline arms are shown beside, and called collapsed when theirs is wholly
    below ("V 6.1 / Y 8.7 collapse; L 15.4 / T 14.1 / S 14.2 hold")."""
    rigor = p.of()
    sel = Selector(metric=p.metric, probe=p.probe, context=p.context)
    stats: dict[str, CellStat] = {}
    checked: dict[str, Claim] = {}
    for arm in [*gate.subjects, *gate.baseline]:
        cells = cell_stats(rows, sel, arm, confidence=rigor.confidence, sequential=rigor.sequential)
        if not cells:
            return pending(f"no canonical {p.metric} at {p.context} for {arm} yet")
        if len(cells) > 1:
            return pending(
                f"{arm} has {p.metric} in several cells at {p.context} ({compare.describe_cells(cells)}): name a scenario"
            )
        stats[arm] = next(iter(cells.values()))
        checked[arm] = check_bound(stats[arm], p.min_value, True, rigor)
    claims = [checked[a] for a in dict.fromkeys(gate.subjects)]  # the baseline arms are shown beside: no claim
    holm_fails(claims, rigor, "subjects")
    judged = {a: (c.verdict, c.note) for a, c in checked.items()}
    at = p.label or context_label(p.context)
    subj = " / ".join(f"{a} {compare.fmt_stat(stats[a])}" for a in gate.subjects)
    others = " / ".join(f"{a} {compare.fmt_stat(stats[a])}" for a in gate.baseline)
    collapse = [a for a in gate.baseline if judged[a][0] == Verdict.FAIL]
    evidence = {
        "values": {a: s.geomean for a, s in stats.items()},
        "min_value": p.min_value,
        "context": p.context,
        "min_runs": p.min_runs,
        "max_error_rate": p.max_error_rate,
        "confidence": p.confidence,
        "interval_method": compare.INTERVAL_METHOD,
        "cells": [
            {**s.evidence("subject" if a in gate.subjects else "baseline"), **checked[a].evidence()}
            for a, s in stats.items()
        ],
        **gate_p(claims),
    }
    verdict = worst(judged[a][0] for a in gate.subjects)
    notes = [judged[a][1] for a in gate.subjects if judged[a][1]]
    tail = ("; " + "; ".join(notes)) if notes else ""
    if verdict == Verdict.FAIL:
        fail = [a for a in gate.subjects if judged[a][0] == Verdict.FAIL]
        return GateResult(
            verdict=verdict,
            reason=f"at {at}: {' / '.join(f'{a} {compare.fmt_stat(stats[a])}' for a in fail)} below {num(p.min_value)} {p.metric}{tail}",
            evidence=evidence,
        )
    reason = f"at {at}: {subj} " + ("hold" if verdict == Verdict.PASS else "undecided") + f" >= {num(p.min_value)}"
    if others:
        reason += f"; {others}" + (" collapse" if collapse and len(collapse) == len(gate.baseline) else "")
    return GateResult(verdict=verdict, reason=reason + tail, evidence=evidence)


register(PredicateSpec("holds_at_ceiling", holds_at_ceiling, CeilingParams))
