"""What each arm cost on the machine, for the front page: energy per output token per arm
and probe with whiskers over its server runs, and throughput against energy per token
with the Pareto front (the arms no other beats on both). From the telemetry rows every
probe run stores (`campaign.core.metrics.energy`). Where no device could be read the
page says "not measured on this machine", never a 0.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import pandas as pd
from markupsafe import Markup

from campaign.core import metrics
from campaign.core.metrics.energy import TELEMETRY
from campaign.core.units import num, size
from campaign.store.store import Store
from gates.search_pick import Measured, pareto_front
from reports import charts
from reports.data import ReportData

NOT_MEASURED = (
    "not measured on this machine: no device the servers ran on could be read (NVML, RAPL or the simulator's)"
)
# what a probe's throughput is read as, first found (decode: its rate; load: its output rate)
THROUGHPUT = (metrics.DECODE_TPS.name, metrics.OUTPUT_TPS.name)


@dataclass
class EnergyRow:
    arm: str
    probe: str
    per_token: float
    low: float
    high: float
    runs: int
    net: float | None
    power_w: float | None
    idle_w: float | None
    devices: str
    caveats: str


@dataclass
class EnergyView:
    measured: bool
    rows: list[EnergyRow] = field(default_factory=list)
    per_token: Markup = Markup("")
    scatter: Markup = Markup("")
    note: str = NOT_MEASURED


def _median(part: pd.DataFrame, metric: str) -> float | None:
    values = [float(v) for v in part.loc[part["metric"] == metric, "value"]]
    return statistics.median(values) if values else None


def build(data: ReportData) -> EnergyView:
    frame = data.frame
    if frame.empty:
        return EnergyView(False)
    canonical = frame[frame["mode"].astype(str) == "canonical"]
    tel = canonical[canonical["scenario"].astype(str) == TELEMETRY]
    if not (tel["metric"] == metrics.ENERGY_PER_OUTPUT_TOKEN_J.name).any():
        return EnergyView(False)
    rows: list[EnergyRow] = []
    points: list[tuple[str, float, float, int]] = []
    for (arm, probe), part in tel.groupby([tel["arm_id"].astype(str), tel["probe"].astype(str)], sort=True):
        values = [float(v) for v in part.loc[part["metric"] == metrics.ENERGY_PER_OUTPUT_TOKEN_J.name, "value"]]
        if not values:
            continue
        limit = part[part["metric"] == metrics.ACCEL_POWER_LIMIT_W.name]
        throttled = int((part.loc[part["metric"] == metrics.CLOCK_THROTTLED_SHARE.name, "value"] > 0).sum())
        shared = int((part.loc[part["metric"] == metrics.ACCEL_OTHER_PROCESSES.name, "value"] > 0).sum())
        caveats = ", ".join(
            t for t in (f"{throttled} throttled" if throttled else "", f"{shared} shared" if shared else "") if t
        )
        rows.append(
            EnergyRow(
                arm,
                probe,
                statistics.median(values),
                min(values),
                max(values),
                len(values),
                _median(part, metrics.ENERGY_PER_OUTPUT_TOKEN_NET_J.name),
                _median(part, metrics.POWER_MEAN_W.name),
                _median(part, metrics.POWER_IDLE_W.name),
                ", ".join(sorted({str(s) for s in limit["source"] if str(s)})),
                caveats,
            )
        )
        mine = canonical[(canonical["arm_id"].astype(str) == arm) & (canonical["probe"].astype(str) == probe)]
        for name in THROUGHPUT:
            rate = _median(mine, name)
            if rate is not None and rate > 0:
                points.append((f"{arm} · {probe}", statistics.median(values), rate, data.arm_color(arm)))
                break
    categories = [f"{r.arm} · {r.probe}" for r in rows]
    bars = charts.bar_chart(
        "energy-per-token",
        "Energy per output token (J), median; whiskers: the lowest and highest server run",
        categories,
        [
            charts.Series(
                "energy per output token",
                [r.per_token for r in rows],
                intervals=[(r.low, r.high) for r in rows],
                colors=[data.arm_color(r.arm) for r in rows],
            )
        ],
        x_title="arm · probe",
        y_title="J per output token",
        legend=False,
    )
    return EnergyView(True, rows, bars, _scatter(points), "")


def _scatter(points: list[tuple[str, float, float, int]]) -> Markup:
    """Throughput against energy per token; the front: no other point has less energy per
    token and more throughput (`gates.search_pick.pareto_front`, the search's own rule)."""
    if len(points) < 2:
        return charts.empty("Throughput against energy per token", "fewer than two arms measured both")
    measured = [Measured(label, ((energy, rate),)) for label, energy, rate, _ in points]
    front = {m.arm_id for m in pareto_front(measured, (False, True))}
    series = [
        (f"{label}{' (front)' if label in front else ''}", [(energy, rate)], color)
        for label, energy, rate, color in points
    ]
    return charts.scatter_chart(
        "energy-front",
        "Throughput against energy per token (front: none has less energy and more throughput)",
        series,
        x_title="J per output token",
        y_title="tokens/s",
    )


def text(row: EnergyRow) -> str:
    """One arm's line: "B · decode 0.42 J/token [0.40, 0.45] over 5 runs (net 0.17), 98 W"."""
    net = f" (net of idle {num(row.net)})" if row.net is not None else ""
    power = f", {num(row.power_w)} W mean" if row.power_w is not None else ""
    return f"{num(row.per_token)} J/token [{num(row.low)}, {num(row.high)}] over {row.runs} runs{net}{power}"


@dataclass
class TelemetryRun:
    """One probe of one arm: its devices' power over each server run, and the numbers."""

    title: str
    chart: Markup
    summary: str


def arm_runs(store: Store, data: ReportData, arm_id: str) -> list[TelemetryRun]:
    """Per probe of the arm, the power its devices drew over each probe run (one line per
    block), beside the run's energy per token, peak memory and utilisation."""
    frame = data.frame
    if frame.empty:
        return []
    mine = frame[(frame["arm_id"].astype(str) == arm_id) & (frame["scenario"].astype(str) == TELEMETRY)]
    if mine.empty:
        return []
    samples = store.samples(sorted({int(r) for r in mine["probe_run_id"]}))
    power: dict[int, list[tuple[float, float | None]]] = {}
    for s in samples:
        if s.series == "power_w":
            power.setdefault(int(s.probe_run_id), []).append((float(s.t_s), float(s.value)))
    out = []
    for probe, part in mine.groupby(mine["probe"].astype(str), sort=True):
        runs = sorted({int(r) for r in part["probe_run_id"]})
        lines = [(f"run {k + 1}", sorted(power.get(run, [])), k) for k, run in enumerate(runs)]
        chart = charts.xy_chart(
            f"arm-telemetry-{probe}",
            "Power during each probe run",
            [line for line in lines if line[1]],
            x_title="device time since the run started (s)",
            y_title="W",
        )
        memory = _median(part, metrics.ACCEL_MEM_PEAK_BYTES.name)
        util = _median(part, metrics.ACCEL_UTIL_MEAN.name)
        per_token = _median(part, metrics.ENERGY_PER_OUTPUT_TOKEN_J.name)
        bits = [
            f"{len(runs)} runs",
            f"energy per output token {num(per_token)} J (median)" if per_token is not None else "",
            f"peak accelerator memory {size(int(memory))}" if memory is not None else "",
            f"busy {util:.0%} of the time" if util is not None else "",
        ]
        out.append(TelemetryRun(f"telemetry · {probe}", chart, "; ".join(b for b in bits if b)))
    return out
