"""The campaign database's repository: every read and write of its rows (`Store`), on
SQLite (WAL) or any SQLAlchemy URL. The tables are `campaign.store.tables`, their migrations
`campaign.store.migrate`, the URL and engine `campaign.store.database`, attempt liveness
`campaign.store.liveness`, the measurement frame `campaign.store.measurements`.

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
from typing import Any

import pandas as pd
from sqlmodel import Session, SQLModel, col, select

from campaign.core.processes import process_start
from campaign.core.states import AttemptState, ItemState
from campaign.store.database import database_url, engine_for, public_url, resolve_url
from campaign.store.liveness import this_host, this_machine
from campaign.store.measurements import RequestOutcome, read_frame, request_outcome
from campaign.store.tables import (
    BLOCK_FIELDS,
    ArmRow,
    AttemptRow,
    CampaignRow,
    EventRow,
    ProbeRunRow,
    QueueItemRow,
    RequestRow,
    SampleRow,
    VerdictRow,
    utcnow,
)


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
                # SQLModel sets __table__ on every table class; its types do not declare it
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
            return s.exec(query.order_by(col(CampaignRow.updated_at).desc())).first()

    def campaigns(self) -> list[CampaignRow]:
        with self.session() as s:
            return list(s.exec(select(CampaignRow).order_by(col(CampaignRow.name))))

    def items(self, campaign_id: int) -> list[QueueItemRow]:
        with self.session() as s:
            q = select(QueueItemRow).where(QueueItemRow.campaign_id == campaign_id).order_by(col(QueueItemRow.position))
            return list(s.exec(q))

    def item_row(self, campaign_id: int, key: str) -> QueueItemRow | None:
        with self.session() as s:
            q = select(QueueItemRow).where(QueueItemRow.campaign_id == campaign_id, col(QueueItemRow.key) == key)
            return s.exec(q).first()

    def arms(self, campaign_id: int) -> list[ArmRow]:
        with self.session() as s:
            return list(s.exec(select(ArmRow).where(ArmRow.campaign_id == campaign_id).order_by(col(ArmRow.arm_id))))

    def set_item_state(self, campaign_id: int, key: str, state: ItemState, reason: str = "") -> None:
        """Move a queue item and log the transition as an event, in one commit."""
        with self.session() as s:
            row = s.exec(
                select(QueueItemRow).where(QueueItemRow.campaign_id == campaign_id, col(QueueItemRow.key) == key)
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
            return list(s.exec(q.order_by(col(AttemptRow.id))))

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

        me: dict[str, Any] = {
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
                    s.exec(select(CampaignRow.id).where(col(CampaignRow.id) == campaign_id).with_for_update())
                else:
                    s.exec(update(CampaignRow).where(col(CampaignRow.id) == campaign_id).values(id=CampaignRow.id))
                rows = list(
                    s.exec(
                        select(AttemptRow)
                        .where(
                            col(AttemptRow.campaign_id) == campaign_id,
                            col(AttemptRow.item_key) == item_key,
                            col(AttemptRow.arm_id) == arm_id,
                            col(AttemptRow.repeat) == repeat,
                        )
                        .order_by(col(AttemptRow.id))
                    )
                )
                newest = rows[-1] if rows else None
                if newest is not None and newest.state == AttemptState.RUNNING:
                    return "busy", newest
                if newest is not None and not fresh and newest.state == AttemptState.DONE:
                    return "done", newest
                if newest is not None and newest.state == AttemptState.INTERRUPTED:
                    taken = s.exec(
                        update(AttemptRow)
                        .where(
                            col(AttemptRow.id) == newest.id,
                            col(AttemptRow.state) == AttemptState.INTERRUPTED,
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
                .where(
                    col(AttemptRow.id) == attempt_id,
                    col(AttemptRow.state) == AttemptState.RUNNING,
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
            col(AttemptRow.id) == attempt_id,
            col(AttemptRow.state) == AttemptState.RUNNING,
            col(AttemptRow.owner_pid) == expected.owner_pid,
            col(AttemptRow.host) == expected.host,
        ]
        cond.append(
            col(AttemptRow.heartbeat_at) == expected.heartbeat_at
            if expected.heartbeat_at is not None
            else col(AttemptRow.heartbeat_at).is_(None)
        )
        with self.engine.begin() as conn:
            done = conn.execute(update(AttemptRow).where(*cond).values(**fields))
        return done.rowcount == 1

    def probe_runs(self, attempt_id: int) -> list[ProbeRunRow]:
        with self.session() as s:
            return list(
                s.exec(select(ProbeRunRow).where(ProbeRunRow.attempt_id == attempt_id).order_by(col(ProbeRunRow.id)))
            )

    # -- measurements -------------------------------------------------------------

    def measurements_frame(
        self, campaign_id: int, latest_only: bool = True, *, columns: list[str] | None = None, categorical: bool = False
    ) -> pd.DataFrame:
        """The campaign's measurements as one frame (`measurements.read_frame`, which says
        what each column is and which rows verdicts read)."""
        return read_frame(self.engine, campaign_id, latest_only, columns=columns, categorical=categorical)

    def request_outcome(self, attempt_id: int, errors: int = 200) -> RequestOutcome:
        """How an attempt's requests went (`measurements.request_outcome`)."""
        return request_outcome(self.engine, attempt_id, errors)

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
                s.exec(
                    select(VerdictRow).where(VerdictRow.campaign_id == campaign_id).order_by(col(VerdictRow.id))
                ).all()
            )

    def latest_verdicts(self, campaign_id: int) -> dict[str, VerdictRow]:
        latest: dict[str, VerdictRow] = {}
        for row in self.verdicts(campaign_id):
            latest[row.gate_id] = row
        return latest

    def events(self, campaign_id: int) -> list[EventRow]:
        with self.session() as s:
            return list(s.exec(select(EventRow).where(EventRow.campaign_id == campaign_id).order_by(col(EventRow.id))))
