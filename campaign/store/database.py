"""Which database a command means (`--db`, $CAMPAIGN_DB, the default file), its URL
with and without credentials, and one engine per database per process, migrated once
by writers (`campaign.store.migrate`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlmodel import create_engine

from campaign.store.migrate import head_revision, schema_revision, upgrade

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
        if (
            engine is not None
            and full.startswith("sqlite")
            and engine.url.database
            and not Path(engine.url.database).exists()
        ):
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
