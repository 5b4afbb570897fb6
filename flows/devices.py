"""One arm at a time per device, through a Prefect global concurrency limit.

Why not `prefect.concurrency.sync.concurrency`: a campaign process can be killed, and the
slot it held must then be released by the next `campaign resume`, not left until a lease
expiry that a temporary Prefect server never enforces. So the lease id is recorded in the
attempt row as soon as it is granted, renewed while the arm runs, and released by resume
when its holder is found dead. Limits are strict: a device without a limit is an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

LEASE_S = 60.0


class DeviceLimitMissing(RuntimeError):
    pass


def ensure_limits(names: list[str]) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        for name in names:
            client.upsert_global_concurrency_limit_by_name(name, 1)


def release_lease(token: str) -> bool:
    """Release the slot a dead campaign process held (`token` = "limit-name/lease-id").

    If this Prefect server still knows the lease, it is released by id. A temporary server
    keeps leases in memory, so after a crash the new server may not know it while the
    slot is still counted in the database: then one slot of that limit is decremented.
    """
    from prefect.client.orchestration import get_client

    name, _, lease_id = token.rpartition("/")
    try:
        with get_client(sync_client=True) as client:
            try:
                client.renew_concurrency_lease(lease_id=lease_id, lease_duration=LEASE_S)
                known = True
            except httpx.HTTPStatusError:
                known = False
            if known:
                client.release_concurrency_slots_with_lease(lease_id=lease_id)
            elif name:
                limit = client.read_global_concurrency_limit_by_name(name)
                if limit.active_slots > 0:
                    client.release_concurrency_slots(names=[name], slots=1, occupancy_seconds=1.0)
        return True
    except Exception:
        return False


class DeviceLock:
    """Hold one slot of the device's limit; `on_lease(lease_id)` records it durably."""

    def __init__(self, name: str, on_lease: Callable[[str], None] | None = None):
        self.name = name
        self.on_lease = on_lease
        self.lease_id: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> DeviceLock:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            while True:
                try:
                    response = client.increment_concurrency_slots_with_lease(
                        names=[self.name], slots=1, mode="concurrency", lease_duration=LEASE_S
                    )
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != 423:
                        raise
                    time.sleep(min(float(exc.response.headers.get("Retry-After", 1)), 2.0))
                    continue
                body: dict[str, Any] = response.json()
                if not body.get("limits"):
                    raise DeviceLimitMissing(f"no concurrency limit {self.name!r}: create it before running arms on this device")
                self.lease_id = str(body["lease_id"])
                break
        if self.on_lease:
            self.on_lease(f"{self.name}/{self.lease_id}")
        self._renewer = threading.Thread(target=self._renew, name=f"lease-{self.name}", daemon=True)
        self._renewer.start()
        return self

    def _renew(self) -> None:
        from prefect.client.orchestration import get_client

        while not self._stop.wait(LEASE_S / 3):
            try:
                with get_client(sync_client=True) as client:
                    client.renew_concurrency_lease(lease_id=self.lease_id, lease_duration=LEASE_S)
            except Exception:
                pass  # the next renewal may succeed; expiry frees the slot at worst

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.lease_id:
            release_lease(self.lease_id)
