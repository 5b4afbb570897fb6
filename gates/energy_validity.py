"""When a verdict on energy rests on numbers that do not compare: arms measured on
different devices (another model, another power limit) are refused, as a comparison
across workload classes is flagged; blocks in which a clock was held down (power cap,
heat) or another process used the device are named in the verdict, which stands but
says what it rests on.

Read from the telemetry rows every probe run stores (`campaign.core.metrics.energy`):
`accel_power_limit_w` (its source names the devices), `clock_throttled_share` and
`accel_other_processes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from campaign.core import metrics
from campaign.core.metrics.energy import TELEMETRY
from gates.runs import block_of

# the metrics whose verdicts these rules guard: every energy or power number
ENERGY_METRICS = frozenset(
    m.name
    for m in (
        metrics.ENERGY_J,
        metrics.ENERGY_PER_OUTPUT_TOKEN_J,
        metrics.ENERGY_PER_OUTPUT_TOKEN_NET_J,
        metrics.POWER_MEAN_W,
        metrics.POWER_PEAK_W,
    )
)


def _telemetry(rows: pd.DataFrame, arm: str, metric: str) -> pd.DataFrame:
    part = rows[(rows["arm_id"] == arm) & (rows["metric"] == metric)]
    return part[part["scenario"].astype(str) == TELEMETRY] if "scenario" in part else part


def device_refusal(rows: pd.DataFrame, arms: Sequence[str]) -> str:
    """Why arms cannot be compared on energy ("" when they can): they ran on devices of
    another model or power limit. An arm on several devices over its blocks is refused
    against itself too."""
    seen: dict[str, set[str]] = {}
    for arm in arms:
        part = _telemetry(rows, arm, metrics.ACCEL_POWER_LIMIT_W.name)
        seen[arm] = {str(src) or f"a {value:g} W limit" for src, value in zip(part["source"], part["value"])}
    kinds = {d for ds in seen.values() for d in ds}
    if len(kinds) <= 1:
        return ""
    said = "; ".join(f"{arm} on {' and '.join(sorted(ds)) or 'unknown devices'}" for arm, ds in seen.items())
    return f"the arms ran on different devices ({said}): energy does not compare across them"


def block_caveats(rows: pd.DataFrame, arms: Sequence[str]) -> list[str]:
    """The blocks a verdict rests on that ran throttled or beside another process."""
    out = []
    for arm in arms:
        for metric, what in (
            (metrics.CLOCK_THROTTLED_SHARE.name, "with a clock held down"),
            (metrics.ACCEL_OTHER_PROCESSES.name, "beside another process on the device"),
        ):
            part = _telemetry(rows, arm, metric)
            if part.empty:
                continue
            blocks = block_of(part)
            bad = {str(b) for b, v in zip(blocks, part["value"]) if v > 0}
            if bad:
                reasons = sorted({str(s) for s, v in zip(part["source"], part["value"]) if v > 0 and s})
                why = f" ({', '.join(reasons)})" if reasons and metric == metrics.CLOCK_THROTTLED_SHARE.name else ""
                out.append(f"{arm} ran {what}{why} in {len(bad)} of {blocks.nunique()} blocks")
    return out
