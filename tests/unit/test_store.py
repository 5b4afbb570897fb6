"""Store round-trip: rows written are read back; attempts are never overwritten."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from campaign.core import metrics
from campaign.core.states import AttemptState, ItemState, ProbeRunState
from campaign.store.store import Store
from campaign.store.tables import CampaignRow, MeasurementRow, ProbeRunRow, QueueItemRow
from tests.paths import FIXTURES_DIR


def test_round_trip_and_latest_only(db_url: str) -> None:
    store = Store(db_url)
    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    camp = store.add(CampaignRow(name="c", title="t"))
    store.add(QueueItemRow(campaign_id=camp.id, key="k", position=0, title="k"))
    first = store.new_attempt(camp.id, "k", "A", {"max_tokens": 8})
    store.update(type(first), first.id, state=AttemptState.FAILED)  # one running attempt per arm at a time
    second = store.new_attempt(camp.id, "k", "A", {})
    assert (first.number, second.number) == (1, 2)
    for att, value in ((first, 1.0), (second, 2.0)):
        run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0, state=ProbeRunState.DONE))
        store.add(
            MeasurementRow(
                campaign_id=camp.id,
                attempt_id=att.id,
                probe_run_id=run.id,
                item_key="k",
                arm_id="A",
                probe="decode",
                mode="canonical",
                metric="decode_tps",
                value=value,
            )
        )
        store.update(type(att), att.id, state=AttemptState.DONE)
    everything = store.measurements_frame(camp.id, latest_only=False)
    assert sorted(everything["value"]) == [1.0, 2.0]
    latest = store.measurements_frame(camp.id)
    assert list(latest["value"]) == [2.0]  # the newest attempt is what verdicts read
    assert len(store.attempts(camp.id)) == 2  # history kept

    store.set_item_state(camp.id, "k", ItemState.DONE, "ok")
    assert store.items(camp.id)[0].state == ItemState.DONE
    assert [e.to_state for e in store.events(camp.id)] == ["done"]


def test_unfinished_probe_runs_are_not_read(db_url: str) -> None:
    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0, state=ProbeRunState.INTERRUPTED))
    store.add(
        MeasurementRow(
            campaign_id=camp.id,
            attempt_id=att.id,
            probe_run_id=run.id,
            item_key="k",
            arm_id="A",
            probe="decode",
            mode="canonical",
            metric="m",
            value=1,
        )
    )
    store.update(type(att), att.id, state=AttemptState.DONE)
    assert store.measurements_frame(camp.id).empty


def test_repeats_under_different_overrides_are_never_pooled(db_url: str) -> None:
    """Three repeats ran with the item's settings; a rerun with `max_tokens=96` finished
    only repeat 0. The verdict reads repeat 0's rerun alone, not it pooled with repeats 1
    and 2 of the old settings (the SQL query and its Python twin agree)."""
    from campaign.store.measurements import newest_done_attempts

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))

    def measured(repeat: int, overrides: dict, value: float) -> int:
        att = store.new_attempt(camp.id, "k", "A", overrides, repeat)
        run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0, state=ProbeRunState.DONE))
        store.add(
            MeasurementRow(
                campaign_id=camp.id,
                attempt_id=att.id,
                probe_run_id=run.id,
                item_key="k",
                arm_id="A",
                repeat=repeat,
                probe="decode",
                mode="canonical",
                metric="decode_tps",
                value=value,
            )
        )
        store.update(type(att), att.id, state=AttemptState.DONE)
        return att.id or 0

    old = [measured(r, {}, 10.0 + r) for r in range(3)]
    assert sorted(store.measurements_frame(camp.id)["value"]) == [10.0, 11.0, 12.0]
    rerun = measured(0, {"max_tokens": 96}, 50.0)
    frame = store.measurements_frame(camp.id)
    assert list(frame["value"]) == [50.0], "repeats of other settings were pooled with the rerun"
    assert set(newest_done_attempts(store.attempts(camp.id)).values()) == set(frame["attempt_id"]) == {rerun}
    assert len(store.measurements_frame(camp.id, latest_only=False)) == 4 and old  # history kept


def _row_values(table, **given):  # type: ignore[no-untyped-def]
    """Values for every NOT NULL column of a reflected table without a default."""
    from datetime import UTC, datetime

    import sqlalchemy as sa

    out = {}
    for col in table.columns:
        if col.primary_key or col.nullable or col.server_default is not None:
            continue
        kind = col.type
        out[col.name] = (
            datetime.now(UTC)
            if isinstance(kind, sa.DateTime)
            else False
            if isinstance(kind, sa.Boolean)
            else 0
            if isinstance(kind, (sa.Integer, sa.Float))
            else "{}"
            if col.name.endswith("_json")
            else ""
        )
    return {**out, **given}


def _old_database(conn: Any, revision: str) -> tuple[Any, int, int, int]:
    """A database migrated to `revision` only, holding one campaign with one done attempt
    and one done decode probe run: (its tables, campaign id, attempt id, probe run id)."""
    import sqlalchemy as sa
    from alembic import command

    from campaign.store.migrate import _alembic_config

    command.upgrade(_alembic_config(conn), revision)
    meta = sa.MetaData()
    meta.reflect(conn)
    t = meta.tables
    cid = conn.execute(t["campaign"].insert().values(**_row_values(t["campaign"], name="old"))).inserted_primary_key[0]
    aid = conn.execute(
        t["attempt"]
        .insert()
        .values(
            **_row_values(t["attempt"], campaign_id=cid, item_key="k", arm_id="A", repeat=0, number=1, state="done")
        )
    ).inserted_primary_key[0]
    rid = conn.execute(
        t["probe_run"]
        .insert()
        .values(**_row_values(t["probe_run"], attempt_id=aid, probe="decode", context=0, state="done"))
    ).inserted_primary_key[0]
    return t, cid, aid, rid


def test_old_attempts_get_empty_block_fields_and_the_frame_carries_every_rows_block(db_url: str) -> None:
    """A database at revision 0002 (before blocks) with one measured attempt: upgraded,
    its attempt has '' and NULL for the block, and its rows say so in the frame; a new
    attempt's rows carry its block id, order, hashes and number. The frame's SQL and
    `newest_done_attempts` still agree on which attempts count."""
    import sqlalchemy as sa

    from campaign.store.measurements import FRAME_COLUMNS, newest_done_attempts
    from campaign.store.tables import AttemptRow

    raw = sa.create_engine(db_url)
    with raw.begin() as conn:
        t, cid, aid, rid = _old_database(conn, "0002")
        conn.execute(
            t["measurement"]
            .insert()
            .values(
                **_row_values(
                    t["measurement"],
                    campaign_id=cid,
                    attempt_id=aid,
                    probe_run_id=rid,
                    item_key="k",
                    arm_id="A",
                    probe="decode",
                    mode="canonical",
                    metric="decode_tps",
                    value=10.0,
                )
            )
        )
    raw.dispose()

    store = Store(db_url)  # upgrades to the newest revision
    (old,) = store.attempts(cid)
    assert (old.block_order, old.block_id, old.settings_hash, old.recipe_hash) == (None, "", "", "")
    frame = store.measurements_frame(cid)
    assert list(frame.columns) == FRAME_COLUMNS
    assert (
        frame["block_order"].isna().all() and list(frame["block_id"]) == [""] and list(frame["attempt_number"]) == [1]
    )

    block = {
        "block_order": 1,
        "block_id": "k/b1/abcdef01",
        "settings_hash": "abcdef0123456789",
        "recipe_hash": "0123456789abcdef",
    }
    new = store.new_attempt(cid, "k", "A", {}, 1, block=block)
    run = store.add(ProbeRunRow(attempt_id=new.id, probe="decode", context=0, state=ProbeRunState.DONE))
    store.add(
        MeasurementRow(
            campaign_id=cid,
            attempt_id=new.id,
            probe_run_id=run.id,
            item_key="k",
            arm_id="A",
            repeat=1,
            probe="decode",
            mode="canonical",
            metric="decode_tps",
            value=11.0,
        )
    )
    store.update(AttemptRow, new.id, state=AttemptState.DONE)
    for categorical in (False, True):
        frame = store.measurements_frame(cid, categorical=categorical).sort_values("value")
        assert list(frame["block_id"].astype(str)) == ["", "k/b1/abcdef01"]
        assert frame["block_order"].isna().tolist() == [True, False] and int(frame["block_order"].iloc[1]) == 1
        assert list(frame["settings_hash"].astype(str)) == ["", block["settings_hash"]]
        assert list(frame["recipe_hash"].astype(str)) == ["", block["recipe_hash"]]
        assert list(frame["attempt_number"]) == [1, 1] and str(frame["attempt_number"].dtype) == "int64"
    assert (
        set(newest_done_attempts(store.attempts(cid)).values())
        == set(store.measurements_frame(cid)["attempt_id"])
        == {aid, new.id}
    )
    with pytest.raises(KeyError, match="not a block field"):
        store.new_attempt(cid, "k", "A", {}, 2, block={"order": 1})
    with pytest.raises(KeyError, match="no measurement frame column"):
        store.measurements_frame(cid, columns=["value", "blocks"])


def test_the_sign_of_trial_becomes_the_rows_kind(db_url: str) -> None:
    """A database at revision 0004, where the sign of `trial` said what a row was (-1 a
    summary, -2 - i warm-up i): upgraded, each row has its kind and its number among its
    kind, warm-up requests their number too, and a summary and a sample of one metric can
    both be trial 0 (the unique key has the kind)."""
    import sqlalchemy as sa
    from sqlalchemy.exc import IntegrityError

    raw = sa.create_engine(db_url)
    with raw.begin() as conn:
        t, cid, aid, rid = _old_database(conn, "0004")
        for scenario, trial, metric, value in (
            ("decode", 0, "decode_tps", 10.0),
            ("decode", 1, "decode_tps", 12.0),
            ("decode", -1, "decode_tps_median", 11.0),
            ("decode:warmup", -2, "decode_tps", 1.0),
            ("decode:warmup", -3, "decode_tps", 2.0),
        ):
            conn.execute(
                t["measurement"]
                .insert()
                .values(
                    **_row_values(
                        t["measurement"],
                        campaign_id=cid,
                        attempt_id=aid,
                        probe_run_id=rid,
                        item_key="k",
                        arm_id="A",
                        probe="decode",
                        scenario=scenario,
                        mode="canonical",
                        trial=trial,
                        metric=metric,
                        value=value,
                    )
                )
            )
        conn.execute(
            t["request_record"]
            .insert()
            .values(
                **_row_values(
                    t["request_record"], probe_run_id=rid, scenario="decode:warmup", mode="canonical", trial=-3
                )
            )
        )
    raw.dispose()

    store = Store(db_url)  # upgrades to the newest revision
    frame = store.measurements_frame(cid).sort_values("value")
    assert [(str(k), t, v) for k, t, v in zip(frame["kind"], frame["trial"], frame["value"])] == [
        ("warmup", 0, 1.0),
        ("warmup", 1, 2.0),
        ("sample", 0, 10.0),
        ("summary", 0, 11.0),
        ("sample", 1, 12.0),
    ]
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT trial FROM request_record")).scalar_one() == 1
    row = {
        "campaign_id": cid,
        "attempt_id": aid,
        "probe_run_id": rid,
        "item_key": "k",
        "arm_id": "A",
        "probe": "decode",
        "scenario": "decode",
        "mode": "canonical",
        "metric": "decode_tps",
        "value": 9.0,
    }
    store.add(MeasurementRow(**row, kind="summary"))  # a summary beside sample 0 of the same metric
    with pytest.raises(IntegrityError):
        store.add(MeasurementRow(**row, kind="sample"))  # but one sample 0 per cell and metric


def test_request_outcome_sums_every_cells_requests_and_failures(db_url: str) -> None:
    """The summary rows of every finished probe run of an attempt, prefixed phases
    included; rows of a run that did not finish, and per-trial rows, are not counted."""
    from campaign.store.tables import RequestRow

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    done = store.add(ProbeRunRow(attempt_id=att.id, probe="agent-load", context=0, state=ProbeRunState.DONE))
    cut = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0, state=ProbeRunState.INTERRUPTED))

    def row(
        run: ProbeRunRow, metric: str, value: float, source: str = "", kind: str = "summary", scenario: str = "s"
    ) -> None:
        store.add(
            MeasurementRow(
                campaign_id=camp.id,
                attempt_id=att.id,
                probe_run_id=run.id,
                item_key="k",
                arm_id="A",
                probe=run.probe,
                scenario=scenario,
                mode="canonical",
                kind=kind,
                metric=metric,
                value=value,
                source=source,
            )
        )

    for prefix in ("", "baseline_"):
        row(done, f"{prefix}requests", 4)
        row(done, f"{prefix}requests_failed", 4)
        row(done, f"{prefix}requests_failed_http_400", 3, "HTTP 400")
        row(done, f"{prefix}requests_failed_stream_broken", 1, "stream broken")
        row(done, f"{prefix}requests_retried", 2)
        row(done, f"{prefix}requests_not_run", 5, "not run")
    row(done, "requests", 1, kind="sample", scenario="t")  # not a summary row
    row(cut, "requests", 9)
    row(cut, "requests_failed", 0)
    store.add(RequestRow(probe_run_id=done.id, ok=False, error='HTTP 400: {"error": {"message": "too long"}}'))
    store.add(RequestRow(probe_run_id=done.id, ok=True))
    store.add(RequestRow(probe_run_id=cut.id, ok=False, error="HTTP 503: busy"))
    outcome = store.request_outcome(att.id)
    assert (outcome.requests, outcome.failed) == (8, 8) and outcome.all_failed
    assert outcome.kinds == {"HTTP 400": 6, "stream broken": 2}
    assert outcome.errors == ['HTTP 400: {"error": {"message": "too long"}}']
    from flows.probe_run import all_failed_reason

    assert all_failed_reason(outcome) == "8/8 requests failed, HTTP 400: too long"
    empty = store.request_outcome(store.new_attempt(camp.id, "k", "B", {}).id)
    assert (empty.requests, empty.failed, empty.all_failed) == (0, 0, False) and all_failed_reason(empty) is None


# -- the probe sink: rows queued by the probe, stored by a writer thread in batches ----------------


def _sink_fixture(db_url: str):  # type: ignore[no-untyped-def]
    from flows.sink import StoreSink

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0))
    return (
        store,
        camp,
        att,
        run,
        (lambda **kw: StoreSink(store, camp.id, att.id, run.id, "k", "A", "decode", False, 0, **kw)),
    )


def _count(store: Store, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql(f"select count(*) from {table}").scalar() or 0)


def test_store_sink_never_writes_on_the_callers_thread(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's call only queues: a slow database (0.2 s a commit) does not slow the
    calls, rows go in a few batches from another thread, and close() stores them all."""
    import threading
    import time

    store, _camp, _att, run, make = _sink_fixture(db_url)
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
        sink.measurement(metric=metrics.DECODE_TPS, value=trial, mode="canonical", trial=trial)
        sink.sample("queue_depth", trial * 0.5, 1.0, "load")
    spent = time.perf_counter() - started
    sink.close()
    assert spent < 0.2, spent  # 600 calls cost less than one commit
    assert _count(store, "measurement") == 300 and _count(store, "sample") == 300
    assert calls and all(name != threading.main_thread().name for name, _ in calls)
    assert len(calls) <= 10 and sum(n for _, n in calls) == 600  # batches, not a commit per row
    frame = store.measurements_frame(_camp.id, latest_only=False)
    assert sorted(frame["trial"]) == list(range(300)) and set(frame["probe_run_id"]) == {run.id}
    assert set(frame["metric"]) == {"decode_tps"} and set(frame["unit"]) == {
        "tok/s"
    }  # the entry's name, in the catalogue's unit


