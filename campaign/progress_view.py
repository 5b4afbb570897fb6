"""The live progress display of `campaign run`: one bar for the queue, one for the arm."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from campaign.schema import CampaignSpec


class CampaignProgress:
    def __init__(self, console: Console, spec: CampaignSpec, items: int | None = None):
        self.spec = spec
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, transient=False,
        )
        self._unsubscribe: Any = None
        self.items = self.progress.add_task("queue", total=items or len(spec.queue))
        self.arm = self.progress.add_task("arm", total=1, visible=False)

    def _on(self, kind: str, data: dict[str, Any]) -> None:
        p = self.progress
        if kind == "item-start":
            p.update(self.items, description=f"queue: {data['title']}")
        elif kind == "item-done":
            p.advance(self.items)
            if data.get("state") not in ("done",):
                p.console.print(f"  item {data['item']}: [yellow]{data['state']}[/yellow] {data.get('reason', '')}")
        elif kind == "arm-start":
            item = self.spec.item(data["item"])
            arm = self.spec.arm(data["arm"])
            contexts = len(item.contexts) or 1
            total = sum(contexts for _ in item.probes)
            p.reset(self.arm, total=max(total, 1), description=f"arm {arm.id}: starting server", visible=True)
        elif kind == "probe-start":
            p.update(self.arm, description=f"arm {data['arm']}: {data['probe']} @ {data['context']}")
        elif kind == "probe-done":
            p.advance(self.arm)
        elif kind == "arm-done":
            p.update(self.arm, description=f"arm {data['arm']}: {data['state']}")
        elif kind == "verdict":
            p.console.print(f"  gate {data['gate']}: [bold]{data['verdict']}[/bold] {data['reason']}")

    def __enter__(self) -> CampaignProgress:
        from flows.progress import subscribe

        self.progress.start()
        self._unsubscribe = subscribe(self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._unsubscribe:
            self._unsubscribe()
        self.progress.stop()
