"""One arm of one queue item: start its server, check identity, run each probe as a task.

The server is stopped on every exit path (success, exception, cancellation), and its
process group and command line are written to the attempt row before health is awaited,
so a killed campaign leaves enough behind for resume to clean up.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow

from arms.probes import registry as probes
from arms.probes.base import ProbeTarget, identify
from arms.runtimes import catalog as runtimes
from arms.runtimes.base import RuntimeAdapter
from arms.runtimes.launching import LaunchBlocked, LaunchSpec
from arms.server import ServerProcess, ServerStartError, free_port
from arms.telemetry.sources import where_of
from campaign.core.processes import rss_of_group
from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import AttemptClaim, AttemptState, ProbeRunState
from campaign.store.liveness import AttemptHeartbeat
from campaign.store.store import Store
from campaign.store.tables import AttemptRow
from flows import interrupt
from flows.arm_states import run_state
from flows.attempt import Attempt
from flows.contracts import NOT_RUN_ON_KEPT, ArmOutcome, ArmRun, Link, ProbeRun
from flows.devices import DeviceLock
from flows.launch import as_attempted, launch_context, launch_refusal, run_seed
from flows.overrides import probe_params, probe_settings_hash
from flows.probe_run import all_failed_reason, run_probe


def _identity_flags(spec: CampaignSpec, arm_id: str, identity: dict[str, Any]) -> list[str]:
    model = spec.model_for(spec.arm(arm_id))
    flags = []
    served = identity.get("served_models") or []
    if model.served_id and served and model.served_id not in served:
        flags.append(f"serves {', '.join(served)!s} but the campaign says {model.served_id}")
    if identity.get("error"):
        flags.append(identity["error"])
    return flags


def _arm_run_name() -> str:
    """campaign/item/arm, in-process and on a worker alike (where the parameters may
    still be the JSON a deployment run was given)."""
    from prefect.runtime import flow_run

    run = flow_run.parameters.get("run")
    try:
        return (run if isinstance(run, ArmRun) else ArmRun.model_validate(run)).name
    except ValueError:
        return "arm"


@flow(name="arm", flow_run_name=_arm_run_name, log_prints=False, persist_result=False)
def arm_flow(run: ArmRun) -> ArmOutcome:
    """One arm's attempt (`ArmRun`), then the attempts of later queue items chained onto
    its server (`run.then`): each an attempt of its own, run on the same server after
    this one is done. Their outcomes come back in `ArmOutcome.then`; one not run says why,
    in state `NOT_RUN_ON_KEPT`.

    A resumed attempt runs with the overrides stored on it, not with `run.item`'s: it
    continues what it started (a rerun's `--set` values included), so its probe runs
    finished before and after the stop were measured alike and under its label
    (`flows.launch.as_attempted`)."""
    spec, item = run.spec, run.item
    store = Store(run.store_url)
    from prefect.runtime import flow_run

    attempt = Attempt.claim(
        store,
        run.campaign_id,
        item.key,
        run.arm_id,
        dict(item.overrides),
        run.block,
        run.fresh,
        flow_run_id=str(flow_run.id or ""),
    )
    if attempt.how == AttemptClaim.DONE:
        return attempt.outcome(AttemptState.DONE).chained(
            [_not_run(run.arm_id, link, "its first attempt was done before") for link in run.then]
        )
    if attempt.how == AttemptClaim.RESUMED:
        item = as_attempted(item, attempt.row)
    with (
        interrupt.stop_on_sigterm() as stop,
        AttemptHeartbeat(store, attempt.id),
    ):  # a worker's cancelled run stops as on Ctrl-C
        result = _hold_and_run(spec, store, run, item, attempt)
    return stop.end_state(result.message) or run_state(result)


def _not_run(arm_id: str, link: Link, why: str) -> ArmOutcome:
    """A chained attempt this flow did not run: the campaign flow runs it on its own."""
    return ArmOutcome(
        arm_id, NOT_RUN_ON_KEPT, f"not run on the kept server: {why}", block=link.block.index, item_key=link.item_key
    )


def _hold_and_run(
    spec: CampaignSpec,
    store: Store,
    arm_run: ArmRun,
    item: QueueItem,
    attempt: Attempt,
) -> ArmOutcome:
    item_key, arm_id = item.key, attempt.arm_id
    links = list(arm_run.then)
    chained: list[ArmOutcome] = []

    def record_lease(lease_id: str) -> None:
        store.update(AttemptRow, attempt.id, device_lease=lease_id)

    def run() -> ArmOutcome:
        return _run_arm(spec, store, item, attempt, Path(arm_run.workdir), links, arm_run.fresh, chained)

    try:
        if arm_run.device_limit:
            lock = DeviceLock(
                arm_run.device_limit,
                on_lease=record_lease,
                device=spec.runtime(spec.arm(arm_id).runtime).device,
                attempt=attempt.id,
                what=f"{arm_run.campaign_name}: {item_key}/{arm_id}",
                on_wait=attempt.waiting_for_device,
            )
            with lock:
                outcome = run()
        else:
            outcome = run()
    except interrupt.CampaignInterrupted:  # stopped while waiting for the device
        outcome = attempt.interrupted()
    ran = {o.item_key for o in chained}
    last = (
        f"{chained[-1].item_key}/{arm_id} before it ended {chained[-1].state}"
        if chained
        else f"{item_key}/{arm_id} ended {outcome.state}"
    )
    chained += [_not_run(arm_id, link, last) for link in links if link.item_key not in ran]
    return outcome.chained(chained)


def _run_arm(
    spec: CampaignSpec,
    store: Store,
    item: QueueItem,
    attempt: Attempt,
    workdir: Path,
    links: list[Link] | None = None,
    fresh: bool = True,
    chained: list[ArmOutcome] | None = None,
) -> ArmOutcome:
    """Start the server, check its identity, run the probes not finished before; every
    end of the attempt is one transition of `attempt` (`flows.attempt`). Then, while the
    server lives and each attempt before ended done, the chained attempts (`links`) on
    the same server, their outcomes appended to `chained`."""
    arm_id, row = attempt.arm_id, attempt.row
    arm = spec.arm(arm_id)
    adapter: RuntimeAdapter = runtimes.get(spec.runtime(arm.runtime).adapter)
    port = free_port()
    tools = probes.needs_tools(item.probes)
    start_seed = run_seed(spec.campaign.name, item.key, arm_id, row.repeat, row.number)
    ctx = launch_context(spec, item, arm_id, port, dict(item.overrides), workdir, tools, start_seed)
    base_url = adapter.base_url(ctx)
    log_path = workdir / "logs" / spec.campaign.name / f"{item.key}-{arm_id}-r{row.repeat}-attempt{row.id}.log"
    attempt.started()
    start_block = _on_start(store, attempt, "") or row.block_id

    server_facts: dict[str, Any] = {}  # what the attempt row records of its server, for chained attempts too

    def on_started(pgid: int, cmdline: str) -> None:
        interrupt.track_server(pgid)  # a Ctrl-C stops it at once
        server_facts.update(server_pgid=pgid, server_cmdline=cmdline, server_log=str(log_path))
        store.update(AttemptRow, attempt.id, **server_facts)

    server = None
    try:
        try:
            try:
                launch = adapter.launch(ctx)  # may refuse a recipe the runtime cannot serve
            except LaunchBlocked as exc:  # its binary or model file is missing here
                return attempt.blocked(str(exc))
            if launch is not None:
                server = ServerProcess(
                    argv=launch.argv,
                    base_url=base_url,
                    log_path=log_path,
                    env=launch.env,
                    health_path=launch.health_path,
                    startup_timeout_s=launch.startup_timeout_s,
                    on_started=on_started,
                    ready=adapter.is_ready,
                )
                try:
                    server.__enter__()
                except ServerStartError as exc:
                    if interrupt.requested():
                        return attempt.interrupted()
                    verdict = adapter.start_failures.classify(exc.exit_code, exc.log_tail)
                    if verdict.blocked:
                        return attempt.blocked(verdict.message)
                    return attempt.failed(f"{exc}: {verdict.message}")

            speaks, target, identity = _attach(spec, arm_id, adapter, base_url, launch, log_path)
            served = Served(
                server,
                adapter,
                speaks,
                target,
                identity,
                attempt.campaign_id,
                attempt.id,
                server_facts,
                arm.recipe.slots,
                start_block,
                item,
            )
            outcome = _probe_attempt(spec, store, item, attempt, served)
        except Exception as exc:
            return _ended_by(exc, attempt, server)  # read before the server is stopped
        if outcome.state == AttemptState.DONE:
            _run_links(spec, store, links or [], arm_id, fresh, served, chained)
        return outcome
    finally:
        _stop(server)


def _attach(
    spec: CampaignSpec,
    arm_id: str,
    adapter: RuntimeAdapter,
    base_url: str,
    launch: LaunchSpec | None,
    log_path: Path,
) -> tuple[RuntimeAdapter, ProbeTarget, dict[str, Any]]:
    """The probe target for a live server, and what the server says it serves (with the
    identity flags). A server at a URL may be any runtime: its telemetry and dialect are
    those of the family its metrics page shows (`RuntimeAdapter.recognise`), learned once,
    here, and recorded as `recognised_as`."""
    model = spec.model_for(spec.arm(arm_id))
    speaks = adapter.recognise(base_url) if launch is None else adapter
    target = ProbeTarget(
        base_url=base_url,
        model=speaks.dialect.request_model or model.request_id,
        telemetry=speaks.telemetry,
        dialect=speaks.dialect,
        sampling=model.sampling.model_dump(exclude_none=True),
        simulated=adapter.simulated,
        # only a log that records the runtime's log counters is read (llama.cpp: -lv 4)
        log_path=str(log_path) if launch is not None and speaks.telemetry.log_counters_enabled(launch.argv) else None,
        cached_tokens_field=(launch.cached_tokens_field or "") if launch is not None else "",
    )
    identity = interrupt.run_cancellable(identify(target))
    identity.update({k: v for k, v in adapter.identity_extras(base_url).items() if k not in identity})
    identity["runtime_version"] = adapter.version(identity)  # what `campaign compare` sets side by side
    if speaks is not adapter:
        identity["recognised_as"] = speaks.name
    identity["flags"] = _identity_flags(spec, arm_id, identity)
    return speaks, target, identity


def _run_links(
    spec: CampaignSpec,
    store: Store,
    links: list[Link],
    arm_id: str,
    fresh: bool,
    served: Served,
    chained: list[ArmOutcome] | None,
) -> None:
    """The chained attempts on the kept server, in order, while it lives and each ends
    done; the rest run on servers of their own (the campaign flow sees them not run)."""
    server = served.server
    for link in links:
        if server is not None and server.proc is not None and server.proc.poll() is not None:
            return
        outcome = _run_link(spec, store, link, arm_id, fresh, served)
        if chained is not None:
            chained.append(outcome)
        if outcome.state != AttemptState.DONE:
            return


def _stop(server: ServerProcess | None) -> None:
    """Stop the attempt's server (every exit path: done, failed, interrupted) and forget
    it for Ctrl-C."""
    if server is not None:
        server.stop()
        if server.pgid:
            interrupt.untrack_server(server.pgid)


@dataclass(frozen=True)
class Served:
    """The running server an arm's attempts share: the first attempt started it."""

    server: ServerProcess | None
    adapter: RuntimeAdapter  # the runtime's: it flushes the cache
    speaks: RuntimeAdapter  # whose telemetry and dialect the target uses (`RuntimeAdapter.recognise`)
    target: ProbeTarget
    identity: dict[str, Any]
    campaign_id: int
    started_by: int  # the attempt that started it
    server_facts: dict[str, Any]  # its process group, command line and log, as that attempt recorded them
    slots: int
    block: str  # the start's block: what the attempts chained onto it store as their `server_block`
    item: QueueItem  # the item its launch was for, with the overrides it ran with (`launch_settings`)


def _probe_attempt(
    spec: CampaignSpec,
    store: Store,
    item: QueueItem,
    attempt: Attempt,
    served: Served,
) -> ArmOutcome:
    """Record the server's identity on the attempt, run its item's probes not finished
    before, and end it (done, or failed when every request failed)."""
    arm_id, campaign_id, row = attempt.arm_id, attempt.campaign_id, attempt.row
    overrides = dict(item.overrides)
    arm = spec.arm(arm_id)
    identity, target = served.identity, served.target
    store.update(
        AttemptRow,
        attempt.id,
        served_model=", ".join(identity.get("served_models") or []),
        fingerprint=identity.get("fingerprint", ""),
        identity_json=json.dumps(identity, default=str),
    )
    for flag in identity.get("flags", []):
        store.log_event(campaign_id, "identity-mismatch", flag, item.key, arm_id)
    done_before = {(r.probe, r.context) for r in store.probe_runs(attempt.id) if r.state == ProbeRunState.DONE}
    contexts = item.contexts or [arm.context]
    for probe in item.probes:
        pspec = probes.get(probe)
        for context in contexts if pspec.per_context else [0]:
            if (str(probe), context) in done_before:
                continue  # finished before a crash: never measured twice
            interrupt.check()
            params = probe_params(spec, item, probe, context, overrides, arm.context, block=row.repeat)
            job = ProbeRun(
                store_url=store.public_url,
                campaign_id=campaign_id,
                attempt_id=attempt.id,
                block=row.repeat,
                item_key=item.key,
                arm_id=arm_id,
                probe=str(probe),
                context=context,
                base_url=target.base_url,
                speaks=served.speaks.name,
                simulated=target.simulated,
                model=target.model,
                sampling=target.sampling,
                params_json=params.model_dump_json(),
                cached_tokens_field=target.cached_field,
                log_path=target.log_path,
                settings_hash=probe_settings_hash(probe, params, overrides),
                **telemetry_fields(served),
            )
            run_probe(job)
    interrupt.check()
    failure = all_failed_reason(store.request_outcome(attempt.id))
    if failure:  # measured nothing: the item's numbers would be empty, not slow
        return attempt.failed(failure)
    server = served.server
    return attempt.done(rss_of_group(server.pgid) if server and server.pgid else None)


def telemetry_fields(served: Served) -> dict[str, Any]:
    """Where the server runs, for the probe run's telemetry: a simulator reads its own
    device; a server this campaign started (or one at a loopback URL) this machine's,
    limited to its process group and the devices its environment lets it see."""
    server = served.server
    env = {**os.environ, **((server.env or {}) if server else {})}
    where = where_of(served.target.simulated, server is not None, served.target.base_url)
    return {
        "telemetry": str(where),
        "server_pgid": server.pgid if server else None,
        "visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
    }


def _run_link(spec: CampaignSpec, store: Store, link: Link, arm_id: str, fresh: bool, served: Served) -> ArmOutcome:
    """One chained attempt on the kept server: claimed as any attempt is (done at once
    when it was done before), its server recorded as the one `served.started_by`
    started (an event says so), the cache emptied first where one of its probes needs
    it cold."""
    from prefect.runtime import flow_run

    differs = launch_refusal(spec, store, served.campaign_id, link, arm_id, served.item, fresh)
    if differs:
        store.log_event(
            served.campaign_id,
            SERVER_NOT_KEPT,
            f"not on the kept server of attempt {served.started_by}: {differs}",
            link.item_key,
            arm_id,
        )
        return _not_run(arm_id, link, differs)
    attempt = Attempt.claim(
        store,
        served.campaign_id,
        link.item_key,
        arm_id,
        dict(link.item.overrides),
        link.block.model_copy(update={"server_block": served.block}),
        fresh,
        flow_run_id=str(flow_run.id or ""),
    )
    if attempt.how == AttemptClaim.DONE:
        return attempt.outcome(AttemptState.DONE)
    item = as_attempted(link.item, attempt.row) if attempt.how == AttemptClaim.RESUMED else link.item
    attempt.started()
    _on_start(store, attempt, served.block)
    with AttemptHeartbeat(store, attempt.id):
        try:
            if served.server_facts:
                store.update(AttemptRow, attempt.id, **served.server_facts)
            store.log_event(
                attempt.campaign_id,
                SERVER_KEPT,
                f"on the server attempt {served.started_by} started (same arm, recipe and block)",
                item.key,
                arm_id,
            )
            if any(probes.get(p).cold_cache for p in item.probes):
                did = served.adapter.flush_cache(served.target.base_url, served.slots)
                store.log_event(attempt.campaign_id, CACHE_FLUSHED, f"{did}, before its probes", item.key, arm_id)
            return _probe_attempt(spec, store, item, attempt, served)
        except Exception as exc:
            return _ended_by(exc, attempt, served.server)


# events of a chained attempt: the server it ran on was kept, and its cache emptied; or it
# was not run there, its launch settings differing (`launch_differences`)
SERVER_KEPT, CACHE_FLUSHED, SERVER_NOT_KEPT = "server-kept", "cache-flushed", "server-not-kept"


def _on_start(store: Store, attempt: Attempt, block: str) -> str:
    """The start `attempt` runs on now (`block`, the starting attempt's block; '' for a
    start of its own), as its `server_block` says, which is returned. A continued attempt
    made for another start (chained before, alone now, or the reverse) takes this one's
    while none of its probe runs has finished: its rows all come from this start. Once
    one has, the label stays with the start its first rows came from, as a continued
    attempt's rows are one run wherever its server restarted."""
    row = attempt.row
    if row.server_block == block or any(r.state == ProbeRunState.DONE for r in store.probe_runs(attempt.id)):
        return row.server_block
    store.update(AttemptRow, attempt.id, server_block=block)
    row.server_block = block
    return block


def _ended_by(exc: Exception, attempt: Attempt, server: ServerProcess | None) -> ArmOutcome:
    """The attempt's end for an exception raised while it ran: interrupted on a stop,
    else failed, saying whether the server had exited."""
    if isinstance(exc, interrupt.CampaignInterrupted) or interrupt.requested():
        return attempt.interrupted()
    tail = ""
    if server is not None and server.proc is not None and server.proc.poll() is not None:
        tail = f" (server exited with code {server.proc.returncode})"
    return attempt.failed(f"{type(exc).__name__}: {exc}{tail}")
