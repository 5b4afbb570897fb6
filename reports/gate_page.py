"""One page per gate: why it says what it says, and the numbers behind it.

What the page shows as the verdict's numbers is what the gate read: the cells, n, medians,
intervals and error rates in its evidence (`GateView.read`), drawn as bars with the
intervals as whiskers. Other medians of the same arms (from every item, which the gate
may not have read) stay in a collapsed table, labelled as such. The arms stand side by
side (subjects, then the baseline or control) so a reader can check the reason line
against the numbers without leaving the page.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from markupsafe import Markup

from campaign.core.units import SIZE_FIELDS, context_label, num, size
from campaign.store.summary import GateView
from gates.rigor import ci_label
from reports import charts, load_curve
from reports.data import ReportData, canonical_first


@dataclass
class GatePage:
    gate: GateView
    arms: list[dict[str, Any]]
    decisive: list[dict[str, Any]]
    others: list[dict[str, Any]]
    recipe_rows: list[dict[str, Any]]
    evidence_rows: list[tuple[str, str]]
    evidence_json: str
    read_cells: list[dict[str, Any]]
    read_comparisons: list[dict[str, Any]]
    chart: Markup
    history: list[Any]
    attempts: list[dict[str, Any]]
    classes: list[str]
    params: dict[str, Any] = field(default_factory=dict)
    load_chart: Markup | None = None
    ci: str = "95% CI"
    paired: list[dict[str, Any]] = field(default_factory=list)  # `paired_blocks`
    reruns: int = 0  # the arms' load curves, on a gate over the load probe
    rejudged: dict[str, Any] | None = None  # `rejudged`: the verdict before a re-judgement


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Evidence JSON as (path, value) rows: `values.B` -> 68.9."""
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return [(prefix, ", ".join(_evidence_value(v) for v in value))]
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, _evidence_value(value))]


def _evidence_value(value: Any) -> str:
    """An evidence value: floats with one digit more than the tables (this is the record
    a verdict came from), counts and words as stored."""
    if isinstance(value, float):
        return num(value, digits=4)
    return str(value)


def build(data: ReportData, gate: GateView) -> GatePage:
    spec_gate = data.summary.spec.gate(gate.id)
    params = dict(spec_gate.params)
    arm_ids = [*gate.subjects, *[b for b in gate.baseline if b not in gate.subjects]]
    role = {a: "subject" for a in gate.subjects} | {
        b: ("control" if gate.verdict == "control" else "baseline") for b in gate.baseline
    }
    arms = []
    for aid in arm_ids:
        arm = data.arm_by_id.get(aid)
        arms.append(
            {
                "id": aid,
                "role": role[aid],
                "page": data.arm_pages.get(aid),
                "simulated": data.is_simulated(aid),
                "label": f"{arm.model}/{arm.quant} on {arm.runtime}" if arm else "not in the store yet",
                "klass": arm.klass if arm else "",
            }
        )
    titles = data.item_titles()
    attempts = [
        {
            "arm": a.arm_id,
            "number": a.number,
            "repeat": getattr(a, "repeat", 0),
            "item": titles.get(a.item_key, a.item_key),
            "state": a.state,
            "started": a.started_at,
            "ended": a.ended_at,
            "error": a.error,
            "served_model": a.served_model,
        }
        for a in data.attempts_of(arm_ids)
    ]
    rows = _side_by_side(data.stats, arm_ids, params.get("metric"))
    metric = params.get("metric")
    decisive = [r for r in rows if r["decides"]] if metric else rows
    read_cells = [_cell_row(c) for c in gate.read("cells")]
    return GatePage(
        gate=gate,
        arms=arms,
        decisive=decisive,
        others=[r for r in rows if not r["decides"]] if metric else [],
        recipe_rows=_recipes(data, arm_ids),
        evidence_rows=flatten(gate.evidence),
        evidence_json=json.dumps(gate.evidence, indent=2, sort_keys=True, default=str),
        read_cells=read_cells,
        read_comparisons=[_comparison_row(c) for c in gate.read("comparisons")],
        paired=paired_blocks(gate),
        chart=_read_chart(data, gate, read_cells, role, metric)
        if read_cells
        else _chart(data, gate, arm_ids, role, params),
        history=history_rows(data.verdicts.get(gate.id, [])),
        attempts=attempts,
        classes=sorted({a["klass"] for a in arms if a["klass"]}),
        params=params,
        load_chart=_load_chart(data, gate, arm_ids, role, params),
        ci=ci_label(
            float(gate.evidence.get("confidence") or data.summary.spec.campaign.confidence),
            bool(gate.evidence.get("sequential")),
        ),
        reruns=_reruns(data, gate.id),
        rejudged=rejudged(gate),
    )


