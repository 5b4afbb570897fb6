"""Server starts: an attempt chained onto a kept server records the start it ran on.

Revision ID: 0007
Revises: 0006

Why: with `campaign.keep_servers`, consecutive queue items share one server start per
arm and block, each item's attempt with a block id of its own. A gate reading several of
those items counted one start once per item (three starts read through two items were
"paired over 6 blocks"), which passes identical arms about five times as often as it
says. `server_block` is the block of the attempt that started the server ('' for an
attempt on a start of its own), and a gate's runs are grouped by it.

Attempts chained before this revision copied the `server_log` of the attempt that
started their server (one log per starting attempt: its id is in the name), so each gets
the block of the earliest attempt of its campaign with the same log; an attempt that is
itself that earliest one, or has no log, keeps ''.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_STARTER = """
    SELECT s.block_id FROM attempt s
    WHERE s.campaign_id = attempt.campaign_id AND s.server_log = attempt.server_log AND s.id < attempt.id
    ORDER BY s.id LIMIT 1
"""


def upgrade() -> None:
    with op.batch_alter_table("attempt") as batch:
        batch.add_column(sa.Column("server_block", sa.String(), nullable=False, server_default=""))
    op.execute(f"UPDATE attempt SET server_block = COALESCE(({_STARTER}), '') WHERE server_log <> '' AND EXISTS ({_STARTER})")


def downgrade() -> None:
    with op.batch_alter_table("attempt") as batch:
        batch.drop_column("server_block")
