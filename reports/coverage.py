"""The coverage matrix: which configuration was measured for what, and in which mode.

Each cell has one of four states, the words the seed dashboard uses:
`canonical` (measured with vendor sampling: counts for a verdict), `greedy` (greedy only:
diagnostic), `planned` (a pending or running queue item will measure it) and `none`
(not run). Rows are arms, labelled by model/quant and runtime; columns are the
cache-probe scenarios, speculation, the other probes of the campaign, and each context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from arms.probes import registry as probe_registry
from campaign.core import metrics
from campaign.core.metrics import CACHE_SCENARIOS
from campaign.core.states import ItemState, Mode, ProbeName
from campaign.core.units import context_label, num, ratio
from reports import load_curve
from reports.data import ReportData

SCENARIOS = list(CACHE_SCENARIOS)
STATE_TEXT = {
    "canonical": "canonical",
    "greedy": "greedy only",
    "planned": "planned",
    "failed": "failed",
    "none": "—",
    "off": "off",
}


@dataclass
class Cell:
    state: str
    text: str
    title: str = ""


@dataclass
class Column:
    group: str
    label: str
    key: str


@dataclass
class CoverageRow:
    arm_id: str
    label: str
    runtime: str
    simulated: bool
    cells: list[Cell] = field(default_factory=list)


@dataclass
class Coverage:
    columns: list[Column]
    rows: list[CoverageRow]

    def groups(self) -> list[tuple[str, int]]:
        """(group, span) for the header row above the columns."""
        out: list[tuple[str, int]] = []
        for col in self.columns:
            if out and out[-1][0] == col.group:
                out[-1] = (col.group, out[-1][1] + 1)
            else:
                out.append((col.group, 1))
        return out


def _modes_index(frame: pd.DataFrame, keys: list[str]) -> dict[tuple, set[str]]:
    if frame.empty:
        return {}
    present = frame.groupby([*keys, "mode"], observed=True).size().index
    out: dict[tuple, set[str]] = {}
    for row in present:
        *key, mode = row
        out.setdefault(tuple(_py(k) for k in key), set()).add(str(mode))
    return out


def _py(value: object) -> int | str:
    """numpy integers to int (contexts), everything else to str (category values)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return str(value)


def _state(modes: set[str] | None, planned: bool, failed: bool = False) -> str:
    """A cell's state; `failed`: its item failed and nothing was measured for it (an arm
    whose every request failed must never read as measured, nor as merely not run)."""
    if modes and Mode.CANONICAL.value in modes:
        return "canonical"
    if modes and Mode.GREEDY.value in modes:
        return "greedy"
    if failed:
        return "failed"
    return "planned" if planned else "none"


Failed = tuple[set[tuple[str, str]], set[tuple[str, int]], dict[str, str]]


def _planned(
    data: ReportData, failed: Failed | None = None
) -> tuple[set[tuple[str, str]], set[tuple[str, int]], dict[str, str]]:
    """(arm, probe) and (arm, context) pairs that an unfinished queue item will measure,
    and, per arm, why a blocked item did not measure it; `failed` is filled with the
    same pairs of failed items, and why."""
    failed_probe, failed_context, failed_why = failed if failed is not None else (set(), set(), {})
    spec = data.summary.spec
    by_probe: set[tuple[str, str]] = set()
    by_context: set[tuple[str, int]] = set()
    blocked: dict[str, str] = {}
    for item in data.summary.items:
        try:
            entry = spec.item(item.key)
        except StopIteration:
            continue
        if item.state == ItemState.BLOCKED:
            for arm_id in item.arms:
                blocked.setdefault(arm_id, item.reason or "blocked")
        if item.state == ItemState.FAILED:
            for arm_id in item.arms:
                arm = data.arm_by_id.get(arm_id)
                failed_probe.update((arm_id, str(p)) for p in entry.probes)
                failed_context.update((arm_id, c) for c in entry.contexts or ([arm.context] if arm else []))
                failed_why.setdefault(arm_id, item.reason or "failed")
        if item.state not in (ItemState.PENDING, ItemState.RUNNING):
            continue
        for arm_id in item.arms:
            arm = data.arm_by_id.get(arm_id)
            for probe in item.probes:
                by_probe.add((arm_id, str(probe)))
            for ctx in entry.contexts or ([arm.context] if arm else []):
                by_context.add((arm_id, ctx))
    return by_probe, by_context, blocked