def test_store_sink_flush_and_a_bad_row_costs_only_itself(db_url: str) -> None:
    from flows.sink import SinkWriteError

    store, _camp, _att, _run, make = _sink_fixture(db_url)
    sink = make(flush_interval_s=5.0)  # would hold rows for 5 s without an explicit flush
    sink.measurement(metric=metrics.TTFT_S, value=1, mode="canonical", trial=0)
    sink.flush()
    assert _count(store, "measurement") == 1
    sink.measurement(
        metric=metrics.TTFT_S, value=2, mode="canonical", trial=0
    )  # same key: violates the unique constraint
    sink.measurement(metric=metrics.TTFT_S, value=3, mode="canonical", trial=1)
    with pytest.raises(SinkWriteError, match="1 row"):
        sink.close()
    assert sorted(store.measurements_frame(_camp.id, latest_only=False)["value"]) == [1.0, 3.0]
    with pytest.raises(ValueError, match="NaN"):  # refused at the call, where it came from
        make().measurement(metric=metrics.TTFT_S, value=float("nan"), mode="canonical")


@pytest.mark.parametrize("fail", [False, True])
def test_run_probe_stores_every_row_before_the_run_changes_state(
    db_url: str, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    """Done means every row is in the database; a failed probe keeps what it measured."""
    from pydantic import BaseModel

    from arms.probes import registry
    from flows import probe_run

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})

    async def probe(_target, sink, _params):  # type: ignore[no-untyped-def]
        for trial in range(50):
            sink.measurement(metric=metrics.DECODE_TPS, value=trial, mode="canonical", trial=trial)
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
    from flows.contracts import ProbeRun

    job = ProbeRun(
        store_url=store.public_url,
        campaign_id=camp.id,
        attempt_id=att.id,
        block=0,
        item_key="k",
        arm_id="A",
        probe="decode",
        context=0,
        base_url="http://127.0.0.1:9",
        speaks="simulator",
        simulated=True,
        model="m",
        sampling={},
        params_json="{}",
        cached_tokens_field="",
    )
    if fail:
        with pytest.raises(RuntimeError, match="went away"):
            probe_run.run_probe(job)
    else:
        probe_run.run_probe(job)
    assert seen == [(ProbeRunState.FAILED if fail else ProbeRunState.DONE, 50)]


