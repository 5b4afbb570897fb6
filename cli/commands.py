"""The commands that run a campaign's queue: run, resume, rerun, and worker (a host's arms).

Each loads its file through `cli.plan.load_checked`, takes the campaign's one runner
slot, starts (or finds) a Prefect server and runs the flows with a progress view. Prefect
and the flows are imported inside the commands, once the file is known to run. A user's
mistake prints one paragraph and exits 2; an unreachable server exits 1; nothing a user
can cause prints a traceback.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.app import (
    CannotRun,
    DbOption,
    UsageError,
    app,
    console,
    err,
    open_existing_store,
    open_store,
    prefect_env,
    process_started,
)
from cli.plan import load_checked, print_warnings


def _nothing_to_do(store: Any, spec: Any, file: Path, recheck_blocked: bool) -> str | None:
    """A line saying the campaign is finished, or None if a run would do something."""
    from campaign.core.loader import file_digest
    from campaign.store import queue

    row = store.campaign(spec.campaign.name)
    if row is None or row.id is None or row.file_digest != file_digest(file):
        return None  # new, or the file changed: register it and run
    if spec.search is not None:
        from campaign.store.study import expanded, search_finished

        if not search_finished(store, spec):
            return None  # the search has trials left to propose
        spec = expanded(store, spec)  # its trials and confirmation are the queue's items now
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


def _run_campaign(file: Path, db: str | None, workdir: str, recheck_blocked: bool) -> None:
    import time
    from datetime import datetime

    prefect_env()
    began = datetime.now(UTC)
    spec = load_checked(file)  # validate before starting anything
    print_warnings(spec)
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
    from campaign.core.search import is_trial_item
    from campaign.core.states import ItemState

    row = store.campaign(name)
    if row is None or row.id is None:
        return
    from campaign.core.schema import CampaignSpec

    search = CampaignSpec.model_validate_json(row.spec_json).search if row.spec_json else None
    base = f"search-{search.base}" if search is not None else None
    failed = [
        i
        for i in store.items(row.id)
        if i.state == ItemState.FAILED
        and (keys is None or i.key in keys)
        and (not is_trial_item(i.key) or i.key == base)
    ]  # a search's failed trial is a result (recorded with its reason), not a broken measurement; its base's is
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
    """Prefect's flow-run heartbeats feed only a zombie-detection automation that a user
    sets up on their server; a campaign keeps its own liveness in the store (attempt
    heartbeats, `campaign resume`). Each sync flow run joins its heartbeat thread at its
    end, which waits for the thread's one-second sleep: half a second a run, a twentieth
    of the demo's wall time. So they are off, unless the user set their frequency
    (`PREFECT_FLOWS_HEARTBEAT_FREQUENCY`, in the environment or the active profile)."""

    def __enter__(self) -> None:
        from prefect.settings import temporary_settings

        if _heartbeat_asked():
            self._ctx = temporary_settings()
        else:
            self._ctx = _without_heartbeats(temporary_settings)
        self._ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)


_HEARTBEAT_NAMES = ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY")


def _heartbeat_asked() -> bool:
    """Whether the user set Prefect's flow-run heartbeat frequency themselves."""
    if any(os.environ.get(name) for name in _HEARTBEAT_NAMES):
        return True
    try:
        from prefect.settings import load_current_profile

        profile = load_current_profile()
    except Exception:
        return False
    return any(getattr(key, "name", str(key)) in _HEARTBEAT_NAMES for key in profile.settings)


def _without_heartbeats(temporary_settings: Any) -> Any:
    try:
        from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY
    except ImportError:
        return temporary_settings()
    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


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
    spec = load_checked(file)
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
def rejudge(
    file: Annotated[
        Path | None,
        typer.Argument(
            help="campaign file whose gate definitions to judge by (default: those stored with the campaign)"
        ),
    ] = None,
    db: DbOption = None,
    name: Annotated[
        str | None, typer.Option("--campaign", help="campaign name (default: the file's, or the latest)")
    ] = None,
) -> None:
    """Judge every gate again from the stored measurements, under today's code and gate
    definitions; each verdict keeps what it was before."""
    from campaign.core.schema import CampaignSpec
    from campaign.store.tables import CampaignRow
    from cli.status_view import render_status
    from flows.verdicts import rejudge as rejudge_all

    store = open_existing_store(db)
    spec = load_checked(file) if file is not None else None
    row = store.campaign(spec.campaign.name if spec is not None else name)
    if row is None or row.id is None or not row.spec_json:
        raise UsageError(f"no campaign {'named ' + repr(name) + ' ' if name else ''}in {store.url} to re-judge")
    stored = CampaignSpec.model_validate_json(row.spec_json)
    if spec is None:
        spec, source = stored, "the gate definitions stored with the campaign"
    else:
        differs = [
            what
            for what, mine, theirs in (
                ("arms", [a.id for a in spec.arms], [a.id for a in stored.arms]),
                ("queue items", [q.key for q in spec.queue], [q.key for q in stored.queue]),
            )
            if mine != theirs
        ]
        if differs:
            raise UsageError(
                f"{file}: its {' and '.join(differs)} differ from the stored campaign's; a re-judgement reads the "
                "stored runs under new gate definitions only (changed arms or items are `campaign run`)"
            )
        store.update(CampaignRow, row.id, spec_json=spec.model_dump_json(by_alias=True))
        source = f"the gate definitions of {file}"
    for gate, was, now in rejudge_all(store, spec, row.id, source):
        console.print(f"{gate}: {was or 'no verdict'} -> {now}", markup=False, highlight=False)
    render_status(console, store, row.name)
