"""Attempt holder and heartbeat; one running attempt per (item, arm, repeat); 64-bit sizes and ids.

Revision ID: 0002
Revises: 0001

Why: several runners and workers on several hosts share one database. An attempt now
says who runs it (host, pid and its start time, Prefect flow run) and beats a heartbeat,
so that recovery elsewhere can prove it dead or leave it alone; the partial unique index
makes a second running attempt of the same arm impossible. Server sizes pass 2 GiB, and
the measurement-sized tables pass 2**31 rows in a long-lived shared database: BIGINT
where the backend has 32-bit integers (SQLite's are 64-bit already, and its rowid must
stay INTEGER, so it keeps its types).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_RUNNING = sa.text("state = 'running'")
_BIG_IDS = ("measurement", "sample", "request_record", "event")


def upgrade() -> None:
    with op.batch_alter_table("attempt") as batch:
        batch.add_column(sa.Column("host", sa.String(), nullable=False, server_default=""))
        batch.add_column(sa.Column("owner_start", sa.Float(), nullable=True))
        batch.add_column(sa.Column("flow_run_id", sa.String(), nullable=False, server_default=""))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column("attempt", "rss_bytes", existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=True)
        for table in _BIG_IDS:
            op.alter_column(table, "id", existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=False)
            # the sequence behind a SERIAL is an integer one: widen it too
            op.execute(f"ALTER SEQUENCE IF EXISTS {table}_id_seq AS BIGINT")
    # The bug this revision ends could leave two running attempts of one arm: keep the
    # newest running, the older ones become interrupted (resume continues the newest).
    op.execute(
        "UPDATE attempt SET state = 'interrupted', error = 'two attempts were running at once; this older one was stopped' "
        "WHERE state = 'running' AND id NOT IN ("
        "SELECT MAX(id) FROM attempt WHERE state = 'running' GROUP BY campaign_id, item_key, arm_id, repeat)"
    )
    op.create_index(
        "uq_attempt_running", "attempt", ["campaign_id", "item_key", "arm_id", "repeat"], unique=True,
        sqlite_where=_RUNNING, postgresql_where=_RUNNING,
    )


def downgrade() -> None:
    op.drop_index("uq_attempt_running", table_name="attempt")
    if op.get_bind().dialect.name != "sqlite":
        for table in _BIG_IDS:
            op.alter_column(table, "id", existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=False)
        op.alter_column("attempt", "rss_bytes", existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=True)
    with op.batch_alter_table("attempt") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("flow_run_id")
        batch.drop_column("owner_start")
        batch.drop_column("host")
