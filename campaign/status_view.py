"""`campaign status` in the terminal: the queue, the gate verdicts, identity flags."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from campaign.store import Store
from campaign.summary import summarize

STATE_STYLE = {
    "done": "green", "running": "cyan", "pending": "white", "failed": "red", "blocked": "yellow",
    "pass": "bold green", "fail": "bold red", "control": "blue", "inconclusive": "magenta",
}


def render_status(console: Console, store: Store, name: str | None = None) -> None:
    s = summarize(store, name)
    sim = " (simulated runtimes)" if s.simulated_arms else ""
    console.print(f"[bold]{s.title}[/bold]  campaign [cyan]{s.name}[/cyan]{sim}")

    gates = Table(title="Gate verdicts", title_justify="left", expand=True)
    gates.add_column("gate", no_wrap=True)
    gates.add_column("title", max_width=32, overflow="fold")
    gates.add_column("verdict", no_wrap=True)
    gates.add_column("arms", no_wrap=True)
    gates.add_column("reason", min_width=40, ratio=1, overflow="fold")
    for g in s.gates:
        arms = "/".join(g.subjects) + (f" vs {'/'.join(g.baseline)}" if g.baseline else "")
        gates.add_row(g.id, g.title, f"[{STATE_STYLE.get(g.verdict, '')}]{g.verdict}[/]", arms, g.reason)
    console.print(gates)

    queue = Table(title="Campaign queue", title_justify="left", expand=True)
    queue.add_column("#", no_wrap=True)
    queue.add_column("item", min_width=24, ratio=2, overflow="fold")
    for col in ("arms", "gate", "state", "attempts"):
        queue.add_column(col, no_wrap=True)
    queue.add_column("note", ratio=1, overflow="fold")
    for i, item in enumerate(s.items, 1):
        queue.add_row(
            str(i), item.title, "/".join(item.arms), item.gate or "",
            f"[{STATE_STYLE.get(item.state, '')}]{item.state}[/]", str(item.attempts),
            "; ".join(x for x in (item.reason, item.isolation) if x),
        )
    console.print(queue)
    for flag in s.flags:
        console.print(f"[yellow]identity[/yellow] arm {flag.arm_id}: {flag.message}")
