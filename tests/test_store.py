"""Store round-trip: rows written are read back; attempts are never overwritten."""

from __future__ import annotations

from pathlib import Path

from campaign.states import AttemptState, ItemState, ProbeRunState
from campaign.store import CampaignRow, MeasurementRow, ProbeRunRow, QueueItemRow, Store


def test_round_trip_and_latest_only(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    camp = store.add(CampaignRow(name="c", title="t"))
    store.add(QueueItemRow(campaign_id=camp.id, key="k", position=0, title="k"))
    first = store.new_attempt(camp.id, "k", "A", {"max_tokens": 8})
    second = store.new_attempt(camp.id, "k", "A", {})
    assert (first.number, second.number) == (1, 2)
    for att, value in ((first, 1.0), (second, 2.0)):
        run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0, state=ProbeRunState.DONE))
        store.add(MeasurementRow(campaign_id=camp.id, attempt_id=att.id, probe_run_id=run.id, item_key="k", arm_id="A", probe="decode", mode="canonical", metric="decode_tps", value=value))
        store.update(type(att), att.id, state=AttemptState.DONE)
    everything = store.measurements_frame(camp.id, latest_only=False)
    assert sorted(everything["value"]) == [1.0, 2.0]
    latest = store.measurements_frame(camp.id)
    assert list(latest["value"]) == [2.0]  # the newest attempt is what verdicts read
    assert len(store.attempts(camp.id)) == 2  # history kept

    store.set_item_state(camp.id, "k", ItemState.DONE, "ok")
    assert store.items(camp.id)[0].state == ItemState.DONE
    assert [e.to_state for e in store.events(camp.id)] == ["done"]


def test_unfinished_probe_runs_are_not_read(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "d.db") if "://" in str(tmp_path) else f"sqlite:///{tmp_path / 'd.db'}")
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0, state=ProbeRunState.INTERRUPTED))
    store.add(MeasurementRow(campaign_id=camp.id, attempt_id=att.id, probe_run_id=run.id, item_key="k", arm_id="A", probe="decode", mode="canonical", metric="m", value=1))
    store.update(type(att), att.id, state=AttemptState.DONE)
    assert store.measurements_frame(camp.id).empty