def build(data: ReportData) -> Coverage:
    frame = data.frame
    spec = data.summary.spec
    failed: Failed = (set(), set(), {})
    by_probe_planned, by_context_planned, blocked = _planned(data, failed)
    failed_probe, failed_context, failed_why = failed
    scen_modes = _modes_index(frame, ["arm_id", "probe", "scenario"])
    probe_modes = _modes_index(frame, ["arm_id", "probe"])
    ctx_modes = _modes_index(frame, ["arm_id", "context"])
    arm_modes = _modes_index(frame, ["arm_id"])
    probes_at: dict[tuple[str, int], set[str]] = {}
    for aid, ctx, probe in _modes_index(frame, ["arm_id", "context", "probe"]):
        probes_at.setdefault((aid, ctx), set()).add(probe)
    values = data.values

    cache = ProbeName.CACHE_PROBE.value
    found = sorted({k[2] for k in scen_modes if k[1] == cache and k[2]} - set(SCENARIOS))
    scenarios = SCENARIOS + found
    queued = {str(p) for item in spec.queue for p in item.probes}
    measured = {k[1] for k in probe_modes}
    others = [p for p in probe_registry.names() if p != cache and (p in queued or p in measured)]
    contexts = sorted({k[1] for k in ctx_modes} | {c for _, c in by_context_planned} | {c for _, c in failed_context})

    columns = [Column("cache-probe", s, f"scenario:{s}") for s in scenarios]
    columns.append(Column("speculation", "MTP / draft", "spec"))
    columns += [Column("probes", p, f"probe:{p}") for p in others]
    columns += [Column("context", context_label(c), f"context:{c}") for c in contexts]

    reuse = _lookup(values, metrics.REUSE.name)
    curves = load_curve.coverage_text(load_curve.load_rows(frame))  # which arms have a load curve
    headlines = {p: h for p in others if (h := probe_registry.get(p).headline) is not None}
    headline = {p: _lookup(values, h.metric) for p, h in headlines.items()}
    accept = _acceptance(frame)

    rows: list[CoverageRow] = []
    for arm in data.arms:
        aid = arm.arm_id
        row = CoverageRow(aid, f"{arm.model}/{arm.quant}", arm.runtime, data.is_simulated(aid))
        why = blocked.get(aid, "")
        failure = failed_why.get(aid, "")
        for s in scenarios:
            state = _state(
                scen_modes.get((aid, cache, s)), (aid, cache) in by_probe_planned, (aid, cache) in failed_probe
            )
            value = reuse.get((aid, cache, s))
            text = _text(state, ratio(value) if value is not None and state in ("canonical", "greedy") else "")
            row.cells.append(Cell(state, text, _title(state, f"{s} reuse", why, failure)))
        spec_state = _state(arm_modes.get((aid,)), any(k[0] == aid for k in by_probe_planned))
        row.cells.append(_speculation_cell(arm.recipe_json, spec_state, accept.get(aid), why))
        for p in others:
            state = _state(probe_modes.get((aid, p)), (aid, p) in by_probe_planned, (aid, p) in failed_probe)
            details = []
            if state in ("canonical", "greedy"):
                vals = [v for (a, pr, _s), v in headline.get(p, {}).items() if a == aid and pr == p]
                if vals:
                    details.append(f"{num(max(vals))} {headlines[p].label}")
                if p == load_curve.LOAD and aid in curves:
                    details.append(curves[aid])
            row.cells.append(Cell(state, _text(state, " · ".join(details)), _title(state, p, why, failure)))
        for c in contexts:
            state = _state(ctx_modes.get((aid, c)), (aid, c) in by_context_planned, (aid, c) in failed_context)
            probes = sorted(probes_at.get((aid, c), set())) if state in ("canonical", "greedy") else []
            text = _text(state, ", ".join(probes))
            row.cells.append(Cell(state, text, _title(state, f"context {context_label(c)}", why, failure)))
        rows.append(row)
    return Coverage(columns, rows)


def _speculation_cell(recipe_json: str, state: str, accept: float | None, why: str) -> Cell:
    """The recipe's speculation (its draft, or the model's own heads) and the acceptance
    measured; off when the recipe does not speculate."""
    recipe = json.loads(recipe_json or "{}")
    if not recipe.get("speculative"):
        return Cell("off", "off", "speculative decoding off in the recipe")
    text = (recipe.get("draft") or "native") + (f" · accept {num(accept)}" if accept is not None else "")
    text += "" if state == "canonical" else f" · {STATE_TEXT[state]}"
    return Cell(state, text, _title(state, "speculation", why))


def _text(state: str, detail: str = "") -> str:
    """A cell's words: what was measured, with the state only where the colour alone would
    not say it (greedy only, planned, failed). A canonical cell is green and says its value;
    that keeps the matrix of a campaign with a dozen columns inside 1400 px."""
    if state == "canonical":
        return detail or STATE_TEXT[state]
    return STATE_TEXT[state] + (f" · {detail}" if detail else "")


def _title(state: str, what: str, blocked_reason: str, failed_reason: str = "") -> str:
    if state == "failed":
        return f"{what}: failed ({failed_reason})" if failed_reason else f"{what}: failed"
    if state == "none" and blocked_reason:
        return f"{what}: not run (blocked: {blocked_reason})"
    return f"{what}: {STATE_TEXT[state]}"


def _lookup(values: pd.DataFrame, metric: str) -> dict[tuple[str, str, str], float]:
    """(arm, probe, scenario) -> the canonical value of `metric` (greedy if no canonical):
    the cell's value as the gates read it (`reports.data.cell_values`), at the context
    where it is highest when the arm ran several -- one cell's number, never a blend."""
    if values.empty:
        return {}
    rows = values[values["metric"] == metric]
    out: dict[tuple[str, str, str], float] = {}
    for mode in (Mode.GREEDY.value, Mode.CANONICAL.value):  # canonical overwrites greedy
        part = rows[rows["mode"] == mode].groupby(["arm_id", "probe", "scenario"])["value"].max()
        for key, value in part.items():
            out[key] = float(value)
    return out


def _acceptance(frame: pd.DataFrame) -> dict[str, float]:
    """Draft acceptance per arm: accepted / drafted tokens over its canonical counter deltas."""
    if frame.empty:
        return {}
    accepted, drafted = metrics.ACCEPTED_TOKENS.name, metrics.DRAFT_TOKENS.name
    rows = frame[frame["metric"].isin([accepted, drafted]) & (frame["mode"] == Mode.CANONICAL.value)]
    sums = rows.groupby(["arm_id", "metric"], observed=True)["value"].sum().unstack(fill_value=0.0)
    out: dict[str, float] = {}
    if {accepted, drafted} <= set(sums.columns):
        for arm_id, row in sums.iterrows():
            if row[drafted] > 0:
                out[str(arm_id)] = float(row[accepted] / row[drafted])
    return out
