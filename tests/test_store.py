"""Store round-trip: rows written are read back; attempts are never overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

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


# -- the probe sink: rows queued by the probe, stored by a writer thread in batches ----------------


def _sink_fixture(tmp_path: Path):  # type: ignore[no-untyped-def]
    from flows.sink import StoreSink

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0))
    return store, camp, att, run, (lambda **kw: StoreSink(store, camp.id, att.id, run.id, "k", "A", "decode", False, 0, **kw))


def _count(store: Store, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql(f"select count(*) from {table}").scalar() or 0)


def test_store_sink_never_writes_on_the_callers_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's call only queues: a slow database (0.2 s a commit) does not slow the
    calls, rows go in a few batches from another thread, and close() stores them all."""
    import threading
    import time

    store, _camp, _att, run, make = _sink_fixture(tmp_path)
    real_insert = store.insert_rows
    calls: list[tuple[str, int]] = []

    def slow_insert(rows):  # type: ignore[no-untyped-def]
        rows = list(rows)
        calls.append((threading.current_thread().name, len(rows)))
        time.sleep(0.2)
        real_insert(rows)

    def no_add(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("a row was committed on the caller's thread")

    monkeypatch.setattr(store, "insert_rows", slow_insert)
    monkeypatch.setattr(store, "add", no_add)
    sink = make()
    started = time.perf_counter()
    for trial in range(300):
        sink.measurement(metric="decode_tps", value=trial, unit="tok/s", mode="canonical", trial=trial)
        sink.sample("queue_depth", trial * 0.5, 1.0, "load")
    spent = time.perf_counter() - started
    sink.close()
    assert spent < 0.2, spent  # 600 calls cost less than one commit
    assert _count(store, "measurement") == 300 and _count(store, "sample") == 300
    assert calls and all(name != threading.main_thread().name for name, _ in calls)
    assert len(calls) <= 10 and sum(n for _, n in calls) == 600  # batches, not a commit per row
    frame = store.measurements_frame(_camp.id, latest_only=False)
    assert sorted(frame["trial"]) == list(range(300)) and set(frame["probe_run_id"]) == {run.id}


def test_store_sink_flush_and_a_bad_row_costs_only_itself(tmp_path: Path) -> None:
    from flows.sink import SinkWriteError

    store, _camp, _att, _run, make = _sink_fixture(tmp_path)
    sink = make(flush_interval_s=5.0)  # would hold rows for 5 s without an explicit flush
    sink.measurement(metric="m", value=1, unit="", mode="canonical", trial=0)
    sink.flush()
    assert _count(store, "measurement") == 1
    sink.measurement(metric="m", value=2, unit="", mode="canonical", trial=0)  # same key: violates the unique constraint
    sink.measurement(metric="m", value=3, unit="", mode="canonical", trial=1)
    with pytest.raises(SinkWriteError, match="1 row"):
        sink.close()
    assert sorted(store.measurements_frame(_camp.id, latest_only=False)["value"]) == [1.0, 3.0]
    with pytest.raises(ValueError, match="NaN"):  # refused at the call, where it came from
        make().measurement(metric="m", value=float("nan"), unit="", mode="canonical")


@pytest.mark.parametrize("fail", [False, True])
def test_run_probe_stores_every_row_before_the_run_changes_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    """Done means every row is in the database; a failed probe keeps what it measured."""
    from pydantic import BaseModel

    from arms.probes import registry
    from flows import arm_flow

    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})

    async def probe(_target, sink, _params):  # type: ignore[no-untyped-def]
        for trial in range(50):
            sink.measurement(metric="decode_tps", value=trial, unit="tok/s", mode="canonical", trial=trial)
        if fail:
            raise RuntimeError("server went away")

    class NoParams(BaseModel):
        pass

    spec = registry.ProbeSpec(registry.ProbeName.DECODE, probe, NoParams, True)
    monkeypatch.setattr(registry, "get", lambda _name: spec)
    seen: list[tuple[str, int]] = []
    real_update = Store.update

    def update(self, row_type, row_id, **fields):  # type: ignore[no-untyped-def]
        if row_type is ProbeRunRow and "state" in fields:
            seen.append((str(fields["state"]), _count(self, "measurement")))
        return real_update(self, row_type, row_id, **fields)

    monkeypatch.setattr(Store, "update", update)
    args = (store.url, camp.id, att.id, 0, "k", "A", "decode", 0, "http://127.0.0.1:9", "simulator", "m", {}, "{}", "")
    if fail:
        with pytest.raises(RuntimeError, match="went away"):
            arm_flow.run_probe.fn(*args)
    else:
        arm_flow.run_probe.fn(*args)
    assert seen == [(ProbeRunState.FAILED if fail else ProbeRunState.DONE, 50)]


@pytest.mark.parametrize("state", [ProbeRunState.RUNNING, ProbeRunState.FAILED, ProbeRunState.INTERRUPTED])
def test_a_resumed_probe_run_is_counted_once(tmp_path: Path, state: ProbeRunState) -> None:
    """A crash leaves part of a probe run's rows behind; resume measures the run again under
    a new probe run. Verdicts read the finished run only: nothing counted twice."""
    store = Store(f"sqlite:///{tmp_path / 'x.db'}")
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    cut = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=1024, state=state))
    again = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=1024, state=ProbeRunState.DONE))
    rows = [(cut, t, 10.0) for t in range(2)] + [(again, t, 20.0) for t in range(4)]
    for run, trial, value in rows:
        store.add(MeasurementRow(campaign_id=camp.id, attempt_id=att.id, probe_run_id=run.id, item_key="k", arm_id="A", probe="decode", mode="canonical", context=1024, trial=trial, metric="decode_tps", value=value))
    store.update(type(att), att.id, state=AttemptState.DONE)
    frame = store.measurements_frame(camp.id)
    assert list(frame["value"]) == [20.0] * 4 and set(frame["probe_run_id"]) == {again.id}
    assert len(store.measurements_frame(camp.id, latest_only=False)) == 6  # history kept for export
