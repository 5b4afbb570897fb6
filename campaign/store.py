"""The campaign database: SQLModel tables on SQLite (WAL) or any SQLAlchemy URL.

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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import Index, UniqueConstraint, event, inspect, text
from sqlalchemy.engine import Engine
from sqlmodel import Field, Session, SQLModel, create_engine, select

from campaign.states import AttemptState, ItemState, ProbeRunState, Verdict


def utcnow() -> datetime:
    return datetime.now(UTC)


class CampaignRow(SQLModel, table=True):
    __tablename__ = "campaign"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    title: str = ""
    source_path: str = ""
    file_digest: str = ""
    spec_json: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class ArmRow(SQLModel, table=True):
    __tablename__ = "arm"
    __table_args__ = (UniqueConstraint("campaign_id", "arm_id"),)
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    arm_id: str
    model: str
    quant: str
    bits_per_weight: float
    runtime: str
    adapter: str
    context: int
    klass: str
    group: str
    recipe_json: str
    simulated: bool = False


class QueueItemRow(SQLModel, table=True):
    __tablename__ = "queue_item"
    __table_args__ = (UniqueConstraint("campaign_id", "key"),)
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    key: str
    position: int
    title: str
    state: str = ItemState.PENDING
    gate: str | None = None
    reason: str = ""
    spec_json: str = ""
    updated_at: datetime = Field(default_factory=utcnow)


class AttemptRow(SQLModel, table=True):
    """One run of one arm for one queue item; a rerun or a retry is a new row."""

    __tablename__ = "attempt"
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    item_key: str = Field(index=True)
    arm_id: str = Field(index=True)
    repeat: int = 0
    number: int
    state: str = AttemptState.RUNNING
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    error: str = ""
    overrides_json: str = "{}"
    owner_pid: int | None = None
    server_pgid: int | None = None
    server_cmdline: str = ""
    server_log: str = ""
    device_lease: str = ""
    served_model: str = ""
    fingerprint: str = ""
    identity_json: str = "{}"
    rss_bytes: int | None = None


class ProbeRunRow(SQLModel, table=True):
    """Marks a probe as finished for an attempt, so resume neither repeats nor loses it."""

    __tablename__ = "probe_run"
    id: int | None = Field(default=None, primary_key=True)
    attempt_id: int = Field(foreign_key="attempt.id", index=True)
    probe: str
    context: int
    state: str = ProbeRunState.RUNNING
    error: str = ""
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None


class RequestRow(SQLModel, table=True):
    __tablename__ = "request_record"
    id: int | None = Field(default=None, primary_key=True)
    probe_run_id: int = Field(foreign_key="probe_run.id", index=True)
    scenario: str = ""
    mode: str = ""
    trial: int = 0
    ok: bool = True
    error: str = ""
    raw_json: str = "{}"


class MeasurementRow(SQLModel, table=True):
    __tablename__ = "measurement"
    __table_args__ = (
        UniqueConstraint("probe_run_id", "scenario", "mode", "context", "trial", "metric"),
        Index("ix_measurement_item", "campaign_id", "item_key"),
        Index("ix_measurement_arm_metric", "campaign_id", "arm_id", "metric"),
    )
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    attempt_id: int = Field(foreign_key="attempt.id", index=True)
    probe_run_id: int = Field(foreign_key="probe_run.id")
    item_key: str
    arm_id: str
    repeat: int = 0
    probe: str
    scenario: str = ""
    mode: str
    context: int = 0
    trial: int = 0
    metric: str
    value: float
    unit: str = ""
    source: str = ""
    simulated: bool = False


class SampleRow(SQLModel, table=True):
    __tablename__ = "sample"
    id: int | None = Field(default=None, primary_key=True)
    probe_run_id: int = Field(foreign_key="probe_run.id", index=True)
    series: str
    t_s: float
    value: float
    label: str = ""


class VerdictRow(SQLModel, table=True):
    __tablename__ = "verdict"
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    gate_id: str = Field(index=True)
    verdict: str
    reason: str
    evidence_json: str = "{}"
    computed_at: datetime = Field(default_factory=utcnow)


class RunnerRow(SQLModel, table=True):
    """The one process running a campaign's queue. The primary key makes the claim
    atomic: of two runners started at the same instant, one insert fails
    (`campaign.queue.claim_runner`)."""

    __tablename__ = "runner"
    campaign_name: str = Field(primary_key=True)
    pid: int
    host: str
    process_start: float | None = None
    command: str = ""
    started_at: datetime = Field(default_factory=utcnow)


class EventRow(SQLModel, table=True):
    __tablename__ = "event"
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    item_key: str = ""
    arm_id: str = ""
    kind: str
    from_state: str = ""
    to_state: str = ""
    message: str = ""
    at: datetime = Field(default_factory=utcnow)


MEASUREMENT_COLUMNS = list(MeasurementRow.model_fields)
MEASUREMENT_TEXT_COLUMNS = ("item_key", "arm_id", "probe", "scenario", "mode", "metric", "unit", "source")
_MEASUREMENTS_SQL = """
SELECT {columns} FROM measurement m
WHERE m.campaign_id = :cid
{latest}
"""
# the SQL twin of newest_done_attempts (a test checks they agree)
_LATEST_CLAUSE = """
  AND m.probe_run_id IN (
    SELECT p.id FROM probe_run p JOIN attempt a ON a.id = p.attempt_id
    WHERE a.campaign_id = :cid AND p.state = :run_done)
  AND m.attempt_id IN (
    SELECT MAX(a.id) FROM attempt a
    WHERE a.campaign_id = :cid AND a.state = :attempt_done
    GROUP BY a.item_key, a.arm_id, a.repeat)
