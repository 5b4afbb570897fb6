"""The attempt loop and the device lanes: an item's arms, each on its device's lane, each retried while it fails.

Arms on different devices run side by side; the arms of one device run one after another
in the plan's order, each holding the device's concurrency limit while it runs. An arm on
another host is dispatched to that host's worker (`flows.placement`).

An arm that ends blocked ends its item's run: no lane starts another of its steps. Blocked
means a cause outside the recipe stops its server (a missing binary, model file or build
component, absent hardware, no worker on its host), which the next block would only find
again, at the cost of a start (or a worker's wait) per block and of blocks of the other
arms that no gate can pair; `campaign resume` re-checks it.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from prefect import tags

from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import AttemptState, ItemState
from campaign.store import queue
from campaign.store.store import Store
from flows import interrupt, placement, queue_runs
from flows.arm_flow import arm_flow
from flows.arm_states import outcome_of
from flows.artifacts import artifact_key
from flows.blocks import Step, block_plan
from flows.contracts import ArmOutcome, ArmRun, Block, Link
from flows.devices import ensure_limits
from flows.items import end_item, start_item, until_settled
from flows.overrides import with_overrides

T = TypeVar("T")


def device_limit_name(device: str) -> str:
    return artifact_key("device", device)


def ensure_device_limits(spec: CampaignSpec) -> list[str]:
    """One global concurrency limit of 1 per device, created before any arm asks for it."""
    names = sorted({device_limit_name(spec.device_of(arm.id)) for arm in spec.arms})
    ensure_limits(names)
    return names


def run_item(
    store: Store,
    spec: CampaignSpec,
    campaign_id: int,
    item: QueueItem,
    workdir: str,
    overrides: dict[str, Any] | None = None,
    fresh: bool = False,
    retries: int = 0,
    add_blocks: bool = False,
) -> ItemState:
    """Run every block of an item (`block_plan`: each block runs every arm once, in its
    own order), or, for an item with `max_blocks`, blocks until its gate is settled
    (`until_settled`); arms on different devices run side by side, each device's lane in
    the plan's order. `overrides` are merged over the item's (`with_overrides`).

    Without `fresh` (a run or a resume), an arm whose newest attempt for this item is done
    is not run again, so a resumed item repeats nothing that was committed; blocks a rerun
    added under the same settings and left unfinished are finished too. With `add_blocks`
    (a rerun with unchanged settings) the item's blocks come after every block its settings
    already ran: the same question, asked with more blocks (`gates.looks`).
    """
    start_item(store, campaign_id, item)
    queue_runs.sync(store, spec, campaign_id)  # the item's Prefect run shows it running
    runs = with_overrides(item, overrides)
    tries = max(retries, item.retries)

    def run(steps: list[Step]) -> list[ArmOutcome]:
        return in_lanes(
            spec,
            steps,
            lambda step: run_attempt(store, spec, campaign_id, runs, workdir, fresh, tries, step.arm_id, step.block),
            stop=ends_item,
        )

    budget = spec.blocks(item)
    ran = queue.next_block(store, campaign_id, item.key, dict(runs.overrides))
    plan = block_plan(spec, runs, range(ran, ran + budget.most) if add_blocks else range(max(budget.most, ran)))
    if budget.adaptive:
        outcomes, note = until_settled(run, plan, budget, store, spec, campaign_id, item)
    else:
        outcomes, note = run(plan), ""
    return end_item(store, campaign_id, item, outcomes, note)


def run_attempt(
    store: Store,
    spec: CampaignSpec,
    campaign_id: int,
    item: QueueItem,
    workdir: str,
    fresh: bool,
    retries: int,
    arm_id: str,
    block: Block,
    links: list[Link] | None = None,
) -> ArmOutcome:
    """One arm's attempt of `block` of `item` (the item as it runs, its overrides merged;
    with `links`: then the chained items' on its server), in-process or on its host's
    worker; retried while it fails. Without `fresh`, an arm whose newest attempt for this
    block is done is not run again."""
    if not fresh:
        done = queue.finished_attempt(store, campaign_id, item.key, arm_id, block.index)
        if done is not None:
            return ArmOutcome(arm_id, AttemptState.DONE, attempt_id=done.id, block=block.index, item_key=item.key)
    outcome = ArmOutcome(arm_id, AttemptState.INTERRUPTED, "not started", block=block.index, item_key=item.key)
    for _ in range(retries + 1):
        if interrupt.requested():  # stopped: the next arms of the lane do not start
            return outcome
        arm_run = ArmRun(
            spec=spec,
            item=item,
            arm_id=arm_id,
            store_url=store.public_url,
            campaign_id=campaign_id,
            workdir=workdir,
            block=block,
            device_limit=device_limit_name(spec.device_of(arm_id)),
            fresh=fresh,
            then=tuple(links or ()),
        )
        arm_tags = placement.arm_tags(spec, item.key, arm_id, spec.device_of(arm_id))
        host = spec.host_of(arm_id)
        if host:  # its host's worker runs it; the store says how it went
            outcome = placement.run_on_host(store, host, arm_run, arm_tags)
        else:
            with tags(*arm_tags):
                outcome = outcome_of(arm_flow(arm_run, return_state=True))
        if outcome.state != AttemptState.FAILED:
            break
    return outcome


def ends_item(outcome: ArmOutcome) -> bool:
    """Whether an arm's outcome ends its item's run: it is blocked (why: this module's
    docstring)."""
    return outcome.state == AttemptState.BLOCKED


def in_lanes(
    spec: CampaignSpec, steps: list[Step], run_one: Callable[[Step], T], stop: Callable[[T], bool] = lambda _: False
) -> list[T]:
    """Run `steps` in the plan's order on each device, the devices side by side; once a
    step's result meets `stop`, no lane starts another step (those running finish)."""
    lanes: dict[str, list[Step]] = {}
    for step in steps:
        lanes.setdefault(spec.device_of(step.arm_id), []).append(step)
    halted = threading.Event()

    def lane(its: list[Step]) -> list[T]:
        results = []
        for step in its:
            if halted.is_set():
                break
            results.append(run_one(step))
            if stop(results[-1]):
                halted.set()
        return results

    if len(lanes) == 1:
        return lane(next(iter(lanes.values())))
    with ThreadPoolExecutor(max_workers=len(lanes), thread_name_prefix="device") as pool:
        # each lane runs in a copy of this thread's context, which holds the campaign's
        # flow run: its arms stay subflows of the campaign run (in-process or dispatched)
        futures = [pool.submit(contextvars.copy_context().run, lane, its) for its in lanes.values()]
        return [o for f in futures for o in f.result()]
