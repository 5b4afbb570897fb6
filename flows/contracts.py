"""What crosses between the campaign flow, an arm flow and a probe task: typed, frozen
values instead of a dict and a dozen scalars.

Why here and frozen: an arm's run is handed from the campaign flow to an arm flow in
this process or, through a deployment, to a worker on another host, and its outcome
comes back the same two ways; a probe run is handed to a Prefect task. Each side used
to build or read a dict by key, so a renamed key failed at run time on the far side of
a process boundary. A model is checked where it is made (and by Prefect, which validates
a flow's parameters against its signature, on the worker too), and nobody changes it on
the way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from campaign.core.states import AttemptState

# the state of a chained attempt the arm flow left for the campaign flow to run alone
NOT_RUN_ON_KEPT = "not-run"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Link(_Frozen):
    """A later queue item's attempt chained onto an arm's server (`ArmRun.then`): run on
    the same server after the arm's own attempt is done, its cache emptied first where a
    probe of it needs a cold one (`flows.campaign_flow.server_group` says when that is
    sound), and only while its launch settings are the server's
    (`flows.arm_flow.launch_settings`). Its attempt stores `block` and, as its
    `server_block`, the block of the start it ran on."""

    item_key: str
    repeat: int
    block: dict[str, Any]
    overrides: dict[str, Any]


class ArmRun(_Frozen):
    """One arm's attempt of one block of a queue item, as the campaign flow asks for it.

    `store_url` carries no password (`Store.public_url`): the credentials come from the
    running process's $CAMPAIGN_DB, never from a flow parameter Prefect would keep.
    Without `fresh`, an arm whose newest attempt is done is not run again. `block` is
    what a new attempt stores of its block (`campaign.store.tables.BLOCK_FIELDS`, made by
    `flows.campaign_flow.block_plan`); `device_limit` names the device lock it holds
    while it runs."""

    campaign_name: str
    item_key: str
    arm_id: str
    spec_json: str
    store_url: str
    campaign_id: int
    overrides: dict[str, Any]
    workdir: str
    repeat: int = 0
    device_limit: str | None = None
    fresh: bool = True
    block: dict[str, Any] | None = None
    then: tuple[Link, ...] = ()

    @property
    def name(self) -> str:
        """The flow run's name: campaign/item/arm."""
        return f"{self.campaign_name}/{self.item_key}/{self.arm_id}"


@dataclass(frozen=True)
class ArmOutcome:
    """How an arm's attempt ended: what an arm flow returns, and what the dispatcher and
    the queue walk say for an arm they end themselves (already done, not started, no
    worker, stopped on its host). `then`: the outcomes of the attempts chained onto its
    server, each with its item; `state` is an `AttemptState` or `NOT_RUN_ON_KEPT`."""

    arm_id: str
    state: str
    message: str = ""
    attempt_id: int | None = None
    repeat: int = 0
    item_key: str = ""
    then: tuple[ArmOutcome, ...] = ()

    def chained(self, then: list[ArmOutcome]) -> ArmOutcome:
        return dataclasses.replace(self, then=tuple(then))

    @property
    def failed_chained(self) -> bool:
        """Its own attempt is done and one chained onto its server failed."""
        return self.state == AttemptState.DONE and any(o.state == AttemptState.FAILED for o in self.then)


class ProbeRun(_Frozen):
    """One probe at one context on a running server, for the probe task: where to store
    its rows (the attempt, its block and item), the server and how to talk to it, and the
    probe's resolved parameters (as JSON, validated again by the probe's own model).
    `settings_hash` is what its rows were measured under (`flows.overrides.probe_settings_hash`)."""

    store_url: str
    campaign_id: int
    attempt_id: int
    repeat: int
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

    @property
    def name(self) -> str:
        """The task run's name: arm-probe@context."""
        return f"{self.arm_id}-{self.probe}@{self.context}"
