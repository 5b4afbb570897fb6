"""Agent-load on an arm page: TTFT per turn for each conversation, the queue under it.

Reads the rows the agent-load probe writes: measurements with probe "agent-load",
metric "ttft_s" and scenario "c{conversation}-t{turn}" (the single-stream baseline as
"baseline-t{turn}"), and samples of series "queue_depth" (and "slots_busy") taken every
0.5 s while the load and the baseline ran, with "sample_gap" rows where a read failed.
Turns are stored from 0 and shown from 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd
from markupsafe import Markup

from arms.probes.base import SAMPLE_GAP
from campaign.store import Store
from campaign.tables import SampleRow
from campaign.units import context_label
from reports import charts
from reports.data import canonical_first

_TURN = re.compile(r"^c(\d+)-t(\d+)$")
_BASE = re.compile(r"^baseline-t(\d+)$")
SAMPLE_SERIES = ("queue_depth", "slots_busy")
BASELINE_SUFFIX = " (single stream)"


@dataclass
class AgentLoadRun:
    """One agent-load probe run of an arm in one mode: its two charts."""

    title: str
    mode: str
    ttft_chart: Markup
    queue_chart: Markup


def _parse(scenario: str) -> tuple[str, int] | None:
    m = _TURN.match(scenario)
    if m:
        return f"conversation {int(m.group(1)) + 1}", int(m.group(2))
    m = _BASE.match(scenario)
    if m:
        return "single stream (baseline)", int(m.group(1))
    return None


def runs(store: Store, ttft: pd.DataFrame, arm_id: str, chart_prefix: str) -> list[AgentLoadRun]:
    """Charts for every agent-load probe run of the arm; `ttft` is `ReportData.agent_ttft`
    (`reports.data.ttft_rows`)."""
    if ttft.empty:
        return []
    rows = ttft[ttft["arm_id"] == arm_id]
    if rows.empty:
        return []
    samples = _samples_by_run(store.samples(sorted(set(rows["probe_run_id"]))))
    out: list[AgentLoadRun] = []
    for (run_id, context, item), part in rows.groupby(["probe_run_id", "context", "item_key"], sort=True, observed=True):
        modes = canonical_first(sorted(set(part["mode"])))
        segments = _segments(samples.get(int(run_id), []), len(modes))
        for n, mode in enumerate(modes):
            sub = part[part["mode"] == mode]
            lines: dict[str, dict[int, float]] = {}
            for r in sub.itertuples(index=False):
                parsed = _parse(r.scenario)
                if parsed:
                    lines.setdefault(parsed[0], {})[parsed[1]] = float(r.value)
            if not lines:
                continue
            turns = sorted({t for line in lines.values() for t in line})
            names = sorted(n_ for n_ in lines if not n_.startswith("single")) + [n_ for n_ in lines if n_.startswith("single")]
            series = [
                charts.Series(name, [lines[name].get(t) for t in turns], mode=mode, color=i, dashed=name.startswith("single"))
                for i, name in enumerate(names)
            ]
            cid = f"{chart_prefix}-al-{int(run_id)}-{mode}"
            title = f"agent-load · {item} · context {context_label(int(context))} · {mode}"
            ttft = charts.line_chart(
                f"{cid}-ttft", "TTFT per turn, per conversation", [str(t + 1) for t in turns], series,
                x_title="turn", y_title="TTFT (s)",
            )
            seg = segments[n] if n < len(segments) else {}
            names = [*SAMPLE_SERIES, *(f"{name}{BASELINE_SUFFIX}" for name in SAMPLE_SERIES)]
            queue = charts.xy_chart(
                f"{cid}-queue", "Queue depth during the load",
                [(name, seg[name], i) for i, name in enumerate(names) if any(v is not None for _, v in seg.get(name, []))],
                x_title="time since the load started (s)", y_title="requests",
            )
            out.append(AgentLoadRun(title, mode, ttft, queue))
    return out


def _samples_by_run(rows: list[SampleRow]) -> dict[int, list[SampleRow]]:
    out: dict[int, list[SampleRow]] = {}
    for row in sorted(rows, key=lambda r: r.id or 0):
        out.setdefault(row.probe_run_id, []).append(row)
    return out


def _segments(rows: list[SampleRow], modes: int) -> list[dict[str, list[tuple[float, float | None]]]]:
    """Split a probe run's samples into one part per mode. Rows carry their phase in
    `label` ("load", "baseline"; rows without one are load); the sampler restarts its
    clock for each phase, so within a phase time going backwards starts the next mode's
    part. Baseline series get their own names. A failed read (series `sample_gap`) breaks
    every line of its phase at its time: no value is drawn across it."""
    parts: dict[str, list[dict[str, list[tuple[float, float | None]]]]] = {"load": [{}], "baseline": [{}]}
    last: dict[str, float] = {}
    for row in rows:
        if row.series not in SAMPLE_SERIES and row.series != SAMPLE_GAP:
            continue
        phase = "baseline" if row.label == "baseline" else "load"
        if phase in last and row.t_s < last[phase] and len(parts[phase]) < max(modes, 1):
            parts[phase].append({})
        last[phase] = row.t_s
        part = parts[phase][-1]
        if row.series == SAMPLE_GAP:
            for points in part.values():
                points.append((row.t_s, None))
        else:
            part.setdefault(row.series, []).append((row.t_s, row.value))
    out: list[dict[str, list[tuple[float, float | None]]]] = []
    for n, load in enumerate(parts["load"]):
        seg = dict(load)
        base = parts["baseline"][n] if n < len(parts["baseline"]) else {}
        seg.update({f"{name}{BASELINE_SUFFIX}": points for name, points in base.items()})
        out.append(seg)
    return out