@pytest.mark.parametrize("state", [ProbeRunState.RUNNING, ProbeRunState.FAILED, ProbeRunState.INTERRUPTED])
def test_a_resumed_probe_run_is_counted_once(db_url: str, state: ProbeRunState) -> None:
    """A crash leaves part of a probe run's rows behind; resume measures the run again under
    a new probe run. Verdicts read the finished run only: nothing counted twice."""
    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    cut = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=1024, state=state))
    again = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=1024, state=ProbeRunState.DONE))
    rows = [(cut, t, 10.0) for t in range(2)] + [(again, t, 20.0) for t in range(4)]
    for run, trial, value in rows:
        store.add(
            MeasurementRow(
                campaign_id=camp.id,
                attempt_id=att.id,
                probe_run_id=run.id,
                item_key="k",
                arm_id="A",
                probe="decode",
                mode="canonical",
                context=1024,
                trial=trial,
                metric="decode_tps",
                value=value,
            )
        )
    store.update(type(att), att.id, state=AttemptState.DONE)
    frame = store.measurements_frame(camp.id)
    assert list(frame["value"]) == [20.0] * 4 and set(frame["probe_run_id"]) == {again.id}
    assert len(store.measurements_frame(camp.id, latest_only=False)) == 6  # history kept for export


# -- several runners, migrations, 64-bit sizes: the same tests on SQLite and Postgres ------------


