"""What an arm's server is launched with, and whether a later item's attempt may run on it.

A kept server serves an item only where every setting that reaches its launch matches; a
server start's own seed follows from the campaign, item, arm, block and attempt.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from arms.probes import registry as probes
from arms.runtimes.launching import LaunchContext
from campaign.core.schema import CampaignSpec, OverrideKeys, QueueItem
from campaign.core.serving import Recipe
from campaign.core.states import AttemptState
from campaign.core.units import recipe_value_text
from campaign.store.store import Store
from campaign.store.tables import AttemptRow
from flows.contracts import Link


def run_seed(campaign_name: str, item_key: str, arm_id: str, block: int, attempt_number: int) -> int:
    """A number for one server start: a sha256 prefix of the campaign, item, arm, block
    and attempt number, so every start of a campaign gets its own (a rerun's attempt
    2 of a block is not its attempt 1 again). The simulator draws the start's own rate
    factor from it (`SimProfile.run_seed`), which is how a block's server run differs
    from the next as a real server's does; `seed` (per campaign and arm) stays what
    seeds the text it samples. A resumed attempt restarts with the same number: it is
    the same attempt, continued."""
    key = f"{campaign_name}/{item_key}/{arm_id}/b{block}/a{attempt_number}"
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


def launch_context(
    spec: CampaignSpec,
    item: QueueItem,
    arm_id: str,
    port: int,
    overrides: dict[str, Any],
    workdir: Path,
    tools: bool,
    start_seed: int = 0,
) -> LaunchContext:
    arm = spec.arm(arm_id)
    recipe = spec.recipe_for(arm_id, item)  # recipe.* overrides, or a confirmatory item's one change
    if recipe != arm.recipe:
        arm = arm.model_copy(update={"recipe": recipe})
    return LaunchContext(
        arm=arm,
        model=spec.model_for(arm),
        runtime=spec.runtime(arm.runtime),
        port=port,
        overrides=overrides,
        workdir=workdir,
        seed=int(hashlib.sha256(f"{spec.campaign.name}/{arm_id}".encode()).hexdigest()[:8], 16) % 10_000,
        tools=tools,
        run_seed=start_seed,
    )


_UNSET = object()


def launch_settings(spec: CampaignSpec, item: QueueItem, arm_id: str) -> dict[str, Any]:
    """Everything of `item` that reaches its arm's server launch (`launch_context`): the
    recipe as the item runs it (`recipe.*` overrides, a confirmatory change), whether its
    probes need the tool flags, and the `sim.*` overrides the simulator's profile takes.
    The rest of a launch is the arm's own (model, runtime, context, `simulate`), the same
    for every item, or the start's (port, run seed). A kept server serves an item only
    where all of these match: launched with other ones, it would measure another server
    than the one the item's rows are stored under."""
    recipe = spec.recipe_for(arm_id, item)
    return {
        **{f"recipe.{name}": getattr(recipe, name) for name in Recipe.model_fields},
        "tools": "on" if probes.needs_tools(item.probes) else "off",
        **OverrideKeys.of(item.overrides).sim_keys(),
    }


def launch_differences(spec: CampaignSpec, lead: QueueItem, item: QueueItem, arms: list[str]) -> list[str]:
    """What of `item`'s launch on `arms` differs from `lead`'s (`launch_settings`), one
    phrase per setting with both values, lead's first: "sim.decode_tps differs (40 vs 80)",
    or per arm where the arms differ apart ("recipe.slots differs (A: 1 vs 4, B: 2 vs 4)")."""
    pairs: dict[str, dict[str, tuple[Any, Any]]] = {}
    for arm_id in arms:
        a, b = launch_settings(spec, lead, arm_id), launch_settings(spec, item, arm_id)
        for key in [*a, *(k for k in b if k not in a)]:
            if a.get(key, _UNSET) != b.get(key, _UNSET):
                pairs.setdefault(key, {})[arm_id] = (a.get(key, _UNSET), b.get(key, _UNSET))
    out = []
    for key, by_arm in pairs.items():
        field = key.removeprefix("recipe.") if key.startswith("recipe.") else ""
        text = {
            arm_id: " vs ".join("unset" if v is _UNSET else recipe_value_text(field, v) for v in pair)
            for arm_id, pair in by_arm.items()
        }
        alike = len(by_arm) == len(arms) and len(set(text.values())) == 1
        out.append(
            f"{key} differs ({next(iter(text.values())) if alike else ', '.join(f'{a}: {t}' for a, t in text.items())})"
        )
    return out


def launch_refusal(
    spec: CampaignSpec, store: Store, campaign_id: int, link: Link, arm_id: str, lead: QueueItem, fresh: bool
) -> str:
    """Why the chained attempt `link` may not run on the server `lead` launched ('' when it
    may): the settings that differ. The attempt runs with the overrides stored on it when it
    is continued (an interrupted one, not `fresh`: a rerun's `--set` values), else the
    link's, as `_run_link` runs it."""
    item = link.item
    newest = [a for a in store.attempts(campaign_id, link.item_key, arm_id) if a.repeat == link.block.index]
    if not fresh and newest and newest[-1].state == AttemptState.INTERRUPTED:
        item = as_attempted(item, newest[-1])
    return "; ".join(launch_differences(spec, lead, item, [arm_id]))


def stored_overrides(attempt: AttemptRow) -> dict[str, Any]:
    """The overrides an attempt was made with (the item's, merged with a rerun's)."""
    return dict(json.loads(attempt.overrides_json or "{}"))


def as_attempted(item: QueueItem, attempt: AttemptRow) -> QueueItem:
    """`item` as `attempt` was made to run it: with the overrides stored on it, which a
    continued attempt keeps (a rerun's `--set` values included), so that its `recipe.*`
    keys reach the launch and its probe runs before and after a stop are measured alike."""
    return item.model_copy(update={"overrides": stored_overrides(attempt)})
