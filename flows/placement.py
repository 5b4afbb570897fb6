"""Arms placed on other hosts: a runtime that names `host = "h1"` has its arms run by
`campaign worker --host h1`, which serves the arm flow as the Prefect deployment
`arm/arm-h1`. `campaign run` starts each such arm with `run_deployment` (a subflow of
the campaign run, so the UI shows it under the campaign), waits for it, and reads the
arm's outcome from the store -- the source of truth; a remote flow's return value is
not kept (`persist_result=False`) and a killed worker returns nothing at all.

Why the dispatcher watches the store as well as the flow run: a worker killed mid-arm
leaves its flow run "Running" in Prefect forever, while its attempt's heartbeat stops.
Once the attempt's holder is provably dead (`holder_gone`), the flow run is marked
Crashed and the arm is dispatched again; the next run on that host (after the worker is
back) takes the dead attempt over and continues it, so it is recovered exactly once.

Why a wait with a limit: a host whose worker died (or never started) would leave its
arm's flow run Scheduled forever and the campaign waiting on it. The dispatcher waits up
to $CAMPAIGN_WORKER_WAIT_S (default 300 s: a live worker picks a run up within seconds),
saying which worker to start, then cancels the flow run and ends the arm's attempt
`blocked` with that reason -- blocked, not failed, because the arm itself is fine and
`campaign resume` re-checks it once the worker runs -- and the campaign goes on. Later arms
on the same host in the same run wait only `ABSENT_WAIT_S`, so one dead host does not
cost the full wait per arm.

Why Ctrl-C cancels the remote flow run and waits a little: the worker's runner then sends
the run's process SIGTERM, which `interrupt.stop_on_sigterm` turns into the local Ctrl-C
stop (server stopped, attempt `interrupted`, flow run Cancelled); `campaign run` waits up
to STOP_WAIT_S for the attempt to say so, then exits 130 and `campaign resume` continues
the attempt. An attempt stopped on its host without a Ctrl-C here (its worker was shut
down) is sent again, as a crashed one is.
"""

from __future__ import annotations

import os
import time
from typing import cast

from campaign.core.schema import CampaignSpec
from campaign.core.search import SEARCH_ITEM_PREFIX, is_trial_item
from campaign.core.states import AttemptClaim, AttemptState
from campaign.store.liveness import holder_gone
from campaign.store.store import Store
from campaign.store.tables import AttemptRow
from flows import interrupt
from flows.contracts import ArmOutcome, ArmRun, arm_state
from flows.prefect_api import configured_api_url
from flows.progress import emit

WAIT_SETTING = "CAMPAIGN_WORKER_WAIT_S"
DEFAULT_WAIT_S = 300.0
ABSENT_WAIT_S = 30.0  # a host found without a worker in this run: its next arms wait this long
POLL_S = 1.0
MAX_DISPATCHES = 3  # a crashed arm is sent again at most this many times in all
STOP_WAIT_S = 10.0  # after Ctrl-C: how long to wait for a worker to record its arm's stop


class PlacementUnavailable(Exception):
    """Arms name hosts but there is no lasting Prefect server to reach their workers;
    the message is one line with the set-up."""


_absent_hosts: set[str] = set()  # hosts whose worker did not pick an arm up, in this process


def wait_limit_s(host: str = "") -> float:
    try:
        limit = float(os.environ.get(WAIT_SETTING) or DEFAULT_WAIT_S)
    except ValueError:
        limit = DEFAULT_WAIT_S
    return min(limit, ABSENT_WAIT_S) if host in _absent_hosts else limit


def hosts_of(spec: CampaignSpec) -> list[str]:
    """The hosts the campaign's queued arms are placed on."""
    return sorted({spec.host_of(arm) for item in spec.queue for arm in item.arms} - {""})


def deployment_name(host: str) -> str:
    """The deployment a host's worker serves; `arm/<this>` is what `run_deployment` takes."""
    return f"arm-{host}"


def campaign_deployment_name(host: str) -> str:
    """The deployment of the whole campaign flow a host's worker serves (`campaign/<this>`),
    for launching and rerunning a campaign from the Prefect UI."""
    return f"campaign-{host}"


