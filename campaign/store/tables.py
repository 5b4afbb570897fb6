"""The campaign database's tables (SQLModel): campaigns, arms, queue items, attempts,
probe runs, requests, measurements, samples, verdicts, runners and events.

What each row means is said on its class; how rows are read and written is
`campaign.store.store`, how the schema changes is `campaign.store.migrate` (alembic), which database
a command means is `campaign.store.database`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Column, Index, Integer, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from campaign.core.states import AttemptState, ItemState, ProbeRunState


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
            "uq_attempt_running",
            "campaign_id",
            "item_key",
            "arm_id",
            "repeat",
            unique=True,
            sqlite_where=text("state = 'running'"),
            postgresql_where=text("state = 'running'"),
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
    host: str = ""  # where it ran, as placed: $CAMPAIGN_HOST (`campaign worker --host`) or the machine
    machine: str = ""  # the machine its owner_pid belongs to (`campaign.store.liveness.this_machine`)
    owner_start: float | None = None
    flow_run_id: str = ""
    heartbeat_at: datetime | None = None
    # the block (server run) it belongs to: `repeat` is the block's number, `block_order`
    # the arm's 0-based place in the block's randomised order (NULL on rows made before
    # blocks), `block_id` the same for every arm of the block and new for other settings;
    # `settings_hash` the item's settings common to its arms, `recipe_hash` this arm's
    # server (`flows.blocks.block_plan` writes them; see docs/architecture.md)
    block_order: int | None = None
    block_id: str = ""
    settings_hash: str = ""
    recipe_hash: str = ""
    # the server start it ran on, for an attempt chained onto a kept server: the block of
    # the attempt that started it ('' = a start of its own, its `block_id`). One start is
    # one run however many items it served (`gates.runs.block_of`).
    server_block: str = ""


# what an attempt is told about its block when it is made (`Store.claim_attempt`)
BLOCK_FIELDS = ("block_order", "block_id", "settings_hash", "recipe_hash", "server_block")


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
        UniqueConstraint(
            "probe_run_id", "scenario", "mode", "context", "kind", "trial", "metric", name="uq_measurement_row"
        ),
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
    # a sample, a summary derived from samples, or a warm-up (`campaign.store.samples` filters);
    # `trial` is the row's number among its kind
    kind: str = "sample"
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
    (`campaign.store.queue.claim_runner`)."""

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
