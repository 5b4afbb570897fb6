"""The campaign database's repository: every read and write of its rows (`Store`), on
SQLite (WAL) or any SQLAlchemy URL. The tables are `campaign.store.tables`, their migrations
`campaign.store.migrate`, the URL and engine `campaign.store.database`, attempt liveness
`campaign.store.liveness`.

Why our own store and not Prefect's: Prefect observes and schedules, but its state does
not survive a killed process the way a campaign must. Here attempts are never overwritten,
every measurement is in the database before its probe run is marked done, and a resumed
run can tell exactly which probe runs finished. Readers of measurements take only rows of
probe runs that are done: a run cut short by a crash may hold part of its rows, and resume
measures it again under a new probe run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from sqlalchemy import text
from sqlmodel import Session, SQLModel, select

from campaign.core import metrics
from campaign.core.processes import process_start
from campaign.core.states import AttemptState, ItemState, ProbeRunState, SampleKind, Verdict
from campaign.store.database import database_url, engine_for, public_url, resolve_url
from campaign.store.liveness import this_host, this_machine
from campaign.store.tables import (
    BLOCK_FIELDS,
    ArmRow,
    AttemptRow,
    CampaignRow,
    EventRow,
    MeasurementRow,
    ProbeRunRow,
    QueueItemRow,
    RequestRow,
    SampleRow,
    VerdictRow,
    utcnow,
)

MEASUREMENT_COLUMNS = list(MeasurementRow.model_fields)
# columns every frame row carries beside the measurement's own (frame name -> SQL over
# its attempt `t` and probe run `r`): which block (server run) measured it, in which
# place of the block's order, under which probe settings (the probe run's; rows from
# before those were recorded fall back to the item's, on the attempt) and which server
# recipe, and which attempt of its (item, arm, repeat)
ATTEMPT_FRAME_COLUMNS = {
    "block_id": "t.block_id",
    "block_order": "t.block_order",
    "settings_hash": "COALESCE(NULLIF(r.settings_hash, ''), t.settings_hash)",
    "recipe_hash": "t.recipe_hash",
    "attempt_number": "t.number",
    "server_block": "COALESCE(NULLIF(t.server_block, ''), t.block_id)",  # the start it ran on (`gates.cells.block_of`)
    # where it ran and what it served: an ablation must share its subject's placement and model
    "host": "t.host",
    "machine": "t.machine",
    "device_lease": "t.device_lease",  # '<device limit>/<lease id>': the limit names the device
    "served_model": "t.served_model",
    "fingerprint": "t.fingerprint",
}
FRAME_COLUMNS = [*MEASUREMENT_COLUMNS, *ATTEMPT_FRAME_COLUMNS]
MEASUREMENT_TEXT_COLUMNS = (
    "item_key",
    "arm_id",
    "probe",
    "scenario",
    "mode",
    "kind",
    "metric",
    "unit",
    "source",
    "block_id",
    "settings_hash",
    "recipe_hash",
    "host",
    "machine",
    "device_lease",
    "served_model",
    "fingerprint",
    "server_block",
)
_MEASUREMENTS_SQL = """
SELECT {columns} FROM measurement m
{join}
WHERE m.campaign_id = :cid
{latest}
"""
_ATTEMPT_JOIN = "LEFT JOIN attempt t ON t.id = m.attempt_id LEFT JOIN probe_run r ON r.id = m.probe_run_id"
# the SQL twin of newest_done_attempts (a test checks they agree)
_LATEST_CLAUSE = """
  AND m.probe_run_id IN (
    SELECT p.id FROM probe_run p JOIN attempt a ON a.id = p.attempt_id
    WHERE a.campaign_id = :cid AND p.state = :run_done)
  AND m.attempt_id IN (
    SELECT MAX(a.id) FROM attempt a
    WHERE a.campaign_id = :cid AND a.state = :attempt_done
      AND a.overrides_json = (
        SELECT b.overrides_json FROM attempt b
        WHERE b.campaign_id = :cid AND b.state = :attempt_done
          AND b.item_key = a.item_key AND b.arm_id = a.arm_id
        ORDER BY b.id DESC LIMIT 1)
    GROUP BY a.item_key, a.arm_id, a.repeat)
