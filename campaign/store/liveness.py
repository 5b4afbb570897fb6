"""Whether the process holding an attempt is alive: this host's name, the heartbeat an
attempt's runner writes, and the rule that judges a holder gone (`holder_gone`).

One rule for every holder (an attempt, a campaign's runner claim, a device slot): a
holder on this machine is judged by its pid (gone, or now a later process), one
elsewhere by its silence (`campaign.core.processes.holder_gone`). "This machine" is the
machine's own name (`this_machine`), never the placement label `campaign worker --host`
sets (`this_host`): a label may name another machine, or two labels one machine, and a
pid means something only on the machine that made it.
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import datetime
from typing import Protocol

from campaign.core.processes import holder_gone as holder_gone_rule
from campaign.store.tables import AttemptRow, aware, utcnow


class Beating(Protocol):
    """What a heartbeat writes through (`campaign.store.store.Store`)."""

    def heartbeat(self, attempt_id: int) -> bool: ...


def this_host() -> str:
    """The name attempts record as their host: $CAMPAIGN_HOST (what `campaign worker
    --host` sets), else the machine's host name."""
    return os.environ.get("CAMPAIGN_HOST") or socket.gethostname()


def this_machine() -> str:
    """The machine's own name, recorded beside every holder's pid."""
    return socket.gethostname()


def on_this_machine(machine: str, host: str = "") -> bool:
    """Whether a holder recorded on `machine` runs here, so its pid can be read. An
    attempt made before machines were recorded ('') is judged by its host, as it was."""
    if machine:
        return machine == this_machine()
    return host in ("", this_host())


HEARTBEAT_S = float(os.environ.get("CAMPAIGN_HEARTBEAT_S", "10"))
# An attempt whose heartbeat is older than this is dead, wherever it ran: six beats missed.
HEARTBEAT_STALE_S = float(os.environ.get("CAMPAIGN_HEARTBEAT_STALE_S", str(6 * HEARTBEAT_S)))


def holder_gone(attempt: AttemptRow, now: datetime | None = None, stale_s: float | None = None) -> str | None:
    """Why the process running `attempt` is provably dead, or None if it may be alive.

    Proof is one of: it ran on this machine and its pid is gone (or now names a process
    started later); or its heartbeat is older than `stale_s` (HEARTBEAT_STALE_S), which
    holds for a holder on another host. A pid on another host proves nothing from here,
    so a live holder elsewhere is never judged dead while it beats; on this host a live
    pid keeps its attempt, however late its heartbeat. Attempts written before heartbeats
    existed (no heartbeat, no host) are judged by their pid, as before.
    """
    now = now or utcnow()
    stale_s = HEARTBEAT_STALE_S if stale_s is None else stale_s
    silent = (now - aware(attempt.heartbeat_at)).total_seconds() if attempt.heartbeat_at is not None else None
    why = holder_gone_rule(
        on_this_machine(attempt.machine, attempt.host),
        attempt.owner_pid,
        attempt.owner_start,
        silent,
        stale_s,
        gone=f"on {attempt.host or 'this host'} is gone",
    )
    if why and why.startswith("silent"):
        return f"no heartbeat from host {attempt.host or '?'} for {why.removeprefix('silent for ')}"
    return why


class AttemptHeartbeat:
    """A thread that beats an attempt's heart every HEARTBEAT_S while its arm runs."""

    def __init__(self, store: Beating, attempt_id: int, every_s: float | None = None):
        self.store, self.attempt_id = store, attempt_id
        self.every_s = HEARTBEAT_S if every_s is None else every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{attempt_id}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                if not self.store.heartbeat(self.attempt_id):
                    return
            except Exception:
                pass  # the next beat may get through; staleness is judged generously

    def __enter__(self) -> AttemptHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
