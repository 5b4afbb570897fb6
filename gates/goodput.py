"""The goodput predicate: a latency target met by at least `min_share` of a typical
server run's requests, failed requests counting as misses.

The requests of one server run share its start's speed, so the run is the unit: one share
per run, with the interval over them (`share_of`); each cell's share is a claim of the
gate (`gates.claims`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd
from pydantic import Field
from scipy import special

from campaign.core import metrics
from campaign.core.schema import GateEntry
from campaign.core.states import SampleKind, Verdict
from campaign.core.units import context_label, num
from campaign.store.samples import kinds
from gates import blockstats
from gates.cells import Cell
from gates.claims import Claim, gate_p, holm_fails, worst
from gates.intervals import CONFIDENCE, rate_interval, rate_p
from gates.registry import Params, PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import DEFAULT_MIN_RUNS, Rigor, alpha_of, ci_label
from gates.runs import block_of, text_column


class GoodputParams(Params):
    metric: str = metrics.TTFT_S.name
    probe: str | None = None
    scenario_pattern: str | None = Field(
        default=None,
        description="regular expression the scenario must match, e.g. 'c\\d+-t[1-9]' (agent-load later turns)",
    )
    context: int | None = None
    target: float = Field(description="the latency a request must meet, e.g. 2.0 (s)")
    lower_is_better: bool = True
    min_share: float = Field(default=0.9, ge=0, le=1, description="share of requests that must meet the target")
    min_n: int = Field(default=DEFAULT_MIN_RUNS, ge=1, description="fewer requests than this in a cell is inconclusive")
    min_runs: int = Field(
        default=DEFAULT_MIN_RUNS,
        ge=2,
        description="fewer server runs (blocks) than this in a cell is inconclusive; 2 is the least a spread can come from",
    )
    confidence: float = Field(
        default=CONFIDENCE, gt=0.5, lt=1, description="the CI level (set campaign-wide by campaign.confidence)"
    )
    sequential: bool = Field(
        default=False,
        description="the t interval over runs is a confidence sequence, valid however often it is looked at (set for a gate "
        "fed by an item with max_blocks)",
    )


GOODPUT_METHOD = (
    "t CI over server runs of each run's share of requests met (failures count as misses), on the probit scale "
    "(continuity-corrected): the share in a typical run; widened to at least the Clopper-Pearson interval of the pooled requests"
)


@dataclass(frozen=True)
class Share:
    """One arm's share of requests meeting the target in one cell (`share_of`): the share
    in a typical server run with its interval and p-values, and the pooled counts."""

    arm: str
    cell: Cell
    run_shares: tuple[float, ...]
    met: int
    requests: int
    failed: int
    share: float
    low: float
    high: float
    p_pass: float
    p_fail: float

    @property
    def runs(self) -> int:
        return len(self.run_shares)


def share_of(arm: str, cell: Cell, per_run: list[tuple[int, int]], failed: int, p: GoodputParams) -> Share:
    """The share met in one cell, from each server run's (met, requests).

    The requests of one run share its start's speed, so the run is the unit: the claim is
    the share in a typical run (as every gate's value is a typical run's), tested by the t
    interval over the runs' shares on the probit scale, where a run's latency shift moves
    its share by an amount that is normal when the shift is (each share continuity-
    corrected, (met + 1/2) / (requests + 1), so a run that met every request has a finite
    one). On the plain scale the mean of the runs' shares is no such test: shares near 1
    are skewed, and 5 runs that happen to miss a slow start pass a share at the bound
    13-26% of the time when the runs' shift is as large as the requests' spread (within
    4% on the probit scale; measured on generated runs at 30 requests each). The share of
    all requests of all runs (a mean over runs) cannot be bounded from so few runs
    without assuming how rare a slow start is. The interval is widened to at least the
    exact interval of the pooled requests, so runs that happen to agree never give a
    narrower one than their requests would as independent trials; its p-values are the
    larger of the two tests' each way, each deciding alike with its interval."""
    shares = tuple(m / n for m, n in per_run)
    met, total = sum(m for m, _ in per_run), sum(n for _, n in per_run)
    probits = [float(special.ndtri((m + 0.5) / (n + 1))) for m, n in per_run]
    k = len(probits)
    mean = sum(probits) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in probits) / (k - 1)) if k > 1 else math.nan
    est = blockstats.Estimate(
        mean, sd / math.sqrt(k) if k > 1 else math.nan, k - 1, k, False, GOODPUT_METHOD, p.sequential, float(k)
    )
    t_lo, t_hi = (float(special.ndtr(x)) for x in est.interval(p.confidence))
    b_lo, b_hi = rate_interval(met, total, p.confidence)
    b_above, b_below = rate_p(met, total, p.min_share)
    bound = float(special.ndtri(p.min_share)) if 0 < p.min_share < 1 else (-math.inf if p.min_share <= 0 else math.inf)
    p_pass, p_fail = max(est.p_above(bound), b_above), max(est.p_below(bound), b_below)
    return Share(
        arm,
        cell,
        shares,
        met,
        total,
        failed,
        float(special.ndtr(mean)),
        min(t_lo, b_lo),
        max(t_hi, b_hi),
        p_pass,
        p_fail,
    )


