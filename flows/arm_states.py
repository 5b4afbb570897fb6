"""An arm flow run's end state in Prefect, and its outcome read back from that state.

The Prefect UI tells a failed arm from a blocked one and from a done one by its flow run's
state; the campaign flow reads the `ArmOutcome` back out of that state, in-process or from
a worker.
"""

from __future__ import annotations

from typing import Any

from campaign.core.states import AttemptState
from flows.contracts import ArmOutcome


class ArmNotDone(Exception):
    """A failed or blocked arm's outcome, as the data of its flow run's failed state.

    An exception, not the outcome itself: Prefect raises a failed state's data when a
    deployment's flow run ends (on a worker), and a plain value there became "TypeError:
    ... cannot be resolved into an exception" in the worker's log instead of what happened
    to the arm."""

    def __init__(self, outcome: ArmOutcome) -> None:
        super().__init__(f"arm {outcome.arm_id} {outcome.state}: {outcome.message}")
        self.outcome = outcome


def run_state(result: ArmOutcome) -> Any:
    """The flow run's end state for an arm's outcome, so the Prefect UI tells them
    apart: a failed arm is Failed; a blocked one (the runtime cannot serve the recipe) is
    a failed-type state named Blocked, red like a failure but named for what it is;
    anything else completes. The outcome is the state's data either way (in an
    `ArmNotDone` when the state failed), read back by `outcome_of`."""
    from prefect.client.schemas.objects import StateType
    from prefect.states import Failed, State

    if result.failed_chained:
        return result  # its own attempt completed; the chained one's failure is in the data
    if result.state == AttemptState.FAILED:
        return Failed(message=result.message or "arm failed", data=ArmNotDone(result))
    if result.state == AttemptState.BLOCKED:
        return State(type=StateType.FAILED, name="Blocked", message=result.message, data=ArmNotDone(result))
    return result


def outcome_of(state: Any) -> ArmOutcome:
    """The outcome of an arm flow run called in-process with `return_state=True`;
    an exception the flow raised is raised again here, as a direct call would."""
    value = state.result(raise_on_failure=False)
    if isinstance(value, ArmNotDone):
        return value.outcome
    if isinstance(value, BaseException):
        raise value
    return value
