"""`campaign`: the entry point. The app layer: the only module that wires every command.

Run as the `campaign` script or `python -m cli`.
"""

from __future__ import annotations

import sys

import typer

from campaign.core.schema import CampaignFileError
from cli import commands, new, probe, reports  # noqa: F401  (each adds its commands to the app)
from cli.app import CannotRun, UsageError, app, err
from cli.db import db_app
from cli.trace import trace_app

app.add_typer(db_app, name="db")
app.add_typer(trace_app, name="trace")


def main() -> None:
    try:
        code = app(standalone_mode=False)  # returns an Exit's code instead of raising it
        if isinstance(code, int) and code:
            sys.exit(code)
    except CampaignFileError as exc:
        err.print(exc.render(), markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
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
    except Exception as exc:  # click's usage errors (typer may vendor its own click)
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            sys.exit(exc.exit_code)
        from flows.interrupt import EXIT_CODE, CampaignInterrupted

        if isinstance(exc, CampaignInterrupted):  # a Ctrl-C before any arm started
            err.print(f"{exc}; nothing was measured", markup=False, highlight=False, soft_wrap=True)
            sys.exit(EXIT_CODE)
        raise
