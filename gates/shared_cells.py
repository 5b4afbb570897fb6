"""The cells several arms share: what the predicates that compare arms themselves
(`gates.control`, `gates.best_of`) read before they compare.

Each arm's stats per cell (`gates.arm_cells.cell_stats`), the cells every arm has (a
gate pending until they exist, inconclusive when the arms ran them under other probe
settings), the arms besides the subjects whose errors leave their numbers unable to
decide, and the evidence of comparisons built by hand in the shape of
`gates.compare.Outcome.evidence`, so the gate page reads every predicate alike.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from campaign.core.states import Verdict
from campaign.core.units import context_label
from gates import compare
from gates.arm_cells import cell_stats
from gates.cells import Cell, CellStat, Selector
from gates.error_limit import error_note, flaky
from gates.result import GateResult, pending
from gates.rigor import Rigor


def shared_by_all(stats: dict[str, dict[Cell, CellStat]]) -> list[Cell]:
    """The cells every arm of `stats` has, sorted."""
    cells = None
    for per_arm in stats.values():
        cells = set(per_arm) if cells is None else cells & set(per_arm)
    return sorted(cells or [])


def no_common(metric: str, stats: dict[str, dict[Cell, CellStat]]) -> GateResult:
    """No cell every arm has. When they share a (probe, scenario, context, mode) but
    measured it under other probe settings (an item with another max_tokens), more runs
    will never make them comparable: inconclusive, naming who ran what. Otherwise the
    missing cells may still come: pending."""
    loose = [{c.loose() for c in cells} for cells in stats.values()]
    shared = set.intersection(*loose) if loose else set()
    if shared:
        key = min(shared)
        by_setting: dict[str, list[str]] = {}
        for arm, cells in stats.items():
            for c in cells:
                if c.loose() == key:
                    by_setting.setdefault(c.settings[:8] or "unrecorded", []).append(arm)
        who = "; ".join(f"{'/'.join(arms)} at settings {setting}" for setting, arms in sorted(by_setting.items()))
        return GateResult(
            verdict=Verdict.INCONCLUSIVE,
            reason=f"no cell for {metric} that all of {'/'.join(stats)} measured under the same probe settings: "
            f"{key[0]}/{key[1]}@{context_label(key[2])} ran {who} (their items gave the probe other "
            f"parameters); runs at other settings are not compared",
        )
    have = "; ".join(f"{arm} has {compare.describe_cells(cells)}" for arm, cells in stats.items())
    return pending(f"no cell for {metric} that all of {'/'.join(stats)} share: {have}")


def arm_stats(
    rows: pd.DataFrame,
    sel: Selector,
    arms: list[str],
    confidence: float,
    sequential: bool = False,
) -> tuple[dict[str, dict[Cell, CellStat]], GateResult | None]:
    """Each arm's stats per cell, and the result to return instead of judging (pending or
    inconclusive) when an arm has none yet or the arms share no cell."""
    stats = {
        arm: cell_stats(rows, sel, arm, confidence=confidence, sequential=sequential) for arm in dict.fromkeys(arms)
    }
    for arm, cells in stats.items():
        if not cells:
            return stats, pending(f"no canonical {sel.metric} for {arm} yet")
    if not shared_by_all(stats):
        return stats, no_common(sel.metric, stats)
    return stats, None


def unreliable(stats: dict[str, dict[Cell, CellStat]], arms: list[str], rigor: Rigor) -> list[str]:
    """Arms a predicate reads besides its subjects whose errors make their numbers
    unable to decide: named, and the gate inconclusive, never a fail for the subject."""
    out = []
    for arm in dict.fromkeys(arms):
        cells = list(stats.get(arm, {}).values())
        if cells and flaky(cells[0], rigor):
            out.append(error_note(cells[0], rigor))
        elif any(c.all_failed for c in cells):
            out.append(f"{arm} failed every request in {', '.join(c.cell.key() for c in cells if c.all_failed)}")
    return out


def comparisons_evidence(
    comparisons: list[compare.Comparison], rigor: Rigor, metric: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Evidence for predicates that build comparisons themselves: the same shape as
    `compare.Outcome.evidence`, so the gate page reads every predicate alike."""
    outcome = compare.Outcome(
        metric=metric, higher_is_better=True, threshold=0.0, rigor=rigor, stats={}, comparisons=comparisons
    )
    ev = outcome.evidence()
    ev.pop("higher_is_better")
    ev.pop("threshold")
    return {**ev, **(extra or {})}