"""


@dataclass
class RequestOutcome:
    """An attempt's requests as its probes counted them (`Store.request_outcome`)."""

    requests: int = 0
    failed: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # error kind -> failed requests
    errors: list[str] = field(default_factory=list)  # raw messages, the first ones

    @property
    def all_failed(self) -> bool:
        return self.requests > 0 and self.failed >= self.requests


def newest_done_attempts(attempts: Iterable[AttemptRow]) -> dict[tuple[str, str, int], int]:
    """The attempt each verdict reads: per (item, arm, repeat), the newest finished one
    that ran with the same overrides as the newest finished attempt of its (item, arm).

    A rerun adds newer attempts; older ones stay in the history, unread by gates. Repeats
    measured under different settings are never pooled: after `campaign rerun X --set
    max_tokens=96` has finished only some repeats, the others' older attempts (other
    overrides) drop out of the verdict instead of being mixed into its medians.
    """
    done = sorted((a for a in attempts if a.state == AttemptState.DONE), key=lambda a: a.id or 0)
    settings = {(a.item_key, a.arm_id): a.overrides_json for a in done}  # the newest wins
    newest: dict[tuple[str, str, int], int] = {}
    for att in done:
        if att.overrides_json == settings[(att.item_key, att.arm_id)]:
            newest[(att.item_key, att.arm_id, att.repeat)] = att.id or 0
    return newest


def _block_fields(block: Mapping[str, Any] | None) -> dict[str, Any]:
    unknown = set(block or {}) - set(BLOCK_FIELDS)
    if unknown:
        raise KeyError(f"not a block field: {', '.join(sorted(unknown))} (block fields: {', '.join(BLOCK_FIELDS)})")
    return dict(block or {})


