"""`campaign check`: a campaign file checked as `run` checks it, and the plan of what a run
would do, timed from earlier runs; nothing is started or created.

`campaign run` loads its file through `load_checked` here too, so both commands refuse
the same files with the same words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cli.app import DbOption, UsageError, app, console, err, open_existing_store


def load_checked(file: Path) -> Any:
    """The campaign file, validated, its queue items' overrides included (exit 2)."""
    from campaign.core.schema import CampaignFileError
    from flows.overrides import check_campaign
    from flows.resolve import load_campaign

    spec = load_campaign(file)
    problems = check_campaign(spec)
    if problems:
        raise CampaignFileError(file, problems)
    return spec


def print_warnings(spec: Any) -> None:
    from flows.design_warnings import design_warnings

    for warning in design_warnings(spec):
        err.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)


def plan_lines(spec: Any, history: dict[tuple[str, str], Any] | None = None) -> list[str]:
    """What a run of `spec` would do, item by item: arms, probes, contexts, blocks and
    server starts, and which gate it feeds; then the totals and, with the store's
    `history` (`campaign.store.summary.block_history`), how long what is left takes."""
    from flows.groups import planned_groups

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
    from flows.design_warnings import detectable_lines

    lines += detectable_lines(spec)
    lines += search_plan_lines(spec)
    span = f"{least_starts} to {starts}" if least_starts != starts else f"{starts}"
    searching = ""
    if spec.search is not None:
        c = spec.search.confirm
        confirm = (1 + c.max_candidates) * (c.max_blocks or c.blocks or spec.campaign.min_blocks + 2)
        budget = spec.search.budget.starts
        searching = f", and the search's {budget if budget is not None else 'timed'} + up to {confirm} (confirmation)"
    lines.append(
        f"{len(spec.queue)} queue items, {len(spec.arms)} arms, {len(spec.gates)} gates, {span} server starts"
        f"{searching} in all"
    )
    if history is not None and (spec.queue or spec.search is None):
        lines.append(time_estimate(spec, history))
    return lines


def search_plan_lines(spec: Any) -> list[str]:
    """What a `[search]` would do: its space and grid, how many trials its budget buys
    (one server start each, the base two), and the confirmation's server starts."""
    search = spec.search
    if search is None:
        return []
    from campaign.core.search import describe

    space = "; ".join(
        f"{name} {', '.join(map(str, d.choices))}"
        if d.choices is not None
        else f"{name} {d.low}..{d.high}{' (log)' if d.log else ''}"
        for name, d in search.space.items()
    )
    grid = search.grid_size()
    if search.budget.starts is not None:
        trials = max(0, search.budget.starts - 2)
        fits = (
            f"the base (2 server starts), then up to {trials} trial arms (1 each; a repeated proposal reuses its run)"
        )
    else:
        fits = "the base (2 server starts), then trial arms until the time is spent (1 start each)"
    if search.budget.minutes is not None:
        fits += f"; at most {search.budget.minutes:g} minutes"
    confirm = search.confirm
    blocks = confirm.max_blocks or confirm.blocks or spec.campaign.min_blocks + 2
    most_arms = 1 + confirm.max_candidates
    conf = (
        f"then the best {confirm.top} (and any within the noise of the best, at most {confirm.max_candidates}) on "
        f"{'up to ' if confirm.max_blocks else ''}{blocks} fresh blocks beside the base: up to {most_arms * blocks} server starts"
    )
    objectives = ", ".join(
        f"{'max' if up else 'min'} {o.metric} ({o.probe}{', ' + o.scenario if o.scenario else ''})"
        for o, up in zip(search.objectives, search.maximizing())
    )
    lines = [
        f"search from {search.base} ({describe(_base_params(spec))}): {search.sampler} over {space}; "
        f"a grid of {grid} arms",
        f"search objective: {objectives}"
        + (f"; constraints: {', '.join(c.text() for c in search.constraints)}" if search.constraints else ""),
        f"search budget {search.budget.starts or '-'} starts{'' if search.budget.minutes is None else f' / {search.budget.minutes:g} min'}: {fits}; {conf}",
    ]
    if search.budget.starts is not None and search.budget.starts - 2 >= grid:
        lines.append(f"search: the budget covers the whole grid ({grid} arms); sampler = 'grid' measures each once")
    return lines


def _base_params(spec: Any) -> dict[str, Any]:
    from campaign.core.search import SearchPlan

    return SearchPlan(spec).base_params()


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


@app.command()
def check(file: Annotated[Path, typer.Argument(help="campaign file (TOML)")], db: DbOption = None) -> None:
    """Check a campaign file without running anything: every name, metric, override and
    design rule `run` checks (exit 2 with each problem), warnings, the plan, timed from
    earlier runs in the database where there are any, and what this machine lacks to
    start the servers, a binary or a model file (`blocked`, exit 1). Nothing is created."""
    from flows.resolve import launch_blockers

    spec = load_checked(file)
    print_warnings(spec)
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
