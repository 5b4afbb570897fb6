"""The values that cross between the campaign flow, an arm flow (in-process or on a
worker) and a probe task (`flows.contracts`)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from flows.contracts import NOT_RUN_ON_KEPT, ArmOutcome, ArmRun, Link, ProbeRun


def arm_run(**changes: object) -> ArmRun:
    values: dict[str, object] = dict(
        campaign_name="c",
        item_key="k",
        arm_id="A",
        spec_json="{}",
        store_url="sqlite:///x.db",
        campaign_id=1,
        overrides={"max_tokens": 64},
        workdir="/tmp/w",
        repeat=2,
        block={"block_id": "k/b2/ab", "block_order": 1},
        then=(Link(item_key="k2", repeat=2, block={"block_order": 1}, overrides={}),),
    )
    return ArmRun(**{**values, **changes})


def test_an_arm_run_survives_the_trip_to_a_worker() -> None:
    """A deployment's parameters travel as JSON and are validated back into the model on
    the worker: nothing is lost or changed on the way, links included."""
    run = arm_run()
    sent = json.loads(json.dumps({"run": run.model_dump(mode="json")}))
    assert ArmRun.model_validate(sent["run"]) == run
    assert run.name == "c/k/A"


def test_a_misspelt_field_is_refused_and_nothing_changes_on_the_way() -> None:
    with pytest.raises(ValidationError, match="extra"):
        arm_run(repeats=3)
    with pytest.raises(ValidationError, match="frozen"):
        arm_run().repeat = 3  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ProbeRun(
            store_url="s",
            campaign_id=1,
            attempt_id=1,
            repeat=0,
            item_key="k",
            arm_id="A",
            probe="decode",
            context="big",
            base_url="u",
            speaks="simulator",
            simulated=True,
            model="m",
            sampling={},
            params_json="{}",  # type: ignore[arg-type]
            cached_tokens_field="",
        )


def test_an_outcome_says_whether_a_chained_attempt_failed() -> None:
    done = ArmOutcome("A", "done", attempt_id=1, repeat=0, item_key="k")
    assert not done.failed_chained
    later = [ArmOutcome("A", "failed", "broken", 2, 0, "k2"), ArmOutcome("A", NOT_RUN_ON_KEPT, "", None, 0, "k3")]
    assert done.chained(later).failed_chained and done.chained(later).then == tuple(later)
    assert not ArmOutcome("A", "failed", "x", 1, 0, "k").chained(later).failed_chained  # its own failure is its state
