"""The device slot (a Prefect global concurrency limit with a lease) against a real Prefect
test server: a waiting arm says whom it waits for, and a slot comes back when its holder
is provably gone -- a dead pid on this host, a lease nobody renews, a slot nobody claims --
and never while its holder lives."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from flows.devices import DeviceLock, Holder, clear_holder, ensure_limits, read_holder, release_lease, write_holder

pytestmark = pytest.mark.integration


def _limit() -> str:
    return f"device-t{uuid.uuid4().hex[:10]}"


def _client() -> Any:
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _occupy(name: str, holder: Holder | None) -> str:
    """Take the slot the way a campaign does, as somebody else."""
    with _client() as client:
        response = client.increment_concurrency_slots_with_lease(
            names=[name], slots=1, mode="concurrency", lease_duration=60
        )
        token = f"{name}/{response.json()['lease_id']}"
        if holder is not None:
            holder.lease = token
            write_holder(client, holder)
    return token


def _active(name: str) -> int:
    with _client() as client:
        return client.read_global_concurrency_limit_by_name(name).active_slots


def _acquire_in_thread(lock: DeviceLock) -> tuple[threading.Thread, threading.Event]:
    got = threading.Event()

    def run() -> None:
        with lock:
            got.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def test_a_waiting_arm_names_the_live_holder_and_goes_on_when_it_dies(prefect_harness: None) -> None:
    name = _limit()
    ensure_limits([name])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        import psutil

        since = time.time()
        _occupy(
            name,
            Holder(
                limit=name,
                pid=sleeper.pid,
                host=socket.gethostname(),
                process_start=psutil.Process(sleeper.pid).create_time(),
                since=since,
                renewed=since - 600,
                attempt=7,
                what="demo: spec-decode/B",
            ),
        )  # late renewals: on this host, liveness decides
        said: list[str] = []
        thread, got = _acquire_in_thread(DeviceLock(name, device="gpu0", on_wait=said.append, poll_s=0.2))
        time.sleep(3)
        assert not got.is_set()  # a live holder keeps its slot
        expected = f"device gpu0 held by attempt 7 (demo: spec-decode/B), pid {sleeper.pid} on host {socket.gethostname()}, since {time.strftime('%H:%M:%S', time.localtime(since))}; waiting"
        assert said == [expected]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert got.wait(30), said
    thread.join(10)
    assert said[-1].endswith(f"holder gone (pid {sleeper.pid} no longer exists); slot taken back")
    assert _active(name) == 0  # the lock released its own slot on exit
    with _client() as client:
        assert read_holder(client, name) is None


def test_a_lease_nobody_renews_expires_even_on_another_host(prefect_harness: None) -> None:
    name = _limit()
    ensure_limits([name])
    old = time.time() - 120
    _occupy(name, Holder(limit=name, pid=1, host="elsewhere", since=old, renewed=old, attempt=3))
    said: list[str] = []
    with DeviceLock(name, on_wait=said.append, poll_s=0.2, stale_s=60):
        assert _active(name) == 1  # ours now; the expired one was taken back
        with _client() as client:
            mine = read_holder(client, name)
        assert mine is not None and mine.host == socket.gethostname() and mine.lease.startswith(name + "/")
    assert len(said) == 1 and "host elsewhere" in said[0] and "its lease was not renewed for 1" in said[0]


def test_a_slot_with_no_holder_comes_back_after_the_stale_time(prefect_harness: None) -> None:
    name = _limit()
    ensure_limits([name])
    _occupy(name, None)  # e.g. a process killed between taking the slot and saying who it is
    said: list[str] = []
    started = time.monotonic()
    with DeviceLock(name, on_wait=said.append, poll_s=0.2, stale_s=2.0):
        waited = time.monotonic() - started
    assert 2.0 <= waited < 20
    assert said[0].endswith("(a slot is counted but no holder is recorded); waiting")
    assert "slot taken back" in said[-1]
    assert _active(name) == 0


def test_release_of_an_unknown_lease_never_frees_another_holders_slot(prefect_harness: None) -> None:
    name = _limit()
    ensure_limits([name])
    now = time.time()
    _occupy(name, Holder(limit=name, pid=1, host="elsewhere", since=now, renewed=now))
    assert release_lease(f"{name}/{uuid.uuid4()}")  # a crashed attempt's lease this server never knew
    assert _active(name) == 1
    with _client() as client:
        holder = read_holder(client, name)
        assert holder is not None
        assert clear_holder(client, name, lease=holder.lease) and not clear_holder(client, name, lease=holder.lease)
    assert release_lease(holder.lease)
    assert _active(name) == 0
