"""Rows to runs: each row's server start (its block), and one `Run` per block and cell.

The server run is the unit of every interval (`gates.compare`, rule 1), so this is where
a gate's rows become the values its intervals are over.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from gates.cells import Cell, Run


def column(rows: pd.DataFrame, name: str, default: Any) -> pd.Series:
    """`rows[name]`, or `default` on every row where the frame has no such column."""
    return rows[name] if name in rows else pd.Series(default, index=rows.index)


def text_column(rows: pd.DataFrame, name: str, default: Any) -> pd.Series:
    """`rows[name]` as text, or `default` on every row where the frame has no such column."""
    return rows[name].astype(str) if name in rows else pd.Series(default, index=rows.index)


_NO_TEXT = ("", "nan", "None", "<NA>")  # an empty text cell, however the frame holds it


def block_of(rows: pd.DataFrame) -> pd.Series:
    """Each row's block: the server start it was measured on. A chained attempt on a kept
    server ran on the start of the attempt that started it (`server_block`, that
    attempt's block): rows of several items from one start are one run, so a gate reading
    those items counts the start once, and pairs arms by start, not by item. Else its
    attempt's own `block_id`; else (item, repeat), for rows stored before block ids."""
    ids = column(rows, "block_id", "").astype(str).fillna("")
    own = ids.where(
        ~ids.isin(_NO_TEXT),
        column(rows, "item_key", "").astype(str) + "/b" + column(rows, "repeat", 0).astype(int).astype(str),
    )
    start = column(rows, "server_block", "").astype(str).fillna("")
    return start.where(~start.isin(_NO_TEXT), own)


def runs_of(part: pd.DataFrame, value: Any = None) -> list[Run]:
    """One `Run` per block of `part` (one cell of one arm): the median of its values, or
    `value(frame)` for another per-run statistic (a percentile, a goodput)."""
    if part.empty:
        return []
    if value is None:  # the median: the one-groupby path every gate takes (`runs_by_cell`)
        return [r for runs in runs_by_cell(part).values() for r in runs]
    frame = pd.DataFrame(
        {
            "_block": block_of(part).to_numpy(),
            "value": part["value"].astype(float).to_numpy(),
            "item": column(part, "item_key", "").astype(str).to_numpy(),
            "attempt": column(part, "attempt_id", 0).to_numpy(),
            "order": column(part, "block_order", None).to_numpy(),
            "recipe": column(part, "recipe_hash", "").astype(str).to_numpy(),
        }
    )
    groups = frame.groupby("_block", sort=True)
    centers = pd.Series({b: float(value(part.loc[(block_of(part) == b).to_numpy()])) for b in groups.groups})
    first = groups[["item", "attempt", "order", "recipe"]].first()
    sizes = groups.size()
    out = []
    for block in first.index:
        v = float(centers[block])
        if math.isnan(v):
            continue
        f = first.loc[block]
        order = f["order"]
        out.append(
            Run(
                block=str(block),
                item=str(f["item"]),
                attempt=int(f["attempt"]),
                value=v,
                requests=int(sizes[block]),
                order=None if order is None or (isinstance(order, float) and math.isnan(order)) else int(order),
                recipe=str(f["recipe"] or "") if str(f["recipe"]) != "nan" else "",
            )
        )
    return out


def runs_by_cell(part: pd.DataFrame) -> dict[Cell, list[Run]]:
    """`runs_of` for every cell of `part` in one groupby (the hot path of every gate)."""
    if part.empty:
        return {}
    frame = pd.DataFrame(
        {
            "probe": column(part, "probe", "").astype(str).to_numpy(),
            "scenario": column(part, "scenario", "").astype(str).to_numpy(),
            "context": column(part, "context", 0).astype(int).to_numpy(),
            "mode": column(part, "mode", "").astype(str).to_numpy(),
            "settings": column(part, "settings_hash", "").astype(str).to_numpy(),
            "_block": block_of(part).to_numpy(),
            "value": part["value"].astype(float).to_numpy(),
            "item": column(part, "item_key", "").astype(str).to_numpy(),
            "attempt": column(part, "attempt_id", 0).to_numpy(),
            "order": pd.to_numeric(column(part, "block_order", math.nan), errors="coerce").to_numpy(dtype=float),
            "recipe": column(part, "recipe_hash", "").astype(str).to_numpy(),
        }
    )
    keys = ["probe", "scenario", "context", "mode", "settings", "_block"]
    groups = frame.groupby(keys, sort=True)
    agg = groups.agg(
        value=("value", "median"),
        requests=("value", "size"),
        item=("item", "first"),
        attempt=("attempt", "first"),
        order=("order", "first"),
        recipe=("recipe", "first"),
    )
    out: dict[Cell, list[Run]] = {}
    for key, row in zip(agg.index, agg.itertuples(index=False)):
        if math.isnan(row.value):
            continue
        cell = Cell(str(key[0]), str(key[1]), int(key[2]), str(key[3]), str(key[4]))
        recipe = "" if row.recipe in ("", "nan", "None") else str(row.recipe)
        out.setdefault(cell, []).append(
            Run(
                block=str(key[5]),
                item=str(row.item),
                attempt=int(row.attempt),
                value=float(row.value),
                requests=int(row.requests),
                order=None if math.isnan(row.order) else int(row.order),
                recipe=recipe,
            )
        )
    return out
