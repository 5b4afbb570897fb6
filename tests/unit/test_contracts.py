"""The values that cross between the campaign flow, an arm flow (in-process or on a
worker) and a probe task (`flows.contracts`)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from campaign.core.schema import CampaignSpec
from campaign.core.states import AttemptState
from flows.contracts import NOT_RUN_ON_KEPT, ArmOutcome, ArmRun, Block, Link, NotRun, ProbeRun, arm_state
from tests.campaigns import arm, campaign_file, item, sim


def _spec() -> CampaignSpec:
    import tomllib

    text = campaign_file(
        "c",
        runtimes=[sim()],
        arms=[arm("A", context=4096)],
        queue=[item("k", ["A"], ["decode"], overrides={"max_tokens": 64}), item("k2", ["A"], ["decode"])],
    )
    return CampaignSpec.model_validate(tomllib.loads(text))


def arm_run(**changes: object) -> ArmRun:
    spec = _spec()
    values: dict[str, object] = dict(
        spec=spec,
        item=spec.item("k"),
        arm_id="A",
        store_url="sqlite:///x.db",
        campaign_id=1,
        workdir="/tmp/w",
        block=Block(index=2, id="k/b2/ab", order=1),
        then=(Link(item=spec.item("k2"), block=Block(index=2, order=1)),),
    )
    return ArmRun(**{**values, **changes})


def test_an_arm_run_survives_the_trip_to_a_worker() -> None:
    """A deployment's parameters travel as JSON and are validated back into the model on
    the worker: nothing is lost or changed on the way, links included."""
    run = arm_run()
    sent = json.loads(json.dumps({"run": run.model_dump(mode="json")}))
    assert ArmRun.model_validate(sent["run"]) == run
    assert run.name == "c/k/A" and run.overrides == {"max_tokens": 64} and run.block.index == 2


def test_a_block_stores_what_an_attempt_is_told_of_it() -> None:
    block = Block(index=1, order=0, id="k/b1/ab", settings_hash="s", recipe_hash="r")
    assert block.fields() == {"block_order": 0, "block_id": "k/b1/ab", "settings_hash": "s", "recipe_hash": "r"}
    chained = block.model_copy(update={"server_block": "j/b1/cd"})
    assert chained.fields()["server_block"] == "j/b1/cd" and chained.index == 1


def test_a_misspelt_field_is_refused_and_nothing_changes_on_the_way() -> None:
    with pytest.raises(ValidationError, match="extra"):
        arm_run(repeats=3)
    with pytest.raises(ValidationError, match="frozen"):
        arm_run().block = Block()  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ProbeRun(
            store_url="s",
            campaign_id=1,
            attempt_id=1,
            block=0,
            item_key="k",
            arm_id="A",
            probe="decode",
            context="big",
            base_url="u",
            speaks="simulator",
            simulated=True,
            model="m",
            sampling={},
            params_json="{}",
            cached_tokens_field="",
        )


def test_an_outcome_says_whether_a_chained_attempt_failed() -> None:
    done = ArmOutcome("A", AttemptState.DONE, attempt_id=1, block=0, item_key="k")
    assert not done.failed_chained
    later = [
        ArmOutcome("A", AttemptState.FAILED, "broken", 2, 0, "k2"),
        ArmOutcome("A", NOT_RUN_ON_KEPT, "", None, 0, "k3"),
    ]
    assert done.chained(later).failed_chained and done.chained(later).then == tuple(later)
    own = ArmOutcome("A", AttemptState.FAILED, "x", 1, 0, "k")
    assert not own.chained(later).failed_chained  # its own failure is its state


def test_an_outcome_state_read_from_the_store_is_the_enum_it_spells() -> None:
    """A worker's attempt row says its state as text; the outcome holds the enum."""
    assert arm_state("done") is AttemptState.DONE and arm_state("not-run") is NotRun.ON_KEPT
    stored: str = "blocked"
    assert ArmOutcome("A", stored).state is AttemptState.BLOCKED  # type: ignore[arg-type]  # coerced, as placement's rows are
