"""The campaign flow: walk the queue in order, run each ready item's arms, compute verdicts.

State lives in the store; this flow only moves it. Re-running it on the same database is
`resume`: finished items are skipped, interrupted attempts are continued, and blocked
items are re-checked first when asked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow
from pydantic import BaseModel, ConfigDict
from pydantic import Field as PydanticField

from campaign.core.schema import CampaignFileError, CampaignSpec
from campaign.core.states import ItemState
from campaign.store import queue
from campaign.store.store import Store
from campaign.store.study import expanded, search_finished
from campaign.store.summary import PREFECT_API_EVENT
from flows import interrupt, placement, queue_runs
from flows import overrides as override_keys
from flows.artifacts import artifact_key, publish
from flows.devices import release_lease
from flows.groups import run_group, server_group
from flows.lanes import ensure_device_limits, run_item
from flows.overrides import with_item_overrides
from flows.prefect_api import configured_api_url
from flows.progress import emit
from flows.resolve import load_campaign, simulated_adapters
from flows.search import run_search
from flows.verdicts import compute_verdicts


def _campaign_run_name() -> str:
    """The campaign flow run is named after the campaign (what the user looks for under
    Runs in the Prefect UI), read from the file; the file's stem if it cannot be read
    (the flow then fails with the file's own error)."""
    import tomllib

    from prefect.runtime import flow_run

    path = str(flow_run.parameters.get("campaign_path", ""))
    try:
        with open(path, "rb") as fh:
            name = tomllib.load(fh)["campaign"]["name"]
        return str(name) if name else Path(path).stem
    except (OSError, ValueError, KeyError, TypeError):
        return Path(path).stem or "campaign"


@flow(name="campaign", flow_run_name=_campaign_run_name, log_prints=False, persist_result=False)
def campaign_flow(
    campaign_path: str, store_url: str, workdir: str = ".campaign", recheck_blocked: bool = False
) -> dict[str, Any]:
    """Run the queue. Only one process runs a campaign at a time (`queue.claim_runner`;
    `RunnerBusy` names the other one). A Ctrl-C returns `{"interrupted": ...}`."""
    spec = load_campaign(campaign_path)
    return _campaign(spec, campaign_path, Store(store_url), workdir, recheck_blocked)


def _campaign(
    spec: CampaignSpec, campaign_path: str, store: Store, workdir: str, recheck_blocked: bool
) -> dict[str, Any]:
    problems = override_keys.check_campaign(spec)  # the command line said so already; callers of the flow hear it too
    if problems:
        raise CampaignFileError(campaign_path, problems)
    taken = queue.claim_runner(store, spec.campaign.name, "campaign resume" if recheck_blocked else "campaign run")
    try:
        return _run_queue(spec, store, campaign_path, workdir, recheck_blocked)
    finally:
        if taken:
            queue.release_runner(store, spec.campaign.name)


def _run_queue(
    spec: CampaignSpec, store: Store, campaign_path: str, workdir: str, recheck_blocked: bool
) -> dict[str, Any]:
    problem = placement.placement_problem(spec)
    if problem:
        raise placement.PlacementUnavailable(problem)
    spec = expanded(store, spec)  # a search's trials and confirmation so far
    row = queue.register(store, spec, campaign_path, simulated_adapters())
    campaign_id = row.id
    assert campaign_id is not None
    note_prefect_api(store, campaign_id)
    for note in queue.recover(store, campaign_id, release_lease):
        store.log_event(campaign_id, "recover", note)
    if recheck_blocked:
        for item_row in store.items(campaign_id):
            if item_row.state == ItemState.BLOCKED:
                queue.move_item(store, campaign_id, item_row.key, ItemState.PENDING, "re-checking a blocked item")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    ensure_device_limits(spec)
    emit(
        "campaign-start",
        name=spec.campaign.name,
        items=len(spec.queue),
        artifact=artifact_key(spec.campaign.name, "queue"),
    )
    _show(store, spec, campaign_id)
    verdicts = None  # as of the last item run
    while True:
        item = queue.next_item(store, spec, campaign_id)
        if item is None and not search_finished(store, spec):
            try:
                spec = run_search(store, spec, campaign_id, workdir, simulated_adapters())
            except interrupt.CampaignInterrupted as exc:
                _show(store, spec, campaign_id)
                return {"campaign": spec.campaign.name, "interrupted": str(exc)}
            queue.register(store, spec, campaign_path, simulated_adapters())
            _show(store, spec, campaign_id)
            continue
        if item is None:
            break
        try:
            run_group(store, spec, campaign_id, server_group(store, spec, campaign_id, item), workdir)
        except interrupt.CampaignInterrupted as exc:  # returned, not raised: a stop is no flow failure
            _show(store, spec, campaign_id)
            return {"campaign": spec.campaign.name, "interrupted": str(exc)}
        verdicts = compute_verdicts(store, spec, campaign_id)
        _show(store, spec, campaign_id)
    waiting = queue.waiting_reasons(store, spec, campaign_id)
    for key, reason in waiting.items():
        queue.move_item(store, campaign_id, key, ItemState.PENDING, reason)
    if verdicts is None or waiting:  # nothing ran, or items changed state since
        verdicts = compute_verdicts(store, spec, campaign_id)
        _show(store, spec, campaign_id)
    emit("campaign-done", name=spec.campaign.name)
    return {
        "campaign": spec.campaign.name,
        "items": {r.key: str(r.state) for r in store.items(campaign_id)},
        "verdicts": {v.gate_id: str(v.verdict) for v in verdicts},
    }


def _show(store: Store, spec: CampaignSpec, campaign_id: int) -> None:
    """What the Prefect UI shows of the campaign, brought up to date: the queue artifact,
    the gate artifacts, and a flow run per queue item in its item's state."""
    publish(store, spec.campaign.name)
    queue_runs.sync(store, spec, campaign_id)


def note_prefect_api(store: Store, campaign_id: int) -> None:
    """Record which Prefect server this run's flow runs go to (`PREFECT_API_EVENT`; an
    empty message for a temporary one), so that `campaign status` and the report link an
    attempt to its flow run only where that link can still open
    (`campaign.store.summary.attempt_links`)."""
    store.log_event(campaign_id, PREFECT_API_EVENT, configured_api_url() or "")


class CampaignLaunch(BaseModel):
    """What the `campaign` deployment asks for in the Prefect UI's run form: typed, so
    the UI shows a form and a rerun repeats it. The credentials are never here: the
    worker's own $CAMPAIGN_DB (or --db) names the shared database."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign: str = PydanticField(
        min_length=1,
        description="the campaign's name in the shared database, or the path of a campaign file on the worker's host",
    )
    workdir: str = PydanticField(default=".campaign", description="where server logs go, on the worker's host")
    recheck_blocked: bool = PydanticField(
        default=False, description="re-check blocked items first, as `campaign resume` does"
    )


def named_campaign(store: Store, campaign: str) -> tuple[CampaignSpec, str]:
    """The spec and source path a launch names: a campaign file readable here (a path
    that exists, or ends in .toml), else the campaign of that name in the store, its spec
    as last registered (`CampaignRow.spec_json`)."""
    path = Path(campaign).expanduser()
    if path.is_file() or campaign.endswith(".toml"):
        return load_campaign(path), str(path)
    row = store.campaign(campaign)
    if row is None or not row.spec_json:
        known = ", ".join(repr(r.name) for r in store.campaigns()) or "none yet"
        raise LookupError(
            f"no campaign file {campaign!r} on this host and no campaign of that name in {store.public_url} (campaigns: {known})"
        )
    return CampaignSpec.model_validate_json(row.spec_json), row.source_path


@flow(
    name="campaign", flow_run_name="{launch.campaign}", log_prints=False, persist_result=False, validate_parameters=True
)
def campaign_launch_flow(launch: CampaignLaunch) -> dict[str, Any]:
    """The `campaign/campaign-HOST` deployment (`campaign worker --host HOST` serves it):
    the same queue walk as `campaign run` (`campaign_flow`), in this flow run, against
    the worker's database. A rerun from the UI is a `campaign run` again: finished items
    are skipped and interrupted ones continued."""
    from campaign.store.database import database_url

    store = Store(database_url())
    spec, source = named_campaign(store, launch.campaign)
    return _campaign(spec, source, store, launch.workdir, launch.recheck_blocked)


@flow(name="rerun", flow_run_name="rerun {item_key}", log_prints=False, persist_result=False)
def rerun_flow(
    campaign_path: str, store_url: str, item_key: str, overrides: dict[str, Any], workdir: str = ".campaign"
) -> dict[str, Any]:
    """New attempts of a finished item. With the settings it ran under (no overrides, or the
    same ones again) they are more blocks of the same question: added after the blocks
    already run, and its gate then reads a confidence sequence over all of them
    (`gates.looks`). With other settings they are a new question, which verdicts read
    instead of the old one; older attempts stay as history. `overrides` are as
    `flows.overrides.check_rerun` makes them (bare recipe fields as recipe.<field>);
    anything else is refused here."""
    store = Store(store_url)
    file_spec = expanded(store, load_campaign(campaign_path))
    problems = override_keys.check(file_spec, file_spec.item(item_key), overrides, "overrides")
    if problems:
        raise CampaignFileError(campaign_path, problems)
    taken = queue.claim_runner(store, file_spec.campaign.name, "campaign rerun")
    try:
        row = queue.register(store, file_spec, campaign_path, simulated_adapters())
        campaign_id = row.id
        assert campaign_id is not None
        note_prefect_api(store, campaign_id)
        spec = with_item_overrides(file_spec, item_key, overrides)
        item = spec.item(item_key)
        ensure_device_limits(spec)
        store.log_event(campaign_id, "rerun", json.dumps(overrides, sort_keys=True), item_key)
        try:
            state = run_item(store, spec, campaign_id, item, workdir, fresh=True, add_blocks=True)
        except interrupt.CampaignInterrupted as exc:
            return {"item": item_key, "interrupted": str(exc)}
        verdicts = compute_verdicts(store, file_spec, campaign_id)
        publish(store, file_spec.campaign.name)
        return {"item": item_key, "state": str(state), "verdicts": {v.gate_id: str(v.verdict) for v in verdicts}}
    finally:
        if taken:
            queue.release_runner(store, file_spec.campaign.name)
