"""The report's search page: the answer, the trials in order, the objective against each
field, the Pareto front where there are two objectives, and the confirmation's gates.

Why a page of its own: a search makes tens of arms, each one run; their pages are there
for the rows, but the question (what did the search find, and what survived
confirmation) is answered here, on one screen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from campaign.core.search import SEARCH_ITEM_PREFIX, describe
from campaign.core.units import num
from campaign.store.study import SearchSummary
from campaign.store.summary import GateView
from reports import charts
from reports.data import ReportData
from reports.search_view import SearchAnswer, search_answer


@dataclass(frozen=True)
class TrialRow:
    number: int
    arm_id: str
    settings: str
    state: str
    values: list[str]
    note: str


@dataclass(frozen=True)
class SearchPage:
    answer: SearchAnswer
    objectives: tuple[str, ...]
    trials: list[TrialRow]
    field_charts: list[Markup]
    front: Markup | None
    gates: list[GateView]
    base_id: str


def build(data: ReportData, search: SearchSummary) -> SearchPage:
    rows = []
    for t in sorted(search.trials, key=lambda t: t.number):
        note = t.reason if t.state == "failed" else ("" if t.feasible else "a constraint did not hold")
        if t.state == "repeat":
            note = "proposed again: its run reused, no server start"
        rows.append(TrialRow(t.number, t.arm_id, describe(t.params), t.state, [num(v) for v in t.values], note))
    gates = [g for g in data.summary.gates if g.id.startswith(SEARCH_ITEM_PREFIX)]
    return SearchPage(
        search_answer(data.summary, search),
        search.objectives,
        rows,
        _field_charts(search),
        _front(search) if len(search.objectives) > 1 else None,
        gates,
        search.base_id,
    )


def _field_charts(search: SearchSummary) -> list[Markup]:
    """Per field: the best and the median first objective among the trial arms at each
    of its values (one run each), so where the objective moves with the field shows."""
    done = [t for t in search.trials if t.state == "complete" and t.values]
    fields = sorted({k for t in done for k in t.params})
    out = []
    better = max if search.maximize[0] else min
    for name in fields:
        by_value: dict[Any, list[float]] = {}
        for t in done:
            if name in t.params:
                by_value.setdefault(t.params[name], []).append(t.values[0])
        keys = sorted(by_value, key=lambda v: (isinstance(v, str), v if not isinstance(v, str) else 0, str(v)))
        best = [better(by_value[k]) for k in keys]
        median = [sorted(by_value[k])[len(by_value[k]) // 2] for k in keys]
        out.append(
            charts.bar_chart(
                f"search-field-{name}",
                f"{search.objectives[0]} by {name}",
                [str(k) for k in keys],
                [charts.Series("best", list(best), color=0), charts.Series("median", list(median), color=1)],
                x_title=name,
                y_title=search.objectives[0],
            )
        )
    return out


def _front(search: SearchSummary) -> Markup:
    done = [t for t in search.trials if t.state == "complete" and len(t.values) > 1 and t.feasible]
    keys = {t.arm_id: [(-v if up else v) for v, up in zip(t.values, search.maximize, strict=False)] for t in done}

    def dominated(t: Any) -> bool:
        mine = keys[t.arm_id]
        return any(
            all(a <= b for a, b in zip(keys[o.arm_id], mine, strict=True)) and keys[o.arm_id] != mine for o in done
        )

    front = [(t.values[0], t.values[1]) for t in done if not dominated(t)]
    rest = [(t.values[0], t.values[1]) for t in done if dominated(t)]
    return charts.scatter_chart(
        "search-front",
        f"{search.objectives[0]} against {search.objectives[1]}",
        [("Pareto front", sorted(front), 0), ("dominated", rest, 7)],
        x_title=search.objectives[0],
        y_title=search.objectives[1],
    )


def finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)
