"""Blocks: each attempt says which block (server run) it is, its place in the block's
order, and hashes of the settings and the recipe it ran with.

Revision ID: 0003
Revises: 0002

Why: a queue item's repeats are blocks. In each block every arm gets its own server
start, in an order drawn from the campaign's seed, and arms may be paired only within a
block; the server run, not the request, is the statistical unit. `repeat` stays the
block's number; `block_order` is the arm's 0-based place in its block, `block_id` one id
shared by the arms of a block (new under other settings), `settings_hash` the item's
settings common to its arms and `recipe_hash` the arm's server. Rows made before this
revision get '' and NULL: their order was the fixed A B A B, never recorded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempt") as batch:
        batch.add_column(sa.Column("block_order", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("block_id", sa.String(), nullable=False, server_default=""))
        batch.add_column(sa.Column("settings_hash", sa.String(), nullable=False, server_default=""))
        batch.add_column(sa.Column("recipe_hash", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("attempt") as batch:
        batch.drop_column("recipe_hash")
        batch.drop_column("settings_hash")
        batch.drop_column("block_id")
        batch.drop_column("block_order")
