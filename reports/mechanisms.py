"""The mechanisms table: for every arm, what each serving mechanism did, block by block.

Why a table: the seed campaign's first question was "did the cache get any hits?", and
the answer sat in the middle of a credit's reason. Here each arm shows the server's own
counters (prefix-cache lookups and hits, drafted and accepted tokens), the most requests
it held waiting, and its resident memory, each per block (server run) and in total, so a
mechanism that never engaged reads as a row of zeros beside the arm it was credited to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from campaign.core import metrics
from campaign.core.states import Mode
from campaign.core.units import num
from gates.runs import block_of
from reports.data import ReportData


@dataclass(frozen=True)
class Counter:
    """One column: the metric, how a block's rows add up, and its heading."""

    metric: str
    how: str  # "sum" or "max"
    label: str


COUNTERS = (
    Counter(metrics.CACHE_LOOKUPS.name, "sum", "cache lookups"),
    Counter(metrics.CACHE_HITS.name, "sum", "cache hits"),
    Counter(metrics.DRAFT_TOKENS.name, "sum", "drafted tokens"),
    Counter(metrics.ACCEPTED_TOKENS.name, "sum", "accepted tokens"),
    Counter(metrics.QUEUE_DEPTH_MAX.name, "max", "queue depth max"),
)
MIB = 1024 * 1024


@dataclass
class Cell:
    total: str
    blocks: str = ""  # each block's value, in block order: "0 · 0 · 3"
    unit: str = ""


@dataclass
class Row:
    arm_id: str
    blocks: int
    cells: list[Cell] = field(default_factory=list)


@dataclass
class Table:
    labels: list[str]
    rows: list[Row]


def build(data: ReportData) -> Table:
    """One row per arm that measured anything; a column per counter some arm reported, and
    resident memory where it was read. Canonical rows only (what the verdicts read)."""
    frame = data.frame
    rows = (
        frame[(frame["mode"] == Mode.CANONICAL.value) & frame["metric"].isin([c.metric for c in COUNTERS])]
        if not frame.empty
        else frame
    )
    shown = [c for c in COUNTERS if not rows.empty and (rows["metric"] == c.metric).any()]
    rss: dict[str, dict[str, float]] = {}  # arm -> block -> the most resident memory read in it (MiB)
    read = [a for a in data.attempts if a.rss_bytes and a.state == "done"]
    starts = (
        block_of(
            pd.DataFrame(
                [
                    {"block_id": a.block_id, "server_block": a.server_block, "item_key": a.item_key, "repeat": a.repeat}
                    for a in read
                ]
            )
        )
        if read
        else []
    )
    for att, block in zip(read, starts):
        mine = rss.setdefault(att.arm_id, {})
        mine[block] = max(mine.get(block, 0.0), (att.rss_bytes or 0) / MIB)
    with_rss = any(rss.values())
    labels = [c.label for c in shown] + (["resident memory max (MiB)"] if with_rss else [])
    if not labels:
        return Table([], [])
    by_block = rows.assign(_block=block_of(rows).to_numpy()) if not rows.empty else rows
    canonical = frame[frame["mode"] == Mode.CANONICAL.value] if not frame.empty else frame
    blocks_of = (
        {str(arm): sorted(set(part)) for arm, part in block_of(canonical).groupby(canonical["arm_id"].astype(str))}
        if not canonical.empty
        else {}
    )
    out: list[Row] = []
    for arm in data.arms:
        if arm.arm_id not in blocks_of:
            continue
        mine = by_block[by_block["arm_id"] == arm.arm_id] if not by_block.empty else by_block
        blocks = blocks_of[arm.arm_id]
        row = Row(arm.arm_id, len(blocks))
        for counter in shown:
            part = mine[mine["metric"] == counter.metric] if not mine.empty else mine
            if part.empty:
                row.cells.append(Cell("—"))
                continue
            per = part.groupby("_block")["value"].agg(counter.how)
            total = per.sum() if counter.how == "sum" else per.max()
            units = sorted(set(part["unit"].astype(str)))
            row.cells.append(
                Cell(_count(total), " · ".join(_count(per.get(b, float("nan"))) for b in blocks), "/".join(units))
            )
        if with_rss:
            read = rss.get(arm.arm_id) or {}
            per_block = " · ".join(num(read[b]) if b in read else "—" for b in blocks)
            row.cells.append(Cell(num(max(read.values())) if read else "—", per_block if read else ""))
        out.append(row)
    return Table(labels, out)


def _count(value: float) -> str:
    if pd.isna(value):
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() else num(float(value))