def test_migrations_make_exactly_the_models_schema(db_url: str) -> None:
    """The migrations and the table classes say the same thing: a database built by the
    migrations differs in nothing from the models (Alembic's own comparison)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlmodel import SQLModel

    from campaign.store.migrate import VERSION_TABLE, head_revision, schema_revision

    store = Store(db_url)
    assert schema_revision(store.engine) == head_revision()
    with store.engine.connect() as conn:
        diffs = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True, "version_table": VERSION_TABLE}),
            SQLModel.metadata,
        )
    assert diffs == []


def test_sizes_past_2_gib_and_ids_past_2_31(db_url: str) -> None:
    """An arm's server above 2 GiB of RSS is stored as it is (a 32-bit column refused it
    at the arm's last step), and so is a measurement id past 2**31."""
    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    att = store.new_attempt(camp.id, "k", "A", {})
    store.update(type(att), att.id, rss_bytes=5 * 2**30)
    assert store.attempts(camp.id)[0].rss_bytes == 5 * 2**30
    run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0))
    store.add(
        MeasurementRow(
            id=2**31 + 7,
            campaign_id=camp.id,
            attempt_id=att.id,
            probe_run_id=run.id,
            item_key="k",
            arm_id="A",
            probe="decode",
            mode="m",
            metric="x",
            value=1,
        )
    )
    assert list(store.measurements_frame(camp.id, latest_only=False)["id"]) == [2**31 + 7]


