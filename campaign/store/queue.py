"""The campaign queue as a state machine over the store.

Why here and not in Prefect: the queue must survive a killed process, be read by
`campaign status` from another terminal, and decide what runs next from states alone.
The flows call these functions; nothing here knows about Prefect.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from campaign.core.loader import file_digest
from campaign.core.processes import kill_orphan, process_start, same_process_alive
from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import SETTLED, TERMINAL_ITEM_STATES, AttemptState, ItemState, ProbeRunState
from campaign.store.liveness import holder_gone, on_this_machine, this_machine
from campaign.store.store import Store
from campaign.store.tables import ArmRow, AttemptRow, CampaignRow, ProbeRunRow, QueueItemRow, RunnerRow, utcnow


class RunnerBusy(RuntimeError):
    """Another live process runs this campaign; the message names it."""


def _describe_runner(row: RunnerRow) -> str:
    started = row.started_at if row.started_at.tzinfo else row.started_at.replace(tzinfo=UTC)  # SQLite drops the zone
    since = started.astimezone().strftime("%H:%M:%S")
    what = f"`{row.command}`, " if row.command else ""
    return f"pid {row.pid} on host {row.host} ({what}since {since})"


def claim_runner(store: Store, name: str, command: str = "") -> bool:
    """Make this process the one runner of campaign `name`.

    Why a row with a primary key: two runners started at the same instant both find no
    runner, but only one insert can succeed, so never both run arms. The claim is
    re-entrant (True = taken now, False = this process already held it). A runner that
    is provably gone -- same host, and its pid no longer exists or now belongs to a
    later process -- is replaced; any other raises `RunnerBusy` naming it.
    """
    from sqlalchemy import delete
    from sqlalchemy.exc import IntegrityError
    from sqlmodel import col

    me, host = os.getpid(), this_machine()
    for _ in range(5):
        try:
            store.add(
                RunnerRow(campaign_name=name, pid=me, host=host, process_start=process_start(me), command=command)
            )
            return True
        except IntegrityError:
            pass
        with store.session() as s:
            row = s.get(RunnerRow, name)
        if row is None:
            continue  # released in between: try again
        if row.pid == me and row.host == host:
            return False
        if not on_this_machine(row.host) or same_process_alive(row.pid, row.process_start):
            raise RunnerBusy(
                f"campaign {name!r} is already being run by {_describe_runner(row)}; "
                "wait for it to finish, or stop it (Ctrl-C in its terminal) and run `campaign resume`"
            )
        with store.session() as s:  # only this exact stale row: a newer claim is kept
            s.exec(
                delete(RunnerRow).where(
                    col(RunnerRow.campaign_name) == name,
                    col(RunnerRow.pid) == row.pid,
                    col(RunnerRow.host) == row.host,
                    col(RunnerRow.started_at) == row.started_at,
                )
            )
            s.commit()
    raise RunnerBusy(f"campaign {name!r}: could not claim it as runner (other processes keep claiming it)")


def release_runner(store: Store, name: str) -> None:
    """Give the campaign up, if this process holds it."""
    from sqlalchemy import delete
    from sqlmodel import col

    with store.session() as s:
        s.exec(
            delete(RunnerRow).where(
                col(RunnerRow.campaign_name) == name,
                col(RunnerRow.pid) == os.getpid(),
                col(RunnerRow.host) == this_machine(),
            )
        )
        s.commit()


def current_runner(store: Store, name: str) -> str | None:
    """Who runs the campaign now, described; None if nobody (or only a gone process)."""
    with store.session() as s:
        row = s.get(RunnerRow, name)
    if row is None:
        return None
    if on_this_machine(row.host) and not same_process_alive(row.pid, row.process_start):
        return None
    return _describe_runner(row)


# Which state a queue item may move to from each: the one rule every writer of an item's
# state goes through (`move_item`; `register` checks it for the rows it writes itself). An
# item starts (pending -> running), ends (running -> done, failed, blocked), or goes back to
# pending: stopped or left by a dead process (running), a waiting reason said again
# (pending), a blocked item re-checked or a done one asked for more blocks (finished). A
# rerun starts a finished item again. A finished item never becomes another finished state
# without running, nor does a pending one finish without starting.
ITEM_MOVES: dict[ItemState, frozenset[ItemState]] = {
    ItemState.PENDING: frozenset({ItemState.PENDING, ItemState.RUNNING}),
    ItemState.RUNNING: frozenset({ItemState.RUNNING, ItemState.PENDING, *TERMINAL_ITEM_STATES}),
    **{state: frozenset({ItemState.PENDING, ItemState.RUNNING}) for state in TERMINAL_ITEM_STATES},
}


class ItemMoveRefused(ValueError):
    """A queue item was asked to move where `ITEM_MOVES` does not allow."""


def item_may_move(before: str, after: ItemState) -> bool:
    """Whether an item in state `before` may move to `after` (`ITEM_MOVES`)."""
    return after in ITEM_MOVES.get(ItemState(before), frozenset())


def move_item(store: Store, campaign_id: int, key: str, state: ItemState, reason: str = "") -> None:
    """Move queue item `key` to `state` with `reason`, logged as an event
    (`Store.set_item_state`), after checking the move is one `ITEM_MOVES` allows."""
    before = next((row.state for row in store.items(campaign_id) if row.key == key), None)
    if before is not None and not item_may_move(before, state):
        raise ItemMoveRefused(f"queue item {key!r} cannot move from {before} to {state}")
    store.set_item_state(campaign_id, key, state, reason)


def register(store: Store, spec: CampaignSpec, source_path: str = "", simulated: Collection[str] = ()) -> CampaignRow:
    """Create or refresh the campaign's rows from its file; states of known items are kept.

    `simulated` names the adapters whose measurements are simulated (the runtime registry
    knows; the caller passes it down, so the store layer never imports a runtime)."""
    with store.session() as s:
        from sqlmodel import select

        row = s.exec(select(CampaignRow).where(CampaignRow.name == spec.campaign.name)).first()
        if row is None:
            row = CampaignRow(name=spec.campaign.name)
        row.title = spec.campaign.title or spec.campaign.name
        row.source_path = str(source_path)
        row.file_digest = file_digest(source_path) if source_path and os.path.exists(source_path) else ""
        row.spec_json = spec.model_dump_json(by_alias=True)
        row.updated_at = utcnow()
        s.add(row)
        s.commit()
        s.refresh(row)
        campaign_id = row.id
        assert campaign_id is not None

        arms = {a.arm_id: a for a in s.exec(select(ArmRow).where(ArmRow.campaign_id == campaign_id))}
        for arm in spec.arms:
            model = spec.model_for(arm)
            runtime = spec.runtime(arm.runtime)
            rec = arms.get(arm.id) or ArmRow(
                campaign_id=campaign_id,
                arm_id=arm.id,
                model="",
                quant="",
                bits_per_weight=0,
                runtime="",
                adapter="",
                context=0,
                klass="",
                group="",
                recipe_json="",
            )
            rec.model, rec.quant, rec.bits_per_weight = model.name, model.quant, model.bits_per_weight
            rec.runtime, rec.adapter, rec.context = runtime.name, runtime.adapter, arm.context
            rec.klass, rec.group = arm.klass, arm.group
            rec.recipe_json = arm.recipe.model_dump_json()
            rec.simulated = runtime.adapter in simulated
            s.add(rec)

        items = {i.key: i for i in s.exec(select(QueueItemRow).where(QueueItemRow.campaign_id == campaign_id))}
        for position, item in enumerate(spec.queue):
            entry = items.get(item.key) or QueueItemRow(
                campaign_id=campaign_id, key=item.key, position=position, title=item.title
            )
            entry.position, entry.title, entry.gate = position, item.title, item.gate
            entry.spec_json = item.model_dump_json()
            if entry.state == ItemState.DONE and entry.id is not None:
                most = spec.blocks(item).most
                missing = 0 if entry.reason.startswith(SETTLED) else _blocks_missing(s, campaign_id, item, most)
                if missing and item_may_move(entry.state, ItemState.PENDING):  # the file now asks for more
                    # blocks: the next run adds them, keeping the ones done
                    entry.state = ItemState.PENDING
                    entry.reason = f"{most} blocks asked, {most - missing} done: the next run adds the rest"
            s.add(entry)
        s.commit()
    return row


def _blocks_missing(s: Any, campaign_id: int, item: QueueItem, most: int) -> int:
    """How many of the item's blocks lack a finished attempt of some arm."""
    from sqlmodel import select

    done = {
        (a.arm_id, a.repeat)
        for a in s.exec(
            select(AttemptRow).where(AttemptRow.campaign_id == campaign_id, AttemptRow.item_key == item.key)
        )
        if a.state == AttemptState.DONE
    }
    return sum(1 for block in range(most) if any((arm, block) not in done for arm in item.arms))


