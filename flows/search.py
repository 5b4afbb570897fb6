"""A campaign's search, run inside its campaign flow: trials as queue items of one block,
then the winner's confirmation as an ordinary item with ordinary gates.

The loop (`flows.search_loop`) proposes and keeps the study; this module gives it a
`measure` that runs the trial arm's item here (its server start, its attempt, its Prefect
flow run tagged like any arm's, its rows in the store) and reads the objective from those
rows the way a gate reads a cell. When the loop stops, the arms to confirm are nominated
(`gates.search_pick`) and written to the study, and the campaign is expanded with the
confirmation item and its gates, which the queue then runs like any other.
"""

from __future__ import annotations

import math
from typing import Any

from campaign.core.schema import CampaignSpec
from campaign.core.search import MODEL, SearchPlan, SearchState, TrialArm, describe
from campaign.core.states import ItemState
from campaign.core.units import num
from campaign.store import queue
from campaign.store.store import Store
from campaign.store.study import (
    ABLATED,
    CONFIRMED,
    FINISHED,
    PICK,
    STOPPED,
    expanded,
    state_of,
    storage,
    study_name,
)
from flows.lanes import run_item
from flows.progress import emit
from flows.search_loop import BaseFailed, SearchLoop, TrialOutcome, maximizing, open_study
from gates.arm_cells import cell_stats
from gates.cells import Selector
from gates.search_pick import pick, search_gain


def run_search(
    store: Store, spec: CampaignSpec, campaign_id: int, workdir: str, simulated: frozenset[str]
) -> CampaignSpec:
    """Run the search phase to its stop rule (or return at once if it had ended), record
    the nomination, and return the campaign expanded with the confirmation."""
    plan = SearchPlan(spec)
    study = open_study(storage(store), study_name(spec.campaign.name), plan.search)
    if study.user_attrs.get(FINISHED):
        return expanded(store, spec)

    def measure(arm: TrialArm) -> TrialOutcome:
        current = state_of(study, plan)
        known = any(a.arm_id == arm.arm_id for a in current.arms)
        now = plan.expand(SearchState(arms=current.arms if known else (*current.arms, arm)))
        queue.register(store, now, store_source(store, spec), simulated)
        key = plan.item_key(arm.arm_id)
        row = next((r for r in store.items(campaign_id) if r.key == key), None)
        state = row.state if row is not None else None
        if state not in (ItemState.DONE, ItemState.FAILED, ItemState.BLOCKED):
            state = run_item(store, now, campaign_id, now.item(key), workdir)
            row = next(r for r in store.items(campaign_id) if r.key == key)
        if state != ItemState.DONE:
            return TrialOutcome(reason=f"{state}: {row.reason if row is not None else ''}".strip(": "))
        return read_outcome(store, campaign_id, plan, arm.arm_id)

    metric = plan.search.objectives[0].metric

    def progress(kind: str, fields: dict[str, Any]) -> None:
        arm = str(fields.get("arm"))
        if kind == "search-trial-start":
            line = f"trial {arm} ({describe(fields.get('params') or {})})"
        elif fields.get("failed"):
            line = f"{arm} failed: {fields['failed']}"
        else:
            values = fields.get("values") or []
            how = "proposed again: its run reused" if fields.get("reused") else "one run"
            line = f"{arm}: {metric} {num(values[0]) if values else '?'} ({how})"
        emit("search", line=line)

    loop = SearchLoop(plan, study, measure, progress)
    try:
        why = loop.run()
    except BaseFailed as exc:  # nothing can be compared with a base that gave no value
        study.set_user_attr(STOPPED, str(exc))
        study.set_user_attr(FINISHED, True)
        emit("search", line=f"stopped: {exc}")
        return expanded(store, spec)
    measured = loop.measured()
    chosen = pick(
        measured,
        maximizing(plan.search),
        plan.base.id,
        plan.search.confirm.top,
        plan.search.confirm.max_candidates,
        spec.campaign.confidence,
    )
    study.set_user_attr(STOPPED, why)
    study.set_user_attr(
        PICK,
        {
            "why": chosen.why,
            "sd": chosen.sd,
            "margin": chosen.margin,
            "starts": loop.starts(),
            "seconds": loop.seconds(),
            "search_gain": search_gain(measured, chosen.winner, plan.base.id) if chosen.winner else None,
        },
    )
    if chosen.winner is not None:
        study.set_user_attr(CONFIRMED, list(chosen.candidates))
        if plan.search.confirm.ablate:
            study.set_user_attr(ABLATED, ablated_fields(plan, state_of(study, plan), chosen.winner))
    study.set_user_attr(FINISHED, True)
    emit(
        "search",
        line=f"stopped ({why}); confirming {', '.join(chosen.candidates) or 'nothing'} on fresh blocks beside {plan.base.id}",
    )
    return expanded(store, spec)


