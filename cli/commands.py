"""The `campaign` commands: run, resume, rerun, worker, status, report, simulate, examples.

Heavy imports (Prefect, flows, reports) happen inside commands, so `campaign --help` and
validation errors are instant. A user's mistake prints one paragraph and exits 2; an
unreachable server exits 1; nothing a user can cause prints a traceback.
"""

from __future__ import annotations

import os
import re
import sys
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any

import typer

from campaign.core.schema import CampaignFileError
from cli.app import (
    CannotRun,
    DbOption,
    UsageError,
    app,
    console,
    err,
    open_campaign,
    open_existing_store,
    open_store,
    prefect_env,
    process_started,
)


def _load_checked(file: Path) -> Any:
    """The campaign file, validated, its queue items' overrides included (exit 2)."""
    from flows.overrides import check_campaign
    from flows.resolve import load_campaign

    spec = load_campaign(file)
    problems = check_campaign(spec)
    if problems:
        raise CampaignFileError(file, problems)
    return spec


def _name_in(file: Path | None, name: str | None) -> str | None:
    """The campaign a read-only command shows: `--campaign`, else the one the file names
    (read for its name only, so a file being edited still finds its results), else None
    (the latest)."""
    if file is None or name is not None:
        return name
    from campaign.core.loader import read_toml

    try:
        named = read_toml(file).get("campaign", {}).get("name")
    except CampaignFileError as exc:
        raise UsageError(f"{file}: cannot read the campaign's name ({'; '.join(exc.problems)})") from None
    if not isinstance(named, str) or not named:
        raise UsageError(f'{file}: no [campaign] name = "..." to look up')
    return named


def _nothing_to_do(store: Any, spec: Any, file: Path, recheck_blocked: bool) -> str | None:
    """A line saying the campaign is finished, or None if a run would do something."""
    from campaign.core.loader import file_digest
    from campaign.store import queue

    row = store.campaign(spec.campaign.name)
    if row is None or row.id is None or row.file_digest != file_digest(file):
        return None  # new, or the file changed: register it and run
    if queue.work_left(store, spec, row.id, recheck_blocked):
        return None
    counts: dict[str, int] = {}
    for item in store.items(row.id):
        counts[item.state] = counts.get(item.state, 0) + 1
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    hint = "; `campaign resume` re-checks blocked items" if counts.get("blocked") and not recheck_blocked else ""
    finished = set(counts) == {"done"}
    head = (
        f"every queue item of {spec.campaign.name!r} has run"
        if finished
        else f"no queue item of {spec.campaign.name!r} can run now"
    )
    return f"nothing to do: {head} ({states}){hint}; `campaign status` shows the verdicts, `campaign rerun ITEM` measures an item again"


def _print_warnings(spec: Any) -> None:
    from flows.resolve import design_warnings

    for warning in design_warnings(spec):
        err.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)


def plan_lines(spec: Any, history: dict[tuple[str, str], Any] | None = None) -> list[str]:
    """What a run of `spec` would do, item by item: arms, probes, contexts, blocks and
    server starts, and which gate it feeds; then the totals and, with the store's
    `history` (`campaign.store.summary.block_history`), how long what is left takes."""
    from flows.campaign_flow import planned_groups

    kept = {
        q.key: group[0].key for group in planned_groups(spec) for q in group[1:]
    }  # item -> the one whose servers it uses
    lines = []
    starts = least_starts = 0
    for item in spec.queue:
        budget = spec.blocks(item)
        n = 0 if item.key in kept else len(item.arms) * budget.most
        starts += n
        least_starts += 0 if item.key in kept else len(item.arms) * budget.least
        contexts = ", ".join(f"{c // 1024}K" if c % 1024 == 0 else str(c) for c in item.contexts) or "each arm's own"
        feeds = f"; feeds {item.gate}" if item.gate else ""
        after = f"; after {', '.join(item.depends_on)}" if item.depends_on else ""
        if budget.adaptive:
            blocks = (
                f"{budget.least} to {budget.most} blocks (until {item.gate} is settled), "
                f"{len(item.arms) * budget.least}-{n} server starts"
            )
        elif item.key in kept:
            blocks = f"{budget.most} block{'s' if budget.most != 1 else ''}, on {kept[item.key]}'s servers (kept: no start of its own)"
        else:
            blocks = f"{budget.most} block{'s' if budget.most != 1 else ''}, {n} server start{'s' if n != 1 else ''}"
        lines.append(
            f"{item.key}: {'/'.join(item.arms)} x {', '.join(str(p) for p in item.probes)} at {contexts}; {blocks}{feeds}{after}"
        )
    from flows.resolve import detectable_lines

    lines += detectable_lines(spec)
    span = f"{least_starts} to {starts}" if least_starts != starts else f"{starts}"
    lines.append(
        f"{len(spec.queue)} queue items, {len(spec.arms)} arms, {len(spec.gates)} gates, {span} server starts in all"
    )
    if history is not None:
        lines.append(time_estimate(spec, history))
    return lines


