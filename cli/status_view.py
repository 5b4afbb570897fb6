"""`campaign status` in the terminal: the answer first (a line or two per gate, read from
its verdict's evidence), then the queue and identity flags; the gates' full reasons with
`--verbose`."""

from __future__ import annotations

import os
from collections.abc import Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from campaign.core.search import is_trial_item
from campaign.store.store import Store
from campaign.store.summary import AttemptLink, ItemView, Summary, attempt_links, summarize, ui_base
from flows.prefect_api import configured_api_url
from reports.answer import answers, question, usual_level

STATE_STYLE = {
    "done": "green",
    "running": "cyan",
    "pending": "white",
    "failed": "red",
    "blocked": "yellow",
    "pass": "bold green",
    "fail": "bold red",
    "control": "blue",
    "inconclusive": "magenta",
}


def render_status(console: Console, store: Store, name: str | None = None, verbose: bool = False) -> None:
    s = summarize(store, name)
    sim = " (simulated runtimes)" if s.simulated_arms else ""
    console.print(f"[bold]{escape(s.title)}[/bold]  campaign [cyan]{escape(s.name)}[/cyan]{sim}")

    width = console.width
    if not s.gates:  # an empty table would squeeze its headers into a column each ("reas / on")
        console.print("Gate verdicts: none (the campaign file has no gates; its numbers are in the report)")
    else:
        render_answer(console, s, width)
        if verbose:
            _render_gates(console, s, width)
    _render_search(console, store, s, width)
    _render_queue(console, s, width)
    for flag in s.flags:
        console.print(f"[yellow]identity[/yellow] arm {flag.arm_id}: {flag.message}")
    # the newest attempt of each arm first: the configured Prefect server is looked up
    # (through Prefect's settings, a second to import) only when there is a run to link
    links = attempt_links(store, s.campaign_id, _ui_url_given(), newest_only=True)
    if links and prefect_ui_address():
        render_flow_runs(console, links)


def render_answer(console: Console, s: Summary, width: int) -> None:
    """The campaign's question, then one gate a line or two: its verdict word, the gate,
    and what it found with the numbers that decided it."""
    asked = question(s)
    if asked:
        console.print(f"[bold]Question:[/bold] {escape(asked)}", soft_wrap=False)
    console.print(
        f"[bold]Answer[/bold] ({usual_level(s)} unless marked; the reasons: campaign status --verbose)", highlight=False
    )
    for a in answers(s):
        style = STATE_STYLE.get(a.verdict, "")
        for i, line in enumerate(a.lines(width - 2)):
            text = escape(line)
            if i == 0 and style:
                word = escape(a.word)
                text = f"[{style}]{word}[/]" + text[len(word) :]
            console.print("  " + text, highlight=False, soft_wrap=True)


def _render_gates(console: Console, s: Summary, width: int) -> None:
    arms_of = {g.id: "/".join(g.subjects) + (f" vs {'/'.join(g.baseline)}" if g.baseline else "") for g in s.gates}
    fixed = [
        _longest(["gate", *(g.id for g in s.gates)]),
        _longest(["verdict", *(str(g.verdict) for g in s.gates)]),
        min(_arms_max(width), _longest(["arms", *arms_of.values()])),
    ]
    title_w, reason_w = fit(width, fixed, _longest(g.title for g in s.gates), _longest(g.reason for g in s.gates))
    gates = Table(title="Gate verdicts", title_justify="left")
    gates.add_column("gate", no_wrap=True, width=fixed[0])
    if title_w:
        gates.add_column("title", width=title_w, overflow="fold")
    gates.add_column("verdict", no_wrap=True, width=fixed[1])
    gates.add_column("arms", width=fixed[2], overflow="fold")
    gates.add_column("reason", width=reason_w, overflow="fold")
    for g in s.gates:
        cells = [
            escape(g.id),
            *([escape(g.title)] if title_w else []),
            f"[{STATE_STYLE.get(g.verdict, '')}]{g.verdict}[/]",
            escape(arms_of[g.id]),
            escape(g.reason),
        ]
        gates.add_row(*cells)
    console.print(gates)


def _render_search(console: Console, store: Store, s: Summary, width: int) -> None:
    """The search's answer (the confirmed winner beside the search's own claim) and
    where it stands, under the gates' answer."""
    if s.spec.search is None:
        return
    from campaign.store.study import summary as search_summary
    from reports.search_view import search_answer

    found = search_summary(store, s.spec)
    if found is None:
        return
    import textwrap

    answer = search_answer(s, found)
    console.print("[bold]Search[/bold]", highlight=False)
    for i, text in enumerate((f"{answer.verdict.upper()}: {answer.headline}", answer.claimed, answer.progress)):
        if not text:
            continue
        for j, line in enumerate(textwrap.wrap(text, width=max(width - 4, 30), break_on_hyphens=False)):
            style = STATE_STYLE.get(answer.verdict, "") if i == 0 and j == 0 else ""
            shown = escape(line)
            if style:
                word = escape(answer.verdict.upper())
                shown = f"[{style}]{word}[/]" + shown[len(word) :]
            console.print(("  " if j == 0 else "    ") + shown, highlight=False)


