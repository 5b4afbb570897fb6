"""Progress events from inside flows to whoever shows them (the CLI's rich progress).

A plain observer list rather than Prefect's event system: the terminal must update even
when no Prefect server is reachable, and listeners are called from worker threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Listener = Callable[[str, dict[str, Any]], None]
_listeners: list[Listener] = []


def subscribe(listener: Listener) -> Callable[[], None]:
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def emit(kind: str, **data: Any) -> None:
    for listener in list(_listeners):
        try:
            listener(kind, data)
        except Exception:  # a broken display must never break a measurement
            pass
