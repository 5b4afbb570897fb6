"""Alembic environment of the campaign database.

Run through `campaign.store.migrate.upgrade` (or `campaign db upgrade`), which hands over an
open connection; the `alembic` command line works too, with `-x url=...`.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import campaign.store.tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from campaign.store.migrate import VERSION_TABLE

config = context.config
target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: batch mode copies the table instead
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("alembic: no database URL (pass -x url=... or set sqlalchemy.url)")
    engine = create_engine(url)
    with engine.begin() as conn:
        _run(conn)
