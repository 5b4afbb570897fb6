"""Verdicts: every gate judged from the stored numbers, and whether an adaptive item's gate is settled.

A verdict is read after every item (and after each block of an item that adds blocks until
its gate is decided), so the rules of which look a verdict is, and which test its looks
allow, live here once for both readers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from campaign.core.schema import CampaignSpec, GateEntry, QueueItem
from campaign.core.states import BUDGET_SPENT, TERMINAL_ITEM_STATES, Verdict
from campaign.store import queue
from campaign.store.store import Store
from campaign.store.tables import VerdictRow
from flows.progress import emit
from gates.engine import canonical_only, evaluate, evaluate_family, gate_rows, read_items
from gates.family import least_holm_level
from gates.looks import Look, added_after_look, look_at, looks_for, sequence_reason


def compute_verdicts(
    store: Store, spec: CampaignSpec, campaign_id: int, stamp: dict[str, Any] | None = None
) -> list[VerdictRow]:
    """Evaluate every gate from the stored numbers, the comparative ones as one family
    (`gates.engine.evaluate_family`: Holm over the gates measured so far, so a verdict
    can still move to inconclusive as more gates join); write a verdict row when it
    changed, with the look it was (`gates.looks`: which question, how many blocks, which
    attempts) and the test its looks allow (`design_of`). `stamp` goes into every
    verdict's evidence (a re-judgement says so, and what each verdict was before it)."""
    frame = store.measurements_frame(campaign_id)
    blocked = queue.blocked_arms(store, campaign_id)
    items = {row.key: row for row in store.items(campaign_id)}
    latest = store.latest_verdicts(campaign_id)
    history = looks_of(store, campaign_id)
    frames: dict[str, Any] = {}
    current: dict[str, Look] = {}
    designs: dict[str, Design] = {}
    for gate in spec.gates:
        feeding = spec.feeding(gate.id)
        if feeding and not any(items[q.key].state in TERMINAL_ITEM_STATES for q in feeding if q.key in items):
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
            for q in spec.feeding(gate.id)
            if q.key in items and items[q.key].reason.startswith(BUDGET_SPENT)
        ]
        if spent and result.verdict == Verdict.INCONCLUSIVE:
            result = result.model_copy(update={"reason": f"inconclusive at budget ({spent[0]}): {result.reason}"})
        design = designs[gate.id]
        if design.why:
            result = result.model_copy(update={"reason": f"{result.reason}; {design.why}"})
        look_evidence = {**current[gate.id].evidence(), "sequential": design.sequential, "planned_looks": design.looks}
        previous = latest.get(gate.id)
        extra = {}
        if stamp is not None:
            was = {"verdict": previous.verdict, "reason": previous.reason} if previous else None
            extra = {"rejudged": {**stamp, "was": was}}
        evidence = json.dumps({**result.evidence, "look": look_evidence, **extra}, default=str, sort_keys=True)
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
    alpha = least_holm_level(spec.gates, gate, spec.campaign.confidence).level
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
    feeding = spec.feeding(gate.id)
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
    if not result.comparative or gate.exploratory:
        return True, line
    if result.verdict == Verdict.FAIL and not result.statistical_fail:
        return True, line  # a rule made it (every request failed): no p-value to adjust
    holm = least_holm_level(spec.gates, gate, spec.campaign.confidence)
    p_pass, p_fail = result.p_values
    p = p_pass if result.verdict == Verdict.PASS else p_fail
    if holm.admits(p):
        return True, line
    members = holm.members
    return (
        False,
        f"{line}; not yet within alpha/{members} = {holm.level:.4f} (p {p:.4f}), which a family of {members} may need",
    )


def rejudge(store: Store, spec: CampaignSpec, campaign_id: int, source: str) -> list[tuple[str, str | None, str]]:
    """Judge every gate again from the stored rows, under `spec`'s gate definitions and
    today's code, and store the verdicts with what each was before (`stamp`); returns
    (gate, verdict before, verdict now) per gate judged. The rows are not touched: a
    re-judgement reads what was measured, it measures nothing."""
    from campaign.store.tables import utcnow

    before = {g: v.verdict for g, v in store.latest_verdicts(campaign_id).items()}
    stamp = {"at": utcnow().isoformat(timespec="seconds"), "definitions": source}
    rows = compute_verdicts(store, spec, campaign_id, stamp)
    store.log_event(campaign_id, "rejudged", f"{len(rows)} gates re-judged under {source}")
    return [(row.gate_id, before.get(row.gate_id), row.verdict) for row in rows]
