"""Report-side commands of the `campaign` CLI (export, ui), registered on the main app.

Heavy imports (pandas, Prefect) stay inside the commands, like in `cli.commands`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.app import DbOption, UsageError, app, console, err, open_campaign


@app.command()
def export(
    fmt: Annotated[str, typer.Option("--format", "-f", help="csv or parquet (parquet needs pyarrow)")] = "csv",
    out: Annotated[Path, typer.Option("--out", help="output folder")] = Path("export"),
    db: DbOption = None,
    name: Annotated[str | None, typer.Option("--campaign", help="campaign name (default: latest)")] = None,
) -> None:
    """Write measurements, samples and verdicts as tables (one file each)."""
    from reports.export import ExportError
    from reports.export import export as run_export

    store, row = open_campaign(db, name)
    try:
        paths = run_export(store, row.id, out, fmt.lower())
    except ExportError as exc:
        raise UsageError(str(exc)) from None
    for path in paths:
        console.print(f"written: {path}")


@app.command()
def ui(
    workdir: Annotated[Path, typer.Option(help="where the server's log and pid go")] = Path(".campaign"),
    port: Annotated[int, typer.Option(help="port of the local server")] = 4200,
    write_profile: Annotated[
        bool,
        typer.Option(
            "--write-profile",
            help="also set PREFECT_API_URL in your active Prefect profile, for runs from any folder (put back by --stop)",
        ),
    ] = False,
    stop: Annotated[
        bool, typer.Option("--stop", help="stop the server `campaign ui` started, forget it, and exit")
    ] = False,
) -> None:
    """Start or find a local Prefect server with its UI; runs from this folder report to it.

    The server is recorded in .campaign/prefect-ui.json; your Prefect profile is not
    changed unless you ask with --write-profile."""
    from cli.ui_server import UiError, ensure_ui, restore_profile, server_command, stop_server
    from flows.prefect_api import forget_ui_record

    if stop:
        stopped = stop_server(workdir)
        console.print(
            "Prefect server stopped."
            if stopped
            else f"no server started by `campaign ui` is running (no live pid in {workdir})"
        )
        if forget_ui_record():
            console.print("runs from this folder use a temporary Prefect server again", markup=False, highlight=False)
        restored = restore_profile(workdir)
        if restored:
            console.print(restored, markup=False, highlight=False)
        return
    api = f"http://127.0.0.1:{port}/api"
    try:
        result = ensure_ui(workdir, write_config=write_profile, command=server_command(port=port), api_url=api)
    except UiError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(1) from None  # cli.main drops typer.Exit codes (standalone_mode=False)
    if result.started:
        console.print(f"started a Prefect server (pid {result.pid}), log: {result.log}")
    else:
        console.print(f"a Prefect server already answers at {result.api_url}")
    if result.profile_written:
        console.print(
            f"PREFECT_API_URL={result.api_url} written to the active Prefect profile: `campaign ui --stop` puts it back"
        )
    elif result.recorded is not None:
        console.print(
            f"recorded in {result.recorded}: `campaign run` from this folder reports to it (your Prefect profile is unchanged)",
            markup=False,
            highlight=False,
        )
    console.print(f"Prefect UI: [bold]{result.ui_url}[/bold]")
