"""The queue as Prefect runs (`flows.queue_runs`), against a real Prefect server: a run per
queue item before any runs, in its item's state; a blocked item is a state named
"Blocked" with its reason, so the UI's run list can filter on it; nothing is made twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.core.states import ItemState
from campaign.store import queue
from campaign.store.store import Store
from flows import queue_runs
from flows.resolve import load_campaign, simulated_adapters


@pytest.mark.integration
def test_each_queue_item_is_a_prefect_run_in_its_state(tmp_path: Path, examples: Path, prefect_harness: None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterStateName, FlowRunFilterTags

    spec = load_campaign(examples / "demo.toml")
    spec = spec.model_copy(update={"campaign": spec.campaign.model_copy(update={"name": f"qr-{tmp_path.name}"})})
    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    row = queue.register(store, spec, "", simulated_adapters())
    assert row.id is not None
    keys = [q.key for q in spec.queue]
    assert queue_runs.sync(store, spec, row.id) == len(keys)  # every item visible before anything ran

    def runs() -> dict[str, object]:
        with get_client(sync_client=True) as client:
            found = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    tags=FlowRunFilterTags(all_=["queue-item", f"campaign:{spec.campaign.name}"])
                )
            )
        return {next(t[5:] for t in r.tags if t.startswith("item:")): r for r in found}

    before = runs()
    assert sorted(before) == sorted(keys) and all(r.state.type.value == "PENDING" for r in before.values())
    queue.move_item(store, row.id, keys[0], ItemState.RUNNING)
    queue.move_item(store, row.id, keys[0], ItemState.DONE)
    queue.move_item(store, row.id, keys[1], ItemState.RUNNING)
    queue.move_item(store, row.id, keys[1], ItemState.BLOCKED, "the server would not start: no GPU")
    assert queue_runs.sync(store, spec, row.id) == 2
    after = runs()
    assert len(after) == len(keys)  # moved, not made again
    assert after[keys[0]].state.name == "Completed"
    blocked = after[keys[1]].state
    assert blocked.name == "Blocked" and blocked.message == "the server would not start: no GPU"
    assert after[keys[2]].state.name == "Pending"
    assert queue_runs.sync(store, spec, row.id) == 0  # nothing changed, nothing set
    with get_client(sync_client=True) as client:  # what the UI's state filter asks
        named = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                tags=FlowRunFilterTags(all_=[f"campaign:{spec.campaign.name}"]),
                state=dict(name=FlowRunFilterStateName(any_=["Blocked"])),
            )
        )
    assert [r.id for r in named] == [after[keys[1]].id]
