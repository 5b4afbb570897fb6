"""The queue as Prefect sees it: one flow run per queue item, created when the campaign
registers its queue, so an item is visible in the UI before it runs, and moved through
states as the item is: Pending (waiting its turn), Running, Completed, Failed, and a
state named "Blocked" (type Paused: it waits for someone) carrying the item's reason,
so the UI's run list can filter pending and blocked items by state.

Why a flow run per item rather than a deployment run: a deployment run is work a worker
picks up, and an item is not work anyone picks up -- its arms are (as flow runs of their
own, tagged `item:<key>`). The item run is a record of the item's state, created with
the tags the arms' runs carry, so filtering by `item:<key>` shows both. Nothing executes
it; its states are set by the campaign flow from the store, which stays the truth.

Found again by its tags (`queue-item`, `campaign:<name>`, `item:<key>`), never by an id
kept in the store, so a resume or a second run finds the runs the first made, and a
temporary server (gone with its run) simply has none. Observation only: a failure to
reach Prefect is logged and never stops the campaign.
"""

from __future__ import annotations

import logging
from typing import Any

from prefect import flow

from campaign.core.schema import CampaignSpec
from campaign.core.states import ItemState
from campaign.store.store import Store

log = logging.getLogger(__name__)

QUEUE_TAG = "queue-item"
BLOCKED = "Blocked"


@flow(name="queue-item", persist_result=False)
def queue_item() -> None:
    """Never run: the flow the item runs belong to (see the module doc)."""


def item_tags(spec: CampaignSpec, key: str) -> list[str]:
    return [QUEUE_TAG, f"campaign:{spec.campaign.name}", f"item:{key}"]


def state_for(state: str, reason: str) -> Any:
    """The Prefect state of a queue item in `state`, with its reason as the message."""
    from prefect.client.schemas.objects import StateType
    from prefect.states import Completed, Failed, Pending, Running, State

    message = reason or None
    if state == ItemState.BLOCKED:
        return State(type=StateType.PAUSED, name=BLOCKED, message=message)
    if state == ItemState.RUNNING:
        return Running(message=message)
    if state == ItemState.DONE:
        return Completed(message=message)
    if state == ItemState.FAILED:
        return Failed(message=message)
    return Pending(message=message)


def sync(store: Store, spec: CampaignSpec, campaign_id: int) -> int:
    """Create the missing item runs and set each one's state to its item's; returns how
    many states changed (0 when Prefect cannot be reached)."""
    try:
        return _sync(store, spec, campaign_id)
    except Exception as exc:  # observation only
        log.warning("could not show the queue as Prefect runs: %s", exc)
        return 0


def _sync(store: Store, spec: CampaignSpec, campaign_id: int) -> int:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    rows = {r.key: r for r in store.items(campaign_id)}
    changed = 0
    with get_client(sync_client=True) as client:
        found = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[QUEUE_TAG, f"campaign:{spec.campaign.name}"]))
        )
        by_item = {t.removeprefix("item:"): run for run in found for t in run.tags if t.startswith("item:")}
        for item in spec.queue:
            row = rows.get(item.key)
            if row is None:
                continue
            wanted = state_for(str(row.state), row.reason)
            run = by_item.get(item.key)
            if run is None:
                client.create_flow_run(
                    queue_item, name=f"item {item.key}", tags=item_tags(spec, item.key), state=wanted
                )
                changed += 1
                continue
            current = run.state
            if current is not None and current.name == wanted.name and (current.message or None) == wanted.message:
                continue
            client.set_flow_run_state(run.id, wanted, force=True)
            changed += 1
    return changed