class Store:
    """Thin, typed access to the campaign database. Every write commits at once (the
    probe sink batches its rows through `insert_rows` from a writer thread).

    `url` is the URL with its credentials, kept in this process only; `public_url` is
    the one to pass on (flow parameters, messages)."""

    def __init__(self, url: str | None = None, migrate: bool = True):
        self.url = resolve_url(url or database_url())
        self.public_url = public_url(self.url)
        self.engine = engine_for(self.url, migrate=migrate)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    def add(self, row: SQLModel) -> Any:
        with self.session() as s:
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def insert_rows(self, rows: Iterable[tuple[type[SQLModel], dict[str, Any]]]) -> None:
        """Insert plain rows (table, column values) in one transaction, in order.

        For bulk writers (the probe sink's writer thread): one executemany per run of
        rows of the same table, no ORM objects, nothing read back. All or nothing.
        """
        runs: list[tuple[type[SQLModel], list[dict[str, Any]]]] = []
        for table, values in rows:
            if runs and runs[-1][0] is table:
                runs[-1][1].append(values)
            else:
                runs.append((table, [values]))
        if not runs:
            return
        with self.engine.begin() as conn:
            for table, values_list in runs:
                conn.execute(table.__table__.insert(), values_list)  # type: ignore[attr-defined]

    def add_all(self, rows: Iterable[SQLModel]) -> None:
        with self.session() as s:
            s.add_all(list(rows))
            s.commit()

    def update(self, row_type: type[SQLModel], row_id: int, **fields: Any) -> Any:
        with self.session() as s:
            row = s.get(row_type, row_id)
            if row is None:
                raise KeyError(f"{row_type.__name__} {row_id} not found")
            for key, value in fields.items():
                setattr(row, key, value)
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    # -- campaigns ----------------------------------------------------------------

    def campaign(self, name: str | None = None) -> CampaignRow | None:
        """The named campaign, or the most recently updated one."""
        with self.session() as s:
            query = select(CampaignRow)
            if name:
                query = query.where(CampaignRow.name == name)
            return s.exec(query.order_by(CampaignRow.updated_at.desc())).first()  # type: ignore[attr-defined]

    def campaigns(self) -> list[CampaignRow]:
        with self.session() as s:
            return list(s.exec(select(CampaignRow).order_by(CampaignRow.name)))

    def items(self, campaign_id: int) -> list[QueueItemRow]:
        with self.session() as s:
            q = select(QueueItemRow).where(QueueItemRow.campaign_id == campaign_id).order_by(QueueItemRow.position)
            return list(s.exec(q))

    def item_row(self, campaign_id: int, key: str) -> QueueItemRow | None:
        with self.session() as s:
            q = select(QueueItemRow).where(QueueItemRow.campaign_id == campaign_id, QueueItemRow.key == key)
            return s.exec(q).first()

    def arms(self, campaign_id: int) -> list[ArmRow]:
        with self.session() as s:
            return list(s.exec(select(ArmRow).where(ArmRow.campaign_id == campaign_id).order_by(ArmRow.arm_id)))

    def set_item_state(self, campaign_id: int, key: str, state: ItemState, reason: str = "") -> None:
        """Move a queue item and log the transition as an event, in one commit."""
        with self.session() as s:
            row = s.exec(
                select(QueueItemRow).where(QueueItemRow.campaign_id == campaign_id, QueueItemRow.key == key)
            ).one()
            before = row.state
            row.state = state
            row.reason = reason
            row.updated_at = utcnow()
            s.add(row)
            s.add(
                EventRow(
                    campaign_id=campaign_id,
                    item_key=key,
                    kind="item-state",
                    from_state=before,
                    to_state=state,
                    message=reason,
                )
            )
            s.commit()

    def log_event(self, campaign_id: int, kind: str, message: str = "", item_key: str = "", arm_id: str = "") -> None:
        self.add(EventRow(campaign_id=campaign_id, kind=kind, message=message, item_key=item_key, arm_id=arm_id))

    # -- attempts -----------------------------------------------------------------

    def attempts(self, campaign_id: int, item_key: str | None = None, arm_id: str | None = None) -> list[AttemptRow]:
        with self.session() as s:
            q = select(AttemptRow).where(AttemptRow.campaign_id == campaign_id)
            if item_key is not None:
                q = q.where(AttemptRow.item_key == item_key)
            if arm_id is not None:
                q = q.where(AttemptRow.arm_id == arm_id)
            return list(s.exec(q.order_by(AttemptRow.id)))

    def new_attempt(
        self,
        campaign_id: int,
        item_key: str,
        arm_id: str,
        overrides: dict[str, Any],
        repeat: int = 0,
        block: Mapping[str, Any] | None = None,
    ) -> AttemptRow:
        number = len([a for a in self.attempts(campaign_id, item_key, arm_id) if a.repeat == repeat]) + 1
        return self.add(
            AttemptRow(
                campaign_id=campaign_id,
                item_key=item_key,
                arm_id=arm_id,
                repeat=repeat,
                number=number,
                overrides_json=json.dumps(overrides, sort_keys=True),
                owner_pid=os.getpid(),
                owner_start=process_start(os.getpid()),
                host=this_host(),
                machine=this_machine(),
                heartbeat_at=utcnow(),
                **_block_fields(block),
            )
        )

    def claim_attempt(
        self,
        campaign_id: int,
        item_key: str,
        arm_id: str,
        overrides: dict[str, Any],
        repeat: int = 0,
        *,
        fresh: bool = True,
        flow_run_id: str = "",
        block: Mapping[str, Any] | None = None,
    ) -> tuple[str, AttemptRow | None]:
        """Take the (item, arm, repeat) to run in this process, atomically.

        Returns ("resumed", attempt) for the newest attempt if it was interrupted (its
        probe runs that finished are kept), ("new", attempt) for a new one, ("done",
        attempt) when not `fresh` and the newest attempt finished (nothing to run), or
        ("busy", attempt) when another holder runs it now. Why atomic: the read of the
        newest attempt and the write that takes it are one transaction that first locks
        the campaign's row (SELECT ... FOR UPDATE on Postgres; on SQLite the first write
        takes the database's one write lock), and the partial unique index on running
        attempts refuses a second running one whatever happens.

        `block` (keys of `BLOCK_FIELDS`) is written on a new attempt only: a resumed
        one keeps the block it was made in.
        """
        from sqlalchemy import update
        from sqlalchemy.exc import IntegrityError

        me = {
            "owner_pid": os.getpid(),
            "owner_start": process_start(os.getpid()),
            "host": this_host(),
            "machine": this_machine(),
            "flow_run_id": flow_run_id,
            "heartbeat_at": utcnow(),
        }
        try:
            with self.session() as s:
                if self.engine.dialect.name == "postgresql":
                    s.exec(select(CampaignRow.id).where(CampaignRow.id == campaign_id).with_for_update())
                else:
                    s.exec(update(CampaignRow).where(CampaignRow.id == campaign_id).values(id=CampaignRow.id))  # type: ignore[call-overload, arg-type]
                rows = list(
                    s.exec(
                        select(AttemptRow)
                        .where(
                            AttemptRow.campaign_id == campaign_id,
                            AttemptRow.item_key == item_key,
                            AttemptRow.arm_id == arm_id,
                            AttemptRow.repeat == repeat,
                        )
                        .order_by(AttemptRow.id)
                    )
                )  # type: ignore[arg-type]
                newest = rows[-1] if rows else None
                if newest is not None and newest.state == AttemptState.RUNNING:
                    return "busy", newest
                if newest is not None and not fresh and newest.state == AttemptState.DONE:
                    return "done", newest
                if newest is not None and newest.state == AttemptState.INTERRUPTED:
                    taken = s.exec(
                        update(AttemptRow)
                        .where(  # type: ignore[call-overload]
                            AttemptRow.id == newest.id,
                            AttemptRow.state == AttemptState.INTERRUPTED,  # type: ignore[arg-type]
                        )
                        .values(state=AttemptState.RUNNING, error="", ended_at=None, **me)
                    )
                    if taken.rowcount != 1:
                        s.rollback()
                        return "busy", newest
                    s.commit()
                    return "resumed", self._attempt(newest.id or 0)
                row = AttemptRow(
                    campaign_id=campaign_id,
                    item_key=item_key,
                    arm_id=arm_id,
                    repeat=repeat,
                    number=len(rows) + 1,
                    overrides_json=json.dumps(overrides, sort_keys=True),
                    **me,
                    **_block_fields(block),
                )
                s.add(row)
                s.commit()
                s.refresh(row)
                return "new", row
        except IntegrityError:  # another process inserted the running attempt first
            running = [
                a
                for a in self.attempts(campaign_id, item_key, arm_id)
                if a.repeat == repeat and a.state == AttemptState.RUNNING
            ]
            return "busy", running[-1] if running else None

    def _attempt(self, attempt_id: int) -> AttemptRow:
        with self.session() as s:
            row = s.get(AttemptRow, attempt_id)
            assert row is not None
            return row

    def heartbeat(self, attempt_id: int) -> bool:
        """Say that the attempt's holder lives; False once the attempt is no longer
        running (finished, or taken over after it was judged dead)."""
        from sqlalchemy import update

        with self.engine.begin() as conn:
            done = conn.execute(
                update(AttemptRow)
                .where(  # type: ignore[arg-type]
                    AttemptRow.id == attempt_id,
                    AttemptRow.state == AttemptState.RUNNING,  # type: ignore[arg-type]
                )
                .values(heartbeat_at=utcnow())
            )
        return done.rowcount == 1

    def release_attempt(self, attempt_id: int, expected: AttemptRow, **fields: Any) -> bool:
        """Move a running attempt on (to interrupted, failed...) only if it is still the
        one `expected` saw: same holder and heartbeat. A holder that came back to life
        and beat its heart in between keeps it. True if this call moved it."""
        from sqlalchemy import update

        cond = [
            AttemptRow.id == attempt_id,
            AttemptRow.state == AttemptState.RUNNING,
            AttemptRow.owner_pid == expected.owner_pid,
            AttemptRow.host == expected.host,
        ]
        cond.append(
            AttemptRow.heartbeat_at == expected.heartbeat_at
            if expected.heartbeat_at is not None
            else AttemptRow.heartbeat_at.is_(None)
        )  # type: ignore[union-attr]
        with self.engine.begin() as conn:
            done = conn.execute(update(AttemptRow).where(*cond).values(**fields))  # type: ignore[arg-type]
        return done.rowcount == 1

    def probe_runs(self, attempt_id: int) -> list[ProbeRunRow]:
        with self.session() as s:
            return list(
                s.exec(select(ProbeRunRow).where(ProbeRunRow.attempt_id == attempt_id).order_by(ProbeRunRow.id))
            )

    # -- measurements -------------------------------------------------------------

    def measurements_frame(
        self, campaign_id: int, latest_only: bool = True, *, columns: list[str] | None = None, categorical: bool = False
    ) -> pd.DataFrame:
        """Measurements as a frame, read with one SQL query (an ORM object per row is what
        made 200,000-row reports slow).

        With `latest_only`, only what verdicts read: rows of the newest finished attempt
        per (item, arm, repeat) -- see `newest_done_attempts` -- from probe runs that
        completed. `categorical` stores text columns as pandas categories, which makes
        comparisons and groupbys integer work.

        Every row carries its attempt's block (`FRAME_COLUMNS`, joined in the same
        query): `block_id` (one id per block, i.e. per server run of each arm; shared
        by the arms of the block, new under other settings), `block_order` (the arm's
        0-based place in its block; <NA> for attempts made before blocks),
        `settings_hash` (its probe run's settings, a cell's `settings`), `recipe_hash`
        ('' before blocks) and `attempt_number`. Pair
        arms only within a `block_id`. `columns` picks any of them.
        """
        wanted = columns or FRAME_COLUMNS
        unknown = [c for c in wanted if c not in MEASUREMENT_COLUMNS and c not in ATTEMPT_FRAME_COLUMNS]
        if unknown:
            raise KeyError(
                f"no measurement frame column {', '.join(map(repr, unknown))}; columns: {', '.join(FRAME_COLUMNS)}"
            )
        joined = any(c in ATTEMPT_FRAME_COLUMNS for c in wanted)
        sql = _MEASUREMENTS_SQL.format(
            columns=", ".join(ATTEMPT_FRAME_COLUMNS[c] if c in ATTEMPT_FRAME_COLUMNS else f"m.{c}" for c in wanted),
            join=_ATTEMPT_JOIN if joined else "",
            latest=_LATEST_CLAUSE if latest_only else "",
        )
        params: dict[str, Any] = {"cid": campaign_id}
        if latest_only:
            params |= {"run_done": ProbeRunState.DONE.value, "attempt_done": AttemptState.DONE.value}
        with self.engine.connect() as conn:
            frame = pd.read_sql(text(sql), conn, params=params)
        frame.columns = wanted
        for col in ("id", "campaign_id", "attempt_id", "probe_run_id", "context", "trial", "repeat", "attempt_number"):
            if col in frame:
                frame[col] = frame[col].astype("int64")
        if "block_order" in frame:  # NULL for attempts made before blocks
            frame["block_order"] = frame["block_order"].astype("Int64")
        if "value" in frame:
            frame["value"] = frame["value"].astype(float)
        if "simulated" in frame:
            frame["simulated"] = frame["simulated"].astype(bool)
        for col in MEASUREMENT_TEXT_COLUMNS:
            if col in frame:
                frame[col] = frame[col].fillna("").astype("category" if categorical else str)
        return frame

    def request_outcome(self, attempt_id: int, errors: int = 200) -> RequestOutcome:
        """How the requests of an attempt's finished probe runs went, from the summary
        rows every probe writes per cell (`arms.probes.failures.record_errors`):
        `requests` and `requests_failed`, with any phase prefix (`baseline_requests`),
        summed; failures by kind from the `requests_failed_<kind>` rows (the kind is
        their source); and the raw messages of the first `errors` failed requests."""
        runs = "SELECT p.id FROM probe_run p WHERE p.attempt_id = :aid AND p.state = :done"
        params = {"aid": attempt_id, "done": ProbeRunState.DONE.value, "summary": SampleKind.SUMMARY.value}
        tally = {"tally": f"%{metrics.REQUESTS.name}%"}
        out = RequestOutcome()
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    f"SELECT m.metric, m.source, m.value FROM measurement m WHERE m.attempt_id = :aid AND m.kind = :summary "
                    f"AND m.metric LIKE :tally AND m.probe_run_id IN ({runs})"
                ),
                {**params, **tally},
            ).all()
            for metric, source, value in rows:
                if metric.endswith(metrics.REQUESTS.name):
                    out.requests += int(value)
                elif metric.endswith(metrics.REQUESTS_FAILED.name):
                    out.failed += int(value)
                elif metrics.FAILED_KIND_PREFIX in metric:
                    out.kinds[source or ""] = out.kinds.get(source or "", 0) + int(value)
            if out.failed:
                out.errors = [
                    e
                    for (e,) in conn.execute(
                        text(
                            f"SELECT r.error FROM request_record r WHERE r.probe_run_id IN ({runs}) AND r.error <> '' "
                            "ORDER BY r.id LIMIT :n"
                        ),
                        {**params, "n": errors},
                    )
                ]
        return out

    def samples(self, probe_run_ids: Iterable[int]) -> list[SampleRow]:
        return self._of_runs(SampleRow, probe_run_ids)

    def requests(self, probe_run_ids: Iterable[int]) -> list[RequestRow]:
        return self._of_runs(RequestRow, probe_run_ids)

    def _of_runs(self, table: Any, probe_run_ids: Iterable[int]) -> list[Any]:
        """The rows of `table` that belong to these probe runs."""
        ids = list(probe_run_ids)
        if not ids:
            return []
        with self.session() as s:
            return list(s.exec(select(table).where(table.probe_run_id.in_(ids))))

    # -- verdicts -----------------------------------------------------------------

    def verdicts(self, campaign_id: int) -> list[VerdictRow]:
        """Every verdict computed for the campaign, oldest first: each gate's looks."""
        with self.session() as s:
            return list(
                s.exec(select(VerdictRow).where(VerdictRow.campaign_id == campaign_id).order_by(VerdictRow.id)).all()
            )

    def latest_verdicts(self, campaign_id: int) -> dict[str, VerdictRow]:
        latest: dict[str, VerdictRow] = {}
        for row in self.verdicts(campaign_id):
            latest[row.gate_id] = row
        return latest

    def verdict_history(self, campaign_id: int, gate_id: str) -> list[VerdictRow]:
        with self.session() as s:
            q = select(VerdictRow).where(VerdictRow.campaign_id == campaign_id, VerdictRow.gate_id == gate_id)
            return list(s.exec(q.order_by(VerdictRow.id)))

    def events(self, campaign_id: int) -> list[EventRow]:
        with self.session() as s:
            return list(s.exec(select(EventRow).where(EventRow.campaign_id == campaign_id).order_by(EventRow.id)))


VERDICT_ORDER = [Verdict.PASS, Verdict.FAIL, Verdict.CONTROL, Verdict.BLOCKED, Verdict.INCONCLUSIVE, Verdict.PENDING]
