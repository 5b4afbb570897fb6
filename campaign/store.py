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
import socket
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, Table, UniqueConstraint, event, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Field, Session, SQLModel, create_engine, select

from campaign.processes import holder_gone as holder_gone_rule, process_start
from campaign.states import AttemptState, ItemState, ProbeRunState, Verdict


def utcnow() -> datetime:
    return datetime.now(UTC)


# 64-bit everywhere a number can pass 2**31: sizes in bytes, and the ids of the tables
# that grow by millions of rows. SQLite keeps INTEGER (its integers are 64-bit already,
# and only an INTEGER primary key is the auto-incremented rowid).
BIG_INT = BigInteger().with_variant(Integer(), "sqlite")


def _big_id() -> Any:
    return Field(default=None, sa_column=Column(BIG_INT, primary_key=True, autoincrement=True))


def aware(moment: datetime) -> datetime:
    """SQLite hands datetimes back without their zone (they were written in UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


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
    """One run of one arm for one queue item; a rerun or a retry is a new row.

    Who runs it is recorded (`host`, `owner_pid` and its `owner_start`, the Prefect
    `flow_run_id`) and proven alive by `heartbeat_at`, so that another process on
    another machine can tell a live attempt from a dead one (`holder_gone`). At most one
    attempt of an (item, arm, repeat) is running: a partial unique index says so, which
    makes `Store.claim_attempt` atomic on every backend.
    """

    __tablename__ = "attempt"
    __table_args__ = (
        Index(
            "uq_attempt_running", "campaign_id", "item_key", "arm_id", "repeat", unique=True,
            sqlite_where=text("state = 'running'"), postgresql_where=text("state = 'running'"),
        ),
    )
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
    rss_bytes: int | None = Field(default=None, sa_column=Column(BIG_INT, nullable=True))
    host: str = ""
    owner_start: float | None = None
    flow_run_id: str = ""
    heartbeat_at: datetime | None = None
    # the block (server run) it belongs to: `repeat` is the block's number, `block_order`
    # the arm's 0-based place in the block's randomised order (NULL on rows made before
    # blocks), `block_id` the same for every arm of the block and new for other settings;
    # `settings_hash` the item's settings common to its arms, `recipe_hash` this arm's
    # server (`flows.campaign_flow.block_plan` writes them; see docs/architecture.md)
    block_order: int | None = None
    block_id: str = ""
    settings_hash: str = ""
    recipe_hash: str = ""


# what an attempt is told about its block when it is made (`Store.claim_attempt`)
BLOCK_FIELDS = ("block_order", "block_id", "settings_hash", "recipe_hash")


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
    # a hash of what this run measured under: the probe's resolved parameters at its
    # context and the simulator overrides (`flows.overrides.probe_settings_hash`); the
    # `settings` of every cell its rows feed ('' on rows made before it was recorded)
    settings_hash: str = ""


class RequestRow(SQLModel, table=True):
    __tablename__ = "request_record"
    id: int | None = _big_id()
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
    id: int | None = _big_id()
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
    id: int | None = _big_id()
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
    id: int | None = _big_id()
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    item_key: str = ""
    arm_id: str = ""
    kind: str
    from_state: str = ""
    to_state: str = ""
    message: str = ""
    at: datetime = Field(default_factory=utcnow)


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
}
FRAME_COLUMNS = [*MEASUREMENT_COLUMNS, *ATTEMPT_FRAME_COLUMNS]
MEASUREMENT_TEXT_COLUMNS = (
    "item_key", "arm_id", "probe", "scenario", "mode", "metric", "unit", "source", "block_id", "settings_hash", "recipe_hash",
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


MIGRATIONS = Path(__file__).with_name("migrations")
BASELINE_REVISION = "0001"  # the schema as the last version without migrations made it
_ADVISORY_LOCK = 0x63616D70  # one Postgres advisory lock: one process migrates at a time


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer version of this program."""