def goodput(rows: pd.DataFrame, gate: GateEntry, p: GoodputParams) -> GateResult:
    """A latency target met by at least `min_share` of a typical server run's requests,
    failed requests counting as misses (their per-request `errors` rows): "ttft_s <= 2.00
    for 93% [82%, 99%] 95% CI in a typical run (42/45 requests in 3 runs, 0 failed)". Per
    arm and cell (probe, context and settings: never pooled). The requests of one server
    run share its start's speed, so the run is the unit: one share per run, and the
    interval is over them (`share_of`). Pass when the whole interval reaches `min_share`,
    fail when none of it does, inconclusive between or with fewer than `min_runs` runs or
    `min_n` requests. Any cell failing fails the gate (Holm over the cells); its p-values
    join the campaign's family."""
    pattern = re.compile(p.scenario_pattern) if p.scenario_pattern else None
    alpha = alpha_of(p.confidence)
    judged: list[tuple[Share, Claim]] = []
    for arm in gate.subjects:
        if rows.empty:
            return pending(f"no canonical {p.metric} for {arm} yet")
        mask = (rows["arm_id"] == arm) & (kinds(rows) == SampleKind.SAMPLE)
        if p.probe:
            mask &= rows["probe"] == p.probe
        if p.context is not None:
            mask &= rows["context"] == p.context
        if pattern is not None:
            mask &= rows["scenario"].astype(str).map(lambda sc: bool(pattern.fullmatch(sc)))
        mine = rows.loc[mask]
        if not (mine["metric"] == p.metric).any():
            return pending(f"no canonical {p.metric} for {arm} yet")
        values = mine["value"].astype(float)
        frame = pd.DataFrame(
            {
                "probe": text_column(mine, "probe", ""),
                "context": mine["context"].astype(int),
                "settings": text_column(mine, "settings_hash", ""),
                "block": block_of(mine),
                "value": (values <= p.target) if p.lower_is_better else (values >= p.target),
                "metric": mine["metric"] == p.metric,
                "failed": mine["metric"].isin(
                    [metrics.ERRORS.name, metrics.NOT_RUN.name]
                ),  # not_run: a stalled server never got it
            }
        )
        frame = frame[frame["metric"] | frame["failed"]]
        frame["met"] = frame["metric"] & frame["value"]
        for (probe, context, settings), part in frame.groupby(["probe", "context", "settings"], sort=True):
            counts = part.groupby("block", sort=True)[["met", "metric", "failed"]].sum()
            per_run = [(int(m), int(n) + int(f)) for m, n, f in counts.itertuples(index=False) if int(n) + int(f)]
            if not per_run:
                continue
            cell = Cell(str(probe), p.scenario_pattern or "", int(context), "canonical", str(settings))
            share = share_of(arm, cell, per_run, int(part["failed"].sum()), p)
            judged.append((share, _share_claim(share, p, alpha)))
    claims = [c for _, c in judged]
    holm_fails(claims, Rigor(confidence=p.confidence), "cells")
    contexts = {s.cell.context for s, _ in judged}
    several = len({(s.cell.probe, s.cell.context, s.cell.settings) for s, _ in judged}) > len(contexts)
    op = "<=" if p.lower_is_better else ">="
    ci = ci_label(p.confidence, p.sequential)
    parts = []
    for s, _ in judged:
        where = (f" {s.cell.probe}" if several else "") + (
            f" at {context_label(s.cell.context)}" if len(contexts) > 1 else ""
        )
        where += f" (settings {s.cell.settings[:8]})" if several else ""
        parts.append(
            f"{s.arm}{where} {s.share:.0%} [{s.low:.0%}, {s.high:.0%}] {ci} in a typical run ({s.met}/{s.requests} "
            f"requests in {s.runs} run{'s' if s.runs != 1 else ''}, {s.failed} failed)"
        )
    reason = f"{p.metric} {op} {num(p.target)} for " + ", ".join(parts) + f"; needs {p.min_share:.0%}"
    notes = list(dict.fromkeys(n for c in claims for n in c.notes))
    if notes:
        reason += "; " + "; ".join(notes)
    results = [
        {
            "arm": s.arm,
            "probe": s.cell.probe,
            "context": s.cell.context,
            "settings": s.cell.settings,
            "runs": s.runs,
            "run_shares": list(s.run_shares),
            "met": s.met,
            "requests": s.requests,
            "failed": s.failed,
            "share": s.share,
            "low": s.low,
            "high": s.high,
            **c.evidence(),
        }
        for s, c in judged
    ]
    return GateResult(
        verdict=worst(c.verdict for c in claims),
        reason=reason,
        evidence={
            "metric": p.metric,
            "target": p.target,
            "op": op,
            "min_share": p.min_share,
            "min_runs": p.min_runs,
            "confidence": p.confidence,
            "interval_method": GOODPUT_METHOD,
            "goodput": results,
            "failures_count_as_misses": True,
            **gate_p(claims),
        },
    )


def _share_claim(s: Share, p: GoodputParams, alpha: float) -> Claim:
    """One cell's share as a claim of the gate: too few runs or requests is a rule (no p)."""
    what = s.arm + (f" at {context_label(s.cell.context)}" if s.cell.context else "")
    if s.runs < p.min_runs or s.requests < p.min_n:
        short = f"{s.runs} run{'s' if s.runs != 1 else ''}" if s.runs < p.min_runs else f"{s.requests} requests"
        need = f"{p.min_runs} (blocks, each its own server start)" if s.runs < p.min_runs else f"{p.min_n} requests"
        return Claim(
            what,
            Verdict.INCONCLUSIVE,
            statistical=False,
            notes=[f"{what} has {short}; needs {need}: too few to decide"],
        )
    if s.p_pass <= alpha:
        return Claim(what, Verdict.PASS, s.p_pass, s.p_fail)
    if s.p_fail <= alpha:
        return Claim(what, Verdict.FAIL, s.p_pass, s.p_fail)
    return Claim(
        what, Verdict.INCONCLUSIVE, s.p_pass, s.p_fail, notes=[f"{s.arm}'s interval straddles {p.min_share:.0%}"]
    )


register(PredicateSpec("goodput", goodput, GoodputParams))
