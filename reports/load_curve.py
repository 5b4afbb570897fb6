"""Throughput-latency curves of the `load` probe, for arm pages, gate pages and the
coverage matrix.

Reads the per-run summary rows the probe writes (kind summary, one cell per run: scenario
`synchronous`, `concurrency=32`, `rate=1.5`, ...; see `arms.probes.load`) through
`curve_rows`, the same function the command line and its JSON use, so the page shows
the numbers `campaign probe` prints. A curve is latency (p50 and p99 TTFT and TPOT)
against the offered rate, with the sweep's maximum goodput marked where it was found,
and beside it goodput and throughput against the offered rate (what the server carried
within the targets, against what was asked of it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from markupsafe import Markup

from arms.probes.load_curve import SWEEP_SCENARIO, curve_rows, sweep_result
from arms.workloads.profiles import is_open_loop
from campaign.core import metrics
from campaign.core.states import ProbeName, SampleKind
from campaign.core.units import num
from campaign.store.samples import kinds
from gates.load_validity import run_faults
from reports import charts

LOAD = ProbeName.LOAD.value
LATENCY_SERIES = (
    ("TTFT p50", metrics.TTFT_P50_S.name, 0, False),
    ("TTFT p99", metrics.TTFT_P99_S.name, 0, True),
    ("TPOT p50", metrics.TPOT_P50_S.name, 1, False),
    ("TPOT p99", metrics.TPOT_P99_S.name, 1, True),
)
# the keys of a curve row (`curve_rows`) and a sweep cell (`sweep_result`) read here
OFFERED, GOODPUT, THROUGHPUT = metrics.OFFERED_RPS.name, metrics.GOODPUT_RPS.name, metrics.REQUEST_THROUGHPUT_RPS.name
MAX_GOODPUT, MAX_GOODPUT_OFFERED = metrics.MAX_GOODPUT_RPS.name, metrics.MAX_GOODPUT_OFFERED_RPS.name


@dataclass
class LoadCurve:
    """One load probe run of an arm (one item, context and mode): its two charts."""

    title: str
    mode: str
    summary: str
    latency_chart: Markup
    goodput_chart: Markup
    runs: int
    notes: list[str]


def load_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The load probe's summary rows (selected once for every page)."""
    if frame.empty:
        return frame
    return frame[(frame["probe"] == LOAD) & (kinds(frame) == SampleKind.SUMMARY)]


def _records(part: pd.DataFrame) -> list[dict[str, Any]]:
    part = part.assign(kind=kinds(part))
    cols = ["scenario", "mode", "context", "kind", "metric", "value", "source"]
    return [
        dict(zip(cols, row))
        for row in part[cols]
        .astype({"scenario": str, "mode": str, "kind": str, "metric": str, "source": str})
        .itertuples(index=False)
    ]


def _knee(records: list[dict[str, Any]], mode: str, context: int) -> tuple[float, float, str] | None:
    """(offered rate, goodput, text) of the sweep's maximum goodput, if a sweep ran and held somewhere."""
    cell = sweep_result(records).get((mode, context))
    if not cell or not cell.get(f"{MAX_GOODPUT}_source"):
        return None
    return cell.get(MAX_GOODPUT_OFFERED, 0.0), cell.get(MAX_GOODPUT, 0.0), cell.get(f"{MAX_GOODPUT_OFFERED}_source", "")


def runs(rows: pd.DataFrame, arm_id: str, chart_prefix: str) -> list[LoadCurve]:
    """Charts for every load probe run of the arm; `rows` comes from `load_rows`."""
    if rows.empty:
        return []
    mine = rows[rows["arm_id"] == arm_id]
    out: list[LoadCurve] = []
    for (item, context), part in mine.groupby(["item_key", "context"], sort=True, observed=True):
        records = _records(part)
        curve = curve_rows(records)
        for mode in dict.fromkeys(r["mode"] for r in curve):  # curve_rows puts canonical first
            points = [r for r in curve if r["mode"] == mode]
            knee = _knee(records, mode, int(context))
            cid = f"{chart_prefix}-load-{item}-{int(context)}-{mode}"
            latency = [
                charts.Curve(
                    name, [(r[OFFERED], r[key]) for r in points if key in r], color=color, mode=mode, dashed=dashed
                )
                for name, key, color, dashed in LATENCY_SERIES
            ]
            top = max((y for c in latency for _, y in c.points), default=0.0)
            goodput = [
                charts.Curve("goodput", [(r[OFFERED], r[GOODPUT]) for r in points], color=2, mode=mode),
                charts.Curve("throughput", [(r[OFFERED], r[THROUGHPUT]) for r in points], color=3, mode=mode),
            ]
            most = max((r[OFFERED] for r in points), default=0.0)
            goodput.append(
                charts.Curve("offered (all carried)", [(0.0, 0.0), (most, most)], color=4, mode=mode, dashed=True)
            )
            summary = f"{len(points)} runs" if len(points) > 1 else _one_run(points[0])
            if knee is not None:
                x, y, text = knee
                marker = f"max goodput {num(y)} req/s"
                latency.append(charts.Curve(marker, [(x, 0.0), (x, top)], color=2, mode=mode, dashed=True))
                goodput.append(charts.Curve(marker, [(x, 0.0), (x, y)], color=2, mode=mode, dashed=True))
                summary += f"; max goodput {num(y)} req/s at {text}"
            title = f"load · {item}{f' · context {int(context)}' if int(context) else ''} · {mode}"
            notes = run_notes(records, mode, int(context))
            if len(points) < 2:  # one point is not a curve: its numbers say more than a dot
                none = charts.empty("Latency against offered rate", "one run, no curve")
                out.append(LoadCurve(title, mode, summary, none, Markup(""), 1, notes))
                continue
            out.append(
                LoadCurve(
                    title,
                    mode,
                    summary,
                    charts.curve_chart(
                        f"{cid}-latency",
                        "Latency against offered rate",
                        latency,
                        x_title="offered rate (req/s)",
                        y_title="latency (s)",
                    ),
                    charts.curve_chart(
                        f"{cid}-goodput",
                        "Goodput and throughput against offered rate",
                        goodput,
                        x_title="offered rate (req/s)",
                        y_title="req/s",
                    ),
                    len(points),
                    notes,
                )
            )
    return out


