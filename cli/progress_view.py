"""The live progress display of `campaign run`: one bar for the queue, one for the arm.

Long probes are never silent: every request updates the arm's line (how many requests,
which conversation and turn, the last TTFT), and where the output is not a terminal (a
log file, CI) a line is printed at most every `LINE_EVERY_S` seconds per probe instead.
An arm waiting for its device says whom it waits for.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from campaign.core.schema import CampaignSpec

LINE_EVERY_S = 10.0


class CampaignProgress:
    def __init__(self, console: Console, spec: CampaignSpec, items: int | None = None):
        self.spec = spec
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._unsubscribe: Any = None
        self.items = self.progress.add_task("queue", total=items or len(spec.queue) + _search_items(spec))
        self.arm = self.progress.add_task("arm", total=1, visible=False)
        self._probe: dict[str, str] = {}  # arm -> "probe @ context"
        self._requests: dict[str, tuple[int, int]] = {}  # arm -> (requests, failed) in the current probe
        self._printed: dict[str, float] = {}
        self._verdicts: dict[str, str] = {}  # gate -> the verdict last printed

    def _on(self, kind: str, data: dict[str, Any]) -> None:
        p = self.progress
        if kind == "item-start":
            p.update(self.items, description=escape(f"queue: {data['title']}"))
        elif kind == "item-done":
            if data.get("state") != "interrupted":
                p.advance(self.items)
            if data.get("state") not in ("done",):
                state, reason = str(data["state"]), str(data.get("reason", ""))
                reason = (
                    reason.removeprefix(state).lstrip(" :") if reason.startswith(state) else reason
                )  # "interrupted interrupted by ..."
                p.console.print(
                    f"  item {escape(data['item'])}: [yellow]{escape(state)}[/yellow] {escape(reason)}".rstrip()
                )
            elif data.get("reason"):  # an item that added blocks until its gate was settled says how many
                p.console.print(f"  item {escape(data['item'])}: done, {escape(str(data['reason']))}")
        elif kind == "block-check":
            from flows.progress import block_check_line

            p.console.print(escape(f"  {block_check_line(data)}"), highlight=False, soft_wrap=True)
        elif kind == "arm-start":
            # a search's trial items are not in the file's queue: one probe at one context
            item = next((q for q in self.spec.queue if q.key == data["item"]), None)
            total = sum((len(item.contexts) or 1) for _ in item.probes) if item is not None else 1
            p.reset(
                self.arm, total=max(total, 1), description=escape(f"arm {data['arm']}: starting server"), visible=True
            )
        elif kind == "search":
            p.console.print(escape(f"  search: {data['line']}"), highlight=False, soft_wrap=True)
        elif kind == "probe-start":
            arm_id = str(data["arm"])
            self._probe[arm_id] = f"{data['probe']} @ {data['context']}"
            self._requests[arm_id] = (0, 0)
            self._printed[arm_id] = time.monotonic()
            p.update(self.arm, description=escape(f"arm {arm_id}: {self._probe[arm_id]}"))
        elif kind == "request":
            self._request(data)
        elif kind == "probe-done":
            p.advance(self.arm)
        elif kind == "arm-done":
            p.update(self.arm, description=escape(f"arm {data['arm']}: {data['state']}"))
        elif kind == "device-wait":
            p.console.print(
                f"  arm {escape(str(data['arm']))}: [yellow]{escape(str(data['message']))}[/yellow]", soft_wrap=True
            )
        elif kind == "probe-warning":
            p.console.print(
                f"  arm {escape(str(data['arm']))}: {escape(str(data['probe']))}: "
                f"[yellow]warning: {escape(str(data['message']))}[/yellow]",
                soft_wrap=True,
            )
        elif kind == "verdict":
            if self._verdicts.get(str(data["gate"])) == data["verdict"]:
                return  # the same verdict with a new reason (the family grew): the status table shows it
            self._verdicts[str(data["gate"])] = str(data["verdict"])
            p.console.print(
                f"  gate {escape(data['gate'])}: [bold]{escape(data['verdict'])}[/bold] {escape(data['reason'])}"
            )

    def _request(self, data: dict[str, Any]) -> None:
        arm = str(data["arm"])
        n, failed = self._requests.get(arm, (0, 0))
        n, failed = n + 1, failed + (0 if data.get("ok") else 1)
        self._requests[arm] = (n, failed)
        text = request_line(self._probe.get(arm, str(data.get("probe", ""))), n, failed, data)
        self.progress.update(self.arm, description=escape(f"arm {arm}: {text}"))
        now = time.monotonic()
        if not self.progress.console.is_terminal and now - self._printed.get(arm, 0.0) >= LINE_EVERY_S:
            self._printed[arm] = now
            self.progress.console.print(escape(f"  arm {arm}: {text}"), highlight=False)

    def __enter__(self) -> CampaignProgress:
        from flows.progress import subscribe

        self.progress.start()
        self._unsubscribe = subscribe(self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._unsubscribe:
            self._unsubscribe()
        self.progress.stop()


def _search_items(spec: CampaignSpec) -> int:
    """The items a search adds at most: a trial item per start its budget allows (the base
    one item of two starts), and the confirmation (and the ablations)."""
    search = spec.search
    if search is None:
        return 0
    trials = search.budget.starts - 1 if search.budget.starts is not None else 0
    return trials + 1 + int(search.confirm.ablate)


def request_line(probe: str, n: int, failed: int, data: dict[str, Any]) -> str:
    """'agent-load @ 0 · 17 requests (1 failed) · conversation 2, turn 4 · ttft 1.23 s'"""
    parts = [probe, f"{n} request{'s' if n != 1 else ''}" + (f" ({failed} failed)" if failed else "")]
    if data.get("turn") is not None:
        parts.append(f"conversation {data.get('conversation')}, turn {int(data['turn']) + 1}")
    elif data.get("scenario"):
        parts.append(str(data["scenario"]))
    if isinstance(data.get("ttft_s"), float):
        parts.append(f"ttft {data['ttft_s']:.2f} s")
    return " · ".join(parts)