def _alembic_config(connection: Any = None) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def schema_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for an empty or a pre-migration database."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"  # Postgres refuses 0/1 for a boolean
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def _bring_to_baseline(conn: Any) -> list[str]:
    """A database made before migrations existed: whatever it lacks of the baseline
    schema (tables, or columns added by versions before it) is added with the defaults,
    nothing is dropped or rewritten; then it is stamped as the baseline and migrated on.

    The baseline is read from the baseline migration itself (run on an empty in-memory
    database), so it is written down once."""
    from alembic import command
    from sqlalchemy import create_engine as sa_create_engine

    scratch = sa_create_engine("sqlite://")
    with scratch.begin() as scratch_conn:
        command.upgrade(_alembic_config(scratch_conn), BASELINE_REVISION)
    baseline = MetaData()
    baseline.reflect(scratch)
    scratch.dispose()
    inspector = inspect(conn)
    done: list[str] = []
    for table in baseline.sorted_tables:
        if table.name == "alembic_version":
            continue
        if not inspector.has_table(table.name):
            Table(table.name, MetaData(), *[c.copy() for c in table.columns]).create(conn)
            done.append(f"created table {table.name}")
            continue
        have = {c["name"] for c in inspector.get_columns(table.name)}
        model = SQLModel.metadata.tables.get(table.name)
        for column in table.columns:
            if column.name in have:
                continue
            current = model.columns.get(column.name) if model is not None else None
            source = current if current is not None else column
            default = source.default.arg if source.default is not None and not callable(source.default.arg) else None
            kind = source.type.compile(conn.dialect)
            conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind} DEFAULT {_literal(default)}'))
            done.append(f"added {table.name}.{column.name}")
    return done


def upgrade(engine: Engine) -> str:
    """Migrate the database to the newest schema (what `campaign db upgrade` runs, and
    every store does on first use in a process). Returns what was done, in words.

    An empty database gets every migration; one made before migrations existed is first
    completed to the baseline and stamped (`_bring_to_baseline`); one made by a newer
    version raises `SchemaTooNew`. On Postgres an advisory lock lets one process migrate
    while the others wait; two SQLite processes racing on a new file find the loser's
    CREATE failing, and it looks again."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    head = head_revision()
    for attempt in range(5):
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_LOCK})
                current = MigrationContext.configure(conn).get_current_revision()
                if current == head:
                    return f"at {head} already"
                config = _alembic_config(conn)
                from alembic.script import ScriptDirectory

                known = {rev.revision for rev in ScriptDirectory.from_config(config).walk_revisions()}
                if current is not None and current not in known:
                    raise SchemaTooNew(
                        f"the database is at schema revision {current}, which this version does not know "
                        f"(its newest is {head}): use the newer version of llm-campaign with it"
                    )
                notes: list[str] = []
                origin = current or "an empty database"
                if current is None and inspect(conn).has_table("campaign"):
                    notes = _bring_to_baseline(conn)
                    command.stamp(config, BASELINE_REVISION)
                    origin = "a database made before migrations"
                command.upgrade(config, "head")
                return f"upgraded from {origin} to {head}" + (f" ({'; '.join(notes)})" if notes else "")
        except (OperationalError, ProgrammingError, IntegrityError) as exc:
            text_ = str(exc).lower()
            if attempt == 4 or not any(w in text_ for w in ("already exists", "duplicate", "unique", "locked")):
                raise
    raise AssertionError("unreachable")


DEFAULT_DB = os.path.join(".campaign", "campaign.db")


def database_given(given: str | None = None) -> str:
    """Which database a command means, as the user wrote it: --db, else $CAMPAIGN_DB,
    else `DEFAULT_DB` (relative to the folder it runs in). The one place that decides."""
    return given or os.environ.get("CAMPAIGN_DB") or DEFAULT_DB


def database_url(given: str | None = None) -> str:
    """`database_given` as a SQLAlchemy URL (a path becomes a SQLite file URL)."""
    return db_url(database_given(given))


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


def public_url(url: str) -> str:
    """The URL without its password: what may be shown, logged and passed to a flow as a
    parameter (Prefect stores parameters in its database and shows them in its UI)."""
    parsed = make_url(url)
    if parsed.password is None:
        return url
    return parsed._replace(password=None).render_as_string(hide_password=False)  # set(password=None) keeps it


def resolve_url(url: str) -> str:
    """The URL to connect with, given one that may have lost its password (`public_url`):
    an engine this process opened with the credentials, or $CAMPAIGN_DB naming the same
    database, supplies them. Otherwise the URL as given (the driver may still find a
    password in PGPASSWORD or ~/.pgpass)."""
    if make_url(url).password is not None:
        return url
    with _ENGINES_LOCK:
        known = _FULL_URLS.get(url)
    if known:
        return known
    env = os.environ.get("CAMPAIGN_DB")
    if env:
        full = db_url(env)
        if public_url(full) == url:
            return full
    return url


_ENGINES: dict[str, Engine] = {}
_FULL_URLS: dict[str, str] = {}  # public URL -> the URL with credentials it was opened with
_ENGINES_LOCK = threading.Lock()


class SchemaNotCurrent(Exception):
    """A read-only command found a database at an older schema revision: it reads only
    what is current, and migrating a shared database is a writer's decision."""