def test_claim_attempt_takes_each_arm_once(db_url: str) -> None:
    """new -> busy while it runs -> done once finished (not fresh) -> resumed when it was
    interrupted; and the database itself refuses a second running attempt."""
    from sqlalchemy.exc import IntegrityError

    from campaign.store.tables import AttemptRow

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    how, att = store.claim_attempt(camp.id, "k", "A", {}, 0, fresh=False, flow_run_id="fr-1")
    assert how == "new" and att is not None and att.flow_run_id == "fr-1" and att.heartbeat_at is not None
    how2, other = store.claim_attempt(camp.id, "k", "A", {}, 0, fresh=False)
    assert (how2, other.id if other else None) == ("busy", att.id)
    assert store.claim_attempt(camp.id, "k", "A", {}, 1, fresh=False)[0] == "new"  # another repeat is another arm run
    with pytest.raises(IntegrityError):
        store.add(
            AttemptRow(campaign_id=camp.id, item_key="k", arm_id="A", repeat=0, number=9, state=AttemptState.RUNNING)
        )
    store.update(AttemptRow, att.id, state=AttemptState.DONE)
    assert store.claim_attempt(camp.id, "k", "A", {}, 0, fresh=False)[0] == "done"
    how3, rerun = store.claim_attempt(camp.id, "k", "A", {}, 0, fresh=True)
    assert how3 == "new" and rerun is not None and rerun.number == 2
    store.update(AttemptRow, rerun.id, state=AttemptState.INTERRUPTED)
    how4, resumed = store.claim_attempt(camp.id, "k", "A", {}, 0, fresh=False)
    assert (how4, resumed.id if resumed else None) == ("resumed", rerun.id) and resumed.state == AttemptState.RUNNING