def run_notes(records: list[dict[str, Any]], mode: str, context: int) -> list[str]:
    """What the page must say about how a run's numbers were taken: which runs are closed
    loops (their latencies are subject to coordinated omission), and which never reached a
    steady state (their whole-run numbers include the warm-up), with how many of their
    runs over blocks."""
    mine = [
        r
        for r in records
        if str(r["mode"]) == mode and int(r.get("context", 0)) == context and r["scenario"] != SWEEP_SCENARIO
    ]
    scenarios = list(dict.fromkeys(str(r["scenario"]) for r in mine))
    notes = []
    closed = [s for s in scenarios if not is_open_loop(s)]
    if closed:
        notes.append(
            f"Closed loop ({', '.join(closed)}): each client sends when its last answer came back, so a slow "
            "response delays the sends after it and their latencies are per request as sent, subject to "
            "coordinated omission"
            + ("; the open-loop runs keep their schedule and are not." if len(closed) < len(scenarios) else ".")
        )
    windows: dict[str, list[float]] = {}
    for r in mine:
        if r["metric"] == metrics.STEADY_WINDOW_S.name:
            windows.setdefault(str(r["scenario"]), []).append(float(r["value"]))
    never = [f"{s} ({sum(w == 0 for w in v)} of {len(v)})" for s, v in windows.items() if any(w == 0 for w in v)]
    if never:
        notes.append(
            f"Never reached a steady state (MSER-5 on tokens per second), runs over blocks: {', '.join(never)}; "
            "their whole-run numbers include the warm-up."
        )
    return notes


def _one_run(r: dict[str, Any]) -> str:
    latency = ", ".join(f"{name} {num(r[key])} s" for name, key, _, _ in LATENCY_SERIES if key in r)
    return (
        f"1 run, {r['scenario']}: offered {num(r[OFFERED])} req/s, goodput {num(r[GOODPUT])} req/s "
        f"({r.get(metrics.TARGET_ATTAINMENT.name, 0):.0%} met), throughput {num(r[THROUGHPUT])} req/s; {latency}"
    )


def coverage_text(rows: pd.DataFrame) -> dict[str, str]:
    """Per arm, what the coverage matrix says about its load runs: a curve (two runs or
    more), the best maximum goodput its sweeps found, and how many runs measured the client
    rather than the server (`gates.load_validity.run_faults`)."""
    out: dict[str, str] = {}
    if rows.empty:
        return out
    for arm, part in rows.groupby("arm_id", observed=True):
        records = _records(part)
        curve = curve_rows(records)
        if not curve:
            continue
        text = f"curve, {len(curve)} runs" if len(curve) > 1 else "1 run, no curve"
        best = [cell[MAX_GOODPUT] for cell in sweep_result(records).values() if MAX_GOODPUT in cell]
        if best:
            text += f" · max goodput {num(max(best))} req/s"
        summary = (
            part[(kinds(part) == SampleKind.SUMMARY) & (part["probe"] == "load")] if "probe" in part else part.iloc[0:0]
        )
        faults = run_faults(summary, str(arm))
        if faults:
            text += f" · {len(faults)} run{'s' if len(faults) != 1 else ''} measured the client (a gate reading them is inconclusive)"
        out[str(arm)] = text
    return out


def gate_chart(
    rows: pd.DataFrame, arm_ids: list[str], params: dict[str, Any], chart_id: str, labels: dict[str, str]
) -> Markup:
    """The arms' curves side by side on a load gate's page: goodput against offered rate
    for a goodput gate, the gate's latency percentile against offered rate for a latency
    gate (where the probe stores that percentile)."""
    metric = str(params.get("metric", ""))
    if metric:
        key = f"{metric.removesuffix('_s')}_p{float(params.get('percentile', 99)):g}_s"
        title, y_title = f"{key} against offered rate, per arm", "latency (s)"
    else:
        key, title, y_title = GOODPUT, "goodput against offered rate, per arm", "req/s"
    curves = []
    for i, arm in enumerate(arm_ids):
        mine = rows[rows["arm_id"] == arm] if not rows.empty else rows
        if params.get("context") is not None and not mine.empty:
            mine = mine[mine["context"] == params["context"]]
        points = (
            [r for r in curve_rows(_records(mine)) if r["mode"] == "canonical" and key in r] if not mine.empty else []
        )
        curves.append(charts.Curve(labels.get(arm, arm), [(r[OFFERED], r[key]) for r in points], color=i))
    return charts.curve_chart(chart_id, title, curves, x_title="offered rate (req/s)", y_title=y_title)
