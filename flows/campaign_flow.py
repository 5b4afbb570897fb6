"""The campaign flow: walk the queue in order, run each ready item's arms, compute verdicts.

State lives in the store; this flow only moves it. Re-running it on the same database is
`resume`: finished items are skipped, interrupted attempts are continued, and blocked
items are re-checked first when asked.
"""

from __future__ import annotations

import contextvars
import json
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, tags
from pydantic import BaseModel, ConfigDict
from pydantic import Field as PydanticField

from arms.probes import registry as probes
from arms.runtimes import catalog as runtime_adapters
from campaign.core.schema import BlockBudget, CampaignFileError, CampaignSpec, GateEntry, OverrideKeys, QueueItem
from campaign.core.states import BUDGET_SPENT, SETTLED, TERMINAL_ITEM_STATES, AttemptState, ItemState, Verdict
from campaign.store import queue
from campaign.store.store import Store
from campaign.store.summary import PREFECT_API_EVENT
from campaign.store.tables import VerdictRow
from flows import interrupt, placement
from flows import overrides as override_keys
from flows.arm_flow import SERVER_NOT_KEPT, arm_flow, launch_differences, outcome_of
from flows.artifacts import artifact_key, publish
from flows.contracts import NOT_RUN_ON_KEPT, ArmOutcome, ArmRun, Link
from flows.devices import ensure_limits, release_lease
from flows.overrides import digest, probe_params
from flows.prefect_api import configured_api_url
from flows.progress import emit
from flows.resolve import load_campaign, simulated_adapters
from gates.compare import alpha_of
from gates.engine import canonical_only, evaluate, evaluate_family, gate_rows, read_items
from gates.family import planned_members
from gates.looks import Look, added_after_look, look_at, looks_for, sequence_reason

Entry = tuple[int, str, dict[str, Any]]  # (block, arm, what its attempt stores of the block): one step of `block_plan`


def compute_verdicts(store: Store, spec: CampaignSpec, campaign_id: int) -> list[VerdictRow]:
    """Evaluate every gate from the stored numbers, the comparative ones as one family
    (`gates.engine.evaluate_family`: Holm over the gates measured so far, so a verdict
    can still move to inconclusive as more gates join); write a verdict row when it
    changed, with the look it was (`gates.looks`: which question, how many blocks, which
    attempts) and the test its looks allow (`design_of`)."""
    frame = store.measurements_frame(campaign_id)
    blocked = queue.blocked_arms(store, campaign_id)
    items = {row.key: row for row in store.items(campaign_id)}
    latest = store.latest_verdicts(campaign_id)
    history = looks_of(store, campaign_id)
    frames: dict[str, Any] = {}
    current: dict[str, Look] = {}
    designs: dict[str, Design] = {}
    for gate in spec.gates:
        feeding = [q for q in spec.queue if q.gate == gate.id]
        if feeding and not any(
            items[q.key].state in (ItemState.DONE, ItemState.BLOCKED, ItemState.FAILED)
            for q in feeding
            if q.key in items
        ):
            continue  # nothing measured for it yet: stays pending
        rows = gate_rows(gate, frame, [q.key for q in feeding])
        frames[gate.id] = rows
        look, adaptive = _look(spec, gate, rows, feeding, items)
        current[gate.id] = look
        designs[gate.id] = design_of(spec, gate, look, adaptive, history.get(gate.id, []))
    sequential = sorted(g for g, d in designs.items() if d.sequential)
    looks = {g: d.looks for g, d in designs.items() if d.looks > 1}
    results = evaluate_family(spec.gates, frames, blocked, spec.campaign.confidence, sequential, looks)
    out = []
    for gate in spec.gates:
        if gate.id not in results:
            continue
        result = results[gate.id]
        spent = [
            items[q.key].reason
            for q in spec.queue
            if q.gate == gate.id and q.key in items and items[q.key].reason.startswith(BUDGET_SPENT)
        ]
        if spent and result.verdict == Verdict.INCONCLUSIVE:
            result = result.model_copy(update={"reason": f"inconclusive at budget ({spent[0]}): {result.reason}"})
        design = designs[gate.id]
        if design.why:
            result = result.model_copy(update={"reason": f"{result.reason}; {design.why}"})
        look_evidence = {**current[gate.id].evidence(), "sequential": design.sequential, "planned_looks": design.looks}
        evidence = json.dumps({**result.evidence, "look": look_evidence}, default=str, sort_keys=True)
        previous = latest.get(gate.id)
        if (
            previous
            and previous.verdict == result.verdict
            and previous.reason == result.reason
            and previous.evidence_json == evidence
        ):
            out.append(previous)
            continue
        row = store.add(
            VerdictRow(
                campaign_id=campaign_id,
                gate_id=gate.id,
                verdict=result.verdict,
                reason=result.reason,
                evidence_json=evidence,
            )
        )
        emit("verdict", gate=gate.id, verdict=str(result.verdict), reason=result.reason)
        out.append(row)
    return out


