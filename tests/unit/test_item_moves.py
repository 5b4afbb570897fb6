"""A queue item's state has one owner (`campaign.store.queue.move_item`): every move is
checked against one table of allowed moves and logged as an event."""

from __future__ import annotations

import pytest

from campaign.core.states import TERMINAL_ITEM_STATES, ItemState
from campaign.store import queue
from campaign.store.store import Store
from campaign.store.tables import CampaignRow, QueueItemRow


def test_an_item_starts_ends_and_goes_back_to_pending_through_one_function(db_url: str) -> None:
    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    cid = camp.id or 0
    store.add(QueueItemRow(campaign_id=cid, key="k", position=0, title="k"))
    queue.move_item(store, cid, "k", ItemState.RUNNING)
    queue.move_item(store, cid, "k", ItemState.DONE, "ok")
    queue.move_item(store, cid, "k", ItemState.RUNNING)  # a rerun starts a finished item again
    queue.move_item(store, cid, "k", ItemState.PENDING, "interrupted")
    (row,) = store.items(cid)
    assert (row.state, row.reason) == (ItemState.PENDING, "interrupted")
    assert [e.to_state for e in store.events(cid)] == ["running", "done", "running", "pending"]


def test_a_move_the_table_does_not_allow_is_refused_and_nothing_is_written(db_url: str) -> None:
    store = Store(db_url)
    cid = store.add(CampaignRow(name="c")).id or 0
    store.add(QueueItemRow(campaign_id=cid, key="k", position=0, title="k"))
    with pytest.raises(queue.ItemMoveRefused, match="from pending to done"):
        queue.move_item(store, cid, "k", ItemState.DONE)  # never finished without starting
    assert store.items(cid)[0].state == ItemState.PENDING and store.events(cid) == []


def test_the_table_covers_every_state_and_finished_states_never_swap() -> None:
    assert set(queue.ITEM_MOVES) == set(ItemState)
    for before in TERMINAL_ITEM_STATES:
        assert not queue.ITEM_MOVES[before] & TERMINAL_ITEM_STATES
        assert queue.item_may_move(before, ItemState.PENDING)
    assert queue.ITEM_MOVES[ItemState.RUNNING] >= TERMINAL_ITEM_STATES
