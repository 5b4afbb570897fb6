"""The campaign flow: walk the queue in order, run each ready item's arms, compute verdicts.

State lives in the store; this flow only moves it. Re-running it on the same database is
`resume`: finished items are skipped, interrupted attempts are continued, and blocked
items are re-checked first when asked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow

from campaign import queue
from campaign.schema import CampaignSpec, QueueItem, load_campaign
from campaign.states import AttemptState, ItemState
from campaign.store import Store, VerdictRow
from flows.arm_flow import arm_flow
from flows.progress import emit
from gates.engine import evaluate


def compute_verdicts(store: Store, spec: CampaignSpec, campaign_id: int) -> list[VerdictRow]:
    """Evaluate every gate from the stored numbers; write a verdict row when it changed."""
    frame = store.measurements_frame(campaign_id)
    blocked = queue.blocked_arms(store, campaign_id)
    item_states = {row.key: row.state for row in store.items(campaign_id)}
    latest = store.latest_verdicts(campaign_id)
    out = []
    for gate in spec.gates:
        feeding = [q for q in spec.queue if q.gate == gate.id]
        if feeding and not any(item_states.get(q.key) in (ItemState.DONE, ItemState.BLOCKED) for q in feeding):
            continue  # nothing measured for it yet: stays pending
        result = evaluate(gate, frame, blocked)
        evidence = json.dumps(result.evidence, default=str, sort_keys=True)
        previous = latest.get(gate.id)
        if previous and previous.verdict == result.verdict and previous.reason == result.reason and previous.evidence_json == evidence:
            out.append(previous)
            continue
        row = store.add(
            VerdictRow(campaign_id=campaign_id, gate_id=gate.id, verdict=result.verdict, reason=result.reason, evidence_json=evidence)
        )
        emit("verdict", gate=gate.id, verdict=str(result.verdict), reason=result.reason)
        out.append(row)
    return out


def run_item(
    store: Store, spec: CampaignSpec, campaign_id: int, item: QueueItem, workdir: str, overrides: dict[str, Any] | None = None
) -> ItemState:
    store.set_item_state(campaign_id, item.key, ItemState.RUNNING)
    emit("item-start", item=item.key, title=item.title, arms=list(item.arms))
    merged = {**item.overrides, **(overrides or {})}
    outcomes = []
    for arm_id in item.arms:
        outcomes.append(
            arm_flow(
                campaign_name=spec.campaign.name,
                item_key=item.key,
                arm_id=arm_id,
                spec_json=spec.model_dump_json(by_alias=True),
                store_url=store.url,
                campaign_id=campaign_id,
                overrides=merged,
                workdir=workdir,
            )
        )
    blocked = [o for o in outcomes if o["state"] == AttemptState.BLOCKED]
    failed = [o for o in outcomes if o["state"] == AttemptState.FAILED]
    if blocked:
        state, reason = ItemState.BLOCKED, f"{blocked[0]['arm_id']}: {blocked[0]['message']}"
    elif failed:
        state, reason = ItemState.FAILED, f"{failed[0]['arm_id']}: {failed[0]['message']}"
    else:
        state, reason = ItemState.DONE, ""
    store.set_item_state(campaign_id, item.key, state, reason)
    emit("item-done", item=item.key, state=str(state), reason=reason)
    return state


@flow(name="campaign", flow_run_name="{campaign_path}", log_prints=False, persist_result=False)
def campaign_flow(campaign_path: str, store_url: str, workdir: str = ".campaign", recheck_blocked: bool = False) -> dict[str, Any]:
    spec = load_campaign(campaign_path)
    store = Store(store_url)
    row = queue.register(store, spec, campaign_path)
    campaign_id = row.id
    assert campaign_id is not None
    for note in queue.recover(store, campaign_id):
        store.log_event(campaign_id, "recover", note)
    if recheck_blocked:
        for item_row in store.items(campaign_id):
            if item_row.state == ItemState.BLOCKED:
                store.set_item_state(campaign_id, item_row.key, ItemState.PENDING, "re-checking a blocked item")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    emit("campaign-start", name=spec.campaign.name, items=len(spec.queue))
    while True:
        item = queue.next_item(store, spec, campaign_id)
        if item is None:
            break
        run_item(store, spec, campaign_id, item, workdir)
        compute_verdicts(store, spec, campaign_id)
    for key, reason in queue.waiting_reasons(store, spec, campaign_id).items():
        store.set_item_state(campaign_id, key, ItemState.PENDING, reason)
    verdicts = compute_verdicts(store, spec, campaign_id)
    emit("campaign-done", name=spec.campaign.name)
    return {
        "campaign": spec.campaign.name,
        "items": {r.key: str(r.state) for r in store.items(campaign_id)},
        "verdicts": {v.gate_id: str(v.verdict) for v in verdicts},
    }
