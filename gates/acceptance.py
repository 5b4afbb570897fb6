"""The acceptance-rate predicate: accepted / drafted tokens of speculative decoding,
from the server's counters ("MTP acceptance ~0.8").

Read as every other predicate reads numbers: per cell, one rate per server run, a CI over
runs (`gates.cells.stat_from_runs`), a bound judged by `gates.claims.check_bound`.
"""

from __future__ import annotations

import pandas as pd
from pydantic import Field

from campaign.core import metrics
from campaign.core.schema import GateEntry
from campaign.core.states import TRACE_SCENARIO_PREFIX, Verdict
from campaign.core.units import num
from gates import compare
from gates.cells import Cell, CellStat, Run, stat_from_runs
from gates.claims import Claim, check_bound, gate_p, holm_fails, worst
from gates.counters import arm_errors
from gates.registry import PredicateSpec, register
from gates.result import GateResult, pending
from gates.rigor import Rigor
from gates.runs import block_of, text_column


class AcceptanceParams(Rigor):
    min_rate: float = Field(default=0.6, ge=0, le=1)
    probe: str | None = None


def _acceptance_cells(rows: pd.DataFrame, arm: str, p: AcceptanceParams) -> dict[Cell, tuple[list[Run], int, int]]:
    """Per cell (probe, context and the settings the counters were measured under: never
    pooled), per server run: accepted / drafted tokens from the server's counters, with
    the cell's drafted and accepted totals."""
    mask = rows["arm_id"] == arm
    if p.probe:
        mask &= rows["probe"] == p.probe
    drafts, accepts = metrics.DRAFT_TOKENS.name, metrics.ACCEPTED_TOKENS.name
    part = rows.loc[mask & rows["metric"].isin([drafts, accepts])]
    if part.empty:
        return {}
    part = part.assign(
        _block=block_of(part),
        _probe=text_column(part, "probe", ""),
        _settings=text_column(part, "settings_hash", ""),
        _context=part["context"].astype(int) if "context" in part else 0,
    )
    out: dict[Cell, tuple[list[Run], int, int]] = {}
    for (probe, context, settings), cell_rows in part.groupby(["_probe", "_context", "_settings"], sort=True):
        runs = []
        for block, g in cell_rows.groupby("_block", sort=True):
            drafted = float(g.loc[g["metric"] == drafts, "value"].sum())
            accepted = float(g.loc[g["metric"] == accepts, "value"].sum())
            if drafted > 0:
                runs.append(
                    Run(
                        block=str(block),
                        item=str(g["item_key"].iloc[0]) if "item_key" in g else "",
                        attempt=int(g["attempt_id"].iloc[0]) if "attempt_id" in g else 0,
                        value=accepted / drafted,
                        requests=int(drafted),
                    )
                )
        drafted_all = int(cell_rows.loc[cell_rows["metric"] == drafts, "value"].sum())
        accepted_all = int(cell_rows.loc[cell_rows["metric"] == accepts, "value"].sum())
        if drafted_all:
            out[Cell(str(probe), "server counters", int(context), "canonical", str(settings))] = (
                runs,
                drafted_all,
                accepted_all,
            )
    return out


def acceptance_rate(rows: pd.DataFrame, gate: GateEntry, p: AcceptanceParams) -> GateResult:
    """Accepted / drafted tokens from the server's counters ("MTP acceptance ~0.8"), as
    every other predicate reads numbers: per cell (probe, context and settings, never
    pooled), one rate per server run, a CI over runs, at least `min_runs` of them, and the
    arm's error rate over every request it made (an arm over `max_error_rate` cannot
    pass). Pass when the whole CI is at or above `min_rate`, fail when it is wholly below,
    inconclusive between (`check_bound`); any cell failing fails the gate (Holm
    over the cells), and the gate joins the campaign's family."""
    rigor = p.of()
    parts: list[str] = []
    checked: list[tuple[CellStat, Claim, int, int]] = []
    # a trace replay's prompts are words drawn at random for each hash id: acceptance on
    # them says nothing about real text, so its counters are not read here
    replay = rows["scenario"].astype(str).str.startswith(TRACE_SCENARIO_PREFIX) if not rows.empty else None
    replayed = rows.loc[replay] if replay is not None else rows
    rows = rows.loc[~replay] if replay is not None else rows
    for arm in gate.subjects:
        if rows.empty and not replayed.empty:
            replay_cells = _acceptance_cells(replayed, arm, p)
            drafted = sum(d for _, d, _ in replay_cells.values())
            if drafted:
                return GateResult(
                    verdict=Verdict.INCONCLUSIVE,
                    reason=f"{arm}'s draft counters come only from trace replays, whose prompts are random words: acceptance "
                    "on random text says nothing about real text; measure it with real prompts (a dataset workload, "
                    "or decode/agent-load on the model's own kind of text)",
                    evidence={
                        "replay_runs": sum(len(r) for r, _, _ in replay_cells.values()),
                        "replay_drafted": drafted,
                        "min_rate": p.min_rate,
                    },
                )
        if rows.empty:
            return pending(f"no draft counters for {arm} yet")
        found = _acceptance_cells(rows, arm, p)
        if not found:
            return pending(f"{arm} drafted no tokens (speculation off, or no counters)")
        errors = arm_errors(rows, arm)
        label = compare.cell_labeller(list(found))
        for cell, (runs, drafted, accepted) in found.items():
            stat = stat_from_runs(
                arm,
                cell,
                "acceptance_rate",
                "accepted_tokens / draft_tokens",
                "summary rows (one per attempt)",
                runs,
                [r.value for r in runs],
                rigor.confidence,
                "ratio",
                rigor.sequential,
            )
            stat.arm_errors = errors
            checked.append((stat, check_bound(stat, p.min_rate, True, rigor), drafted, accepted))
            where = label(cell).rstrip(":")
            if len(found) > 1 and not where:
                where = f"settings {cell.settings[:8] or 'unrecorded'}"
            parts.append(
                f"{arm}{' ' + where if where else ''} {compare.fmt_stat(stat)} ({accepted}/{drafted} drafted tokens)"
            )
    claims = [c for _, c, _, _ in checked]
    holm_fails(claims, rigor, "cells")
    verdict = worst(c.verdict for c in claims)
    reason = (
        "draft acceptance " + ", ".join(parts) + ("" if verdict == Verdict.PASS else f"; needs >= {num(p.min_rate)}")
    )
    notes = [n for c in claims for n in c.notes]
    if notes:
        reason += "; " + "; ".join(dict.fromkeys(notes))
    cells = [
        {**stat.evidence("subject"), **c.evidence(), "drafted": drafted, "accepted": accepted}
        for stat, c, drafted, accepted in checked
    ]
    return GateResult(
        verdict=verdict,
        reason=reason,
        evidence={
            "acceptance": {c["arm"]: c["median"] for c in cells},
            "min_rate": p.min_rate,
            "cells": cells,
            "min_runs": p.min_runs,
            "max_error_rate": p.max_error_rate,
            "confidence": p.confidence,
            "interval_method": compare.INTERVAL_METHOD,
            **gate_p(claims),
        },
    )


register(PredicateSpec("acceptance_rate", acceptance_rate, AcceptanceParams))