def placement_problem(spec: CampaignSpec) -> str | None:
    """One line on what is missing to run a campaign whose arms name hosts, or None."""
    hosts = hosts_of(spec)
    if not hosts or configured_api_url():
        return None
    names = ", ".join(hosts)
    return (
        f"arms of {spec.campaign.name!r} run on hosts {names}, which needs a Prefect server all machines reach: "
        "start one (`prefect server start --host 0.0.0.0`), `export PREFECT_API_URL=http://SERVER:4200/api` here and on "
        f"each host, and run `campaign worker --host NAME` on each of {names} with the same CAMPAIGN_DB"
    )


def arm_tags(spec: CampaignSpec, item_key: str, arm_id: str, device: str) -> list[str]:
    """Tags of an arm's flow run, to filter the Prefect UI by any of them."""
    runtime = spec.runtime(spec.arm(arm_id).runtime)
    return [
        f"campaign:{spec.campaign.name}",
        f"item:{item_key}",
        f"arm:{arm_id}",
        f"device:{device}",
        f"host:{spec.host_of(arm_id) or 'local'}",
        f"runtime:{runtime.name}",
        *(
            ["search:trial"]
            if is_trial_item(item_key)
            else ["search:confirm"]
            if item_key.startswith(SEARCH_ITEM_PREFIX)
            else []
        ),
    ]


def _no_worker(store: Store, host: str, run: ArmRun, message: str) -> ArmOutcome:
    """The arm's attempt, recorded `blocked` on `host` with `message`: no worker took it.
    Recorded (not only returned) so that the gates, `campaign status` and `resume` see
    which arm waits for which host. If a worker claimed it after all, in the instant
    before its run was cancelled, that attempt is left to its holder."""
    from campaign.store.tables import utcnow

    _absent_hosts.add(host)
    how, attempt = store.claim_attempt(
        run.campaign_id, run.item_key, run.arm_id, run.overrides, run.block.index, fresh=True
    )
    if how == AttemptClaim.NEW and attempt is not None and attempt.id is not None:
        store.update(AttemptRow, attempt.id, state=AttemptState.BLOCKED, error=message, host=host, ended_at=utcnow())
    elif (
        how == AttemptClaim.RESUMED and attempt is not None and attempt.id is not None
    ):  # keep its finished probes for the worker
        store.update(AttemptRow, attempt.id, state=AttemptState.INTERRUPTED, error=message, ended_at=utcnow())
    return _outcome(run, AttemptState.BLOCKED, message, attempt.id if attempt is not None else None)


def _outcome(run: ArmRun, state: str, message: str = "", attempt_id: int | None = None) -> ArmOutcome:
    return ArmOutcome(run.arm_id, arm_state(state), message, attempt_id, run.block.index, run.item_key)


def _attempt_of(store: Store, run: ArmRun, flow_run_id: str) -> AttemptRow | None:
    """The attempt the flow run holds; for a run that found the arm already done (not
    `fresh`), the newest done attempt."""
    rows = [a for a in store.attempts(run.campaign_id, run.item_key, run.arm_id) if a.repeat == run.block.index]
    mine = [a for a in rows if a.flow_run_id == flow_run_id]
    if mine:
        return mine[-1]
    if rows and rows[-1].state == AttemptState.DONE and not run.fresh:
        return rows[-1]
    return None


def _stopped_attempt(store: Store, run: ArmRun, flow_run_id: str, waiting: bool) -> AttemptRow | None:
    """The attempt of a flow run this Ctrl-C cancelled, once its worker has recorded the
    stop (the runner sends the run's process SIGTERM; `interrupt.stop_on_sigterm` stops
    the arm and marks it interrupted), so that the line `campaign run` ends with is true
    and a `campaign resume` right after finds the attempt free. Waits at most
    STOP_WAIT_S: a worker that is gone leaves it to `resume`, which proves it dead."""
    deadline = time.monotonic() + (STOP_WAIT_S if waiting else 0.0)
    while True:
        attempt = _attempt_of(store, run, flow_run_id)
        if (attempt is not None and attempt.state != AttemptState.RUNNING) or time.monotonic() > deadline:
            return attempt
        time.sleep(POLL_S / 4)


def run_on_host(store: Store, host: str, run: ArmRun, tags: list[str]) -> ArmOutcome:
    """Run one arm on `host`'s worker and return its outcome as the store records it."""
    if not configured_api_url():
        raise PlacementUnavailable(
            f"arm {run.arm_id} runs on host {host}, but no lasting Prefect server is configured (PREFECT_API_URL)"
        )
    for _ in range(MAX_DISPATCHES):
        outcome = _dispatch_once(store, host, run, tags)
        if outcome is not None:
            return outcome
    return _outcome(run, AttemptState.FAILED, f"the arm's flow run on host {host} crashed {MAX_DISPATCHES} times")


