"""The majority predicate: a majority of tool-loop trials right ("tool loop 2/3"), per
cell, with the exact (Clopper-Pearson) interval of each pass rate.

Each trial is its own draw of the model's sampling, so trials, not server runs, are the
unit here; the arm's error rate still covers every request it made (`gates.counters`).
"""

from __future__ import annotations

import pandas as pd
from pydantic import Field

from campaign.core import metrics
from campaign.core.schema import GateEntry
from campaign.core.states import SampleKind, Verdict
from campaign.core.units import context_label, num
from campaign.store.samples import kinds
from gates.claims import Claim, gate_p, holm_fails, worst
from gates.counters import arm_errors
from gates.error_limit import error_rule
from gates.intervals import CONFIDENCE, RATE_METHOD, rate_interval, rate_p
from gates.registry import Params, PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import DEFAULT_MAX_ERROR_RATE, Rigor, alpha_of, ci_label
from gates.runs import text_column


class MajorityParams(Params):
    metric: str = metrics.TOOL_LOOP_PASS.name
    probe: str | None = "tool-loop"
    min_ratio: float = Field(default=0.5, ge=0, le=1, description="pass when the pass rate exceeds this (strict)")
    max_error_rate: float = Field(default=DEFAULT_MAX_ERROR_RATE, ge=0, le=1)
    confidence: float = Field(
        default=CONFIDENCE, gt=0.5, lt=1, description="the CI level (set campaign-wide by campaign.confidence)"
    )


def passes_of(rows: pd.DataFrame, arm: str, p: MajorityParams) -> dict[tuple[int, str], tuple[int, int]]:
    """Passes and trials per cell, (context, settings): never pooled across contexts, nor
    across the settings the trials were measured under (`gates.cells.Cell`)."""
    if rows.empty:
        return {}
    mask = (rows["arm_id"] == arm) & (rows["metric"] == p.metric) & (kinds(rows) == SampleKind.SAMPLE)
    if p.probe:
        mask &= rows["probe"] == p.probe
    part = rows.loc[mask]
    keys = [part["context"].astype(int), text_column(part, "settings_hash", "")]
    return {
        (int(ctx), str(settings)): (int((g["value"] > 0.5).sum()), int(len(g)))
        for (ctx, settings), g in part.groupby(keys)
    }


def majority(rows: pd.DataFrame, gate: GateEntry, p: MajorityParams) -> GateResult:
    """Majority of trials right ("tool loop 2/3"), per cell (context and settings), with the
    exact (Clopper-Pearson) interval of each pass rate: pass when the whole interval is
    above `min_ratio`, fail when it is at or below it, inconclusive between -- which is
    where 3 trials always land (2/3 has [0.09, 0.99]). Each trial is its own draw of the
    model's sampling, so trials (not server runs) are the unit here, and each cell's
    p-values are the exact binomial tails at `min_ratio` (`gates.intervals.rate_p`); any
    cell failing fails the gate (Holm over the cells), and the gate joins the campaign's
    family. The arm's error rate covers every request it made (`gates.counters.arm_errors`).
    Several arms whose intervals overlap cannot be told apart, and the reason says so."""
    results: dict[str, tuple[int, int, float, float]] = {}
    cells: list[tuple[str, int, str, Claim]] = []
    alpha = alpha_of(p.confidence)
    for arm in gate.subjects:
        per_cell = passes_of(rows, arm, p)
        if not per_cell:
            return pending(f"no canonical tool-loop trials for {arm} yet")
        errors = arm_errors(rows, arm)
        contexts = {ctx for ctx, _ in per_cell}
        for (ctx, settings), (k, n) in sorted(per_cell.items()):
            label = arm if len(contexts) == 1 else f"{arm} at {context_label(ctx)}"
            if len(per_cell) > len(contexts):
                label += f" (settings {settings[:8] or 'unrecorded'})"
            lo, hi = rate_interval(k, n, p.confidence)
            results[label] = (k, n, lo, hi)
            above, below = rate_p(k, n, p.min_ratio)
            ruled = error_rule(errors, p.max_error_rate, p.confidence)
            if ruled is not None:
                claim = Claim(label, ruled[0], 1.0, 0.0 if ruled[0] == Verdict.FAIL else 1.0, False, [ruled[1]])
            elif above <= alpha:
                claim = Claim(label, Verdict.PASS, above, below)
            elif below <= alpha:
                claim = Claim(label, Verdict.FAIL, above, below)
            else:
                claim = Claim(
                    label,
                    Verdict.INCONCLUSIVE,
                    above,
                    below,
                    notes=[f"{n} trials cannot tell {label}'s rate from {p.min_ratio:.0%}"],
                )
            cells.append((label, ctx, settings, claim))
    claims = [c for *_, c in cells]
    holm_fails(claims, Rigor(confidence=p.confidence), "cells")
    notes = [n for c in claims for n in c.notes]
    labels = list(results)
    overlaps = [
        f"{a}/{b}"
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if results[a][2] <= results[b][3] and results[b][2] <= results[a][3]
    ]
    if overlaps:
        notes.append(f"intervals overlap ({', '.join(overlaps)}): these trials cannot tell the arms apart")
    ci = ci_label(p.confidence)
    shown = ", ".join(f"{a} {k}/{n} [{num(lo)}, {num(hi)}] {ci}" for a, (k, n, lo, hi) in results.items())
    verdict = worst(c.verdict for c in claims)
    reason = f"tool loop {shown}"
    if verdict == Verdict.FAIL and not any("cannot pass" in x for x in notes):
        reason += f"; needs more than {p.min_ratio:.0%}"
    if notes:
        reason += "; " + "; ".join(dict.fromkeys(notes))
    return GateResult(
        verdict=verdict,
        reason=reason,
        evidence={
            "passes": {a: [k, n] for a, (k, n, _, _) in results.items()},
            "rate_intervals": {a: [lo, hi] for a, (_, _, lo, hi) in results.items()},
            "claims": [
                {"label": label, "context": ctx, "settings": settings, **c.evidence()}
                for label, ctx, settings, c in cells
            ],
            "interval_method": RATE_METHOD,
            "min_ratio": p.min_ratio,
            "confidence": p.confidence,
            **gate_p(claims),
        },
    )


register(PredicateSpec("majority", majority, MajorityParams))
