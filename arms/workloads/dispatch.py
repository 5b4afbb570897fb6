"""Sending a load profile's requests (`arms.workloads.profiles`): on its schedule (open
loop) or as its clients are ready (closed loop), and what the run sent (`RunResult`).

Every request keeps its scheduled send (`RequestRecord.scheduled_ns`) beside its actual one
(`send_ns`, when its headers were written to the socket); `schedule_lag_s` is the
difference. The open-loop dispatcher never waits for a response, so it cannot turn into a
closed loop; a client that falls behind its own schedule shows it in the lag, with numbers.
The one limit is `max_in_flight` (the connection pool is sized to it, so the pool never
throttles silently below it): a send that finds it full waits for a request to end, and
every such wait is counted (`RunResult.cap_waits`) and reported; its wait is in its lag.
For closed-loop profiles the scheduled send is the moment the client was ready, so their
lag is the client's own overhead.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from arms.client import gc_paused
from arms.measures import NS, RequestRecord
from arms.workloads.profiles import Profile


@dataclass
class RunResult:
    """What a run sent: every record in index order, each with `scheduled_ns` set."""

    profile: Profile
    records: list[RequestRecord]
    start_ns: int
    end_ns: int
    window_s: float
    max_in_flight: int
    peak_in_flight: int = 0
    cap_waits: int = 0
    cpu_s: float = 0.0  # the client process's CPU time over the run (all its threads)
    loop_lags_ns: list[int] = field(default_factory=list)  # how late the loop woke each tick (`LoopTicker`)

    @property
    def span_s(self) -> float:
        return max(0.0, (self.end_ns - self.start_ns) / NS)


class LoopTicker:
    """How late the client's event loop runs: a task that sleeps `period` again and again
    and records how much later than asked it woke each time. Every stamp the client takes
    (a send, a byte's arrival) waits for the loop as this ticker does, so a loop late by
    more than a bound measured the client, whatever its CPU share says (a busy neighbour
    process steals the core without the client's CPU time showing it)."""

    def __init__(self, period_s: float = 0.01):
        self.period_s = period_s
        self.lags_ns: list[int] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        period = int(self.period_s * NS)
        while True:
            asked = time.perf_counter_ns()
            await asyncio.sleep(self.period_s)
            self.lags_ns.append(max(0, time.perf_counter_ns() - asked - period))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None


Send = Callable[[int, Any], Awaitable[RequestRecord]]
Prepare = Callable[[int], Any]


async def run(
    profile: Profile,
    send: Send,
    *,
    prepare: Prepare = lambda i: None,
    duration_s: float | None = None,
    requests: int | None = None,
    max_in_flight: int = 256,
    stop: Callable[[], bool] = lambda: False,
) -> RunResult:
    """Run one profile: `send(i, prepare(i))` for each request i, on the profile's schedule.

    Open loop: every request's `prepare` runs before the clock starts (building a prompt
    must not delay a send), then each is sent at its time as its own task. Closed loop:
    `concurrency` clients, each preparing and sending its next request when the last ended,
    until the duration has passed or the request count is reached.
    `stop()` true (a probe whose server stalled) ends the waiting: open loop hands the rest
    of its schedule to `send` at once (which records them as not run), closed loop sends no more.
    The cyclic garbage collector is off for the whole run, not only while streams are in
    flight: at a low rate there are moments with nothing in flight, and a collection then
    would delay the next scheduled send by tens of milliseconds.
    """
    gc.collect()  # before the clock starts: then the collector stays off for the whole run
    cpu0 = time.process_time()
    ticker = LoopTicker()
    with gc_paused:  # a collection between two requests would land on a scheduled send (tens of ms)
        ticker.start()
        try:
            if profile.open_loop:
                result = await _open_loop(profile, send, prepare, duration_s, requests, max_in_flight, stop)
            else:
                result = await _closed_loop(profile, send, prepare, duration_s, requests, stop)
        finally:
            await ticker.stop()
    result.cpu_s = time.process_time() - cpu0
    result.loop_lags_ns = ticker.lags_ns
    return result


async def _open_loop(
    profile: Profile,
    send: Send,
    prepare: Prepare,
    duration_s: float | None,
    requests: int | None,
    cap: int,
    stop: Callable[[], bool],
) -> RunResult:
    offsets, window = profile.offsets(duration_s, requests)
    items = [prepare(i) for i in range(len(offsets))]
    records: list[RequestRecord | None] = [None] * len(offsets)
    freed = asyncio.Event()
    state = {"in_flight": 0, "peak": 0, "waits": 0}

    async def one(i: int, due: int) -> None:
        try:
            record = await send(i, items[i])
            record.scheduled_ns = due
            records[i] = record
        finally:
            state["in_flight"] -= 1
            freed.set()

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter_ns()
    for i, offset in enumerate(offsets):
        due = start + int(offset * NS)
        if not stop():
            wait = (due - time.perf_counter_ns()) / NS
            if wait > 0:
                await asyncio.sleep(wait)
        if state["in_flight"] >= cap:
            state["waits"] += 1  # reported: this send waits for a request to end
            while state["in_flight"] >= cap:
                freed.clear()
                await freed.wait()
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    done = [r for r in records if r is not None]
    end = max((r.end_ns for r in done), default=time.perf_counter_ns())
    return RunResult(profile, done, start, end, window, cap, state["peak"], state["waits"])


async def _closed_loop(
    profile: Profile,
    send: Send,
    prepare: Prepare,
    duration_s: float | None,
    requests: int | None,
    stop: Callable[[], bool],
) -> RunResult:
    if duration_s is None and requests is None:
        raise ValueError("a closed-loop run needs a duration or a request count")
    records: dict[int, RequestRecord] = {}
    counter = iter(range(requests if requests is not None else 1 << 62))
    start = time.perf_counter_ns()
    deadline = None if duration_s is None else start + int(duration_s * NS)
    state = {"in_flight": 0, "peak": 0}

    async def client() -> None:
        while not stop():
            ready = time.perf_counter_ns()
            if deadline is not None and ready >= deadline:
                return
            i = next(counter, None)
            if i is None:
                return
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
            try:
                record = await send(i, prepare(i))
            finally:
                state["in_flight"] -= 1
            record.scheduled_ns = ready
            records[i] = record

    await asyncio.gather(*(client() for _ in range(profile.concurrency)))
    done = [records[i] for i in sorted(records)]
    end = max((r.end_ns for r in done), default=time.perf_counter_ns())
    result = RunResult(profile, done, start, end, 0.0, profile.concurrency, state["peak"], 0)
    result.window_s = result.span_s
    return result
