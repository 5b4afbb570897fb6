"""Blocks: which arms run in which order in each block of an item, and the hashes that name its settings.

A block is one server start of each of an item's arms, in an order drawn from the campaign's
seed; its number is stored as the attempt's `repeat` column. The `flows.contracts.Block` an
attempt is made in is made here, once, for a run, a resume and a rerun alike.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arms.probes import registry as probes
from campaign.core.schema import CampaignSpec, OverrideKeys, QueueItem
from flows.contracts import Block
from flows.overrides import digest, probe_params


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


@dataclass(frozen=True)
class Step:
    """One step of an item's schedule (`block_plan`): an arm's attempt in one block."""

    arm_id: str
    block: Block


def block_plan(spec: CampaignSpec, item: QueueItem, blocks: Sequence[int] | None = None) -> list[Step]:
    """The item's schedule, block by block: a `Step` (the arm, and the `Block` its attempt
    is made in) for every arm of its first block in its order (`block_order`), then the
    next, ...; `blocks` are the block numbers (0 .. the item's budget - 1 unless given: a
    rerun adds blocks after those run, `queue.next_block`). `item` is the item as it runs
    (its overrides merged, `flows.overrides.with_overrides`).
    The block's number is the attempt's `repeat`; its id is
    `{item}/b{block}/{settings_hash[:8]}`, the same for the arms of a block and new
    when the item runs under other settings (a rerun with `--set`), so a pairing by
    block id never pairs runs of different settings."""
    settings = settings_hash(spec, item, dict(item.overrides))
    recipes = {arm_id: recipe_hash(spec, item, arm_id) for arm_id in item.arms}
    plan = []
    for number in range(spec.blocks(item).most) if blocks is None else blocks:
        for place, arm_id in enumerate(block_order(spec.campaign.seed, item.key, number, item.arms)):
            block = Block(
                index=number,
                order=place,
                id=f"{item.key}/b{number}/{settings[:8]}",
                settings_hash=settings,
                recipe_hash=recipes[arm_id],
            )
            plan.append(Step(arm_id, block))
    return plan
