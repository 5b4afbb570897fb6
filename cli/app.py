"""The command line's shared parts: the typer app, consoles, common options, user errors.

Every command module imports this one and nothing imports them back, except
`cli.main`, which wires them all; so the commands form no cycle.
"""


from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
from rich.console import Console


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Gated experiment campaigns for LLM serving: run arms, probe servers, compute verdicts.",
    pretty_exceptions_enable=False,
)
# A terminal's own width, or COLUMNS when set; else (a pipe, a log file) 160, wide enough
# for the tables without wrapping every reason.
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
err = Console(stderr=True)

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="database file or SQLAlchemy URL (default: .campaign/campaign.db, or $CAMPAIGN_DB)"),
]


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


class CannotRun(Exception):
    """The command cannot go on (another runner, no Prefect server): one line, exit 1."""


def open_store(db: str | None) -> Any:
    from campaign.store import Store, db_url, default_db_url

    return Store(db_url(db) if db else default_db_url())


def prefect_env() -> None:
    """Before Prefect is imported: quiet console logs, no analytics. Run logs are not
    sent to a temporary server (it is gone when the run ends); `flows.placement` turns
    them on for a configured one, where someone can read them."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED", "false")
