"""The `campaign` command line.

Heavy imports (Prefect, flows, reports) happen inside commands, so `campaign --help` and
validation errors are instant. A user's mistake prints one paragraph and exits 2; an
unreachable server exits 1; nothing a user can cause prints a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from campaign.schema import CampaignFileError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Gated experiment campaigns for LLM serving: run arms, probe servers, compute verdicts.",
    pretty_exceptions_enable=False,
)
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="database file or SQLAlchemy URL (default: .campaign/campaign.db, or $CAMPAIGN_DB)"),
]


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


def _store(db: str | None) -> Any:
    from campaign.store import Store, db_url, default_db_url

    return Store(db_url(db) if db else default_db_url())


def _prefect_env() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED", "false")


def _run_campaign(file: Path, db: str | None, workdir: str, recheck_blocked: bool) -> None:
    from campaign.schema import load_campaign

    spec = load_campaign(file)  # validate before starting anything
    _prefect_env()
    store = _store(db)
    from campaign.progress_view import CampaignProgress
    from flows.campaign_flow import campaign_flow

    with CampaignProgress(console, spec) as _progress, _quiet_heartbeat():
        result = campaign_flow(str(file), store.url, workdir, recheck_blocked)
    from campaign.status_view import render_status

    render_status(console, store, result["campaign"])


class _quiet_heartbeat:
    """Sync flow runs start a heartbeat thread that costs about a second each; campaigns
    keep their own liveness in the store, so turn it off for our runs."""

    def __enter__(self) -> None:
        from prefect.settings import temporary_settings

        try:
            from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY

            self._ctx = temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})
        except ImportError:
            self._ctx = temporary_settings()
        self._ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="campaign file (TOML)")],
    db: DbOption = None,
    workdir: Annotated[str, typer.Option(help="where server logs go")] = ".campaign",
) -> None:
    """Run a campaign's queue, arm by arm, and compute its verdicts."""
    _run_campaign(file, db, workdir, recheck_blocked=False)


@app.command()
def resume(
    file: Annotated[Path | None, typer.Argument(help="campaign file (default: the one last run)")] = None,
    db: DbOption = None,
    workdir: Annotated[str, typer.Option(help="where server logs go")] = ".campaign",
) -> None:
    """Carry on after a crash or after a blocked gate was fixed: blocked items are
    re-checked first, interrupted attempts continued, pending items run."""
    if file is None:
        row = _store(db).campaign()
        if row is None or not row.source_path:
            raise UsageError("no campaign in the database yet; give the campaign file: campaign resume FILE")
        file = Path(row.source_path)
    _run_campaign(file, db, workdir, recheck_blocked=True)


def _parse_sets(sets: list[str]) -> dict[str, Any]:
    """`--set key=value`: values parsed as TOML scalars (numbers, booleans, strings)."""
    import tomllib

    out: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected key=value, e.g. --set max_tokens=4096")
        try:
            out[key.strip()] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = raw
    return out


@app.command()
def rerun(
    item: Annotated[str, typer.Argument(help="queue item id or title")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="override key=value (repeatable)")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="campaign file (default: the one last run)")] = None,
    db: DbOption = None,
    workdir: Annotated[str, typer.Option(help="where server logs go")] = ".campaign",
) -> None:
    """A new attempt of a finished item with overrides; history is kept, the newest counts."""
    from campaign.schema import load_campaign

    store = _store(db)
    if file is None:
        row = store.campaign()
        if row is None or not row.source_path:
            raise UsageError("no campaign in the database yet; pass --file")
        file = Path(row.source_path)
    spec = load_campaign(file)
    match = [q for q in spec.queue if item in (q.key, q.title)]
    if not match:
        raise UsageError(f"no queue item {item!r}; items: {', '.join(repr(q.key) for q in spec.queue)}")
    overrides = _parse_sets(set_ or [])
    _prefect_env()
    from campaign.progress_view import CampaignProgress
    from campaign.status_view import render_status
    from flows.campaign_flow import rerun_flow

    with CampaignProgress(console, spec, items=1), _quiet_heartbeat():
        rerun_flow(str(file), store.url, match[0].key, overrides, workdir)
    render_status(console, store, spec.campaign.name)


@app.command()
def status(
    db: DbOption = None,
    name: Annotated[str | None, typer.Option("--campaign", help="campaign name (default: latest)")] = None,
) -> None:
    """Queue items with their state, gates with verdict and reason."""
    from campaign.status_view import render_status

    store = _store(db)
    row = store.campaign(name)
    if row is None:
        raise UsageError(f"no campaign {'named ' + repr(name) + ' ' if name else ''}in {store.url}; run one first: campaign run FILE")
    render_status(console, store, row.name)


@app.command()
def report(
    db: DbOption = None,
    out: Annotated[Path, typer.Option("--out", help="output folder")] = Path("reports/site"),
    name: Annotated[str | None, typer.Option("--campaign", help="campaign name (default: latest)")] = None,
) -> None:
    """Write the static HTML verdict pages."""
    from reports.site import write_site

    store = _store(db)
    row = store.campaign(name)
    if row is None:
        raise UsageError(f"no campaign in {store.url}; run one first: campaign run FILE")
    index = write_site(store, row.name, out)
    from reports.prefect_ui import configured_api_url

    if configured_api_url():  # a Prefect server is in use: link the report from its UI
        from flows.artifacts import publish_report_link

        _prefect_env()
        publish_report_link(row.name, str(index))
    console.print(f"report written: [bold]{index}[/bold]")


@app.command()
def simulate(
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    slots: Annotated[int, typer.Option(help="serving slots")] = 4,
    ctx_size: Annotated[int, typer.Option(help="context limit per request, tokens")] = 32768,
    prefill_chunk: Annotated[int, typer.Option(help="prefill chunk, tokens")] = 512,
    prefix_cache_tokens: Annotated[int, typer.Option(help="prefix cache size in tokens (0 = off)")] = 0,
    time_scale: Annotated[float, typer.Option(help="model seconds per wall second")] = 1.0,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    model: Annotated[str, typer.Option(help="served model id")] = "sim-model",
    profile_json: Annotated[str | None, typer.Option(help="any other profile field, as JSON")] = None,
) -> None:
    """Run the embedded serving simulator standalone (OpenAI-compatible, with /metrics)."""
    from arms.simulator.main import main as sim_main

    argv = [
        "--host", host, "--port", str(port), "--slots", str(slots), "--ctx-size", str(ctx_size),
        "--prefill-chunk", str(prefill_chunk), "--prefix-cache-tokens", str(prefix_cache_tokens),
        "--time-scale", str(time_scale), "--seed", str(seed), "--model", model,
    ]
    if profile_json:
        argv += ["--profile-json", profile_json]
    code = sim_main(argv)
    raise typer.Exit(code or 0)


def _register_extra_commands() -> None:
    """Command groups kept in their own modules so each stays small."""
    import campaign.cli_probe  # noqa: F401
    import campaign.cli_reports  # noqa: F401


def main() -> None:
    _register_extra_commands()
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
        raise


if __name__ == "__main__":
    # run through the imported module so that command modules register on the same app
    from campaign.cli import main as _main

    _main()