def time_estimate(spec: Any, history: dict[tuple[str, str], Any]) -> str:
    """How long the blocks still to run take, from the same (item, arm)'s earlier blocks
    in the store (their median wall time, server start included). A block never run has
    no estimate: a guess from token counts would ignore start-up, warm-up and the
    machine's load, and be wrong in the direction that hurts."""
    import statistics

    left = timed = 0
    seconds = 0.0
    for item in spec.queue:
        for arm in item.arms:
            past = history.get((item.key, arm))
            most = spec.blocks(item).most  # an adaptive item may stop earlier: an upper bound
            missing = (
                0 if past and past.settled else most - (len([r for r in past.done_blocks if r < most]) if past else 0)
            )
            if missing <= 0:
                continue
            left += missing
            if past and past.seconds:
                timed += missing
                seconds += missing * statistics.median(past.seconds)
    if left == 0:
        return "time: nothing left to run (every block of every item is done)"
    if timed == 0:
        return f"time: no estimate yet for the {left} server start{'s' if left != 1 else ''} left (none of these blocks ran before; after a first run, `campaign check` times the rest from it)"
    minutes = seconds / 60
    about = f"{minutes:.0f} min" if minutes >= 1.5 else f"{seconds:.0f} s"
    rest = "" if timed == left else f"; {left - timed} never ran, not counted"
    return f"time: about {about} for {timed} of the {left} server start{'s' if left != 1 else ''} left (median of the same blocks' earlier runs){rest}"


def _run_campaign(file: Path, db: str | None, workdir: str, recheck_blocked: bool) -> None:
    import time
    from datetime import datetime

    prefect_env()
    began = datetime.now(UTC)
    spec = _load_checked(file)  # validate before starting anything
    _print_warnings(spec)
    from flows.placement import placement_problem

    problem = placement_problem(spec)  # arms on other hosts need a lasting Prefect server
    if problem:
        raise CannotRun(problem)
    store = open_store(db)
    done = _nothing_to_do(store, spec, file, recheck_blocked)
    if done:
        console.print(done, markup=False, highlight=False, soft_wrap=True)
        _exit_if_failed(store, spec.campaign.name)
        return
    from cli.prefect_server import begin

    # a temporary Prefect server is launched now, once the file is known to run, and
    # starts while this process loads the flows
    with (
        begin() as prefect,
        _runner(store, spec.campaign.name, "campaign resume" if recheck_blocked else "campaign run"),
    ):
        from cli.progress_view import CampaignProgress
        from flows.campaign_flow import campaign_flow

        with _flow_session(prefect):
            with CampaignProgress(console, spec), _quiet_heartbeat():
                result = campaign_flow(str(file), store.public_url, workdir, recheck_blocked)
    _finish(result)
    from campaign.store.summary import run_cost
    from cli.status_view import render_status

    render_status(console, store, result["campaign"])
    cost, started = run_cost(store, result["campaign"], began), process_started()
    first = cost.first_started.timestamp() if cost.first_started else started
    console.print(cost.line(time.time() - started, first - started), markup=False, highlight=False, soft_wrap=True)
    _exit_if_failed(store, result["campaign"])


class _runner:
    """This process as the campaign's one runner for the block (exit 1 if another runs it)."""

    def __init__(self, store: Any, name: str, command: str):
        self.store, self.name, self.command = store, name, command
        self.taken = False

    def __enter__(self) -> None:
        from campaign.store import queue

        try:
            self.taken = queue.claim_runner(self.store, self.name, self.command)
        except queue.RunnerBusy as exc:
            raise CannotRun(str(exc)) from None

    def __exit__(self, *exc: object) -> None:
        if self.taken:
            from campaign.store import queue

            queue.release_runner(self.store, self.name)