_MIGRATED: set[str] = set()


def engine_for(url: str, migrate: bool = True) -> Engine:
    """One engine (one connection pool) per database per process, its schema checked
    and brought to the newest revision once (`upgrade`). A SQLite file deleted since is
    checked again. With `migrate` False (status, report, export, check) nothing is
    written: a database behind the newest revision raises `SchemaNotCurrent` instead,
    so a read-only command never migrates a shared Postgres under running workers."""
    full = resolve_url(url)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(full)
        if engine is not None and full.startswith("sqlite") and engine.url.database and not Path(engine.url.database).exists():
            engine.dispose()
            _MIGRATED.discard(full)
            engine = None
        if engine is not None and migrate and full not in _MIGRATED:
            upgrade(engine)
            _MIGRATED.add(full)
        if engine is None:
            kwargs: dict[str, Any] = {}
            if full.startswith("sqlite"):
                kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
            else:
                kwargs["pool_pre_ping"] = True
            engine = create_engine(full, **kwargs)
            if full.startswith("sqlite"):
                _sqlite_pragmas(engine)
            if migrate:
                upgrade(engine)
                _MIGRATED.add(full)
            else:
                current, head = schema_revision(engine), head_revision()
                if current != head:
                    engine.dispose()
                    raise SchemaNotCurrent(
                        f"{public_url(full)} is at schema revision {current or 'none (made before migrations)'}, "
                        f"this version reads {head}: run `campaign db upgrade` (or any `campaign run`) first"
                    )
            _ENGINES[full] = engine
            _FULL_URLS[public_url(full)] = full
        return engine


def this_host() -> str:
    """The name attempts record as their host: $CAMPAIGN_HOST (what `campaign worker
    --host` sets), else the machine's host name."""
    return os.environ.get("CAMPAIGN_HOST") or socket.gethostname()


HEARTBEAT_S = float(os.environ.get("CAMPAIGN_HEARTBEAT_S", "10"))
# An attempt whose heartbeat is older than this is dead, wherever it ran: six beats missed.
HEARTBEAT_STALE_S = float(os.environ.get("CAMPAIGN_HEARTBEAT_STALE_S", str(6 * HEARTBEAT_S)))


def holder_gone(attempt: AttemptRow, now: datetime | None = None, stale_s: float | None = None) -> str | None:
    """Why the process running `attempt` is provably dead, or None if it may be alive.

    Proof is one of: it ran on this host and its pid is gone (or now names a process
    started later); or its heartbeat is older than `stale_s` (HEARTBEAT_STALE_S), which
    holds for a holder on another host. A pid on another host proves nothing from here,
    so a live holder elsewhere is never judged dead while it beats; on this host a live
    pid keeps its attempt, however late its heartbeat. Attempts written before heartbeats
    existed (no heartbeat, no host) are judged by their pid, as before.
    """
    now = now or utcnow()
    stale_s = HEARTBEAT_STALE_S if stale_s is None else stale_s
    silent = (now - aware(attempt.heartbeat_at)).total_seconds() if attempt.heartbeat_at is not None else None
    why = holder_gone_rule(attempt.host in ("", this_host()), attempt.owner_pid, attempt.owner_start, silent, stale_s,
                           gone=f"on {attempt.host or 'this host'} is gone")
    if why and why.startswith("silent"):
        return f"no heartbeat from host {attempt.host or '?'} for {why.removeprefix('silent for ')}"
    return why


