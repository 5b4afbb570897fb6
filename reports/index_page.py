"""What the index page shows beyond the summary: the decode and reuse charts and the
offerings tables, built from the cell values computed once in `reports.data`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from markupsafe import Markup

from campaign.core import metrics
from campaign.core.states import ProbeName
from campaign.core.units import plain
from reports import charts
from reports.answer import answer_of
from reports.coverage import SCENARIOS
from reports.data import ReportData, canonical_first


def speculates(arm: Any) -> bool:
    """Whether the arm's recipe decodes speculatively (from the stored recipe)."""
    import json

    try:
        return bool(json.loads(arm.recipe_json or "{}").get("speculative"))
    except ValueError:
        return False


RECIPE_KINDS = {False: "without speculation", True: "with speculation"}


def _best(values: pd.DataFrame, data: ReportData, key_of: Any) -> dict[tuple[str, str, bool], tuple[float, str]]:
    """(category, mode, speculative) -> (best median decode, which arm at which context).

    Speculation is part of the key: a speculative arm's decode is only ever compared with
    other speculative arms', so a bar never sets q4 with a draft model against q8 without."""
    rows = (
        values[(values["metric"] == metrics.DECODE_TPS.name) & (values["probe"] == ProbeName.DECODE.value)]
        if not values.empty
        else values
    )
    best: dict[tuple[str, str, bool], tuple[float, str]] = {}
    for row in rows.itertuples(index=False):
        arm = data.arm_by_id.get(row.arm_id)
        if arm is None:
            continue
        key = (key_of(arm), row.mode, speculates(arm))
        note = f"{row.arm_id} @ {row.context}"
        if key not in best or row.value > best[key][0]:
            best[key] = (float(row.value), note)
    return best


def _mode_series(categories: list[str], best: dict[tuple[str, str, bool], tuple[float, str]]) -> list[charts.Series]:
    """One series per kind of recipe (and mode); each bar printed with its arm and context."""
    modes = canonical_first(sorted({m for _, m, _ in best}))
    kinds = sorted({k for _, _, k in best})
    out = []
    for i, kind in enumerate(kinds):
        color = -1 - i  # neutral: a kind of recipe is not an arm, and must not wear an arm's colour
        for mode in modes:
            if not any((c, mode, kind) in best for c in categories):
                continue
            values = [best.get((c, mode, kind), (None, None))[0] for c in categories]
            labels = [best.get((c, mode, kind), (None, None))[1] for c in categories]
            name = RECIPE_KINDS[kind] + ("" if mode == "canonical" else f" · {mode}")
            out.append(charts.Series(name, values, mode=mode, color=color, labels=labels))
    return out


def _sim_suffix(simulated: bool) -> str:
    return " (simulated)" if simulated else ""


def decode_per_runtime(data: ReportData) -> Markup:
    sim = {a.runtime: True for a in data.arms if data.is_simulated(a.arm_id)}
    best = _best(data.values, data, lambda arm: arm.runtime + _sim_suffix(sim.get(arm.runtime, False)))
    categories = sorted({c for c, _, _ in best})
    return charts.bar_chart(
        "decode-runtime",
        "Best decode per runtime, speculative and plain recipes apart",
        categories,
        _mode_series(categories, best),
        x_title="runtime",
        y_title="decode (tok/s)",
        print_labels=True,
    )


def decode_per_quant(data: ReportData) -> Markup:
    quants: dict[float, set[str]] = {}
    for arm in data.arms:
        quants.setdefault(arm.bits_per_weight, set()).add(arm.quant)
    label = {bpw: f"{plain(bpw)} bpw ({'/'.join(sorted(q))})" for bpw, q in quants.items()}
    best = _best(data.values, data, lambda arm: label[arm.bits_per_weight])
    categories = [label[b] for b in sorted(quants) if any(c == label[b] for c, _, _ in best)]
    return charts.bar_chart(
        "decode-quant",
        "Best decode per quant, speculative and plain recipes apart",
        categories,
        _mode_series(categories, best),
        x_title="bits per weight",
        y_title="decode (tok/s)",
        print_labels=True,
    )


def decode_per_context(data: ReportData) -> Markup:
    """Canonical decode per arm at each context, the seed campaign's main chart: each bar is
    the cell's value as a gate reads it (`reports.data.cell_values`: the geometric mean
    over server runs of each run's median), the whisker its 95% CI over those runs (none
    with one run). A run, not a request, is the unit, as in the gates: requests of one
    server share its state."""
    title = "Decode per context and arm (canonical)"
    vals = data.values
    rows = (
        vals[
            (vals["probe"] == ProbeName.DECODE.value)
            & (vals["metric"] == metrics.DECODE_TPS.name)
            & (vals["mode"] == "canonical")
        ]
        if not vals.empty
        else vals
    )
    if rows.empty:
        return charts.empty(title, "no decode measured yet")
    contexts = sorted({int(float(c)) for c in rows["context"]})
    arm_ids = [a.arm_id for a in data.arms if a.arm_id in set(rows["arm_id"].astype(str))]
    series = []
    for arm_id in arm_ids:
        mine = {int(float(r.context)): r for r in rows[rows["arm_id"] == arm_id].itertuples(index=False)}
        values: list[float | None] = []
        intervals: list[tuple[float, float] | None] = []
        labels: list[str | None] = []
        for ctx in contexts:
            cell = mine.get(ctx)
            if cell is None:
                values.append(None), intervals.append(None), labels.append(None)
                continue
            runs = int(cell.runs)
            values.append(float(cell.value))
            intervals.append((float(cell.low), float(cell.high)) if runs > 1 else None)
            labels.append(f"{arm_id}: {runs} run{'s' if runs != 1 else ''}" + (", 95% CI" if runs > 1 else ""))
        name = f"{arm_id}{' (sim)' if data.is_simulated(arm_id) else ''}"
        series.append(charts.Series(name, values, color=data.arm_color(arm_id), intervals=intervals, labels=labels))
    categories = [f"{c // 1024}K" if c % 1024 == 0 else str(c) for c in contexts]
    return charts.bar_chart(
        "decode-context",
        f"{title}, over server runs",
        categories,
        series,
        x_title="context (tokens)",
        y_title="decode (tok/s)",
    )


