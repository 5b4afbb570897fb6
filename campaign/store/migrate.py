"""The schema's versions: alembic migrations (campaign/migrations), run by writers
(`campaign.store.database.engine_for` with migrate) and `campaign db upgrade`, never by a
read-only command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, Table, create_engine, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

import campaign.store.tables  # noqa: F401  (registers the tables on SQLModel.metadata)

MIGRATIONS = Path(__file__).with_name("migrations")
BASELINE_REVISION = "0001"  # the schema as the last version without migrations made it
# Our revision's table. Not alembic's default `alembic_version`: a search's Optuna study
# lives in the same database (`campaign.store.study`), and Optuna keeps its own alembic
# revision there under the default name.
VERSION_TABLE = "campaign_schema_version"
_OLD_VERSION_TABLE = "alembic_version"
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
    with engine.connect() as conn:
        return _context(conn).get_current_revision()


def _context(conn: Any) -> Any:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})


def _adopt_old_version_table(conn: Any, known: set[str]) -> None:
    """A database migrated before our revision had a table of its own: its revision was in
    alembic's default table. Move it to ours, and drop the old table when nothing else
    (an Optuna study) keeps a revision there."""
    inspector = inspect(conn)
    if inspector.has_table(VERSION_TABLE) or not inspector.has_table(_OLD_VERSION_TABLE):
        return
    rows = [r[0] for r in conn.execute(text(f"SELECT version_num FROM {_OLD_VERSION_TABLE}"))]
    ours = [r for r in rows if r in known]
    if not ours:
        return
    conn.execute(text(f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"))
    conn.execute(text(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:v)"), {"v": ours[0]})
    if len(ours) == len(rows):
        conn.execute(text(f"DROP TABLE {_OLD_VERSION_TABLE}"))
    else:
        conn.execute(text(f"DELETE FROM {_OLD_VERSION_TABLE} WHERE version_num = :v"), {"v": ours[0]})


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

    scratch = create_engine("sqlite://")
    with scratch.begin() as scratch_conn:
        command.upgrade(_alembic_config(scratch_conn), BASELINE_REVISION)
    baseline = MetaData()
    baseline.reflect(scratch)
    scratch.dispose()
    inspector = inspect(conn)
    done: list[str] = []
    for table in baseline.sorted_tables:
        if table.name in (VERSION_TABLE, _OLD_VERSION_TABLE):
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
            arg = getattr(source.default, "arg", None)  # a scalar default's value (ColumnDefault.arg)
            default = None if arg is None or callable(arg) else arg
            kind = source.type.compile(conn.dialect)
            conn.execute(
                text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind} DEFAULT {_literal(default)}')
            )
            done.append(f"added {table.name}.{column.name}")
    return done


@contextmanager
def _migrating(engine: Engine) -> Iterator[Connection]:
    """A connection that holds the database's write lock from before the revision is read
    until the last migration is committed, so two processes racing on one database
    migrate it once, one after the other.

    Postgres: an advisory lock in the transaction. SQLite: pysqlite commits every DDL
    statement on its own, so a racer could read a revision half-way through another's
    migrations; a connection of its own, with the driver's transaction handling off,
    opens `BEGIN IMMEDIATE` itself (the file's write lock; the other waits on its busy
    timeout) and the whole migration is one transaction. An in-memory SQLite database
    has one process and needs no lock."""
    file = engine.url.database if engine.dialect.name == "sqlite" else None
    if not file or file == ":memory:" or file.startswith("file:"):
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_LOCK})
            yield conn
        return
    with engine.connect():
        pass  # the engine's own connect hook sets the file's journal mode first
    solo = create_engine(engine.url, poolclass=NullPool, connect_args={"timeout": 60, "isolation_level": None})
    try:
        with solo.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
            conn.exec_driver_sql("COMMIT")
    finally:
        solo.dispose()


def upgrade(engine: Engine) -> str:
    """Migrate the database to the newest schema (what `campaign db upgrade` runs, and
    every store does on first use in a process). Returns what was done, in words.

    An empty database gets every migration; one made before migrations existed is first
    completed to the baseline and stamped (`_bring_to_baseline`); one made by a newer
    version raises `SchemaTooNew`. Each process migrates under the database's write lock
    (`_migrating`), so a racer finds the revision the winner left."""
    from alembic import command
    from alembic.script import ScriptDirectory

    head = head_revision()
    with _migrating(engine) as conn:
        config = _alembic_config(conn)
        known = {rev.revision for rev in ScriptDirectory.from_config(config).walk_revisions()}
        _adopt_old_version_table(conn, known)
        current = _context(conn).get_current_revision()
        if current == head:
            return f"at {head} already"
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