def history_rows(verdicts: list[Any]) -> list[dict[str, Any]]:
    """Each look at the gate, oldest first: when, what it said, how many blocks it read,
    whether by a fixed-design CI, a CI over an adaptive item's planned looks, or a
    confidence sequence (blocks added after a look), and
    which question it answered (numbered; a rerun with other settings starts the next)."""
    out: list[dict[str, Any]] = []
    questions: dict[str, int] = {}
    for row in verdicts:
        try:
            look = json.loads(row.evidence_json or "{}").get("look") or {}
        except ValueError:
            look = {}
        question = str(look.get("question", ""))
        if question and question not in questions:
            questions[question] = len(questions) + 1
        try:
            rejudged = json.loads(row.evidence_json or "{}").get("rejudged")
        except ValueError:
            rejudged = None
        out.append(
            {
                "computed_at": row.computed_at,
                "verdict": row.verdict,
                "reason": row.reason,
                "blocks": look.get("blocks", ""),
                "test": _test_of(look) + ("; re-judged from the stored runs" if rejudged else ""),
                "question": questions.get(question, ""),
                "complete": look.get("complete", True),
            }
        )
    return out


def _test_of(look: dict[str, Any]) -> str:
    """How a look was judged: a confidence sequence, a CI at alpha / the planned looks, or a CI."""
    if not look:
        return ""
    if look.get("sequential"):
        return "CS"
    looks = int(look.get("planned_looks", 1) or 1)
    return f"CI, 1 of {looks} planned looks" if looks > 1 else "CI"


def _reruns(data: ReportData, gate_id: str) -> int:
    """Reruns of the items that feed the gate: how many tries the verdict took."""
    spec = data.summary.spec
    feeding = {q.key for q in spec.feeding(gate_id)}
    numbers: dict[tuple[str, str, int], int] = {}
    for a in data.attempts_of([arm for q in spec.queue if q.key in feeding for arm in q.arms]):
        if a.item_key in feeding:
            key = (a.item_key, a.arm_id, getattr(a, "repeat", 0))
            numbers[key] = max(numbers.get(key, 0), a.number)
    return max(numbers.values(), default=1) - 1


def _cell_row(c: dict[str, Any]) -> dict[str, Any]:
    """One cell the gate read, formatted for the table."""
    rate = c.get("error_rate")
    kinds = ", ".join(f"{k} {v}" for k, v in (c.get("errors_by_kind") or {}).items())
    errors = (
        "not recorded"
        if rate is None
        else f"{num(rate)} ({c.get('failed', 0)}/{c.get('requests', 0)})" + (f": {kinds}" if kinds else "")
    )
    cov = c.get("coverage")
    return {
        "check": c.get("check", ""),
        "arm": c.get("arm", ""),
        "role": c.get("role", ""),
        "metric": c.get("metric", ""),
        "samples": c.get("samples", ""),
        "basis": c.get("basis", ""),
        "cell": f"{c.get('probe', '')}/{c.get('scenario', '')}@{context_label(int(c.get('context') or 0))}",
        "context": c.get("context", 0),
        "mode": c.get("mode", ""),
        "n": c.get("n"),
        "median": c.get("median"),
        "low": c.get("low"),
        "high": c.get("high"),
        "coverage": "" if cov is None else f"{cov:.0%}",
        "errors": errors,
        "verdict": c.get("verdict", ""),
        "unit": c.get("unit", ""),
        "size": c.get("size") or c.get("n"),
        "runs": c.get("runs", c.get("n")),
        "fed_by": _fed_by(c),
        "faults": "; ".join(c.get("faults") or []),
    }


