"""`campaign`: the entry point. The app layer: the only module that wires every command.

Run as the `campaign` script or `python -m cli`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from cli import commands, compare, examples, new, plan, probe, reports, simulate  # noqa: F401  (each adds its commands)
from cli.app import CannotRun, UsageError, app, err
from cli.db import db_app
from cli.trace import trace_app

# the order `campaign --help` lists the commands in (a command not named here comes last)
ORDER = (
    "run",
    "check",
    "resume",
    "rerun",
    "worker",
    "status",
    "report",
    "simulate",
    "examples",
    "new",
    "probe",
    "export",
    "compare",
    "rejudge",
    "ui",
)


def _listed_at(info: typer.models.CommandInfo) -> int:
    name = info.name or getattr(info.callback, "__name__", "")
    return ORDER.index(name) if name in ORDER else len(ORDER)


app.registered_commands.sort(key=_listed_at)
app.add_typer(db_app, name="db")
app.add_typer(trace_app, name="trace")

if TYPE_CHECKING:
    from campaign.core.schema import CampaignFileError


def _file_error() -> type[CampaignFileError]:
    """The campaign-file error class, imported only when an exception is being matched
    (the schema is a quarter of a second that `--help` and `new` need not pay)."""
    from campaign.core.schema import CampaignFileError

    return CampaignFileError


def main() -> None:
    try:
        code = app(standalone_mode=False)  # returns an Exit's code instead of raising it
        if isinstance(code, int) and code:
            sys.exit(code)
    except UsageError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except CannotRun as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err.print("interrupted; `campaign resume` carries on from the last committed measurement")
        sys.exit(130)
    except _file_error() as exc:
        err.print(exc.render(), markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except Exception as exc:  # click's usage errors (typer may vendor its own click)
        code = getattr(exc, "exit_code", None)
        show = getattr(exc, "show", None)
        if show is not None and isinstance(code, int):
            show()
            sys.exit(code)
        from flows.interrupt import EXIT_CODE, CampaignInterrupted

        if isinstance(exc, CampaignInterrupted):  # a Ctrl-C before any arm started
            err.print(f"{exc}; nothing was measured", markup=False, highlight=False, soft_wrap=True)
            sys.exit(EXIT_CODE)
        raise
