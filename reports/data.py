"""Everything a report needs, read from the store once and aggregated once.

Why one load: a campaign can hold hundreds of thousands of measurements; reading them per
page, or through one ORM object per row, is what made a report slow. Here the rows come in
as one frame (plain SQL into pandas), the per-cell medians are computed in two groupbys,
and every page slices those small tables.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from sqlalchemy import text
from sqlmodel import select

from campaign.states import AttemptState, Mode, ProbeRunState
from campaign.store import ArmRow, AttemptRow, MeasurementRow, Store, VerdictRow
from campaign.summary import Summary, summarize

STAT_KEYS = ["arm_id", "probe", "scenario", "mode", "context", "metric", "unit", "source"]
CELL_KEYS = ["arm_id", "probe", "scenario", "mode", "context", "metric"]
MEASUREMENT_COLUMNS = list(MeasurementRow.model_fields)

_LATEST_SQL = """
SELECT {columns} FROM measurement m
WHERE m.campaign_id = :cid
{latest}
"""
_LATEST_CLAUSE = """
  AND m.probe_run_id IN (
    SELECT p.id FROM probe_run p JOIN attempt a ON a.id = p.attempt_id
    WHERE a.campaign_id = :cid AND p.state = :run_done)
  AND m.attempt_id IN (
    SELECT MAX(a.id) FROM attempt a
    WHERE a.campaign_id = :cid AND a.state = :attempt_done
    GROUP BY a.item_key, a.arm_id)
"""


TEXT_COLUMNS = ("item_key", "arm_id", "probe", "scenario", "mode", "metric", "unit", "source")
REPORT_COLUMNS = ["id", "probe_run_id", "item_key", "arm_id", "probe", "scenario", "mode", "context", "trial", "metric", "value", "unit", "source", "simulated"]


def load_measurements(
    store: Store, campaign_id: int, latest_only: bool = True, *, columns: list[str] | None = None, categorical: bool = False
) -> pd.DataFrame:
    """The same rows as `Store.measurements_frame`, read with one SQL query into pandas.

    `latest_only` keeps what verdicts read: rows of the newest finished attempt per
    (item, arm), from probe runs that completed. tests/test_report.py checks that this
    and the store's own method agree. `categorical` stores the text columns as pandas
    categories: comparisons and groupbys on them are then integer work, which is most of
    what makes a 200,000-row report fast (pandas' default string arrays are not).
    """
    wanted = columns or MEASUREMENT_COLUMNS
    sql = _LATEST_SQL.format(columns=", ".join(f"m.{c}" for c in wanted), latest=_LATEST_CLAUSE if latest_only else "")
    params: dict[str, Any] = {"cid": campaign_id}
    if latest_only:
        params |= {"run_done": ProbeRunState.DONE.value, "attempt_done": AttemptState.DONE.value}
    with store.engine.connect() as conn:
        frame = pd.read_sql(text(sql), conn, params=params)
    frame.columns = wanted
    for col in ("id", "campaign_id", "attempt_id", "probe_run_id", "context", "trial"):
        if col in frame:
            frame[col] = frame[col].astype("int64")
    if "value" in frame:
        frame["value"] = frame["value"].astype(float)
    if "simulated" in frame:
        frame["simulated"] = frame["simulated"].astype(bool)
    for col in TEXT_COLUMNS:
        if col in frame:
            frame[col] = frame[col].fillna("").astype("category" if categorical else str)
    return frame


def cell_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Median, min, max and count per (arm, probe, scenario, mode, context, metric, unit,
    source), with whether any row was simulated: the tables on every page."""
    if frame.empty:
        return pd.DataFrame(columns=[*STAT_KEYS, "median", "min", "max", "count", "simulated"])
    grouped = frame.groupby(STAT_KEYS, dropna=False, sort=True, observed=True)
    stats = grouped["value"].agg(["median", "min", "max", "count"])
    stats["simulated"] = grouped["simulated"].max()
    return _plain(stats.reset_index())


def cell_medians(frame: pd.DataFrame) -> pd.DataFrame:
    """Median per (arm, probe, scenario, mode, context, metric) over per-trial rows only
    (trial -1 rows are derived summaries): what charts draw and gates read."""
    if frame.empty:
        return pd.DataFrame(columns=[*CELL_KEYS, "value"])
    rows = frame[frame["trial"] >= 0]
    return _plain(rows.groupby(CELL_KEYS, sort=True, observed=True)["value"].median().reset_index())


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Small aggregated tables go back to plain text columns, so pages can compare and
    sort them without tripping over category semantics."""
    for col in frame.columns:
        if isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = frame[col].astype(str)
    return frame


def page_names(ids: list[str]) -> dict[str, str]:
    """A file name per id that is safe on any file system: lowercase slug, with a suffix
    where two ids differ only in case or punctuation ("A" and "a" would share a file on
    macOS)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for ident in ids:
        base = re.sub(r"[^a-z0-9]+", "-", str(ident).lower()).strip("-") or "x"
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        out[ident] = name
    return out


@dataclass
class ReportData:
    """The campaign as the report reads it; built once by `load`."""

    summary: Summary
    arms: list[ArmRow]
    frame: pd.DataFrame
    stats: pd.DataFrame
    medians: pd.DataFrame
    attempts: list[AttemptRow]
    verdicts: dict[str, list[VerdictRow]]
    arm_pages: dict[str, str]
    gate_pages: dict[str, str]
    agent_ttft: pd.DataFrame | None = None
    arm_by_id: dict[str, ArmRow] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from reports.agent_load import ttft_rows

        self.arm_by_id = {a.arm_id: a for a in self.arms}
        if self.agent_ttft is None:
            self.agent_ttft = ttft_rows(self.frame)

    @property
    def campaign_id(self) -> int:
        return self.summary.campaign_id

    def is_simulated(self, arm_id: str) -> bool:
        return arm_id in self.summary.simulated_arms

    def attempts_of(self, arm_ids: list[str]) -> list[AttemptRow]:
        wanted = set(arm_ids)
        return [a for a in self.attempts if a.arm_id in wanted]

    def item_titles(self) -> dict[str, str]:
        return {i.key: i.title for i in self.summary.items}


def load(store: Store, name: str | None = None) -> ReportData:
    summary = summarize(store, name)
    cid = summary.campaign_id
    frame = load_measurements(store, cid, columns=REPORT_COLUMNS, categorical=True)
    arms = store.arms(cid)
    with store.session() as s:
        rows = s.exec(select(VerdictRow).where(VerdictRow.campaign_id == cid).order_by(VerdictRow.id)).all()  # type: ignore[arg-type]
    verdicts: dict[str, list[VerdictRow]] = defaultdict(list)
    for row in rows:
        verdicts[row.gate_id].append(row)
    return ReportData(
        summary=summary,
        arms=arms,
        frame=frame,
        stats=cell_stats(frame),
        medians=cell_medians(frame),
        attempts=store.attempts(cid),
        verdicts=dict(verdicts),
        arm_pages=page_names([a.arm_id for a in arms]),
        gate_pages=page_names([g.id for g in summary.gates]),
    )


def canonical_first(modes: list[str]) -> list[str]:
    """Canonical before greedy, whatever else after: the order every table uses."""
    order = {Mode.CANONICAL.value: 0, Mode.GREEDY.value: 1}
    return sorted(modes, key=lambda m: (order.get(m, 2), m))
