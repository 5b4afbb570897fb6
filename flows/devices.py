"""One arm at a time per device, through a Prefect global concurrency limit.

Why not `prefect.concurrency.sync.concurrency`: a campaign process can be killed, and the
slot it held must then come back without anyone resetting it by hand. So:

- the slot is taken with a lease (Prefect's lease API, `LEASE_S` long) that a thread
  renews while the arm runs, and the lease id is recorded in the attempt row as soon as
  it is granted (resume releases it when the attempt's process is gone);
- beside the slot, the holder writes who it is into a Prefect variable named after the
  limit (attempt, campaign item/arm, pid, host, process start time, when it took the
  slot, when it last renewed). A Prefect server outlives any database a campaign uses,
  so a run on another database, or on another machine sharing the server, sees it too;
- an arm that finds the device busy says what it waits for ("device local held by
  attempt 7 (demo: spec-decode/B), pid 4242 on host h1, since 18:10:48") and takes the
  slot back when its holder is provably gone: the holder ran on this host and its
  process no longer exists (or the pid now belongs to a process started later) -- while
  it lives, it keeps the slot; or it ran on another host and has not renewed for
  `STALE_S` (its lease expired; a temporary Prefect server keeps leases in memory and
  runs no expiry service, so expiry is enforced here too); or the slot is counted with
  no holder at all for `STALE_S` (left by a process that died before it could say who
  it was).

Limits are strict: a device without a limit is an error.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import httpx

from campaign.core.processes import holder_gone
from campaign.core.processes import process_start as _process_start
from campaign.store.liveness import on_this_machine, this_machine
from flows import interrupt

LEASE_S = 60.0  # the shortest lease Prefect grants
RENEW_S = LEASE_S / 3
STALE_S = 2 * LEASE_S  # a holder not renewed for this long is gone (six renewals missed)


class DeviceLimitMissing(RuntimeError):
    pass


def ensure_limits(names: list[str]) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        for name in names:
            client.upsert_global_concurrency_limit_by_name(name, 1)


def holder_variable(limit_name: str) -> str:
    """Prefect variable names allow lowercase letters, digits, dashes and underscores."""
    return "campaign-holder-" + limit_name


@dataclass
class Holder:
    """Who holds a device slot, as written beside the lease."""

    limit: str
    lease: str = ""
    pid: int = 0
    host: str = ""
    process_start: float | None = None
    since: float = 0.0
    renewed: float = 0.0
    attempt: int | None = None
    what: str = ""

    def describe(self, device: str) -> str:
        who = f"attempt {self.attempt}" if self.attempt is not None else "a campaign"
        what = f" ({self.what})" if self.what else ""
        since = datetime.fromtimestamp(self.since).strftime("%H:%M:%S") if self.since else "?"
        return f"device {device} held by {who}{what}, pid {self.pid} on host {self.host}, since {since}"

    def gone(self, now: float, stale_s: float) -> str | None:
        """Why this holder is provably gone, or None if it may still be running. On this
        host its process decides (alive: it keeps the slot, however late its renewals);
        elsewhere, a lease not renewed for `stale_s` has expired."""
        silent = now - self.renewed if self.renewed else None
        why = holder_gone(
            on_this_machine(self.host),
            self.pid,
            self.process_start,
            silent,
            stale_s,
            gone="no longer exists",
            reused="now belongs to another process",
        )
        if why and why.startswith("silent"):
            return f"its lease was not renewed for {silent:.0f} s"
        return why


def read_holder(client: Any, limit_name: str) -> Holder | None:
    var = client.read_variable_by_name(holder_variable(limit_name))
    if var is None or not isinstance(var.value, dict):
        return None
    fields = {k: v for k, v in var.value.items() if k in Holder.__dataclass_fields__}
    try:
        return Holder(**{"limit": limit_name, **fields})
    except TypeError:
        return None


def write_holder(client: Any, holder: Holder) -> None:
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate
    from prefect.exceptions import ObjectAlreadyExists

    name = holder_variable(holder.limit)
    value = asdict(holder)
    try:
        client.create_variable(VariableCreate(name=name, value=value))
    except ObjectAlreadyExists:
        client.update_variable(VariableUpdate(name=name, value=value))


def clear_holder(client: Any, limit_name: str, lease: str | None = None) -> bool:
    """Delete the holder record (only the one for `lease`, when given). True if this call
    deleted it: of two processes clearing the same record, one gets True."""
    from prefect.exceptions import ObjectNotFound

    if lease is not None:
        current = read_holder(client, limit_name)
        if current is None or current.lease != lease:
            return False
    try:
        client.delete_variable_by_name(holder_variable(limit_name))
    except ObjectNotFound:
        return False
    return True


def release_lease(token: str) -> bool:
    """Release the slot a campaign process held (`token` = "limit-name/lease-id").

    If this Prefect server still knows the lease, it is released by id. A temporary server
    keeps leases in memory, so after a crash the new server may not know it while the
    slot is still counted in the database: then one slot of that limit is decremented,
    unless the holder record names another lease (the slot was taken back already and
    is someone else's now). The holder record of that lease goes with it.
    """
    from prefect.client.orchestration import get_client

    name, _, lease_id = token.rpartition("/")
    try:
        with get_client(sync_client=True) as client:
            try:
                lease = UUID(lease_id)
                client.renew_concurrency_lease(lease_id=lease, lease_duration=LEASE_S)
                known = True
            except (ValueError, httpx.HTTPStatusError):  # not a lease id, or one this server never knew
                known = False
            if known:
                client.release_concurrency_slots_with_lease(lease_id=lease)
            elif name:
                holder = read_holder(client, name)
                if holder is None or holder.lease == token:  # else the counted slot is another holder's
                    limit = client.read_global_concurrency_limit_by_name(name)
                    if limit.active_slots > 0:
                        client.release_concurrency_slots(names=[name], slots=1, occupancy_seconds=1.0)
            if name:
                clear_holder(client, name, lease=token)
        return True
    except Exception:
        return False


@dataclass
class DeviceLock:
    """Hold one slot of the device's limit; `on_lease(token)` records it durably.

    `on_wait(message)` is called whenever the holder being waited for changes (and when a
    gone holder's slot is taken back), so a waiting arm is never silent.
    """

    name: str
    on_lease: Callable[[str], None] | None = None
    device: str = ""
    attempt: int | None = None
    what: str = ""
    on_wait: Callable[[str], None] | None = None
    stale_s: float = STALE_S
    poll_s: float = 1.0
    lease_id: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _renewer: threading.Thread | None = field(default=None, repr=False)
    _holder: Holder | None = field(default=None, repr=False)

    @property
    def token(self) -> str:
        return f"{self.name}/{self.lease_id}"

    def _say(self, message: str) -> None:
        if self.on_wait:
            self.on_wait(message)

    def __enter__(self) -> DeviceLock:
        from prefect.client.orchestration import get_client

        device = self.device or self.name.removeprefix("device-")
        last_said = ""
        unknown_since: float | None = None
        with get_client(sync_client=True) as client:
            while True:
                interrupt.check(f"waiting for device {device}")
                try:
                    response = client.increment_concurrency_slots_with_lease(
                        names=[self.name], slots=1, mode="concurrency", lease_duration=LEASE_S
                    )
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != 423:
                        raise
                    now = time.time()
                    holder = read_holder(client, self.name)
                    if holder is None:
                        unknown_since = unknown_since or now
                        message = f"device {device} is busy (a slot is counted but no holder is recorded); waiting"
                        if now - unknown_since > self.stale_s:
                            self._reclaim(client, None, f"no holder for {now - unknown_since:.0f} s", device)
                            unknown_since = None
                            continue
                    else:
                        unknown_since = None
                        gone = holder.gone(now, self.stale_s)
                        if gone:
                            self._reclaim(client, holder, gone, device)
                            continue
                        message = holder.describe(device) + "; waiting"
                    if message != last_said:
                        self._say(message)
                        last_said = message
                    time.sleep(min(float(exc.response.headers.get("Retry-After", self.poll_s)), self.poll_s))
                    continue
                body: dict[str, Any] = response.json()
                if not body.get("limits"):
                    raise DeviceLimitMissing(
                        f"no concurrency limit {self.name!r}: create it before running arms on this device"
                    )
                self.lease_id = str(body["lease_id"])
                break
            now = time.time()
            self._holder = Holder(
                limit=self.name,
                lease=self.token,
                pid=os.getpid(),
                host=this_machine(),
                process_start=_process_start(os.getpid()),
                since=now,
                renewed=now,
                attempt=self.attempt,
                what=self.what,
            )
            try:
                write_holder(client, self._holder)
            except Exception:
                pass  # the slot is ours either way; only the waiting message is poorer
        if self.on_lease:
            self.on_lease(self.token)
        self._renewer = threading.Thread(target=self._renew, name=f"lease-{self.name}", daemon=True)
        self._renewer.start()
        return self

    def _reclaim(self, client: Any, holder: Holder | None, why: str, device: str) -> None:
        """Free the slot of a holder that is gone (lease by id if known, else one slot)."""
        if holder is not None and holder.lease:
            if not clear_holder(client, self.name, lease=holder.lease):
                return  # another waiter took it back first
            release_lease(holder.lease)
            who = holder.describe(device)
        else:
            limit = client.read_global_concurrency_limit_by_name(self.name)
            if limit.active_slots > 0:
                client.release_concurrency_slots(names=[self.name], slots=1, occupancy_seconds=1.0)
            who = f"device {device}'s slot"
        self._say(f"{who}: holder gone ({why}); slot taken back")

    def _renew(self) -> None:
        from prefect.client.orchestration import get_client

        while not self._stop.wait(RENEW_S):
            try:
                with get_client(sync_client=True) as client:
                    client.renew_concurrency_lease(lease_id=UUID(str(self.lease_id)), lease_duration=LEASE_S)
                    if self._holder is not None:
                        self._holder.renewed = time.time()
                        write_holder(client, self._holder)
            except Exception:
                pass  # the next renewal may succeed; expiry frees the slot at worst

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        if self.lease_id:
            release_lease(self.token)
