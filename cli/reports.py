"""The read-only commands: status, report, export and ui. Each reads the store (never
migrating or creating it) and shows one campaign: the one `--campaign` names, else the
one the campaign file names, else the latest.

Heavy imports (pandas, Prefect, the page writers) stay inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.app import DbOption, UsageError, app, console, err, open_campaign, prefect_env


def _name_in(file: Path | None, name: str | None) -> str | None:
    """The campaign a read-only command shows: `--campaign`, else the one the file names
    (read for its name only, so a file being edited still finds its results), else None
    (the latest)."""
    if file is None or name is not None:
        return name
    from campaign.core.loader import read_toml
    from campaign.core.schema import CampaignFileError

    try:
        named = read_toml(file).get("campaign", {}).get("name")
    except CampaignFileError as exc:
        raise UsageError(f"{file}: cannot read the campaign's name ({'; '.join(exc.problems)})") from None
    if not isinstance(named, str) or not named:
        raise UsageError(f'{file}: no [campaign] name = "..." to look up')
    return named


@app.command()
def status(
    file: Annotated[
        Path | None, typer.Argument(help="campaign file: show the campaign it names (default: the latest)")
    ] = None,
    db: DbOption = None,
    name: Annotated[
        str | None, typer.Option("--campaign", help="campaign name (default: the file's, or the latest)")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="also each gate's full reason")] = False,
) -> None:
    """The answer (a line or two per gate), then the queue items with their state."""
    from cli.status_view import render_status

    name = _name_in(file, name)
    store, row = open_campaign(db, name)
    render_status(console, store, row.name, verbose=verbose)
    from campaign.store.queue import current_runner

    runner = current_runner(store, row.name)
    if runner:
        console.print(f"running now: {runner}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def report(
    file: Annotated[
        Path | None, typer.Argument(help="campaign file: report the campaign it names (default: the latest)")
    ] = None,
    db: DbOption = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="output folder (default: reports/site/CAMPAIGN); its earlier pages are replaced"),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--campaign", help="campaign name (default: the file's, or the latest)")
    ] = None,
) -> None:
    """Write the static HTML verdict pages, one folder per campaign."""
    from reports.site import default_folder, write_site

    name = _name_in(file, name)
    store, row = open_campaign(db, name)
    index = write_site(store, row.name, out if out is not None else default_folder("reports/site", row.name))
    from flows.prefect_api import configured_api_url

    if configured_api_url():  # a Prefect server is in use: link the report from its UI
        from flows.artifacts import publish_report_link

        prefect_env()
        publish_report_link(row.name, str(index))
    console.print(f"report written: [bold]{index}[/bold]")


@app.command()
def export(
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="csv, parquet (needs pyarrow) or benchmark-report (llm-d Benchmark Report v0.2.1, a JSON file per server run)",
        ),
    ] = "csv",
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
