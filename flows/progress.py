"""Progress events from inside flows to whoever shows them (the CLI's rich progress), and
to the Prefect run's log.

A plain observer list rather than Prefect's event system: the terminal must update even
when no Prefect server is reachable, and listeners are called from worker threads.

The same events, as one line each (`describe`), also go to the log of the Prefect flow
run they happen in, so a long probe shows its turns in the Prefect UI too. They go
through a logger of their own that only talks to the API (nothing more in the terminal,
where the rich view shows them), and only while a run context exists; whether logs are
sent at all is Prefect's PREFECT_LOGGING_TO_API_ENABLED.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

Listener = Callable[[str, dict[str, Any]], None]
_listeners: list[Listener] = []
_api_logger: logging.Logger | None = None
_logger_lock = threading.Lock()


def subscribe(listener: Listener) -> Callable[[], None]:
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def emit(kind: str, **data: Any) -> None:
    for listener in list(_listeners):
        try:
            listener(kind, data)
        except Exception:  # a broken display must never break a measurement
            pass
    _to_run_log(kind, data)


def _request_line(data: dict[str, Any]) -> str:
    where = f"arm {data.get('arm')}: {data.get('probe')} request"
    what = data.get("scenario") or ""
    if data.get("turn") is not None:
        what = f"conversation {data.get('conversation')}, turn {int(data['turn']) + 1}"
    timing = f", ttft {data['ttft_s']:.2f} s" if isinstance(data.get("ttft_s"), float) else ""
    status = "ok" if data.get("ok") else f"failed ({data.get('error') or 'error'})"
    return f"{where} ({what}) {status}{timing}"


def _campaign_start(data: dict[str, Any]) -> str:
    n = data.get("items")
    return (
        f"campaign {data.get('name')}: {n} queue item{'' if n == 1 else 's'} "
        f"(the queue table: this run's Artifacts tab, key {data.get('artifact')})"
    )


# kind -> its line in the run's log; a kind not here is not worth reading later
_LINES: dict[str, Callable[[dict[str, Any]], str]] = {
    "request": _request_line,
    "probe-start": lambda d: f"arm {d.get('arm')}: {d.get('probe')} @ {d.get('context')} started",
    "probe-done": lambda d: f"arm {d.get('arm')}: {d.get('probe')} @ {d.get('context')} done",
    "device-wait": lambda d: f"arm {d.get('arm')}: {d.get('message')}",
    "probe-warning": lambda d: f"arm {d.get('arm')}: {d.get('probe')}: warning: {d.get('message')}",
    "arm-wait": lambda d: f"arm {d.get('arm')}: {d.get('message')}",
    "arm-done": lambda d: f"arm {d.get('arm')}: {d.get('state')}",
    "campaign-start": _campaign_start,
    "campaign-done": lambda d: f"campaign {d.get('name')}: queue walked",
    "item-start": lambda d: f"item {d.get('item')} ({'/'.join(d.get('arms') or [])}) started",
    "item-done": lambda d: f"item {d.get('item')} {d.get('state')}" + (f": {d['reason']}" if d.get("reason") else ""),
    "verdict": lambda d: f"gate {d.get('gate')}: {d.get('verdict')} ({d.get('reason')})",
    "block-check": lambda d: block_check_line(d),
    "search": lambda d: f"search: {d.get('line')}",
}


def block_check_line(data: dict[str, Any]) -> str:
    """After a block of an item that adds blocks until its gate is settled: what the gate
    says and whether the item stops."""
    then = "settled: no more blocks" if data.get("settled") else f"open: another block (at most {data.get('most')})"
    return f"item {data.get('item')} after {data.get('blocks')} blocks: gate {data.get('gate')} {data.get('verdict')}; {then}"


def describe(kind: str, data: dict[str, Any]) -> str | None:
    """One line per event worth reading later; None for the rest."""
    line = _LINES.get(kind)
    return line(data) if line else None


def _logger() -> logging.Logger:
    global _api_logger
    with _logger_lock:
        if _api_logger is None:
            from prefect.logging.handlers import APILogHandler

            logger = logging.getLogger("campaign.progress")
            logger.setLevel(logging.INFO)
            logger.propagate = False  # the terminal has the rich view
            logger.addHandler(APILogHandler())
            _api_logger = logger
        return _api_logger


def _to_run_log(kind: str, data: dict[str, Any]) -> None:
    line = describe(kind, data)
    if line is None:
        return
    try:
        from prefect.context import FlowRunContext, TaskRunContext

        if FlowRunContext.get() is None and TaskRunContext.get() is None:
            return
        _logger().info(line)
    except Exception:  # the log is a courtesy; a measurement never waits on it
        pass
