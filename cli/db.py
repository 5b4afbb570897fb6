"""`campaign db ...`: the database's schema revision, and migrating it by hand.

Commands that write (run, resume, rerun, worker) migrate a database they open
(`campaign.store.migrate.upgrade`), as a Prefect server does its own; read-only ones (status,
report, export, check) never do, and say so when a database is behind. `campaign db
upgrade` migrates and nothing else, for whoever wants to migrate a shared database
before starting runners and workers on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# added to the main app by cli.main (this module imports nothing of it: no cycle)
db_app = typer.Typer(help="The campaign database: schema revision and migrations.", no_args_is_help=True)
console = Console()
DbOption = Annotated[str | None, typer.Option("--db", help="database file or SQLAlchemy URL (default: $CAMPAIGN_DB)")]


def _engine(db: str | None) -> Engine:
    from sqlalchemy import create_engine

    from campaign.store.database import database_url, resolve_url

    return create_engine(resolve_url(database_url(db)))


@db_app.command()
def upgrade(db: DbOption = None) -> None:
    """Migrate the database to this version's newest schema revision."""
    from campaign.store.database import public_url
    from campaign.store.migrate import upgrade as migrate

    engine = _engine(db)
    console.print(
        f"{public_url(str(engine.url.render_as_string(hide_password=False)))}: {migrate(engine)}", highlight=False
    )
    engine.dispose()


@db_app.command()
def current(db: DbOption = None) -> None:
    """Print the database's schema revision and this version's newest one."""
    from campaign.store.migrate import head_revision, schema_revision

    engine = _engine(db)
    console.print(
        f"database at {schema_revision(engine) or 'no revision (empty, or made before migrations)'}; newest {head_revision()}",
        highlight=False,
    )
    engine.dispose()