def recover(store: Store, campaign_id: int, release_lease: Callable[[str], bool] | None = None) -> list[str]:
    """After a crash: attempts left `running` by a provably dead process (`holder_gone`:
    its pid gone on this host, or its heartbeat stale) become `interrupted`, their servers
    are stopped (if still ours), the device slots they held are released, and running
    items go back to pending. An attempt whose holder may be alive -- on another host,
    or a worker here -- is left alone: nothing it holds is released, and the arm waits
    for it (`flows.arm_flow`)."""
    notes: list[str] = []
    live_items: set[str] = set()
    for att in store.attempts(campaign_id):
        if att.state != AttemptState.RUNNING:
            continue
        gone = holder_gone(att)
        if gone is None:
            live_items.add(att.item_key)
            notes.append(
                f"attempt {att.id} ({att.item_key}/{att.arm_id}) is still run by pid {att.owner_pid} on host {att.host or '?'}; left alone"
            )
            continue
        if not store.release_attempt(
            att.id or 0, att, state=AttemptState.INTERRUPTED, ended_at=utcnow(), error=f"interrupted ({gone})"
        ):
            continue  # its holder beat its heart in between, or another runner took it
        if (
            att.server_pgid
            and on_this_machine(att.machine, att.host)
            and kill_orphan(att.server_pgid, att.server_cmdline)
        ):
            notes.append(f"stopped server process group {att.server_pgid} left by attempt {att.id}")
        if att.device_lease and release_lease is not None and release_lease(att.device_lease):
            notes.append(f"released the device slot held by attempt {att.id}")
        for run in store.probe_runs(att.id or 0):
            if run.state == ProbeRunState.RUNNING:
                store.update(ProbeRunRow, run.id or 0, state=ProbeRunState.INTERRUPTED, ended_at=utcnow())
        notes.append(f"attempt {att.id} ({att.item_key}/{att.arm_id}) was interrupted ({gone}); it will be continued")
    for item in store.items(campaign_id):
        if item.state == ItemState.RUNNING and item.key not in live_items:
            move_item(store, campaign_id, item.key, ItemState.PENDING, "interrupted; resuming")
    return notes