def collapsed_items(items: list[ItemView]) -> list[ItemView]:
    """The queue with a search's trial items folded into one row: a search makes tens of
    them, each one block of one arm, and the table is for the campaign's items."""
    trials = [i for i in items if is_trial_item(i.key)]
    if len(trials) <= 1:
        return items
    counts: dict[str, int] = {}
    for i in trials:
        counts[str(i.state)] = counts.get(str(i.state), 0) + 1
    state = next(iter(counts)) if len(counts) == 1 else ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    folded = ItemView(
        key="search trials",
        title=f"{len(trials)} trial arms, one server run each (the base two)",
        state=state,
        reason="; ".join(f"{i.key}: {i.reason}" for i in trials if str(i.state) in ("failed", "blocked"))[:200],
        gate=None,
        arms=[f"{len(trials)} arms"],
        probes=trials[0].probes,
        attempts=sum(i.attempts for i in trials),
    )
    first = items.index(trials[0])
    rest = [i for i in items if not is_trial_item(i.key)]
    return [*rest[:first], folded, *rest[first:]]


def _render_queue(console: Console, s: Summary, width: int) -> None:
    items = collapsed_items(s.items)
    notes = ["; ".join(x for x in (item.overrides, item.reason, item.isolation) if x) for item in items]
    columns = {
        "item": [i.key for i in items],
        "arms": ["/".join(i.arms) for i in items],
        "gate": [i.gate or "" for i in items],
        "state": [str(i.state) for i in items],
        "tries": [str(i.attempts) for i in items],
    }
    fixed = [
        min(
            {"arms": _arms_max(width), "item": _arms_max(width), "gate": _arms_max(width) - 2}.get(name, 99),
            _longest([name, *values]),
        )
        for name, values in columns.items()
    ]
    title_w, note_w = fit(width, fixed, _longest(i.title for i in items), _longest(notes))
    queue = Table(title="Campaign queue", title_justify="left")
    queue.add_column("item", width=fixed[0], overflow="fold")
    if title_w:
        queue.add_column("title", width=title_w, overflow="fold")
    for name, w in zip(list(columns)[1:], fixed[1:]):
        queue.add_column(name, width=w, overflow="fold")
    queue.add_column("note", width=note_w, overflow="fold")
    for item, note in zip(items, notes):
        queue.add_row(
            escape(item.key),
            *([escape(item.title)] if title_w else []),
            escape("/".join(item.arms)),
            escape(item.gate or ""),
            f"[{STATE_STYLE.get(item.state, '')}]{item.state}[/]",
            str(item.attempts),
            escape(note),
        )
    console.print(queue)


def prefect_ui_address() -> str | None:
    """The Prefect UI to link to: $PREFECT_UI_URL, else the one serving the configured
    API ($PREFECT_API_URL or the active profile's); None when there is none (runs went to
    a temporary server, whose pages are gone)."""
    given = _ui_url_given()
    if given:
        return given
    api = configured_api_url()
    return ui_base(api) if api else None


def _ui_url_given() -> str | None:
    return os.environ["PREFECT_UI_URL"].rstrip("/") if os.environ.get("PREFECT_UI_URL") else None


def render_flow_runs(console: Console, links: list[AttemptLink]) -> None:
    """The newest attempt of each arm of each item (`links`): where it ran and its flow
    run's page. A line that would not fit puts the URL on a line of its own (never cut:
    it must stay clickable and copyable)."""
    console.print("[bold]Flow runs[/bold] (newest attempt of each arm)", highlight=False)
    for link in links:
        head = f"{link.item_key}/{link.arm_id} #{link.attempt_id} {link.state} on {link.host or '?'}"
        if link.url is None:
            why = "no flow run" if not link.flow_run_id else "ran on a temporary Prefect server"
            console.print(f"  {escape(head)} ({why})", highlight=False)
        elif len(head) + len(link.url) + 4 <= console.width:
            console.print(f"  {escape(head)}: {escape(link.url)}", highlight=False)
        else:
            console.print(f"  {escape(head)}:", highlight=False)
            indent = "    " if len(link.url) + 4 <= console.width else ""
            console.print(f"{indent}{escape(link.url)}", highlight=False, soft_wrap=True)


ARMS_MAX = 14  # an arms cell longer than this wraps (twice that on a wide terminal)
TITLE_MIN = 12  # a title column narrower than this is left out
TITLE_MAX = 32  # beside a text that wraps, a title longer than this wraps too
TEXT_MIN = 40  # the text column keeps at least this much before a title gets any


def _arms_max(width: int) -> int:
    return ARMS_MAX if width < 120 else 2 * ARMS_MAX


def _longest(texts: Iterable[object]) -> int:
    return max((len(str(t)) for t in texts), default=0)


def fit(width: int, fixed: list[int], title: int, text: int) -> tuple[int | None, int]:
    """Widths of a table's title column and its text column (a reason, a note), given
    the widths of its other columns; None for the title means: leave it out.

    Why by hand: rich shrinks the widest wrapping column first, and the reason is the
    widest -- at 80 columns it was left 7-16 characters. Here both are whole when they
    fit; otherwise the title gets a quarter of the room (at least `TITLE_MIN`) and the
    text the rest, wrapped, never cut; and when the text would keep less than `TEXT_MIN`,
    the title goes. Each column costs 3 characters of frame and padding, the table 1 more.
    """
    text = max(text, 4)
    room = width - sum(fixed) - (3 * (len(fixed) + 2) + 1)
    if text + max(title, 5) <= room:
        return max(title, 5), text
    want_title = min(max(title, 5), TITLE_MAX)
    title_w = max(TITLE_MIN, min(want_title, room // 4))
    if room - title_w >= TEXT_MIN:
        return title_w, room - title_w
    return None, max(8, min(text, room + 3))