def _dispatch_once(store: Store, host: str, arm_run: ArmRun, tags: list[str]) -> ArmOutcome | None:
    """One flow run of the host's deployment, followed to its end. None: its holder died
    mid-arm (or the run crashed) and the arm should be sent again."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import FlowRun, StateType
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Cancelled, Cancelling, Crashed

    arm_id, item_key = arm_run.arm_id, arm_run.item_key
    limit = wait_limit_s(host)
    began = time.monotonic()
    hint = f"start `campaign worker --host {host}` on that machine (waiting up to {limit:.0f} s, {WAIT_SETTING})"
    said = False
    name = f"arm/{deployment_name(host)}"
    while True:
        try:
            flow_run = cast(  # called from sync code, run_deployment runs to its FlowRun; its type says either
                FlowRun,
                run_deployment(
                    name=name,
                    parameters={"run": arm_run.model_dump(mode="json")},
                    tags=tags,
                    as_subflow=True,
                    timeout=0,
                ),
            )
            break
        except ObjectNotFound:
            if time.monotonic() - began > limit:
                return _no_worker(
                    store, host, arm_run, f"no worker has ever served host {host} (deployment {name}): {hint}"
                )
            if not said:
                emit("arm-wait", arm=arm_id, item=item_key, message=f"no worker serves host {host} yet: {hint}")
                said = True
            interrupt.check(f"waiting for a worker on {host}")
            time.sleep(POLL_S * 2)
    run_id = str(flow_run.id)
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(flow_run.id)
            state = run.state
            kind = state.type if state is not None else StateType.SCHEDULED
            if interrupt.requested():  # Cancelling: the worker stops the run (its server with it)
                stop = Cancelled if kind in (StateType.SCHEDULED, StateType.PENDING) else Cancelling
                client.set_flow_run_state(flow_run.id, stop(message="the campaign run was stopped"), force=True)
                attempt = _stopped_attempt(store, arm_run, run_id, waiting=stop is Cancelling)
                return _outcome(
                    arm_run, AttemptState.INTERRUPTED, f"stopped on host {host}", attempt.id if attempt else None
                )
            if kind in (StateType.SCHEDULED, StateType.PENDING):
                waited = time.monotonic() - began
                if waited > limit:
                    client.set_flow_run_state(
                        flow_run.id, Cancelled(message=f"no worker for host {host} picked it up"), force=True
                    )
                    return _no_worker(
                        store,
                        host,
                        arm_run,
                        f"no worker for host {host} picked up the arm within {limit:.0f} s: {hint}",
                    )
                if waited > 10 and not said:
                    emit("arm-wait", arm=arm_id, item=item_key, message=f"waiting for a worker on host {host}: {hint}")
                    said = True
            elif state is not None and state.is_final():
                _absent_hosts.discard(host)
                attempt = _attempt_of(store, arm_run, run_id)
                if attempt is not None and attempt.state == AttemptState.INTERRUPTED and not interrupt.requested():
                    return None  # its worker was stopped (not this run): send it again, the next run continues it
                if attempt is not None and attempt.state != AttemptState.RUNNING:
                    return _outcome(arm_run, attempt.state, attempt.error, attempt.id)
                if attempt is not None or kind == StateType.CRASHED:
                    return None  # died holding the attempt, or before claiming it: send it again
                return _outcome(
                    arm_run,
                    AttemptState.FAILED,
                    f"flow run {run.name} on host {host} ended {state.name}: {state.message or ''}".rstrip(": "),
                )
            else:  # running: its holder must stay alive
                attempt = _attempt_of(store, arm_run, run_id)
                gone = holder_gone(attempt) if attempt is not None and attempt.state == AttemptState.RUNNING else None
                if gone:
                    client.set_flow_run_state(
                        flow_run.id, Crashed(message=f"worker on {host} died: {gone}"), force=True
                    )
                    emit(
                        "arm-wait",
                        arm=arm_id,
                        item=item_key,
                        message=f"the worker on host {host} died mid-arm ({gone}); sending the arm again",
                    )
                    return None
            time.sleep(POLL_S)
