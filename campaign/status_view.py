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
    for col in ("gate", "title", "verdict", "arms", "reason"):
        gates.add_column(col, overflow="fold", ratio=4 if col == "reason" else None)
    for g in s.gates:
        arms = "/".join(g.subjects) + (f" vs {'/'.join(g.baseline)}" if g.baseline else "")
        gates.add_row(g.id, g.title, f"[{STATE_STYLE.get(g.verdict, '')}]{g.verdict}[/]", arms, g.reason)
    console.print(gates)

    queue = Table(title="Campaign queue", title_justify="left", expand=True)
    for col in ("#", "item", "arms", "gate", "state", "attempts", "note"):
        queue.add_column(col, overflow="fold")
    for i, item in enumerate(s.items, 1):
        queue.add_row(
            str(i), item.title, "/".join(item.arms), item.gate or "",
            f"[{STATE_STYLE.get(item.state, '')}]{item.state}[/]", str(item.attempts), item.reason,
        )
    console.print(queue)
    for flag in s.flags:
        console.print(f"[yellow]identity[/yellow] arm {flag.arm_id}: {flag.message}")
