"""What crosses between the campaign flow, an arm flow and a probe run: typed, frozen
values instead of a dict and a dozen scalars.

Why here and frozen: an arm's run is handed from the campaign flow to an arm flow in
this process or, through a deployment, to a worker on another host, and its outcome
comes back the same two ways; a probe run is handed one job. A dict built on one side
and read by key on the other fails at run time, on the far side of a process boundary,
when a key is renamed. A model is checked where it is made (and by Prefect, which validates
a flow's parameters against its signature, on the worker too), and nobody changes it on
the way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer

from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import AttemptState


class NotRun(StrEnum):
    """An `ArmOutcome` state that is no attempt's: a chained attempt the arm flow left
    for the campaign flow to run alone, on a server of its own."""

    ON_KEPT = "not-run"


# the state of a chained attempt the arm flow left for the campaign flow to run alone
NOT_RUN_ON_KEPT = NotRun.ON_KEPT


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Block(_Frozen):
    """One block of a queue item as an attempt is made in it (`flows.blocks.block_plan`).

    `index` is the block's number (stored as the attempt's `repeat` column: a block is one
    server start of each arm, not a trial); `order` the arm's 0-based place in the block's
    order, `id` the same for every arm of the block and new under other settings,
    `settings_hash` and `recipe_hash` what it runs with, and `server_block` the block of
    the start a chained attempt ran on ('' for a start of its own). What a new attempt
    stores of it is `fields()` (`campaign.store.tables.BLOCK_FIELDS`)."""

    index: int = 0
    order: int | None = None
    id: str = ""
    settings_hash: str = ""
    recipe_hash: str = ""
    server_block: str = ""

    def fields(self) -> dict[str, Any]:
        """The attempt row's block columns, as `Store.claim_attempt` takes them."""
        out: dict[str, Any] = {
            "block_order": self.order,
            "block_id": self.id,
            "settings_hash": self.settings_hash,
            "recipe_hash": self.recipe_hash,
        }
        if self.server_block:
            out["server_block"] = self.server_block
        return out


class Link(_Frozen):
    """A later queue item's attempt chained onto an arm's server (`ArmRun.then`): run on
    the same server after the arm's own attempt is done, its cache emptied first where a
    probe of it needs a cold one (`flows.groups.server_group` says when that is
    sound), and only while its launch settings are the server's
    (`flows.launch.launch_settings`). `item` is the queue item as it runs (its overrides
    merged, `flows.overrides.with_overrides`). Its attempt stores `block` and, as its
    `server_block`, the block of the start it ran on."""

    item: QueueItem
    block: Block

    @property
    def item_key(self) -> str:
        return self.item.key


class ArmRun(_Frozen):
    """One arm's attempt of one block of a queue item, as the campaign flow asks for it.

    `spec` is the campaign and `item` the queue item as it runs (its overrides merged once,
    `flows.overrides.with_overrides`): typed, and serialised only where a deployment hands
    the run to a worker (`model_dump`/`model_validate`). `store_url` carries no password
    (`Store.public_url`): the credentials come from the running process's $CAMPAIGN_DB,
    never from a flow parameter Prefect would keep. Without `fresh`, an arm whose newest
    attempt is done is not run again. `block` is the block a new attempt is made in
    (`flows.blocks.block_plan`); `device_limit` names the device lock it holds while it runs."""

    spec: CampaignSpec
    item: QueueItem
    arm_id: str
    store_url: str
    campaign_id: int
    workdir: str
    block: Block = Block()
    device_limit: str | None = None
    fresh: bool = True
    then: tuple[Link, ...] = ()

    @field_serializer("spec")
    def _spec_by_alias(self, spec: CampaignSpec) -> dict[str, Any]:
        """The campaign as its file spells it, so that a worker reads back the same spec."""
        return spec.model_dump(mode="json", by_alias=True)

    @property
    def campaign_name(self) -> str:
        return self.spec.campaign.name

    @property
    def item_key(self) -> str:
        return self.item.key

    @property
    def overrides(self) -> dict[str, Any]:
        """The overrides the item runs with (what a new attempt stores)."""
        return dict(self.item.overrides)

    @property
    def name(self) -> str:
        """The flow run's name: campaign/item/arm."""
        return f"{self.campaign_name}/{self.item_key}/{self.arm_id}"


ArmState = AttemptState | NotRun


def arm_state(value: str) -> ArmState:
    """`value` as the enum it spells: an attempt's state, or `NOT_RUN_ON_KEPT`."""
    return NotRun(value) if value in NotRun._value2member_map_ else AttemptState(value)


@dataclass(frozen=True)
class ArmOutcome:
    """How an arm's attempt ended: what an arm flow returns, and what the dispatcher and
    the queue walk say for an arm they end themselves (already done, not started, no
    worker, stopped on its host). `block` is the block's number; `then`: the outcomes of
    the attempts chained onto its server, each with its item; `state` is an `AttemptState`
    or `NOT_RUN_ON_KEPT` (a string given is read as the one it spells)."""

    arm_id: str
    state: ArmState
    message: str = ""
    attempt_id: int | None = None
    block: int = 0
    item_key: str = ""
    then: tuple[ArmOutcome, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.state, (AttemptState, NotRun)):
            object.__setattr__(self, "state", arm_state(self.state))

    def chained(self, then: list[ArmOutcome]) -> ArmOutcome:
        return dataclasses.replace(self, then=tuple(then))

    @property
    def failed_chained(self) -> bool:
        """Its own attempt is done and one chained onto its server failed."""
        return self.state == AttemptState.DONE and any(o.state == AttemptState.FAILED for o in self.then)


class ProbeRun(_Frozen):
    """One probe at one context on a running server, for `flows.probe_run.run_probe`: where to store
    its rows (the attempt, its block's number and item), the server and how to talk to it,
    and the probe's resolved parameters (as JSON, validated again by the probe's own model).
    `settings_hash` is what its rows were measured under (`flows.overrides.probe_settings_hash`)."""

    store_url: str
    campaign_id: int
    attempt_id: int
    block: int
    item_key: str
    arm_id: str
    probe: str
    context: int
    base_url: str
    # the adapter whose telemetry and request dialect the probe uses: the runtime's, or
    # for a server at a URL the family its metrics page showed (`RuntimeAdapter.recognise`)
    speaks: str
    simulated: bool
    model: str
    sampling: dict[str, Any]
    params_json: str
    cached_tokens_field: str
    log_path: str | None = None
    settings_hash: str = ""
    # where the server runs, for the devices the telemetry reads (`arms.telemetry.sources`):
    # its process group (its own processes on a device are not "others") and the devices
    # its environment lets it see
    telemetry: str = "none"
    server_pgid: int | None = None
    visible_devices: str | None = None