def looks_of(store: Store, campaign_id: int) -> dict[str, list[Look]]:
    """Each gate's earlier looks, oldest first, from its stored verdicts."""
    out: dict[str, list[Look]] = {}
    for row in store.verdicts(campaign_id):
        look = Look.from_evidence(json.loads(row.evidence_json or "{}"), str(row.verdict))
        if look is not None:
            out.setdefault(row.gate_id, []).append(look)
    return out


@dataclass(frozen=True)
class Design:
    """How a gate's blocks are judged, given how they were looked at: a fixed-design
    test, Bonferroni over an adaptive item's planned `looks`, or a confidence sequence;
    `why` is said in the reason when it is not the fixed design."""

    sequential: bool = False
    looks: int = 1
    why: str = ""


def design_of(
    spec: CampaignSpec, gate: GateEntry, look: Look, adaptive: Sequence[QueueItem], earlier: Sequence[Look]
) -> Design:
    """The test `gate` reads now (`gates.looks`): a confidence sequence when blocks were
    added after an earlier complete look at the same question; Bonferroni over the planned
    looks when its rows include adaptive items' (each a look after every block from its
    least to its most) and that is the sharper test at their budget, else the sequence;
    otherwise the fixed design."""
    before = added_after_look(look, earlier)
    if before is not None:
        return Design(sequential=True, why=sequence_reason(before, look))
    if not adaptive:
        return Design()
    members = max(1, len(planned_members(spec.gates)))
    alpha = alpha_of(float(gate.params.get("confidence", spec.campaign.confidence))) / members
    total = looks_for([(spec.blocks(q).least, spec.blocks(q).most) for q in adaptive], alpha)
    if total > 1:
        return Design(looks=total, why=f"{total} planned looks (a look after each block), each claim at alpha/{total}")
    return Design(sequential=True)


def _look(
    spec: CampaignSpec, gate: GateEntry, rows: Any, feeding: list[QueueItem], items: dict[str, Any]
) -> tuple[Look, list[QueueItem]]:
    """The look a verdict of `gate` from `rows` is, and the adaptive items whose rows it
    includes (their blocks were added after looks, whoever looked). Complete: every item
    the gate reads (its feeding items, or every item running its arms where it reads all)
    has finished."""
    arms = set(gate.arms_read())
    mine = canonical_only(rows)
    if not mine.empty:
        mine = mine[mine["arm_id"].isin(arms)]
    read = (
        [q.key for q in feeding]
        if read_items(gate, [q.key for q in feeding]) is not None
        else [q.key for q in spec.queue if arms & set(q.arms)]
    )
    complete = all(items[k].state in TERMINAL_ITEM_STATES for k in read if k in items)
    keys = set(mine["item_key"].astype(str)) if not mine.empty else set()
    adaptive = [q for q in spec.queue if q.key in keys and spec.blocks(q).adaptive]
    return look_at(gate.id, mine, complete), adaptive


