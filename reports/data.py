"""Everything a report needs, read from the store once and aggregated once.

Why one load: a campaign can hold hundreds of thousands of measurements; reading them per
page, or through one ORM object per row, is what made a report slow. Here the rows come in
as one frame (plain SQL into pandas), the per-cell statistics are computed once,
and every page slices those small tables.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import pandas as pd
from sqlmodel import select

from campaign.core import metrics
from campaign.core.states import Mode, ProbeName, SampleKind
from campaign.store.samples import kinds, samples, without_warmups
from campaign.store.store import Store
from campaign.store.summary import Summary, summarize
from campaign.store.tables import ArmRow, AttemptRow, VerdictRow
from gates.cells import cell_value
from gates.runs import block_of

STAT_KEYS = ["arm_id", "probe", "scenario", "mode", "context", "metric", "unit", "source"]
CELL_KEYS = ["arm_id", "probe", "scenario", "mode", "context", "metric"]
REPORT_COLUMNS = [
    "id",
    "probe_run_id",
    "item_key",
    "arm_id",
    "probe",
    "scenario",
    "mode",
    "context",
    "kind",
    "trial",
    "metric",
    "value",
    "unit",
    "source",
    "simulated",
    "repeat",
    "block_id",
    "server_block",  # the last three: each row's server run (`gates.runs.block_of`)
]
VALUE_COLUMNS = [*CELL_KEYS, "value", "low", "high", "runs"]


def cell_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Median, min, max and count per (arm, probe, scenario, mode, context, metric, unit,
    source), with whether any row was simulated: the tables on every page. Warm-up rows
    are stored but never shown as a cell."""
    frame = without_warmups(frame)
    if frame.empty:
        return pd.DataFrame(columns=[*STAT_KEYS, "median", "min", "max", "count", "simulated"])
    grouped = frame.groupby(STAT_KEYS, dropna=False, sort=True, observed=True)
    stats = grouped["value"].agg(["median", "min", "max", "count"])
    stats["simulated"] = grouped["simulated"].max()
    return _plain(stats.reset_index())


def cell_values(frame: pd.DataFrame) -> pd.DataFrame:
    """The value of every (arm, probe, scenario, mode, context, metric) cell of samples, as
    a gate reads it (`gates.cells.cell_value`): each server run's median, then their
    geometric mean with its 95% CI over runs (`low`, `high`; NaN with one run), and the
    number of `runs`. Charts, the coverage matrix and the export show this value, so a
    cell reads the same number on every page as in the gate's reason."""
    rows = samples(frame) if not frame.empty else frame
    if rows.empty:
        return pd.DataFrame(columns=VALUE_COLUMNS)
    per_run = (
        rows.assign(_run=block_of(rows).to_numpy())
        .groupby([*CELL_KEYS, "_run"], sort=True, observed=True)["value"]
        .median()
        .dropna()
        .reset_index()
    )
    out = []
    for key, part in per_run.groupby(CELL_KEYS, sort=True, observed=True):
        value, low, high = cell_value(part["value"].tolist())
        out.append({**dict(zip(CELL_KEYS, key)), "value": value, "low": low, "high": high, "runs": len(part)})
    return _plain(pd.DataFrame(out, columns=VALUE_COLUMNS))


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Small aggregated tables go back to plain text columns, so pages can compare and
    sort them without tripping over category semantics."""
    for col in frame.columns:
        if isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = frame[col].astype(str)
    return frame


def ttft_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-turn TTFT rows of every agent-load run, selected once for all arm pages.
    Here, with the other selections, so that the topic views above (`reports.agent_load`)
    read it and nothing here reads them."""
    if frame.empty:
        return frame
    mask = (
        (frame["probe"] == ProbeName.AGENT_LOAD.value)
        & (frame["metric"] == metrics.TTFT_S.name)
        & (kinds(frame) == SampleKind.SAMPLE)
    )
    return frame[mask]


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
    values: pd.DataFrame  # `cell_values`: the one number of each cell
    attempts: list[AttemptRow]
    verdicts: dict[str, list[VerdictRow]]
    arm_pages: dict[str, str]
    gate_pages: dict[str, str]
    agent_ttft: pd.DataFrame | None = None
    arm_by_id: dict[str, ArmRow] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.arm_by_id = {a.arm_id: a for a in self.arms}
        self._arm_order = {a.arm_id: i for i, a in enumerate(self.arms)}
        if self.agent_ttft is None:
            self.agent_ttft = ttft_rows(self.frame)

    @property
    def campaign_id(self) -> int:
        return self.summary.campaign_id

    def arm_color(self, arm_id: str) -> int:
        """The arm's palette index, by its place in the campaign file: the same colour on
        every chart of every page, so arm C is one hue wherever it is compared."""
        return self._arm_order.get(arm_id, len(self._arm_order))

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
    frame = store.measurements_frame(cid, columns=REPORT_COLUMNS, categorical=True)
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
        values=cell_values(frame),
        attempts=store.attempts(cid),
        verdicts=dict(verdicts),
        arm_pages=page_names([a.arm_id for a in arms]),
        gate_pages=page_names([g.id for g in summary.gates]),
    )


def canonical_first(modes: list[str]) -> list[str]:
    """Canonical before greedy, whatever else after: the order every table uses."""
    order = {Mode.CANONICAL.value: 0, Mode.GREEDY.value: 1}
    return sorted(modes, key=lambda m: (order.get(m, 2), m))