@dataclass
class Readiness:
    ready: bool
    reason: str = ""


def readiness(spec: CampaignSpec, states: dict[str, str], item: QueueItem) -> Readiness:
    """Can this item run now? Items wait for dependencies; a blocked or failed dependency
    keeps them waiting (with the reason) instead of running on a broken premise."""
    for dep in item.depends_on:
        state = states.get(dep, ItemState.PENDING)
        if state != ItemState.DONE:
            return Readiness(False, f"waiting on {dep!r} ({state})")
    return Readiness(True)


def next_item(store: Store, spec: CampaignSpec, campaign_id: int) -> QueueItem | None:
    states = {row.key: row.state for row in store.items(campaign_id)}
    for item in spec.queue:
        if states.get(item.key) in TERMINAL_ITEM_STATES:
            continue
        if readiness(spec, states, item).ready:
            return item
    return None


def waiting_reasons(store: Store, spec: CampaignSpec, campaign_id: int) -> dict[str, str]:
    states = {row.key: row.state for row in store.items(campaign_id)}
    out = {}
    for item in spec.queue:
        if states.get(item.key) == ItemState.PENDING:
            r = readiness(spec, states, item)
            if not r.ready:
                out[item.key] = r.reason
    return out


def blocked_arms(store: Store, campaign_id: int) -> dict[str, str]:
    """Arms whose newest attempt is blocked, with the external reason word for word."""
    latest: dict[str, AttemptRow] = {}
    for att in store.attempts(campaign_id):
        latest[att.arm_id] = att
    return {arm: att.error for arm, att in latest.items() if att.state == AttemptState.BLOCKED}


def finished_attempt(store: Store, campaign_id: int, item_key: str, arm_id: str, repeat: int) -> AttemptRow | None:
    """The newest attempt if it is done: on resume, an arm finished before a crash is not re-run."""
    attempts = [a for a in store.attempts(campaign_id, item_key, arm_id) if a.repeat == repeat]
    if attempts and attempts[-1].state == AttemptState.DONE:
        return attempts[-1]
    return None


def next_block(store: Store, campaign_id: int, item_key: str, overrides: dict[str, Any]) -> int:
    """The first block number no attempt of the item under these overrides has used: where
    a rerun with unchanged settings adds its blocks to the same question (0 for settings
    never run, a new question). Any attempt counts, finished or not, so a number is never
    given to two blocks of one question."""
    key = json.dumps(overrides, sort_keys=True)
    repeats = [a.repeat for a in store.attempts(campaign_id, item_key) if a.overrides_json == key]
    return max(repeats) + 1 if repeats else 0


def work_left(store: Store, spec: CampaignSpec, campaign_id: int, recheck_blocked: bool) -> bool:
    """Whether a run (or, with `recheck_blocked`, a resume) would do anything: an item
    ready to run, one left running by a dead process, or a blocked one to re-check."""
    rows = store.items(campaign_id)
    if {r.key for r in rows} != {q.key for q in spec.queue}:
        return True
    if any(r.state == ItemState.RUNNING for r in rows):
        return True
    if recheck_blocked and any(r.state == ItemState.BLOCKED for r in rows):
        return True
    return next_item(store, spec, campaign_id) is not None