def reuse_by_scenario(data: ReportData) -> Markup:
    med = data.values
    rows = (
        med[(med["metric"] == metrics.REUSE.name) & (med["probe"] == ProbeName.CACHE_PROBE.value)]
        if not med.empty
        else med
    )
    if rows.empty:
        return charts.empty("Cache-probe reuse by scenario and arm", "no cache-probe measured yet")
    cell = rows.groupby(["scenario", "arm_id", "mode"])["value"].median()
    present = set(rows["scenario"])
    categories = [s for s in SCENARIOS if s in present] + sorted(present - set(SCENARIOS))
    arm_ids = sorted(set(rows["arm_id"]))
    series = []
    for arm_id in arm_ids:
        for mode in canonical_first(sorted(set(rows[rows["arm_id"] == arm_id]["mode"]))):
            values = [float(cell[(s, arm_id, mode)]) if (s, arm_id, mode) in cell.index else None for s in categories]
            name = f"{arm_id}{' (sim)' if data.is_simulated(arm_id) else ''} · {mode}"
            series.append(charts.Series(name, values, mode=mode, color=data.arm_color(arm_id)))
    return charts.bar_chart(
        "reuse-scenario",
        "Cache-probe reuse by scenario and arm",
        categories,
        series,
        x_title="cache-probe scenario",
        y_title="reuse (cached / prompt tokens)",
    )


def runtime_offerings(data: ReportData) -> list[dict[str, Any]]:
    used: dict[str, list[str]] = {}
    for arm in data.arms:
        used.setdefault(arm.runtime, []).append(arm.arm_id)
    return [
        {
            "name": r.name,
            "adapter": r.adapter,
            "seeks": r.seeks,
            "how": r.how,
            "cost": r.cost,
            "arms": used.get(r.name, []),
            "simulated": r.adapter == "simulator",
        }
        for r in data.summary.spec.runtimes
    ]


def quant_offerings(data: ReportData) -> list[dict[str, Any]]:
    used: dict[tuple[str, str], list[str]] = {}
    for arm in data.arms:
        used.setdefault((arm.model, arm.quant), []).append(arm.arm_id)
    return [
        {
            "name": m.name,
            "quant": m.quant,
            "bits_per_weight": m.bits_per_weight,
            "description": m.description,
            "served_id": m.served_id or "",
            "arms": used.get((m.name, m.quant), []),
        }
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


@dataclass
class Finding:
    """One line of the index's answer: what was decided, why, and where the evidence is."""

    title: str
    reason: str
    href: str
    arms: str = ""
    found: str = ""  # the gate's answer line (`reports.answer`); the reason folds below it
    word: str = ""  # the verdict word the answer opens with


ANSWER_GROUPS = [
    ("won", "Passed", "pass"),
    ("failed", "Failed", "fail"),
    ("blocked", "Blocked", "blocked"),
    ("broken", "Measurement failed", ""),
    ("undecided", "Not decided", "inconclusive"),
    ("control", "Controls", "control"),
]


def answer(data: ReportData) -> list[tuple[str, str, list[Finding]]]:
    """The campaign's answer, before any table: each gate under its verdict (passed,
    failed, blocked, not decided, control) with its answer line (`reports.answer`), its
    full reason folded below, and a link to its page, and each queue item that is blocked or whose measurement broke without a gate
    to say so, linked to the arm page that shows why. Groups with nothing are left out."""
    groups: dict[str, list[Finding]] = {key: [] for key, _, _ in ANSWER_GROUPS}
    by_verdict = {"pass": "won", "fail": "failed", "blocked": "blocked", "control": "control"}
    gated_blocked = set()
    for g in data.summary.gates:
        arms = "/".join(g.subjects) + (f" vs {'/'.join(g.baseline)}" if g.baseline else "")
        said = answer_of(g)
        finding = Finding(g.title or g.id, g.reason, f"gates/{data.gate_pages[g.id]}.html", arms, said.found, said.word)
        groups[by_verdict.get(str(g.verdict), "undecided")].append(finding)
        if str(g.verdict) == "blocked":
            gated_blocked.add(g.id)
    for item in data.summary.items:
        state = str(item.state)
        if state not in ("blocked", "failed") or (item.gate in gated_blocked and state == "blocked"):
            continue
        arm_id = item.reason.split(":", 1)[0].strip() if ":" in item.reason else (item.arms[0] if item.arms else "")
        href = f"arms/{data.arm_pages[arm_id]}.html" if arm_id in data.arm_pages else "#queue-h"
        finding = Finding(f"queue item: {item.title}", item.reason or state, href, "/".join(item.arms))
        groups["blocked" if state == "blocked" else "broken"].append(finding)
    return [(key, label, groups[key]) for key, label, _ in ANSWER_GROUPS if groups[key]]