class AttemptHeartbeat:
    """A thread that beats an attempt's heart every HEARTBEAT_S while its arm runs."""

    def __init__(self, store: "Store", attempt_id: int, every_s: float | None = None):
        self.store, self.attempt_id = store, attempt_id
        self.every_s = HEARTBEAT_S if every_s is None else every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{attempt_id}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                if not self.store.heartbeat(self.attempt_id):
                    return
            except Exception:
                pass  # the next beat may get through; staleness is judged generously

    def __enter__(self) -> "AttemptHeartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


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
        self, campaign_id: int, item_key: str, arm_id: str, overrides: dict[str, Any], repeat: int = 0,
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

        me = {"owner_pid": os.getpid(), "owner_start": process_start(os.getpid()), "host": this_host(),
              "flow_run_id": flow_run_id, "heartbeat_at": utcnow()}
        try:
            with self.session() as s:
                if self.engine.dialect.name == "postgresql":
                    s.exec(select(CampaignRow.id).where(CampaignRow.id == campaign_id).with_for_update())
                else:
                    s.exec(update(CampaignRow).where(CampaignRow.id == campaign_id).values(id=CampaignRow.id))  # type: ignore[call-overload, arg-type]
                rows = list(s.exec(select(AttemptRow).where(
                    AttemptRow.campaign_id == campaign_id, AttemptRow.item_key == item_key,
                    AttemptRow.arm_id == arm_id, AttemptRow.repeat == repeat,
                ).order_by(AttemptRow.id)))  # type: ignore[arg-type]
                newest = rows[-1] if rows else None
                if newest is not None and newest.state == AttemptState.RUNNING:
                    return "busy", newest
                if newest is not None and not fresh and newest.state == AttemptState.DONE:
                    return "done", newest
                if newest is not None and newest.state == AttemptState.INTERRUPTED:
                    taken = s.exec(update(AttemptRow).where(  # type: ignore[call-overload]
                        AttemptRow.id == newest.id, AttemptRow.state == AttemptState.INTERRUPTED,  # type: ignore[arg-type]
                    ).values(state=AttemptState.RUNNING, error="", ended_at=None, **me))
                    if taken.rowcount != 1:
                        s.rollback()
                        return "busy", newest
                    s.commit()
                    return "resumed", self._attempt(newest.id or 0)
                row = AttemptRow(
                    campaign_id=campaign_id, item_key=item_key, arm_id=arm_id, repeat=repeat, number=len(rows) + 1,
                    overrides_json=json.dumps(overrides, sort_keys=True), **me, **_block_fields(block),
                )
                s.add(row)
                s.commit()
                s.refresh(row)
                return "new", row
        except IntegrityError:  # another process inserted the running attempt first
            running = [a for a in self.attempts(campaign_id, item_key, arm_id) if a.repeat == repeat and a.state == AttemptState.RUNNING]
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
            done = conn.execute(update(AttemptRow).where(  # type: ignore[arg-type]
                AttemptRow.id == attempt_id, AttemptRow.state == AttemptState.RUNNING,  # type: ignore[arg-type]
            ).values(heartbeat_at=utcnow()))
        return done.rowcount == 1

    def release_attempt(self, attempt_id: int, expected: AttemptRow, **fields: Any) -> bool:
        """Move a running attempt on (to interrupted, failed...) only if it is still the
        one `expected` saw: same holder and heartbeat. A holder that came back to life
        and beat its heart in between keeps it. True if this call moved it."""
        from sqlalchemy import update

        cond = [AttemptRow.id == attempt_id, AttemptRow.state == AttemptState.RUNNING,
                AttemptRow.owner_pid == expected.owner_pid, AttemptRow.host == expected.host]
        cond.append(AttemptRow.heartbeat_at == expected.heartbeat_at if expected.heartbeat_at is not None else AttemptRow.heartbeat_at.is_(None))  # type: ignore[union-attr]
        with self.engine.begin() as conn:
            done = conn.execute(update(AttemptRow).where(*cond).values(**fields))  # type: ignore[arg-type]
        return done.rowcount == 1

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
            raise KeyError(f"no measurement frame column {', '.join(map(repr, unknown))}; columns: {', '.join(FRAME_COLUMNS)}")
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
        rows every probe writes per cell (trial -1, `arms.probes.failures.record_errors`):
        `requests` and `requests_failed`, with any phase prefix (`baseline_requests`),
        summed; failures by kind from the `requests_failed_<kind>` rows (the kind is
        their source); and the raw messages of the first `errors` failed requests."""
        runs = (
            "SELECT p.id FROM probe_run p WHERE p.attempt_id = :aid AND p.state = :done"
        )
        params = {"aid": attempt_id, "done": ProbeRunState.DONE.value}
        out = RequestOutcome()
        with self.engine.connect() as conn:
            rows = conn.execute(text(
                f"SELECT m.metric, m.source, m.value FROM measurement m WHERE m.attempt_id = :aid AND m.trial = -1 "
                f"AND m.metric LIKE '%requests%' AND m.probe_run_id IN ({runs})"
            ), params).all()
            for metric, source, value in rows:
                if metric.endswith("requests"):
                    out.requests += int(value)
                elif metric.endswith("requests_failed"):
                    out.failed += int(value)
                elif "requests_failed_" in metric:
                    out.kinds[source or ""] = out.kinds.get(source or "", 0) + int(value)
            if out.failed:
                out.errors = [e for (e,) in conn.execute(text(
                    f"SELECT r.error FROM request_record r WHERE r.probe_run_id IN ({runs}) AND r.error <> '' "
                    "ORDER BY r.id LIMIT :n"
                ), {**params, "n": errors})]
        return out

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