def settled(store: Store, spec: CampaignSpec, campaign_id: int, item: QueueItem, last_block: int) -> tuple[bool, str]:
    """Whether the gate an adaptive item feeds is decided by its blocks 0..`last_block`
    (and whatever else the gate reads), and the verdict as one line.

    Decided means pass or fail, and, for a gate of the campaign's comparative family, with
    its deciding p-value within alpha / (the family's planned size): the least any Holm
    adjustment at the end can leave it, so no later gate can undo what stopped the item.
    Rows of this item's later blocks (an earlier, interrupted run may have left some) are
    cut, so a resumed run stops exactly where an uninterrupted one would."""
    gate = spec.gate(str(item.gate))
    feeding = [q for q in spec.queue if q.gate == gate.id]
    rows = gate_rows(gate, store.measurements_frame(campaign_id), [q.key for q in feeding])
    if not rows.empty:
        rows = rows[(rows["item_key"] != item.key) | (rows["repeat"] <= last_block)]
    look, adaptive = _look(spec, gate, rows, feeding, {})
    design = design_of(
        spec,
        gate,
        look,
        [*adaptive, *([item] if item not in adaptive else [])],
        looks_of(store, campaign_id).get(gate.id, []),
    )
    result = evaluate(
        gate, rows, queue.blocked_arms(store, campaign_id), spec.campaign.confidence, design.sequential, design.looks
    )
    line = f"{result.verdict}: {result.reason}" if result.reason else str(result.verdict)
    if result.verdict not in (Verdict.PASS, Verdict.FAIL):
        return False, line
    if "p_pass" not in result.evidence or gate.exploratory:
        return True, line
    if result.verdict == Verdict.FAIL and not result.evidence.get("statistical_fail", True):
        return True, line  # a rule made it (every request failed): no p-value to adjust
    members = max(1, len(planned_members(spec.gates)))
    p = float(result.evidence["p_pass" if result.verdict == Verdict.PASS else "p_fail"])
    level = alpha_of(float(gate.params.get("confidence", spec.campaign.confidence))) / members
    if p <= level:
        return True, line
    return (
        False,
        f"{line}; not yet within alpha/{members} = {level:.4f} (p {p:.4f}), which a family of {members} may need",
    )


def device_limit_name(device: str) -> str:
    return artifact_key("device", device)


def ensure_device_limits(spec: CampaignSpec) -> list[str]:
    """One global concurrency limit of 1 per device, created before any arm asks for it."""
    names = sorted({device_limit_name(spec.device_of(arm.id)) for arm in spec.arms})
    ensure_limits(names)
    return names


def block_order(seed: int, item_key: str, block: int, arms: Sequence[str]) -> list[str]:
    """The arms of block `block` of item `item_key`, in the order they run: a permutation
    drawn by `random.Random(f"{seed}/{item_key}/{block}").shuffle`, `seed` being
    `campaign.seed`.

    Why random and why seeded by a string: a fixed A B A B puts every arm in the same
    place of every block, so whatever drifts within a block (a warming machine, a
    filling disk) favours one arm every time; a fresh order per block spreads it over
    all. Python seeds `random` from a string through SHA-512, the same on every machine
    and in every process (no hash randomisation), so the order follows from the file
    alone and a resumed run draws the same one."""
    order = list(arms)
    random.Random(f"{seed}/{item_key}/{block}").shuffle(order)
    return order


def settings_hash(spec: CampaignSpec, item: QueueItem, overrides: dict[str, Any]) -> str:
    """A sha256 prefix (16 hex digits) of what an item runs every one of its arms with:
    the overrides that are not `recipe.*` keys (those are the servers', in
    `recipe_hash`), its probes, contexts and modes, and each probe's parameters as
    `flows.overrides.probe_params` resolves them per context of the item. A probe's
    context the item does not name is its arm's own (the server's context, in
    `recipe_hash`): it is resolved here as 0, so the hash is the same for every arm."""
    common = OverrideKeys.of(overrides).without_recipe()
    params: dict[str, Any] = {}
    for probe in item.probes:
        contexts = item.contexts if probes.get(probe).per_context and item.contexts else [0]
        resolved = []
        for context in contexts:
            try:
                resolved.append(probe_params(spec, item, probe, context, overrides, 0).model_dump(mode="json"))
            except ValueError as exc:  # checked before the run with real contexts; never stop it here
                resolved.append({"unresolved": str(exc)})
        params[str(probe)] = resolved
    return digest(
        {
            "overrides": common,
            "probes": [str(p) for p in item.probes],
            "contexts": list(item.contexts),
            "modes": [str(m) for m in item.modes],
            "params": params,
        }
    )