def _fed_by(c: dict[str, Any]) -> str:
    """'item decode-4k, blocks b0 b1 b2, attempts 3 5 7': where a cell's runs came from."""
    items = ", ".join(c.get("items") or [])
    blocks = " ".join(str(b).split("/")[1] if "/" in str(b) else str(b) for b in (c.get("blocks") or []))
    attempts = " ".join(str(a) for a in (c.get("attempts") or []))
    parts = [
        f"item {items}" if items else "",
        f"blocks {blocks}" if blocks else "",
        f"attempts {attempts}" if attempts else "",
    ]
    return ", ".join(p for p in parts if p)


def _comparison_row(c: dict[str, Any]) -> dict[str, Any]:
    pct = lambda v: f"{v * 100:+.0f}%"  # noqa: E731
    return {
        "check": c.get("check", ""),
        "subject": c.get("subject", ""),
        "baseline": c.get("baseline", ""),
        "cell": c.get("cell", ""),
        "change": f"{pct(c['change'])} [{pct(c['change_low'])}, {pct(c['change_high'])}]" if "change" in c else "",
        "method": c.get("method", ""),
        "coverage": f"{c['coverage']:.0%}" if c.get("coverage") is not None else "",
        "p": f"{c['p_pass']:.3f} / {c['p_fail']:.3f}" if c.get("statistical") and "p_pass" in c else "by rule",
        "verdict": c.get("verdict", ""),
        "notes": "; ".join(c.get("notes") or []),
    }


def paired_blocks(gate: GateView) -> list[dict[str, Any]]:
    """Each paired comparison block by block: both arms' run values and their ratio, beside
    the paired change that decided it. Why: each arm's interval spans the spread between
    its server starts, so two arms' intervals can overlap while the paired change, from
    which that spread cancels, is decisive; the page shows the view that decided."""
    cells = gate.read("cells")
    out = []
    for c in gate.read("comparisons"):
        if not c.get("pairs") or "change" not in c:
            continue
        where = (c.get("context"), c.get("scenario"), c.get("settings"))
        mine = {
            arm: next(
                (
                    x
                    for x in cells
                    if x.get("arm") == arm and (x.get("context"), x.get("scenario"), x.get("settings")) == where
                ),
                None,
            )
            for arm in (c["subject"], c["baseline"])
        }
        s, b = mine[c["subject"]], mine[c["baseline"]]
        if s is None or b is None:
            continue
        base = dict(zip(b.get("blocks") or [], b.get("run_values") or []))
        rows = [
            {"block": block, "subject": v, "baseline": base[block], "ratio": v / base[block] - 1}
            for block, v in zip(s.get("blocks") or [], s.get("run_values") or [])
            if block in base and base[block]
        ]
        if rows:
            out.append(
                {
                    "check": c.get("check", ""),
                    "subject": c["subject"],
                    "baseline": c["baseline"],
                    "cell": c.get("cell", ""),
                    "decided": _comparison_row(c)["change"],
                    "pairs": c["pairs"],
                    "rows": rows,
                }
            )
    return out


