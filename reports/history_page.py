"""One history page per arm: each headline metric over the campaigns in this database
that ran the same arm (same id, model and runtime) and over the runtime builds its
servers reported, one point per (campaign, build) with its interval over server runs.

Rebuilt from the stored rows each time, with today's statistics: the value of a point is
the geometric mean of its server runs' medians, as a gate reads it (`gates.arm_cells`),
so a re-judged campaign (`campaign rejudge`) and its history agree. Whether a change
between two points is established is `campaign compare`'s question, not this page's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from markupsafe import Markup

from campaign.core import metrics
from campaign.core.states import AttemptState
from campaign.store.store import Store
from gates.across import DEFAULT_METRICS
from gates.arm_cells import cell_stats
from gates.cells import Selector
from reports import charts
from reports.data import ReportData


@dataclass(frozen=True)
class Point:
    campaign: str
    version: str
    when: str
    value: float
    low: float
    high: float
    runs: int

    @property
    def label(self) -> str:
        return f"{self.campaign} · {self.version}"


@dataclass
class HistoryPage:
    arm_id: str
    what: str  # the arm's model and runtime
    group: str  # the arm's class and group, as the arm page says them
    campaigns: list[str]
    charts: list[tuple[str, Markup]] = field(default_factory=list)
    rows: list[tuple[str, str, Point]] = field(default_factory=list)  # (metric, cell, point)


def _version_of(identity_json: str) -> str:
    try:
        return str(json.loads(identity_json or "{}").get("runtime_version") or "unknown build")
    except ValueError:
        return "unknown build"


def build(store: Store, data: ReportData, arm_id: str) -> HistoryPage:
    mine = next(a for a in data.arms if a.arm_id == arm_id)
    key = (mine.model, mine.quant, mine.runtime)
    page = HistoryPage(arm_id, f"{mine.model}/{mine.quant} on {mine.runtime}", f"{mine.klass} / {mine.group}", [])
    points: dict[tuple[str, str], list[Point]] = {}
    campaigns = sorted(store.campaigns(), key=lambda c: c.created_at)
    for camp in campaigns:
        if camp.id is None:
            continue
        same = [a for a in store.arms(camp.id) if a.arm_id == arm_id and (a.model, a.quant, a.runtime) == key]
        if not same:
            continue
        page.campaigns.append(camp.name)
        frame = store.measurements_frame(camp.id)
        frame = frame[(frame["arm_id"] == arm_id) & (frame["mode"] == "canonical")]
        attempts = [a for a in store.attempts(camp.id, arm_id=arm_id) if a.state == AttemptState.DONE]
        by_version: dict[str, set[int]] = {}
        started: dict[str, str] = {}
        for a in attempts:
            version = _version_of(a.identity_json)
            by_version.setdefault(version, set()).add(a.id or 0)
            if a.started_at is not None:
                started.setdefault(version, a.started_at.strftime("%Y-%m-%d"))
        for version, ids in by_version.items():
            part = frame[frame["attempt_id"].isin(ids)]
            for name in DEFAULT_METRICS:
                if not (part["metric"] == name).any():
                    continue
                stats = cell_stats(
                    part, Selector(metric=name), arm_id, confidence=data.summary.spec.campaign.confidence
                )
                for cell, stat in stats.items():
                    if not stat.runs or math.isnan(stat.geomean):
                        continue
                    low, high = (stat.low, stat.high) if stat.n > 1 else (stat.geomean, stat.geomean)
                    point = Point(camp.name, version, started.get(version, ""), stat.geomean, low, high, stat.n)
                    points.setdefault((name, cell.key()), []).append(point)
    for (name, cell), found in sorted(points.items()):
        unit = metrics.METRICS[name].unit if name in metrics.METRICS else ""
        chart = charts.bar_chart(
            f"history-{arm_id}-{name}-{cell}".replace("/", "-").replace("@", "-"),
            f"{name} at {cell}: each campaign and build, its interval over server runs",
            [p.label for p in found],
            [
                charts.Series(
                    name,
                    [p.value for p in found],
                    intervals=[(p.low, p.high) for p in found],
                    colors=[data.arm_color(arm_id)] * len(found),
                )
            ],
            x_title="campaign · runtime build",
            y_title=f"{name} ({unit})" if unit else name,
            legend=False,
        )
        page.charts.append((f"{name} · {cell}", chart))
        page.rows += [(name, cell, p) for p in found]
    return page