def recipe_hash(spec: CampaignSpec, item: QueueItem, arm_id: str) -> str:
    """A sha256 prefix (16 hex digits) of the server an arm runs for an item: its
    resolved recipe (`CampaignSpec.recipe_for`, the item's `recipe.*` overrides and a
    confirmatory change included), its model, quant and runtime, and the two other
    things its launch takes from the arm: its context size and its simulator table."""
    arm = spec.arm(arm_id)
    model = spec.model_for(arm)
    return digest(
        {
            "recipe": spec.recipe_for(arm_id, item).model_dump(mode="json"),
            "model": model.name,
            "quant": model.quant,
            "runtime": arm.runtime,
            "context": arm.context,
            "simulate": arm.simulate,
        }
    )


def block_plan(
    spec: CampaignSpec,
    item: QueueItem,
    overrides: dict[str, Any] | None = None,
    blocks: Sequence[int] | None = None,
) -> list[tuple[int, str, dict[str, Any]]]:
    """The item's schedule, block by block: (block, arm, what its attempt stores of the
    block) for every arm of its first block in its order (`block_order`), then the next,
    ...; `blocks` are the block numbers (0 .. the item's budget - 1 unless given: a rerun
    adds blocks after those run, `queue.next_block`).
    The block's number is the attempt's `repeat`; `block_id` is
    `{item}/b{block}/{settings_hash[:8]}`, the same for the arms of a block and new
    when the item runs under other settings (a rerun with `--set`), so a pairing by
    `block_id` never pairs runs of different settings."""
    merged = {**item.overrides, **(overrides or {})}
    resolved = item.model_copy(update={"overrides": merged})
    settings = settings_hash(spec, resolved, merged)
    recipes = {arm_id: recipe_hash(spec, resolved, arm_id) for arm_id in item.arms}
    plan = []
    for block in range(spec.blocks(item).most) if blocks is None else blocks:
        for place, arm_id in enumerate(block_order(spec.campaign.seed, item.key, block, item.arms)):
            plan.append(
                (
                    block,
                    arm_id,
                    {
                        "block_order": place,
                        "block_id": f"{item.key}/b{block}/{settings[:8]}",
                        "settings_hash": settings,
                        "recipe_hash": recipes[arm_id],
                    },
                )
            )
    return plan


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
    (`_until_settled`); arms on different devices run side by side, each device's lane in
    the plan's order.

    Without `fresh` (a run or a resume), an arm whose newest attempt for this item is done
    is not run again, so a resumed item repeats nothing that was committed; blocks a rerun
    added under the same settings and left unfinished are finished too. With `add_blocks`
    (a rerun with unchanged settings) the item's blocks come after every block its settings
    already ran: the same question, asked with more blocks (`gates.looks`).
    """
    _start_item(store, campaign_id, item)
    merged = {**item.overrides, **(overrides or {})}
    spec_json = spec.model_dump_json(by_alias=True)

    def one(repeat: int, arm_id: str, block: dict[str, Any]) -> ArmOutcome:
        return _run_attempt(
            store,
            spec,
            spec_json,
            campaign_id,
            item,
            merged,
            workdir,
            fresh,
            max(retries, item.retries),
            repeat,
            arm_id,
            block,
        )

    def run(entries: list[tuple[int, str, dict[str, Any]]]) -> list[dict[str, Any]]:
        return _in_lanes(spec, entries, lambda e: one(*e))

    budget = spec.blocks(item)
    ran = queue.next_block(store, campaign_id, item.key, merged)
    plan = block_plan(
        spec, item, overrides, range(ran, ran + budget.most) if add_blocks else range(max(budget.most, ran))
    )
    if budget.adaptive:
        outcomes, note = _until_settled(run, plan, budget, store, spec, campaign_id, item)
    else:
        outcomes, note = run(plan), ""
    return _end_item(store, campaign_id, item, outcomes, note)


def _run_attempt(
    store: Store,
    spec: CampaignSpec,
    spec_json: str,
    campaign_id: int,
    item: QueueItem,
    overrides: dict[str, Any],
    workdir: str,
    fresh: bool,
    retries: int,
    repeat: int,
    arm_id: str,
    block: dict[str, Any],
    links: list[Link] | None = None,
) -> ArmOutcome:
    """One arm's attempt of one block of `item` (with `links`: then the chained items' on
    its server), in-process or on its host's worker; retried while it fails. Without
    `fresh`, an arm whose newest attempt for this block is done is not run again."""
    if not fresh:
        done = queue.finished_attempt(store, campaign_id, item.key, arm_id, repeat)
        if done is not None:
            return ArmOutcome(arm_id, AttemptState.DONE, attempt_id=done.id, repeat=repeat, item_key=item.key)
    outcome = ArmOutcome(arm_id, AttemptState.INTERRUPTED, "not started", repeat=repeat, item_key=item.key)
    for _ in range(retries + 1):
        if interrupt.requested():  # stopped: the next arms of the lane do not start
            return outcome
        arm_run = ArmRun(
            campaign_name=spec.campaign.name,
            item_key=item.key,
            arm_id=arm_id,
            spec_json=spec_json,
            store_url=store.public_url,
            campaign_id=campaign_id,
            overrides=overrides,
            workdir=workdir,
            repeat=repeat,
            device_limit=device_limit_name(spec.device_of(arm_id)),
            fresh=fresh,
            block=block,
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


def _in_lanes(spec: CampaignSpec, entries: list[Any], run_one: Callable[[Any], Any]) -> list[Any]:
    """Run `entries` (each starting with its block and arm) in the plan's order on each
    device, the devices side by side."""
    lanes: dict[str, list[Any]] = {}
    for entry in entries:
        lanes.setdefault(spec.device_of(entry[1]), []).append(entry)
    if len(lanes) == 1:
        return [run_one(e) for e in next(iter(lanes.values()))]
    with ThreadPoolExecutor(max_workers=len(lanes), thread_name_prefix="device") as pool:
        # each lane runs in a copy of this thread's context, which holds the campaign's
        # flow run: its arms stay subflows of the campaign run (in-process or dispatched)
        futures = [
            pool.submit(contextvars.copy_context().run, lambda lane=lane: [run_one(e) for e in lane])
            for lane in lanes.values()
        ]
        return [o for f in futures for o in f.result()]


def server_group(store: Store, spec: CampaignSpec, campaign_id: int, first: QueueItem) -> list[QueueItem]:
    """`first`, then the queue items right after it (finished ones skipped) that can run
    on its arms' servers: one server start per arm and block serves them all.

    Sound only where nothing a verdict reads can tell: the same arms launched alike
    (every launch setting, `flows.arm_flow.launch_settings`: the recipe, the tool flags,
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
        group = list(_group(spec, left[0], left[1:], lambda q, passed=passed: set(q.depends_on) <= passed).items)
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
    spec_json = spec.model_dump_json(by_alias=True)
    for item in group:
        _start_item(store, campaign_id, item)
    plans = {q.key: {(b, a): block for b, a, block in block_plan(spec, q)} for q in group}
    outcomes: dict[str, list[ArmOutcome]] = {q.key: [] for q in group}

    def one(entry: tuple[int, str, dict[str, Any]]) -> None:
        repeat, arm_id, block = entry
        chain = [(q, {**plans[q.key][(repeat, arm_id)], "block_order": block["block_order"]}) for q in group]
        left = []
        for q, b in chain:
            if queue.finished_attempt(store, campaign_id, q.key, arm_id, repeat) is None:
                left.append((q, b))
            else:
                outcomes[q.key].append(ArmOutcome(arm_id, AttemptState.DONE, repeat=repeat, item_key=q.key))
        if not left:
            return
        (lead, lead_block), rest = left[0], left[1:]
        links = [Link(item_key=q.key, repeat=repeat, block=b, overrides=dict(q.overrides)) for q, b in rest]
        got = _run_attempt(
            store,
            spec,
            spec_json,
            campaign_id,
            lead,
            dict(lead.overrides),
            workdir,
            False,
            0,
            repeat,
            arm_id,
            lead_block,
            links,
        )
        outcomes[lead.key].append(got)
        for chained in got.then:
            key = chained.item_key
            if chained.state == NOT_RUN_ON_KEPT:  # on a server of its own
                q = spec.item(key)
                chained = _run_attempt(
                    store,
                    spec,
                    spec_json,
                    campaign_id,
                    q,
                    dict(q.overrides),
                    workdir,
                    False,
                    0,
                    repeat,
                    arm_id,
                    plans[key][(repeat, arm_id)],
                )
            outcomes[key].append(chained)

    _in_lanes(spec, block_plan(spec, group[0]), one)
    stopped: interrupt.CampaignInterrupted | None = None
    for item in group:
        try:
            _end_item(store, campaign_id, item, outcomes[item.key], "")
        except interrupt.CampaignInterrupted as exc:
            stopped = stopped or exc
    if stopped is not None:
        raise stopped


def _start_item(store: Store, campaign_id: int, item: QueueItem) -> None:
    store.set_item_state(campaign_id, item.key, ItemState.RUNNING)
    emit("item-start", item=item.key, title=item.title, arms=list(item.arms))


def _until_settled(
    run: Callable[[list[Entry]], list[ArmOutcome]],
    plan: list[Entry],
    budget: BlockBudget,
    store: Store,
    spec: CampaignSpec,
    campaign_id: int,
    item: QueueItem,
) -> tuple[list[ArmOutcome], str]:
    """An adaptive item's blocks, one at a time (`run` runs a block's entries); from its
    least on, after each block the gate decides whether to go on (`settled`). Returns the
    outcomes and how it ended: settled after n blocks, or its budget spent."""
    outcomes: list[ArmOutcome] = []
    numbers = sorted({e[0] for e in plan})
    for count, number in enumerate(numbers, start=1):
        got = run([e for e in plan if e[0] == number])
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


def _end_item(store: Store, campaign_id: int, item: QueueItem, outcomes: list[ArmOutcome], note: str) -> ItemState:
    """The item's state from its arms' outcomes: interrupted (raised, after recording it
    pending), blocked, failed, or done with `note`."""
    if interrupt.requested() or any(o.state == AttemptState.INTERRUPTED for o in outcomes):
        store.set_item_state(campaign_id, item.key, ItemState.PENDING, "interrupted; `campaign resume` carries on")
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
    store.set_item_state(campaign_id, item.key, state, reason)
    emit("item-done", item=item.key, state=str(state), reason=reason)
    return state


def _campaign_run_name() -> str:
    """The campaign flow run is named after the campaign (what the user looks for under
    Runs in the Prefect UI), read from the file; the file's stem if it cannot be read
    (the flow then fails with the file's own error)."""
    import tomllib

    from prefect.runtime import flow_run

    path = str(flow_run.parameters.get("campaign_path", ""))
    try:
        with open(path, "rb") as fh:
            name = tomllib.load(fh)["campaign"]["name"]
        return str(name) if name else Path(path).stem
    except (OSError, ValueError, KeyError, TypeError):
        return Path(path).stem or "campaign"


@flow(name="campaign", flow_run_name=_campaign_run_name, log_prints=False, persist_result=False)
def campaign_flow(
    campaign_path: str, store_url: str, workdir: str = ".campaign", recheck_blocked: bool = False
) -> dict[str, Any]:
    """Run the queue. Only one process runs a campaign at a time (`queue.claim_runner`;
    `RunnerBusy` names the other one). A Ctrl-C returns `{"interrupted": ...}`."""
    spec = load_campaign(campaign_path)
    return _campaign(spec, campaign_path, Store(store_url), workdir, recheck_blocked)


def _campaign(
    spec: CampaignSpec, campaign_path: str, store: Store, workdir: str, recheck_blocked: bool
) -> dict[str, Any]:
    problems = override_keys.check_campaign(spec)  # the command line said so already; callers of the flow hear it too
    if problems:
        raise CampaignFileError(campaign_path, problems)
    taken = queue.claim_runner(store, spec.campaign.name, "campaign resume" if recheck_blocked else "campaign run")
    try:
        return _run_queue(spec, store, campaign_path, workdir, recheck_blocked)
    finally:
        if taken:
            queue.release_runner(store, spec.campaign.name)


def _run_queue(
    spec: CampaignSpec, store: Store, campaign_path: str, workdir: str, recheck_blocked: bool
) -> dict[str, Any]:
    problem = placement.placement_problem(spec)
    if problem:
        raise placement.PlacementUnavailable(problem)
    row = queue.register(store, spec, campaign_path, simulated_adapters())
    campaign_id = row.id
    assert campaign_id is not None
    note_prefect_api(store, campaign_id)
    for note in queue.recover(store, campaign_id, release_lease):
        store.log_event(campaign_id, "recover", note)
    if recheck_blocked:
        for item_row in store.items(campaign_id):
            if item_row.state == ItemState.BLOCKED:
                store.set_item_state(campaign_id, item_row.key, ItemState.PENDING, "re-checking a blocked item")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    ensure_device_limits(spec)
    emit(
        "campaign-start",
        name=spec.campaign.name,
        items=len(spec.queue),
        artifact=artifact_key(spec.campaign.name, "queue"),
    )
    publish(store, spec.campaign.name)
    verdicts = None  # as of the last item run
    while True:
        item = queue.next_item(store, spec, campaign_id)
        if item is None:
            break
        try:
            run_group(store, spec, campaign_id, server_group(store, spec, campaign_id, item), workdir)
        except interrupt.CampaignInterrupted as exc:  # returned, not raised: a stop is no flow failure
            publish(store, spec.campaign.name)
            return {"campaign": spec.campaign.name, "interrupted": str(exc)}
        verdicts = compute_verdicts(store, spec, campaign_id)
        publish(store, spec.campaign.name)
    waiting = queue.waiting_reasons(store, spec, campaign_id)
    for key, reason in waiting.items():
        store.set_item_state(campaign_id, key, ItemState.PENDING, reason)
    if verdicts is None or waiting:  # nothing ran, or items changed state since
        verdicts = compute_verdicts(store, spec, campaign_id)
        publish(store, spec.campaign.name)
    emit("campaign-done", name=spec.campaign.name)
    return {
        "campaign": spec.campaign.name,
        "items": {r.key: str(r.state) for r in store.items(campaign_id)},
        "verdicts": {v.gate_id: str(v.verdict) for v in verdicts},
    }


def note_prefect_api(store: Store, campaign_id: int) -> None:
    """Record which Prefect server this run's flow runs go to (`PREFECT_API_EVENT`; an
    empty message for a temporary one), so that `campaign status` and the report link an
    attempt to its flow run only where that link can still open
    (`campaign.store.summary.attempt_links`)."""
    store.log_event(campaign_id, PREFECT_API_EVENT, configured_api_url() or "")


class CampaignLaunch(BaseModel):
    """What the `campaign` deployment asks for in the Prefect UI's run form: typed, so
    the UI shows a form and a rerun repeats it. The credentials are never here: the
    worker's own $CAMPAIGN_DB (or --db) names the shared database."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign: str = PydanticField(
        min_length=1,
        description="the campaign's name in the shared database, or the path of a campaign file on the worker's host",
    )
    workdir: str = PydanticField(default=".campaign", description="where server logs go, on the worker's host")
    recheck_blocked: bool = PydanticField(
        default=False, description="re-check blocked items first, as `campaign resume` does"
    )


def named_campaign(store: Store, campaign: str) -> tuple[CampaignSpec, str]:
    """The spec and source path a launch names: a campaign file readable here (a path
    that exists, or ends in .toml), else the campaign of that name in the store, its spec
    as last registered (`CampaignRow.spec_json`)."""
    path = Path(campaign).expanduser()
    if path.is_file() or campaign.endswith(".toml"):
        return load_campaign(path), str(path)
    row = store.campaign(campaign)
    if row is None or not row.spec_json:
        known = ", ".join(repr(r.name) for r in store.campaigns()) or "none yet"
        raise LookupError(
            f"no campaign file {campaign!r} on this host and no campaign of that name in {store.public_url} (campaigns: {known})"
        )
    return CampaignSpec.model_validate_json(row.spec_json), row.source_path


@flow(
    name="campaign", flow_run_name="{launch.campaign}", log_prints=False, persist_result=False, validate_parameters=True
)
def campaign_launch_flow(launch: CampaignLaunch) -> dict[str, Any]:
    """The `campaign/campaign-HOST` deployment (`campaign worker --host HOST` serves it):
    the same queue walk as `campaign run` (`campaign_flow`), in this flow run, against
    the worker's database. A rerun from the UI is a `campaign run` again: finished items
    are skipped and interrupted ones continued."""
    from campaign.store.database import database_url

    store = Store(database_url())
    spec, source = named_campaign(store, launch.campaign)
    return _campaign(spec, source, store, launch.workdir, launch.recheck_blocked)


def with_item_overrides(spec: CampaignSpec, item_key: str, overrides: dict[str, Any]) -> CampaignSpec:
    """The campaign as a rerun runs it: the item's overrides merged with the new ones, so
    that `recipe.*` keys reach the server's launch (`CampaignSpec.recipe_for`) exactly as
    when written in the campaign file."""
    if not overrides:
        return spec
    queue_items = [
        q.model_copy(update={"overrides": {**q.overrides, **overrides}}) if q.key == item_key else q for q in spec.queue
    ]
    return spec.model_copy(update={"queue": queue_items})


@flow(name="rerun", flow_run_name="rerun {item_key}", log_prints=False, persist_result=False)
def rerun_flow(
    campaign_path: str, store_url: str, item_key: str, overrides: dict[str, Any], workdir: str = ".campaign"
) -> dict[str, Any]:
    """New attempts of a finished item. With the settings it ran under (no overrides, or the
    same ones again) they are more blocks of the same question: added after the blocks
    already run, and its gate then reads a confidence sequence over all of them
    (`gates.looks`). With other settings they are a new question, which verdicts read
    instead of the old one; older attempts stay as history. `overrides` are as
    `flows.overrides.check_rerun` makes them (bare recipe fields as recipe.<field>);
    anything else is refused here."""
    file_spec = load_campaign(campaign_path)
    problems = override_keys.check(file_spec, file_spec.item(item_key), overrides, "overrides")
    if problems:
        raise CampaignFileError(campaign_path, problems)
    store = Store(store_url)
    taken = queue.claim_runner(store, file_spec.campaign.name, "campaign rerun")
    try:
        row = queue.register(store, file_spec, campaign_path, simulated_adapters())
        campaign_id = row.id
        assert campaign_id is not None
        note_prefect_api(store, campaign_id)
        spec = with_item_overrides(file_spec, item_key, overrides)
        item = spec.item(item_key)
        ensure_device_limits(spec)
        store.log_event(campaign_id, "rerun", json.dumps(overrides, sort_keys=True), item_key)
        try:
            state = run_item(store, spec, campaign_id, item, workdir, fresh=True, add_blocks=True)
        except interrupt.CampaignInterrupted as exc:
            return {"item": item_key, "interrupted": str(exc)}
        verdicts = compute_verdicts(store, file_spec, campaign_id)
        publish(store, file_spec.campaign.name)
        return {"item": item_key, "state": str(state), "verdicts": {v.gate_id: str(v.verdict) for v in verdicts}}
    finally:
        if taken:
            queue.release_runner(store, file_spec.campaign.name)