class _flow_session:
    """Two-step Ctrl-C (flows.interrupt) and the Prefect API for the flows of one command
    (`prefect`: the `cli.prefect_server.begin` this command entered first)."""

    def __init__(self, prefect: Any) -> None:
        self._prefect = prefect
        self._stack: Any = None

    def __enter__(self) -> None:
        from contextlib import ExitStack

        from cli.prefect_server import PrefectUnavailable
        from flows.interrupt import SigintHandler

        prefect_env()
        self._stack = ExitStack()
        try:
            self._stack.enter_context(
                SigintHandler(lambda text: err.print(text, markup=False, highlight=False, soft_wrap=True))
            )
            api = self._stack.enter_context(
                self._prefect.api(lambda text: err.print(text, markup=False, highlight=False))
            )
            if os.environ.get("PREFECT_LOGGING_TO_API_ENABLED") == "false" and not api.temporary:
                from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

                self._stack.enter_context(temporary_settings(updates={PREFECT_LOGGING_TO_API_ENABLED: True}))
        except PrefectUnavailable as exc:
            self._stack.close()
            raise CannotRun(str(exc)) from None
        except BaseException:
            self._stack.close()
            raise
        return None

    def __exit__(self, *exc: object) -> None:
        self._stack.__exit__(*exc)


def _finish(result: dict[str, Any]) -> None:
    """A stopped run: the one line on how to carry on, exit 130."""
    if result.get("interrupted"):
        err.print(
            f"interrupted: {result['interrupted']}, recorded as interrupted and its device slot released; "
            "`campaign resume` carries on from the last committed measurement",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(130)


def _exit_if_failed(store: Any, name: str, keys: list[str] | None = None) -> None:
    """Exit 1 when a queue item (of `keys`, or any) ended `failed`: its measurement broke
    (an arm crashed, or every request of an arm failed), so the campaign's numbers are
    not all there. One line per item with its reason, after the status table. A gate
    that fails leaves its item `done`: that is a result, exit 0."""
    from campaign.core.states import ItemState

    row = store.campaign(name)
    if row is None or row.id is None:
        return
    failed = [i for i in store.items(row.id) if i.state == ItemState.FAILED and (keys is None or i.key in keys)]
    if not failed:
        return
    for item in failed:
        err.print(f"failed: {item.key}: {item.reason}", markup=False, highlight=False, soft_wrap=True)
    rerun = " && ".join(f"campaign rerun {item.key}" for item in failed[:3])
    err.print(
        f"{len(failed)} queue item{'s' if len(failed) != 1 else ''} failed; fix the cause above, then: {rerun} "
        f"(the arm pages of `campaign report` hold each server's log)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    sys.exit(1)


class _quiet_heartbeat:
    """Sync flow runs start a heartbeat thread that costs about a second each; campaigns
    keep their own liveness in the store, so turn it off for runs on a temporary server.
    A configured server keeps Prefect's heartbeats (its UI marks a silent run crashed)."""

    def __enter__(self) -> None:
        from prefect.settings import temporary_settings

        from flows.prefect_api import configured_api_url

        if configured_api_url():
            self._ctx = temporary_settings()
        else:
            self._on_temporary_server(temporary_settings)
        self._ctx.__enter__()

    def _on_temporary_server(self, temporary_settings: Any) -> None:
        try:
            from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY

            self._ctx = temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})
        except ImportError:
            self._ctx = temporary_settings()

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
def check(file: Annotated[Path, typer.Argument(help="campaign file (TOML)")], db: DbOption = None) -> None:
    """Check a campaign file without running anything: every name, metric, override and
    design rule `run` checks (exit 2 with each problem), warnings, the plan, timed from
    earlier runs in the database where there are any, and what this machine lacks to
    start the servers, a binary or a model file (`blocked`, exit 1). Nothing is created."""
    from flows.resolve import launch_blockers

    spec = _load_checked(file)
    _print_warnings(spec)
    history: dict[tuple[str, str], Any] = {}
    try:
        store = open_existing_store(db)
    except UsageError:
        store = None  # no database yet: nothing ran, nothing to time
    if store is not None:
        from campaign.store.summary import block_history

        history = block_history(store, spec.campaign.name)
    for line in plan_lines(spec, history):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    blocked = launch_blockers(spec)
    for line in blocked:
        console.print(f"blocked: {line}", markup=False, highlight=False, soft_wrap=True)
    if blocked:
        console.print(
            f"{file}: blocked (the run would end these arms blocked; fix it, then check again)",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)
    console.print(f"{file}: ok", markup=False, highlight=False)


