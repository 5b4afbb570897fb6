"""Sample kind: a measurement says whether it is a sample, a summary or a warm-up.

Revision ID: 0005
Revises: 0004

Why: the kind was encoded in the sign of `trial` (-1 a summary, -2 and below warm-up i as
-2 - i), so every reader rewrote the sample filter with a comparison of its own. `kind`
holds it now and `trial` is the row's number among its kind: summaries become trial 0,
warm-up i becomes trial i (request records of warm-ups too). The row's unique key gains
the kind and a name, so a summary and a sample of one metric can both be trial 0.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_OLD_KEY = ["probe_run_id", "scenario", "mode", "context", "trial", "metric"]
_NEW_KEY = ["probe_run_id", "scenario", "mode", "context", "kind", "trial", "metric"]
# names SQLite's unnamed constraints for the batch copy, so the old key can be dropped
_NAMING = {"uq": "uq_%(table_name)s_%(column_0_N_name)s"}


def _old_key_name() -> str | None:
    """The old unique key's name ('' on SQLite, where it had none; None when the table
    lacks it: a database completed to the baseline by column only)."""
    for constraint in sa.inspect(op.get_bind()).get_unique_constraints("measurement"):
        if list(constraint["column_names"]) == _OLD_KEY:
            return constraint.get("name") or ""
    return None


def upgrade() -> None:
    old = _old_key_name()
    with op.batch_alter_table("measurement", naming_convention=_NAMING) as batch:
        batch.add_column(sa.Column("kind", sa.String(), nullable=False, server_default="sample"))
        if old is not None:
            batch.drop_constraint(old or "uq_measurement_" + "_".join(_OLD_KEY), type_="unique")
    op.execute("UPDATE measurement SET kind = 'summary', trial = 0 WHERE trial = -1")
    op.execute("UPDATE measurement SET kind = 'warmup', trial = -2 - trial WHERE trial <= -2")
    op.execute("UPDATE request_record SET trial = -2 - trial WHERE trial <= -2")
    with op.batch_alter_table("measurement") as batch:
        batch.create_unique_constraint("uq_measurement_row", _NEW_KEY)


def downgrade() -> None:
    op.execute("UPDATE request_record SET trial = -2 - trial WHERE trial >= 0 AND scenario LIKE '%:warmup'")
    op.execute("UPDATE measurement SET trial = -2 - trial WHERE kind = 'warmup'")
    op.execute("UPDATE measurement SET trial = -1 WHERE kind = 'summary'")
    with op.batch_alter_table("measurement") as batch:
        batch.drop_constraint("uq_measurement_row", type_="unique")
        batch.drop_column("kind")
        # None: the unnamed constraint the table had before; alembic takes it, its types say str
        batch.create_unique_constraint(None, _OLD_KEY)  # type: ignore[arg-type]
