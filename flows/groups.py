"""Server groups: consecutive queue items that run on one server start per arm and block.

Keeping a server for the next items saves its start, but is sound only where no verdict
can tell; the rules of who may join a group, and why one may not, live here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from arms.probes import registry as probes
from arms.runtimes import catalog as runtime_adapters
from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import TERMINAL_ITEM_STATES, AttemptState
from campaign.store import queue
from campaign.store.store import Store
from flows import interrupt, queue_runs
from flows.arm_flow import SERVER_NOT_KEPT
from flows.blocks import Step, block_plan
from flows.contracts import NOT_RUN_ON_KEPT, ArmOutcome, Link
from flows.items import end_item, start_item
from flows.lanes import ends_item, in_lanes, run_attempt, run_item
from flows.launch import launch_differences


def server_group(store: Store, spec: CampaignSpec, campaign_id: int, first: QueueItem) -> list[QueueItem]:
    """`first`, then the queue items right after it (finished ones skipped) that can run
    on its arms' servers: one server start per arm and block serves them all.

    Sound only where nothing a verdict reads can tell: the same arms launched alike
    (every launch setting, `flows.launch.launch_settings`: the recipe, the tool flags,
    the simulator's `sim.*` overrides), the same fixed number of blocks, every arm local,
    no retries, ready now (so none depends on another of the group), and no two feeding
    one gate (a gate's runs must be separate server runs, and with a kept server two
    items' block k would be one). Each arm of a block serves every item in the same
    state (the items before, on the same server), so the items' comparisons stay fair. A
    probe that needs a cold cache runs on a kept server only where the runtime can empty
    it (`RuntimeAdapter.cache_flush`). `campaign.keep_servers = false` turns it off. The
    first ready item on the same arms that cannot join is told why, in an event
    (`SERVER_NOT_KEPT`): it gets servers of its own."""
    states = {row.key: row.state for row in store.items(campaign_id)}
    keys = [q.key for q in spec.queue]
    after = [q for q in spec.queue[keys.index(first.key) + 1 :] if states.get(q.key) not in TERMINAL_ITEM_STATES]
    grouped = _group(spec, first, after, lambda q: queue.readiness(spec, states, q).ready)
    if grouped.apart is not None:
        store.log_event(
            campaign_id, SERVER_NOT_KEPT, f"not on {first.key}'s kept servers: {grouped.why}", grouped.apart.key
        )
    return list(grouped.items)


def planned_groups(spec: CampaignSpec) -> list[list[QueueItem]]:
    """The `server_group`s a first run of `spec` forms, in queue order, for `campaign
    check`'s plan (each item's dependencies taken as done once the queue has passed
    them, as the run does)."""
    groups: list[list[QueueItem]] = []
    passed: set[str] = set()
    left = list(spec.queue)
    while left:

        def ready(q: QueueItem, passed: set[str] = passed) -> bool:
            return set(q.depends_on) <= passed

        group = list(_group(spec, left[0], left[1:], ready).items)
        groups.append(group)
        passed |= {q.key for q in group}
        left = [q for q in left if q.key not in passed]
    return groups


@dataclass(frozen=True)
class _Grouped:
    """A server group, and the first ready item on its arms left out of it, with why."""

    items: tuple[QueueItem, ...]
    apart: QueueItem | None = None
    why: str = ""


def _group(
    spec: CampaignSpec, first: QueueItem, after: list[QueueItem], ready: Callable[[QueueItem], bool]
) -> _Grouped:
    group = [first]
    if not spec.campaign.keep_servers or not _may_lead(spec, first):
        return _Grouped((first,))
    for nxt in after:
        if not ready(nxt):
            break
        why = _apart(spec, group, nxt)
        if why:
            same_arms = set(nxt.arms) == set(first.arms)
            return _Grouped(tuple(group), nxt if same_arms else None, why if same_arms else "")
        group.append(nxt)
    return _Grouped(tuple(group))


def _may_lead(spec: CampaignSpec, item: QueueItem) -> bool:
    return not _not_kept(spec, item)


def _not_kept(spec: CampaignSpec, item: QueueItem) -> str:
    """Why `item` never runs on a kept server ('' when it may): what it does between
    blocks or where its arms run would differ from the group's."""
    if spec.blocks(item).adaptive:
        return "it adds blocks until its gate is settled"
    if item.retries:
        return f"it retries ({item.retries})"
    remote = [a for a in item.arms if spec.host_of(a)]
    return f"{', '.join(remote)} run{'s' if len(remote) == 1 else ''} on another host" if remote else ""


def _apart(spec: CampaignSpec, group: list[QueueItem], item: QueueItem) -> str:
    """Why `item` cannot run on the servers of `group` ('' when it can), with the values
    that differ."""
    first = group[0]
    if _not_kept(spec, item):
        return _not_kept(spec, item)
    if set(item.arms) != set(first.arms):
        return f"other arms ({', '.join(first.arms)} vs {', '.join(item.arms)})"
    if spec.blocks(item).most != spec.blocks(first).most:
        return f"other blocks ({spec.blocks(first).most} vs {spec.blocks(item).most})"
    if item.gate and item.gate in {q.gate for q in group}:
        return f"it feeds {item.gate} too: one server run would count twice"
    differs = launch_differences(spec, first, item, list(first.arms))
    if differs:
        return "; ".join(differs)
    cold = [str(p) for p in item.probes if probes.get(p).cold_cache]
    runtimes = {spec.arm(a).runtime for a in item.arms}
    stuck = sorted(r for r in runtimes if not runtime_adapters.get(spec.runtime(r).adapter).cache_flush)
    if cold and stuck:
        return f"{', '.join(cold)} needs a cold cache, which {', '.join(stuck)} cannot empty"
    return ""


def run_group(store: Store, spec: CampaignSpec, campaign_id: int, group: list[QueueItem], workdir: str) -> None:
    """Run a `server_group`: block by block, each arm in the first item's order for that
    block, its server started once for the first item's attempt and kept for the
    others' (`ArmRun.then`, each an attempt of its own with its own block fields,
    its place in the block the one it really ran at, and the start it ran on). A chained
    attempt the arm flow did not run (its server's first attempt did not end done, or
    its launch settings differ) runs on a server of its own."""
    if len(group) == 1:
        run_item(store, spec, campaign_id, group[0], workdir)
        return
    for item in group:
        start_item(store, campaign_id, item)
    queue_runs.sync(store, spec, campaign_id)  # the items' Prefect runs show them running
    plans = {q.key: {(s.block.index, s.arm_id): s.block for s in block_plan(spec, q)} for q in group}
    outcomes: dict[str, list[ArmOutcome]] = {q.key: [] for q in group}

    def one(step: Step) -> list[ArmOutcome]:
        number, arm_id = step.block.index, step.arm_id
        chain = [(q, plans[q.key][(number, arm_id)].model_copy(update={"order": step.block.order})) for q in group]
        left = []
        for q, b in chain:
            if queue.finished_attempt(store, campaign_id, q.key, arm_id, number) is None:
                left.append((q, b))
            else:
                outcomes[q.key].append(ArmOutcome(arm_id, AttemptState.DONE, block=number, item_key=q.key))
        if not left:
            return []
        (lead, lead_block), rest = left[0], left[1:]
        links = [Link(item=q, block=b) for q, b in rest]
        got = run_attempt(store, spec, campaign_id, lead, workdir, False, 0, arm_id, lead_block, links)
        outcomes[lead.key].append(got)
        ran = [got]
        for chained in got.then:
            key = chained.item_key
            if chained.state == NOT_RUN_ON_KEPT:  # on a server of its own
                chained = run_attempt(
                    store, spec, campaign_id, spec.item(key), workdir, False, 0, arm_id, plans[key][(number, arm_id)]
                )
            outcomes[key].append(chained)
            ran.append(chained)
        return ran

    in_lanes(spec, block_plan(spec, group[0]), one, stop=lambda ran: any(map(ends_item, ran)))
    stopped: interrupt.CampaignInterrupted | None = None
    for item in group:
        try:
            end_item(store, campaign_id, item, outcomes[item.key], "")
        except interrupt.CampaignInterrupted as exc:
            stopped = stopped or exc
    if stopped is not None:
        raise stopped