@app.command()
def resume(
    file: Annotated[Path | None, typer.Argument(help="campaign file (default: the one last run)")] = None,
    db: DbOption = None,
    workdir: Annotated[str, typer.Option(help="where server logs go")] = ".campaign",
) -> None:
    """Carry on after a crash or after a blocked gate was fixed: blocked items are
    re-checked first, interrupted attempts continued, pending items run."""
    if file is None:
        row = open_store(db).campaign()
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
    """Measure an item again: unchanged settings add blocks to the same question (its gate
    then reads a confidence sequence over all of them); --set asks a new question."""
    store = open_store(db)
    if file is None:
        row = store.campaign()
        if row is None or not row.source_path:
            raise UsageError("no campaign in the database yet; pass --file")
        file = Path(row.source_path)
    prefect_env()
    spec = _load_checked(file)
    match = [q for q in spec.queue if item in (q.key, q.title)]
    if not match:
        raise UsageError(f"no queue item {item!r}; items: {', '.join(repr(q.key) for q in spec.queue)}")
    from flows.overrides import check_rerun

    checked = check_rerun(spec, match[0], _parse_sets(set_ or []))
    if checked.problems:
        raise UsageError("\n".join(checked.problems))
    for note in checked.notes:
        console.print(note, markup=False, highlight=False)
    with _runner(store, spec.campaign.name, "campaign rerun"):
        from cli.prefect_server import begin
        from cli.progress_view import CampaignProgress
        from cli.status_view import render_status
        from flows.campaign_flow import rerun_flow

        with begin() as prefect, _flow_session(prefect):
            with CampaignProgress(console, spec, items=1), _quiet_heartbeat():
                result = rerun_flow(str(file), store.public_url, match[0].key, checked.overrides, workdir)
    _finish(result)
    render_status(console, store, spec.campaign.name)
    _exit_if_failed(store, spec.campaign.name, [match[0].key])


@app.command()
def worker(
    host: Annotated[str, typer.Option("--host", help='this host\'s name, as runtimes name it (host = "NAME")')],
    db: DbOption = None,
) -> None:
    """Serve this host's arms: the Prefect deployment arm/arm-HOST (needs PREFECT_API_URL)."""
    prefect_env()
    from cli.worker import BadHost, WorkerCannotStart, serve_host

    try:
        serve_host(host, db, lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True))
    except BadHost as exc:
        raise UsageError(str(exc)) from None
    except WorkerCannotStart as exc:
        raise CannotRun(str(exc)) from None


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
        "--host",
        host,
        "--port",
        str(port),
        "--slots",
        str(slots),
        "--ctx-size",
        str(ctx_size),
        "--prefill-chunk",
        str(prefill_chunk),
        "--prefix-cache-tokens",
        str(prefix_cache_tokens),
        "--time-scale",
        str(time_scale),
        "--seed",
        str(seed),
        "--model",
        model,
    ]
    if profile_json:
        argv += ["--profile-json", profile_json]
    code = sim_main(argv)
    raise typer.Exit(code or 0)


def _examples() -> dict[str, Any]:
    """Example campaign files by name: shipped in the wheel as `campaign.examples`, the
    repository's examples/ folder in a checkout (the same files)."""
    from importlib import resources

    try:
        folder: Any = resources.files("campaign.examples")
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parent.parent / "examples"
    return {
        f.name.removesuffix(".toml"): f
        for f in sorted(folder.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".toml")
    }


def _first_comment(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""


@app.command()
def examples(
    name: Annotated[str | None, typer.Argument(help="example to write (default: list them)")] = None,
    out: Annotated[Path, typer.Option("--out", help="folder to write it into")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """List the example campaigns, or write one out to run it: campaign examples demo."""
    found = _examples()
    if name is None:
        for key, file in found.items():
            console.print(f"[bold]{key}[/bold]  {_first_comment(file.read_text(encoding='utf-8'))}", highlight=False)
        console.print("write one with: campaign examples NAME [--out DIR], then: campaign run NAME.toml")
        return
    key = name.removesuffix(".toml")
    if key not in found:
        raise UsageError(f"no example {name!r}; examples: {', '.join(found)}")
    target = out / f"{key}.toml"
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pass --force to overwrite it")
    out.mkdir(parents=True, exist_ok=True)
    text = found[key].read_text(encoding="utf-8")
    target.write_text(text, encoding="utf-8")
    # the files it names beside itself (a replayed trace) come with it
    folder = found[key].parent if hasattr(found[key], "parent") else None
    for name in sorted(set(re.findall(r'^trace\s*=\s*"(traces/[\w.-]+)"', text, re.MULTILINE))):
        source = folder / name if folder is not None else None
        if source is not None and source.is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(source.read_bytes())
            console.print(f"written: {out / name}", highlight=False)
    console.print(f"written: {target}\nrun it: campaign run {target}", highlight=False)