def test_release_attempt_only_moves_the_holder_it_judged(db_url: str) -> None:
    """Recovery judged a holder dead from its heartbeat; if it beat again in between, the
    conditional update leaves the attempt alone."""

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    _how, att = store.claim_attempt(camp.id, "k", "A", {}, 0)
    assert att is not None
    seen = store.attempts(camp.id)[0]
    assert store.heartbeat(att.id)  # the holder lives after all
    assert not store.release_attempt(att.id, seen, state=AttemptState.INTERRUPTED)
    seen = store.attempts(camp.id)[0]
    assert store.release_attempt(att.id, seen, state=AttemptState.INTERRUPTED)
    assert not store.heartbeat(att.id)  # a taken-over attempt's heartbeat stops counting


def test_pre_migration_sqlite_database_is_upgraded(tmp_path: Path) -> None:
    """A database made by the last version without migrations (create_all, no
    alembic_version), lacking a column of older versions too, opens with its rows kept
    and ends at the newest revision."""
    import sqlite3

    from campaign.store.migrate import head_revision, schema_revision

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.executescript((FIXTURES_DIR / "schema_before_migrations.sql").read_text())
        conn.execute(
            "INSERT INTO campaign (name, title, source_path, file_digest, spec_json, created_at, updated_at) VALUES ('old', '', '', '', '', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )
        conn.execute(
            "INSERT INTO attempt (campaign_id, item_key, arm_id, repeat, number, state, started_at, error, overrides_json, server_cmdline, server_log, served_model, fingerprint, identity_json) VALUES (1, 'k', 'A', 0, 1, 'done', '2026-01-01 00:00:00', '', '{}', '', '', '', '', '{}')"
        )
    store = Store(f"sqlite:///{db}")
    assert schema_revision(store.engine) == head_revision()
    old = store.campaign("old")
    assert old is not None
    attempts = store.attempts(old.id)
    assert [(a.arm_id, a.state, a.device_lease, a.host) for a in attempts] == [("A", "done", "", "")]


def test_racers_on_a_new_sqlite_file_migrate_it_once(tmp_path: Path) -> None:
    """Four writers open one new file at the same instant (as two `campaign run` do): the
    whole migration happens under the file's write lock, so exactly one migrates and
    the others find it at the newest revision, never half-way (where a racer took the
    half-made tables for a database made before migrations and stamped it twice)."""
    import threading

    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from campaign.store.database import _sqlite_pragmas
    from campaign.store.migrate import head_revision, schema_revision, upgrade

    head = head_revision()
    for n in range(3):
        url = f"sqlite:///{tmp_path / f'race{n}.db'}"
        engines = [
            create_engine(url, poolclass=NullPool, connect_args={"timeout": 30, "check_same_thread": False})
            for _ in range(4)
        ]
        for engine in engines:
            _sqlite_pragmas(engine)
        start = threading.Barrier(len(engines))
        said: list[str] = []

        def migrate(engine: Any, start: threading.Barrier = start, said: list[str] = said) -> None:
            start.wait()
            try:
                said.append(upgrade(engine))
            except Exception as exc:  # noqa: BLE001 (the assertion below names it)
                said.append(f"raised {exc!r}")

        threads = [threading.Thread(target=migrate, args=(engine,)) for engine in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert sorted(said) == sorted([f"upgraded from an empty database to {head}"] + [f"at {head} already"] * 3), said
        assert schema_revision(engines[0]) == head


def test_a_read_only_command_never_migrates_and_says_what_to_run(tmp_path: Path) -> None:
    """status, report, export and check open the store without migrating: a database
    behind the newest revision stays as it is, and the message names the command that
    migrates it; a writer then brings it up to date."""
    import sqlite3

    from campaign.store.database import SchemaNotCurrent
    from campaign.store.migrate import head_revision, schema_revision
    from cli.app import UsageError, open_existing_store

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.executescript((FIXTURES_DIR / "schema_before_migrations.sql").read_text())
    url = f"sqlite:///{db}"
    with pytest.raises(SchemaNotCurrent, match="campaign db upgrade"):
        Store(url, migrate=False)
    with pytest.raises(UsageError, match="is at schema revision none"):
        open_existing_store(str(db))
    from sqlalchemy import create_engine

    plain = create_engine(url)
    assert schema_revision(plain) is None  # untouched
    plain.dispose()
    assert schema_revision(Store(url).engine) == head_revision()
    assert Store(url, migrate=False).campaign("nothing") is None  # current now: opens


def test_device_limits_are_named_per_host() -> None:
    """Two hosts' `local` devices are two limits; a runtime without a host keeps the bare
    name; an arm's own `host` moves it (and its device) off its runtime's host."""
    from campaign.core.schema import ArmEntry, CampaignMeta, CampaignSpec
    from campaign.core.serving import ModelEntry, RuntimeEntry
    from flows.lanes import device_limit_name

    spec = CampaignSpec.model_construct(
        campaign=CampaignMeta(name="c"),
        models=[ModelEntry(name="m", quant="q", bits_per_weight=4)],
        runtimes=[
            RuntimeEntry(name="a", adapter="simulator", host="h1"),
            RuntimeEntry(name="b", adapter="simulator", host="h2"),
            RuntimeEntry(name="c", adapter="simulator"),
        ],
        arms=[
            ArmEntry(id="A", model="m", runtime="a", context=4096),
            ArmEntry(id="B", model="m", runtime="b", context=4096),
            ArmEntry(id="C", model="m", runtime="c", context=4096),
            ArmEntry(id="D", model="m", runtime="a", context=4096, host="h3"),
            ArmEntry(id="E", model="m", runtime="a", context=4096, host=""),
        ],
    )
    names = {arm: device_limit_name(spec.device_of(arm)) for arm in "ABCDE"}
    assert names == {
        "A": "device-h1-local",
        "B": "device-h2-local",
        "C": "device-local",
        "D": "device-h3-local",
        "E": "device-local",
    }
    assert [spec.host_of(arm) for arm in "ABCDE"] == ["h1", "h2", "", "h3", ""]


def test_one_liveness_rule_for_attempts_runners_and_device_slots() -> None:
    """`campaign.core.processes.holder_gone`: on this host the process decides, however silent;
    elsewhere only silence past the limit proves anything, and a pid there proves nothing."""
    import os

    from campaign.core.processes import holder_gone, process_start

    me, started = os.getpid(), process_start(os.getpid())
    assert holder_gone(True, me, started, silent_s=10_000, stale_s=60) is None  # alive here: keeps it
    assert holder_gone(True, me, (started or 0) - 3600, None, 60) == f"pid {me} now belongs to a later process"
    assert holder_gone(False, me, started, silent_s=30, stale_s=60) is None  # elsewhere, still beating
    assert holder_gone(False, 1, None, silent_s=61, stale_s=60) == "silent for 61 s (limit 60 s)"
    assert holder_gone(False, 1, None, None, 60) is None  # elsewhere and never beat: no proof


def test_our_revision_moves_out_of_alembics_default_table_and_optuna_lives_beside(tmp_path: Path) -> None:
    """A database migrated when our revision was in alembic's default table
    (`alembic_version`) keeps its rows and has the revision moved to ours; then an Optuna
    study (whose own alembic revision is in `alembic_version`) is created in the same
    file, and both the store and the study open it again."""
    import sqlite3

    import optuna

    from campaign.store.migrate import VERSION_TABLE, head_revision, schema_revision

    made = Store(f"sqlite:///{tmp_path / 'new.db'}")
    del made
    old = tmp_path / "old.db"
    with sqlite3.connect(tmp_path / "new.db") as src, sqlite3.connect(old) as dst:
        src.backup(dst)  # a consistent copy, then laid out as the previous version left it
        (rev,) = dst.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
        dst.execute(f"DROP TABLE {VERSION_TABLE}")
        dst.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        dst.execute("INSERT INTO alembic_version VALUES (?)", (rev,))
        dst.execute(
            "INSERT INTO campaign (name, title, source_path, file_digest, spec_json, created_at, updated_at) "
            "VALUES ('kept', '', '', '', '', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )
    url = f"sqlite:///{old}"
    store = Store(url)
    assert schema_revision(store.engine) == head_revision() and store.campaign("kept") is not None
    with sqlite3.connect(old) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert VERSION_TABLE in tables and "alembic_version" not in tables
    study = optuna.create_study(study_name="s", storage=optuna.storages.RDBStorage(url))
    study.enqueue_trial({"x": 1.0})
    with sqlite3.connect(old) as conn:
        (theirs,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert theirs != rev  # Optuna's own revision, in its own table
    assert schema_revision(Store(url).engine) == head_revision()
    assert optuna.load_study(study_name="s", storage=url).study_name == "s"
