"""The command line's shared parts: the typer app, consoles, common options, user errors.

Every command module imports this one and nothing imports them back, except
`cli.main`, which wires them all; so the commands form no cycle.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup


def _plain_help() -> None:
    """Help in the style of click, uv and pytest rather than typer's newest: a flag shows no
    value, a value shows its kind in capitals (INT, PATH, TEXT) instead of `<int>` or
    `<list[str]>`, and a required argument reads FILE in the usage line, not `{file}`.
    Typer has no setting for it, so its two display hooks are replaced here; if a typer
    release renames them, help falls back to typer's own style and nothing else changes."""
    from typer import core

    option, argument = getattr(core, "TyperOption", None), getattr(core, "TyperArgument", None)
    kinds = {"str": "TEXT", "int": "INT", "float": "NUMBER", "path": "PATH", "file": "PATH", "directory": "DIR"}
    for cls in (option, argument):
        original = getattr(cls, "display_type", None)
        if cls is None or original is None:
            continue

        def display_type(self: Any, ctx: Any, _original: Any = original) -> str:
            if getattr(self, "is_flag", False) or getattr(self, "count", False):
                return ""
            label = str(_original(self, ctx)).strip("<>")
            inner = label.removeprefix("list[").removesuffix("]")
            if "|" in inner:  # a choice: its values, as they are typed
                return inner
            return kinds.get(inner, inner.upper())

        cls.display_type = display_type
    if argument is not None and hasattr(argument, "_usage_display_name"):

        def usage_name(self: Any) -> str:
            name = (self.metavar or self.name or "").upper()
            name = name if self.required else f"[{name}]"
            return name if self.nargs == 1 else f"{name}..."

        argument._usage_display_name = usage_name


_plain_help()

# Commands whose options cost imports to build (`campaign probe` reads every probe's
# parameter model, which imports the probes and their HTTP clients): the app lists them
# by a light stand-in with the same summary, and builds the real command only when it
# is the one run (its own `--help` included), so other commands never pay for it.
BUILT_WHEN_RUN: dict[str, Callable[[], Any]] = {}


class _Commands(TyperGroup):
    """The main app's commands: as typer's, except that a command named in
    `BUILT_WHEN_RUN` is built when it is resolved to run, not when it is listed."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        build = BUILT_WHEN_RUN.get(name or "")
        return name, (build() if build is not None else command), rest


app = typer.Typer(
    cls=_Commands,
    add_completion=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Gated experiment campaigns for LLM serving: run arms, probe servers, compute verdicts.",
    pretty_exceptions_enable=False,
    # Markdown: a docstring's single line breaks join into one paragraph that wraps at the
    # terminal's width, instead of ragged lines where the source happened to break.
    rich_markup_mode="markdown",
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
    from campaign.store.database import database_url
    from campaign.store.store import Store

    return Store(database_url(db))


def open_existing_store(db: str | None) -> Any:
    """The store of a read-only command (status, report, export): a database file that
    does not exist is a usage error, never created (with its folder) as a side effect."""
    from campaign.store.database import SchemaNotCurrent, database_given, database_url
    from campaign.store.store import Store

    raw = database_given(db)
    if "://" not in raw:
        from pathlib import Path

        path = Path(raw).expanduser()
        if not path.is_file():
            raise UsageError(f"no campaign database at {path}; run one first (campaign run FILE) or name it with --db")
    try:
        return Store(database_url(db), migrate=False)  # read-only: migrates nothing
    except SchemaNotCurrent as exc:
        raise UsageError(str(exc)) from None


def open_campaign(db: str | None, name: str | None) -> tuple[Any, Any]:
    """The store and campaign row a read-only command (status, report, export) shows:
    the named campaign, or the latest for None. One function so that each such command
    says the same usage error when there is none to show."""
    store = open_existing_store(db)
    row = store.campaign(name)
    if row is None or row.id is None:
        raise UsageError(
            f"no campaign {'named ' + repr(name) + ' ' if name else ''}in {store.url}; run one first: campaign run FILE"
        )
    return store, row


def process_started() -> float:
    """When this command's process began (epoch seconds; the interpreter's own start-up
    included), for the wall time `campaign run` reports."""
    import psutil

    try:
        return float(psutil.Process().create_time())
    except psutil.Error:
        import time

        return time.time()


def prefect_env() -> None:
    """Before Prefect is imported: quiet console logs, no analytics. Run logs are not
    sent to a temporary server (it is gone when the run ends); `flows.placement` turns
    them on for a configured one, where someone can read them."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED", "false")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("llm-campaign")
        except PackageNotFoundError:
            text = "unknown (not installed)"
        console.print(f"campaign {text}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Gated experiment campaigns for LLM serving: run arms, probe servers, compute verdicts."""
