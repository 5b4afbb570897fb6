"""Agent load in the report: on the front page, TTFT by turn per arm over server runs and
the first turns apart from the later ones; on an arm page, TTFT per turn for each
conversation of each run, the queue under it.

Reads the rows the agent-load probe writes: measurements with probe "agent-load",
metric "ttft_s" and scenario "c{conversation}-t{turn}" (the single-stream baseline as
"baseline-t{turn}"), and samples of series "queue_depth" (and "slots_busy") taken every
0.5 s while the load and the baseline ran, with "sample_gap" rows where a read failed.
Turns are stored from 0 and shown from 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd
from markupsafe import Markup

from arms.probes.queue_sampler import SAMPLE_GAP
from campaign.core import metrics
from campaign.core.states import Mode
from campaign.core.units import context_label, num
from campaign.store.store import Store
from campaign.store.tables import SampleRow
from reports import charts
from reports.data import ReportData, canonical_first, cell_values

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
    for (run_id, context, item), part in rows.groupby(
        ["probe_run_id", "context", "item_key"], sort=True, observed=True
    ):
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
            names = sorted(n_ for n_ in lines if not n_.startswith("single")) + [
                n_ for n_ in lines if n_.startswith("single")
            ]
            series = [
                charts.Series(
                    name, [lines[name].get(t) for t in turns], mode=mode, color=i, dashed=name.startswith("single")
                )
                for i, name in enumerate(names)
            ]
            cid = f"{chart_prefix}-al-{int(run_id)}-{mode}"
            title = f"agent-load · {item} · context {context_label(int(context))} · {mode}"
            ttft = charts.line_chart(
                f"{cid}-ttft",
                "TTFT per turn, per conversation",
                [str(t + 1) for t in turns],
                series,
                x_title="turn",
                y_title="TTFT (s)",
            )
            seg = segments[n] if n < len(segments) else {}
            names = [*SAMPLE_SERIES, *(f"{name}{BASELINE_SUFFIX}" for name in SAMPLE_SERIES)]
            queue = charts.xy_chart(
                f"{cid}-queue",
                "Queue depth during the load",
                [
                    (name, seg[name], i)
                    for i, name in enumerate(names)
                    if any(v is not None for _, v in seg.get(name, []))
                ],
                x_title="time since the load started (s)",
                y_title="requests",
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


def turns(data: ReportData) -> Markup | None:
    """TTFT by turn for every arm that ran agent-load, canonical: each bar is the value of
    that turn's cell as a gate reads it (each run's median over its conversations, then
    the geometric mean over runs, `gates.cells.cell_value`), the whisker its 95% CI over
    runs. The first turn stands apart from the later ones: with more slots every
    conversation prefills its first turn at once, so the first turn may pay for what the
    later turns gain, and an operator needs both. None when no arm ran agent-load."""
    ttft = data.agent_ttft
    if ttft is None or ttft.empty:
        return None
    rows = ttft[ttft["mode"] == Mode.CANONICAL.value]
    parsed = rows["scenario"].astype(str).str.extract(_TURN)
    rows = rows.assign(_turn=pd.to_numeric(parsed[1], errors="coerce")).dropna(subset=["_turn"])
    if rows.empty:
        return None
    # a turn is a cell of its own: its value is the one every cell gets (`cell_values`)
    cells = cell_values(rows.assign(scenario=rows["_turn"].astype(int)))
    turn_numbers = sorted(int(t) for t in set(cells["scenario"]))
    arm_ids = [a.arm_id for a in data.arms if a.arm_id in set(cells["arm_id"].astype(str))]
    series = []
    for arm_id in arm_ids:
        mine = {int(c.scenario): c for c in cells[cells["arm_id"] == arm_id].itertuples(index=False)}
        values: list[float | None] = []
        intervals: list[tuple[float, float] | None] = []
        labels: list[str | None] = []
        for t in turn_numbers:
            cell = mine.get(t)
            if cell is None:
                values.append(None), intervals.append(None), labels.append(None)
                continue
            runs = int(cell.runs)
            values.append(float(cell.value))
            intervals.append((float(cell.low), float(cell.high)) if runs > 1 else None)
            labels.append(
                f"{arm_id} turn {t + 1}: {runs} run{'s' if runs != 1 else ''}" + (", 95% CI" if runs > 1 else "")
            )
        name = f"{arm_id}{' (sim)' if data.is_simulated(arm_id) else ''}"
        series.append(charts.Series(name, values, color=data.arm_color(arm_id), intervals=intervals, labels=labels))
    categories = [("turn 1 (first)" if t == 0 else f"turn {t + 1}") for t in turn_numbers]
    return charts.bar_chart(
        "agent-turns",
        "Agent load: TTFT by turn and arm (canonical), over server runs",
        categories,
        series,
        x_title="turn of each conversation",
        y_title="TTFT (s)",
    )


def first_and_later(data: ReportData) -> list[dict[str, Any]]:
    """Per arm, the first turns' and the later turns' TTFT as gates read them (the cells of
    ttft_first_s and ttft_later_s in `ReportData.values`): value, 95% CI and runs."""
    vals = data.values
    if vals.empty:
        return []
    wanted = {metrics.TTFT_FIRST_S.name: "first", metrics.TTFT_LATER_S.name: "later"}
    rows = vals[
        vals["metric"].isin(list(wanted)) & (vals["mode"] == Mode.CANONICAL.value) & (vals["probe"] == "agent-load")
    ]
    out: list[dict[str, Any]] = []
    for arm in data.arms:
        mine = rows[rows["arm_id"] == arm.arm_id]
        if mine.empty:
            continue
        entry: dict[str, Any] = {"arm_id": arm.arm_id}
        for r in mine.itertuples(index=False):
            shown = num(float(r.value))
            if int(r.runs) > 1 and pd.notna(r.low):
                shown += f" [{num(float(r.low))}, {num(float(r.high))}]"
            entry[wanted[str(r.metric)]] = f"{shown} s, {int(r.runs)} run{'s' if int(r.runs) != 1 else ''}"
        out.append(entry)
    return out
