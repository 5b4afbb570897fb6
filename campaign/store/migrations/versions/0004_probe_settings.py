"""Probe settings: each probe run records a hash of the settings it measured under.

Revision ID: 0004
Revises: 0003

Why: a cell is (probe, scenario, context, mode, settings). Revision 0003 took a cell's
settings from its attempt, a hash of the whole item (all its probes, contexts, modes and
overrides, `repeats` among them), so the same decode at 32K in two items was two cells
and a gate across those items found nothing to compare. The probe run's own hash (its
resolved parameters at its context and the simulator overrides) is what its rows were
measured under. Rows made before this revision get '', and their frame falls back to the
attempt's hash.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("probe_run") as batch:
        batch.add_column(sa.Column("settings_hash", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("probe_run") as batch:
        batch.drop_column("settings_hash")