def _read_chart(
    data: ReportData, gate: GateView, cells: list[dict[str, Any]], role: dict[str, str], metric: str | None
) -> Markup:
    """The medians the gate read, one bar per arm and cell, each with its interval as a
    whisker (the exact interval of the median stated in the evidence)."""
    wanted = metric if metric and any(c["metric"] == metric for c in cells) else cells[0]["metric"]
    chosen = [
        c for c in cells if c["metric"] == wanted and c["median"] is not None and math.isfinite(float(c["median"]))
    ]
    if not chosen:
        return charts.empty(f"{wanted} as the gate read it", "no cells")
    several = len({c["cell"] for c in chosen}) > 1
    labels, values, intervals = [], [], []
    for c in chosen:
        runs = int(c.get("runs") or 0)
        who = (
            f"{c['arm']} ({c['role'] or role.get(c['arm'], '')}){' sim' if data.is_simulated(c['arm']) else ''}"
            f" · {runs} run{'s' if runs != 1 else ''}"
        )
        labels.append(f"{who} · {c['cell']}" if several else who)
        values.append(float(c["median"]))
        bounded = (
            c["low"] is not None
            and (c.get("runs") or 0) > 1
            and math.isfinite(float(c["low"]))
            and math.isfinite(float(c["high"]))
        )
        intervals.append((float(c["low"]), float(c["high"])) if bounded else None)
    unit = chosen[0]["unit"] or _unit(data, wanted)
    title = f"{wanted} as the gate read it (value over server runs, whiskers: {gate.evidence.get('confidence', 0.95):.0%} CI)"
    colors = [data.arm_color(c["arm"]) for c in chosen]
    series = [charts.Series("canonical", values, mode="canonical", color=0, intervals=intervals, colors=colors)]
    return charts.bar_chart(
        f"gate-{data.gate_pages[gate.id]}",
        title,
        labels,
        series,
        x_title="arm · cell" if several else "arm",
        y_title=f"{wanted} ({unit})" if unit else wanted,
        legend=False,
    )


def _side_by_side(stats: pd.DataFrame, arm_ids: list[str], metric: str | None) -> list[dict[str, Any]]:
    """Rows (mode, probe, scenario, context, metric) x one median per arm; canonical first,
    the gate's own metric first within a mode."""
    if stats.empty:
        return []
    rows = stats[stats["arm_id"].isin(arm_ids)]
    if rows.empty:
        return []
    cells: dict[tuple, dict[str, Any]] = {}
    for r in rows.itertuples(index=False):
        key = (r.mode, r.probe, r.scenario, r.context, r.metric, r.unit)
        entry = cells.setdefault(key, {"values": {}, "simulated": False})
        # several sources for one cell: keep the one with most rows
        prev = entry["values"].get(r.arm_id)
        if prev is None or r.count > prev[1]:
            entry["values"][r.arm_id] = (float(r.median), int(r.count))
        entry["simulated"] |= bool(r.simulated)
    modes = canonical_first(sorted({k[0] for k in cells}))
    ordered = sorted(cells, key=lambda k: (modes.index(k[0]), k[4] != metric, k[1], k[2], k[3], k[4]))
    return [
        {
            "mode": k[0],
            "probe": k[1],
            "scenario": k[2],
            "context": k[3],
            "metric": k[4],
            "unit": k[5],
            "decides": k[4] == metric,
            "simulated": cells[k]["simulated"],
            "values": [cells[k]["values"].get(a) for a in arm_ids],
        }
        for k in ordered
    ]


def _recipes(data: ReportData, arm_ids: list[str]) -> list[dict[str, Any]]:
    fields = ["model", "quant", "bits_per_weight", "runtime", "context", "klass", "group"]
    recipes = {a: json.loads(data.arm_by_id[a].recipe_json or "{}") for a in arm_ids if a in data.arm_by_id}
    keys = sorted({k for r in recipes.values() for k in r})
    out = []
    for f in fields:
        values = [str(getattr(data.arm_by_id[a], f)) if a in data.arm_by_id else "" for a in arm_ids]
        out.append({"name": "class" if f == "klass" else f, "values": values, "differs": len(set(values)) > 1})
    for k in keys:
        values = [
            size(v) if k in SIZE_FIELDS and isinstance(v, int) else _recipe_value(v)
            for v in (recipes.get(a, {}).get(k) for a in arm_ids)
        ]
        out.append({"name": f"recipe.{k}", "values": values, "differs": len(set(values)) > 1})
    return out