def ablated_fields(plan: SearchPlan, state: Any, winner: str) -> list[str]:
    """The fields where the winner differs from the base, when it differs in two or more
    (with one, the confirmation against the base is the ablation already). A model is
    never ablated: a model is not a mechanism of a recipe."""
    arm = next((a for a in state.arms if a.arm_id == winner), None)
    if arm is None:
        return []
    base = plan.base_params()
    differ = [k for k, v in arm.params.items() if k != MODEL and str(v) != str(base.get(k))]
    return differ if len(differ) >= 2 else []


def store_source(store: Store, spec: CampaignSpec) -> str:
    row = store.campaign(spec.campaign.name)
    return row.source_path if row is not None else ""


def read_outcome(store: Store, campaign_id: int, plan: SearchPlan, arm_id: str) -> TrialOutcome:
    """An arm's search runs from the store: per block of its trial item, each objective's
    run value (over the cells it has, their geometric mean); each constraint's value as
    the geometric mean over its runs (an arithmetic mean where a value is 0)."""
    frame = store.measurements_frame(campaign_id)
    key = plan.item_key(arm_id)
    rows = frame[(frame["item_key"] == key) & (frame["mode"] == "canonical")] if not frame.empty else frame
    per_objective: list[dict[str, float]] = []
    for obj in plan.search.objectives:
        sel = Selector(metric=obj.metric, probe=obj.probe, scenario=obj.scenario, context=obj.context)
        runs = _block_values(rows, sel, arm_id)
        if not runs:
            return TrialOutcome(reason=f"no value of {obj.metric} ({obj.probe}) in {key}'s rows")
        per_objective.append(runs)
    blocks = sorted(set.intersection(*(set(r) for r in per_objective)))
    if not blocks:
        return TrialOutcome(reason=f"no block of {key} has a value of every objective")
    runs_out = tuple(tuple(r[b] for r in per_objective) for b in blocks)
    first = plan.search.objectives[0]
    constraints = []
    for c in plan.search.constraints:
        sel = Selector(metric=c.metric, probe=c.probe or first.probe, scenario=c.scenario or first.scenario)
        values = list(_block_values(rows, sel, arm_id).values())
        if not values:
            return TrialOutcome(reason=f"no value of {c.metric} for the constraint {c.text()} in {key}'s rows")
        constraints.append(_mean(values))
    return TrialOutcome(runs_out, tuple(constraints))


def _block_values(rows: Any, sel: Selector, arm_id: str) -> dict[str, float]:
    by_block: dict[str, list[float]] = {}
    for stat in cell_stats(rows, sel, arm_id).values():
        for run in stat.runs:
            if math.isfinite(run.value):
                by_block.setdefault(run.block, []).append(run.value)
    return {b: _mean(v) for b, v in by_block.items()}


def _mean(values: list[float]) -> float:
    if all(v > 0 for v in values):
        return math.exp(sum(math.log(v) for v in values) / len(values))
    return sum(values) / len(values)


def trial_label(plan: SearchPlan, arm: TrialArm) -> str:
    return f"{arm.arm_id} ({describe(arm.params)})"
