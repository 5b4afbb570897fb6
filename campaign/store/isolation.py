"""Variable isolation: what a confirmatory item changed, and what moved because of it.

A confirmatory item re-runs an earlier one with exactly one recipe variable changed (seed
004: per-session cache cap 48G -> 100G at the same context and order). Status and report
say which variable changed and which canonical medians moved most between the two.
"""

from __future__ import annotations

import pandas as pd

from campaign.core import metrics
from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import Mode, SampleKind
from campaign.store.samples import kinds

# what a person compares between two runs; server counter deltas are totals, not effects
PER_REQUEST_METRICS = tuple(
    m.name for m in (metrics.REUSE, metrics.TTFT_S, metrics.DECODE_TPS, metrics.E2E_S, metrics.TOOL_LOOP_PASS)
)


def _show(value: object) -> str:
    if isinstance(value, int) and value >= 1024**3 and value % (1024**3) == 0:
        return f"{value // 1024**3}G"
    if isinstance(value, int) and value >= 1024**2 and value % (1024**2) == 0:
        return f"{value // 1024**2}M"
    return str(value)


def changed_variable(spec: CampaignSpec, item: QueueItem) -> str:
    """'session_cache_cap 48G -> 100G (V)' for a confirmatory item, '' otherwise."""
    if not item.confirms or not item.change:
        return ""
    (field,) = item.change
    parts = []
    base = spec.item(item.confirms)
    for arm_id in item.arms:
        before = getattr(spec.recipe_for(arm_id, base), field)
        after = getattr(spec.recipe_for(arm_id, item), field)
        parts.append(f"{arm_id}: {_show(before)} -> {_show(after)}")
    return f"confirms {item.confirms!r}, changing only {field} ({'; '.join(parts)})"


def what_moved(frame: pd.DataFrame, item: QueueItem, top: int = 3, min_change: float = 0.10) -> list[str]:
    """The canonical medians that moved most between the earlier item and the confirmatory one."""
    if frame.empty or not item.confirms:
        return []
    rows = frame[
        (frame["mode"] == Mode.CANONICAL.value)
        & (kinds(frame) == SampleKind.SAMPLE)
        & frame["arm_id"].isin(item.arms)
        & frame["metric"].isin(PER_REQUEST_METRICS)
    ]
    keys = ["arm_id", "probe", "scenario", "context", "metric"]
    before = rows[rows["item_key"] == item.confirms].groupby(keys)["value"].median()
    after = rows[rows["item_key"] == item.key].groupby(keys)["value"].median()
    both = pd.concat([before.rename("before"), after.rename("after")], axis=1).dropna()
    if both.empty:
        return []
    scale = both[["before", "after"]].abs().max(axis=1).where(lambda s: s > 0, 1.0)
    both["change"] = (both["after"] - both["before"]).abs() / scale
    moved = both[both["change"] >= min_change].sort_values("change", ascending=False).head(top)
    out = []
    for (arm, _probe, scenario, _ctx, metric), r in moved.iterrows():
        label = f"{arm} {scenario + ' ' if scenario else ''}{metric}"
        out.append(f"{label} {r['before']:.2f} -> {r['after']:.2f}")
    return out