def _recipe_value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "—"
    return str(value)


def _chart(
    data: ReportData, gate: GateView, arm_ids: list[str], role: dict[str, str], params: dict[str, Any]
) -> Markup:
    metric = params.get("metric")
    title = f"{metric} per arm" if metric else "gate metric"
    if not metric:
        return charts.empty(title, f"predicate {gate.predicate} names no single metric to chart")
    med = data.values
    if med.empty:
        return charts.empty(title, "no measurements yet")
    rows = med[(med["metric"] == metric) & med["arm_id"].isin(arm_ids)]
    if params.get("probe"):
        rows = rows[rows["probe"] == params["probe"]]
    if params.get("context") is not None:
        rows = rows[rows["context"] == params["context"]]
    wanted = params.get("scenarios") or ([params["scenario"]] if params.get("scenario") else [])
    if wanted:
        rows = rows[rows["scenario"].isin(wanted)]
    if rows.empty:
        return charts.empty(title, f"no {metric} measured for {'/'.join(arm_ids)} yet")
    unit = _unit(data, metric)
    threshold = gate.evidence.get("threshold")
    if threshold is not None:
        title += f" (gate: {gate.evidence.get('op', '')} {threshold})"
    labels = {a: f"{a} ({role[a]}){' sim' if data.is_simulated(a) else ''}" for a in arm_ids}
    scenarios = sorted(set(rows["scenario"]))
    chart_id = f"gate-{data.gate_pages[gate.id]}"
    if len(scenarios) > 1:
        ordered = [s for s in wanted if s in scenarios] + [s for s in scenarios if s not in wanted]
        cell = rows.groupby(["scenario", "arm_id", "mode"])["value"].median()
        series = []
        for aid in arm_ids:
            for mode in canonical_first(sorted(set(rows[rows["arm_id"] == aid]["mode"]))):
                vals = [float(cell[(s, aid, mode)]) if (s, aid, mode) in cell.index else None for s in ordered]
                series.append(charts.Series(f"{labels[aid]} · {mode}", vals, mode=mode, color=data.arm_color(aid)))
        return charts.bar_chart(chart_id, title, ordered, series, x_title="scenario", y_title=f"{metric} ({unit})")
    cell = rows.groupby(["arm_id", "mode"])["value"].median()
    present = [a for a in arm_ids if a in set(rows["arm_id"])]
    series = []
    for mode in canonical_first(sorted(set(rows["mode"]))):
        vals = [float(cell[(a, mode)]) if (a, mode) in cell.index else None for a in present]
        series.append(charts.Series(mode, vals, mode=mode, color=0, colors=[data.arm_color(a) for a in present]))
    return charts.bar_chart(
        chart_id, title, [labels[a] for a in present], series, x_title="arm", y_title=f"{metric} ({unit})"
    )


def _unit(data: ReportData, metric: str) -> str:
    stats = data.stats
    if stats.empty:
        return ""
    units = stats.loc[stats["metric"] == metric, "unit"]
    return str(units.iloc[0]) if len(units) else ""


def _load_chart(
    data: ReportData, gate: GateView, arm_ids: list[str], role: dict[str, str], params: dict[str, Any]
) -> Markup | None:
    """A gate over the load probe shows its arms' curves side by side (`reports.load_curve`)."""
    if params.get("probe", "load" if gate.predicate.startswith("load_") else None) != load_curve.LOAD:
        return None
    labels = {a: f"{a} ({role[a]}){' sim' if data.is_simulated(a) else ''}" for a in arm_ids}
    return load_curve.gate_chart(
        load_curve.load_rows(data.frame), arm_ids, params, f"gate-{data.gate_pages[gate.id]}-load", labels
    )


def rejudged(gate: GateView) -> dict[str, Any] | None:
    """What a re-judgement (`campaign rejudge`) changed: when, under which definitions,
    and the verdict before it; None when the verdict shown was not a re-judgement."""
    found = gate.evidence.get("rejudged")
    return found if isinstance(found, dict) else None