"""


def newest_done_attempts(attempts: Iterable[AttemptRow]) -> dict[tuple[str, str, int], int]:
    """The attempt each verdict reads: per (item, arm, repeat), the newest finished one.

    A rerun adds newer attempts; older ones stay in the history, unread by gates.
    """
    newest: dict[tuple[str, str, int], int] = {}
    for att in attempts:
        if att.state == AttemptState.DONE:
            key = (att.item_key, att.arm_id, att.repeat)
            newest[key] = max(newest.get(key, 0), att.id or 0)
    return newest


def _add_missing_columns(engine: Engine) -> None:
    """Bring a database made by an older version up to date: new columns are added with
    their defaults, nothing is dropped or rewritten."""
    inspector = inspect(engine)
    with engine.begin() as conn:
        for table in SQLModel.metadata.sorted_tables:
            if not inspector.has_table(table.name):
                continue
            have = {c["name"] for c in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name in have:
                    continue
                default = column.default.arg if column.default is not None and not callable(column.default.arg) else None
                literal = "NULL" if default is None else (f"'{default}'" if isinstance(default, str) else str(int(default) if isinstance(default, bool) else default))
                kind = column.type.compile(engine.dialect)
                conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind} DEFAULT {literal}'))


def _create_tables(engine: Engine, tries: int = 5) -> None:
    """Create missing tables and columns. Two processes opening a new database at the
    same instant race here (both see a table missing, the second CREATE fails): the loser
    looks again, and finds the work done."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    for attempt in range(tries):
        try:
            SQLModel.metadata.create_all(engine)
            _add_missing_columns(engine)
            return
        except (OperationalError, ProgrammingError) as exc:
            text_ = str(exc).lower()
            if attempt == tries - 1 or not ("already exists" in text_ or "duplicate column" in text_):
                raise


def default_db_url() -> str:
    env = os.environ.get("CAMPAIGN_DB")
    if env:
        return db_url(env)
    return db_url(".campaign/campaign.db")


def db_url(value: str) -> str:
    """Accept a SQLAlchemy URL or a plain file path (the common case)."""
    if "://" in value:
        return value
    path = Path(value).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()


class Store:
    """Thin, typed access to the campaign database. Every write commits at once (the
    probe sink batches its rows through `insert_rows` from a writer thread)."""

    def __init__(self, url: str | None = None):
        self.url = url or default_db_url()
        kwargs: dict[str, Any] = {}
        if self.url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.engine = create_engine(self.url, **kwargs)
        if self.url.startswith("sqlite"):
            _sqlite_pragmas(self.engine)
        _create_tables(self.engine)

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
                    campaign_id=campaign_id, item_key=key, kind="item-state", from_state=before, to_state=state, message=reason
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
        self, campaign_id: int, item_key: str, arm_id: str, overrides: dict[str, Any], repeat: int = 0
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
            )
        )

    def probe_runs(self, attempt_id: int) -> list[ProbeRunRow]:
        with self.session() as s:
            return list(s.exec(select(ProbeRunRow).where(ProbeRunRow.attempt_id == attempt_id).order_by(ProbeRunRow.id)))

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
        """
        wanted = columns or MEASUREMENT_COLUMNS
        sql = _MEASUREMENTS_SQL.format(
            columns=", ".join(f"m.{c}" for c in wanted), latest=_LATEST_CLAUSE if latest_only else ""
        )
        params: dict[str, Any] = {"cid": campaign_id}
        if latest_only:
            params |= {"run_done": ProbeRunState.DONE.value, "attempt_done": AttemptState.DONE.value}
        with self.engine.connect() as conn:
            frame = pd.read_sql(text(sql), conn, params=params)
        frame.columns = wanted
        for col in ("id", "campaign_id", "attempt_id", "probe_run_id", "context", "trial", "repeat"):
            if col in frame:
                frame[col] = frame[col].astype("int64")
        if "value" in frame:
            frame["value"] = frame["value"].astype(float)
        if "simulated" in frame:
            frame["simulated"] = frame["simulated"].astype(bool)
        for col in MEASUREMENT_TEXT_COLUMNS:
            if col in frame:
                frame[col] = frame[col].fillna("").astype("category" if categorical else str)
        return frame

    def samples(self, probe_run_ids: Iterable[int]) -> list[SampleRow]:
        ids = list(probe_run_ids)
        if not ids:
            return []
        with self.session() as s:
            return list(s.exec(select(SampleRow).where(SampleRow.probe_run_id.in_(ids))))  # type: ignore[attr-defined]

    def requests(self, probe_run_ids: Iterable[int]) -> list[RequestRow]:
        ids = list(probe_run_ids)
        if not ids:
            return []
        with self.session() as s:
            return list(s.exec(select(RequestRow).where(RequestRow.probe_run_id.in_(ids))))  # type: ignore[attr-defined]

    # -- verdicts -----------------------------------------------------------------

    def latest_verdicts(self, campaign_id: int) -> dict[str, VerdictRow]:
        with self.session() as s:
            rows = s.exec(select(VerdictRow).where(VerdictRow.campaign_id == campaign_id).order_by(VerdictRow.id)).all()
        latest: dict[str, VerdictRow] = {}
        for row in rows:
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
