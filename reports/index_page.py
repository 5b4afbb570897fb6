"""What the index page shows beyond the summary: the decode and reuse charts and the
offerings tables, built from the medians computed once in `reports.data`."""

from __future__ import annotations

from typing import Any

import pandas as pd
from markupsafe import Markup

from campaign.states import ProbeName
from reports import charts
from reports.coverage import SCENARIOS
from reports.data import ReportData, canonical_first


def _best(medians: pd.DataFrame, data: ReportData, key_of: Any) -> dict[tuple[str, str], tuple[float, str]]:
    """(category, mode) -> (best median decode, which arm at which context)."""
    rows = medians[(medians["metric"] == "decode_tps") & (medians["probe"] == ProbeName.DECODE.value)] if not medians.empty else medians
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for row in rows.itertuples(index=False):
        arm = data.arm_by_id.get(row.arm_id)
        if arm is None:
            continue
        key = (key_of(arm), row.mode)
        note = f"arm {row.arm_id} at {row.context} tokens"
        if key not in best or row.value > best[key][0]:
            best[key] = (float(row.value), note)
    return best


def _mode_series(categories: list[str], best: dict[tuple[str, str], tuple[float, str]]) -> list[charts.Series]:
    modes = canonical_first(sorted({m for _, m in best}))
    out = []
    for mode in modes:
        values = [best.get((c, mode), (None, None))[0] for c in categories]
        labels = [best.get((c, mode), (None, None))[1] for c in categories]
        out.append(charts.Series(mode, values, mode=mode, color=0, labels=labels))
    return out


def _sim_suffix(simulated: bool) -> str:
    return " (simulated)" if simulated else ""


def decode_per_runtime(data: ReportData) -> Markup:
    sim = {a.runtime: True for a in data.arms if data.is_simulated(a.arm_id)}
    best = _best(data.medians, data, lambda arm: arm.runtime + _sim_suffix(sim.get(arm.runtime, False)))
    categories = sorted({c for c, _ in best})
    return charts.bar_chart(
        "decode-runtime", "Best decode per runtime", categories, _mode_series(categories, best),
        x_title="runtime", y_title="decode (tok/s)",
    )


def decode_per_quant(data: ReportData) -> Markup:
    quants: dict[float, set[str]] = {}
    for arm in data.arms:
        quants.setdefault(arm.bits_per_weight, set()).add(arm.quant)
    label = {bpw: f"{bpw:g} bpw ({'/'.join(sorted(q))})" for bpw, q in quants.items()}
    best = _best(data.medians, data, lambda arm: label[arm.bits_per_weight])
    categories = [label[b] for b in sorted(quants) if any(c == label[b] for c, _ in best)]
    return charts.bar_chart(
        "decode-quant", "Best decode per quant (fewer bits tends to faster)", categories, _mode_series(categories, best),
        x_title="bits per weight", y_title="decode (tok/s)",
    )


def reuse_by_scenario(data: ReportData) -> Markup:
    med = data.medians
    rows = med[(med["metric"] == "reuse") & (med["probe"] == ProbeName.CACHE_PROBE.value)] if not med.empty else med
    if rows.empty:
        return charts.empty("Cache-probe reuse by scenario and arm", "no cache-probe measured yet")
    cell = rows.groupby(["scenario", "arm_id", "mode"])["value"].median()
    present = set(rows["scenario"])
    categories = [s for s in SCENARIOS if s in present] + sorted(present - set(SCENARIOS))
    arm_ids = sorted(set(rows["arm_id"]))
    series = []
    for i, arm_id in enumerate(arm_ids):
        for mode in canonical_first(sorted(set(rows[rows["arm_id"] == arm_id]["mode"]))):
            values = [float(cell[(s, arm_id, mode)]) if (s, arm_id, mode) in cell.index else None for s in categories]
            name = f"{arm_id}{' (sim)' if data.is_simulated(arm_id) else ''} · {mode}"
            series.append(charts.Series(name, values, mode=mode, color=i))
    return charts.bar_chart(
        "reuse-scenario", "Cache-probe reuse by scenario and arm", categories, series,
        x_title="cache-probe scenario", y_title="reuse (cached / prompt tokens)",
    )


def runtime_offerings(data: ReportData) -> list[dict[str, Any]]:
    used: dict[str, list[str]] = {}
    for arm in data.arms:
        used.setdefault(arm.runtime, []).append(arm.arm_id)
    return [
        {"name": r.name, "adapter": r.adapter, "seeks": r.seeks, "how": r.how, "cost": r.cost,
         "arms": used.get(r.name, []), "simulated": r.adapter == "simulator"}
        for r in data.summary.spec.runtimes
    ]


def quant_offerings(data: ReportData) -> list[dict[str, Any]]:
    used: dict[tuple[str, str], list[str]] = {}
    for arm in data.arms:
        used.setdefault((arm.model, arm.quant), []).append(arm.arm_id)
    return [
        {"name": m.name, "quant": m.quant, "bits_per_weight": m.bits_per_weight, "description": m.description,
         "served_id": m.served_id or "", "arms": used.get((m.name, m.quant), [])}
        for m in sorted(data.summary.spec.models, key=lambda m: (m.name, m.bits_per_weight))
    ]


def identity_rows(data: ReportData) -> dict[str, dict[str, str]]:
    """Per arm, what its newest attempt with an identity check saw."""
    out: dict[str, dict[str, str]] = {}
    for att in data.attempts:
        if att.served_model or att.fingerprint:
            out[att.arm_id] = {"served_model": att.served_model, "fingerprint": att.fingerprint}
    return out


def gate_is_simulated(data: ReportData, arm_ids: list[str]) -> bool:
    return any(data.is_simulated(a) for a in arm_ids)
