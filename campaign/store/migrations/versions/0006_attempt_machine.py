"""Attempt machine: an attempt records the machine its owner's pid belongs to.

Revision ID: 0006
Revises: 0005

Why: an attempt's `host` is where it was placed ($CAMPAIGN_HOST, `campaign worker
--host`), which may name another machine, or two labels one machine; runner claims and
device slots recorded the machine's own name. A pid proves a holder gone only on the
machine that made it, so every holder is now judged by its machine
(`campaign.store.liveness.on_this_machine`). Attempts made before this revision get '' and are
judged by their host, as they were.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempt") as batch:
        batch.add_column(sa.Column("machine", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("attempt") as batch:
        batch.drop_column("machine")
