"""A queue item's run from start to end: its state as the flows move it, and an adaptive item's stop.

An item is running while its arms run, and ends pending (interrupted), blocked, failed or
done from its arms' outcomes; an item that adds blocks until its gate is settled stops
here, after the block that settles it.
"""

from __future__ import annotations

from collections.abc import Callable

from campaign.core.schema import BlockBudget, CampaignSpec, QueueItem
from campaign.core.states import BUDGET_SPENT, SETTLED, AttemptState, ItemState
from campaign.store import queue
from campaign.store.store import Store
from flows import interrupt
from flows.blocks import Step
from flows.contracts import ArmOutcome
from flows.progress import emit
from flows.verdicts import settled


def start_item(store: Store, campaign_id: int, item: QueueItem) -> None:
    queue.move_item(store, campaign_id, item.key, ItemState.RUNNING)
    emit("item-start", item=item.key, title=item.title, arms=list(item.arms))


def until_settled(
    run: Callable[[list[Step]], list[ArmOutcome]],
    plan: list[Step],
    budget: BlockBudget,
    store: Store,
    spec: CampaignSpec,
    campaign_id: int,
    item: QueueItem,
) -> tuple[list[ArmOutcome], str]:
    """An adaptive item's blocks, one at a time (`run` runs a block's steps); from its
    least on, after each block the gate decides whether to go on (`settled`). Returns the
    outcomes and how it ended: settled after n blocks, or its budget spent."""
    outcomes: list[ArmOutcome] = []
    numbers = sorted({s.block.index for s in plan})
    for count, number in enumerate(numbers, start=1):
        got = run([s for s in plan if s.block.index == number])
        outcomes += got
        if interrupt.requested() or any(o.state != AttemptState.DONE for o in got):
            return outcomes, ""
        if count < budget.least:
            continue
        done, line = settled(store, spec, campaign_id, item, number)
        emit("block-check", item=item.key, gate=item.gate, blocks=count, most=len(numbers), settled=done, verdict=line)
        if done:
            return outcomes, f"{SETTLED} {count} of at most {len(numbers)} blocks ({item.gate} {line.split(':')[0]})"
    return outcomes, f"{BUDGET_SPENT}: {len(numbers)} blocks, {item.gate} still open"


def end_item(store: Store, campaign_id: int, item: QueueItem, outcomes: list[ArmOutcome], note: str) -> ItemState:
    """The item's state from its arms' outcomes: interrupted (raised, after recording it
    pending), blocked, failed, or done with `note`."""
    if interrupt.requested() or any(o.state == AttemptState.INTERRUPTED for o in outcomes):
        queue.move_item(store, campaign_id, item.key, ItemState.PENDING, "interrupted; `campaign resume` carries on")
        emit("item-done", item=item.key, state="interrupted", reason="interrupted by the user")
        stopped = [o for o in outcomes if o.state == AttemptState.INTERRUPTED and o.attempt_id]
        where = ", ".join(f"{item.key}/{o.arm_id} (attempt {o.attempt_id})" for o in stopped) or item.key
        raise interrupt.CampaignInterrupted(f"stopped {where}")
    blocked = [o for o in outcomes if o.state == AttemptState.BLOCKED]
    failed = [o for o in outcomes if o.state == AttemptState.FAILED]
    if blocked:
        state, reason = ItemState.BLOCKED, f"{blocked[0].arm_id}: {blocked[0].message}"
    elif failed:
        state, reason = ItemState.FAILED, f"{failed[0].arm_id}: {failed[0].message}"
    else:
        state, reason = ItemState.DONE, note
    queue.move_item(store, campaign_id, item.key, state, reason)
    emit("item-done", item=item.key, state=str(state), reason=reason)
    return state
