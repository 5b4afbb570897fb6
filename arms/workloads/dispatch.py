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
    cpu_s: float = 0.0  # the client's CPU time over the run (all its processes and threads)
    loop_lags_ns: list[int] = field(default_factory=list)  # how late the loop woke each tick (`LoopTicker`)
    indices: list[int] = field(default_factory=list)  # each record's request index (its place in the run)
    procs: int = 1  # client processes that sent the run (`arms.workloads.shards`)
    busiest_cpu_s: float | None = None  # the busiest process's CPU time, when several sent it

    @property
    def client_cpu_s(self) -> float:
        """CPU time of the process that had the least room: a process stamps its own
        streams, so it is one process's share of a core that can make its stamps late."""
        return self.cpu_s if self.busiest_cpu_s is None else self.busiest_cpu_s

    @property
    def span_s(self) -> float:
        return max(0.0, (self.end_ns - self.start_ns) / NS)


@dataclass(frozen=True)
class Part:
    """Which of a run's requests this process sends: those whose index is `shard` modulo
    `procs`, from a start every process shares (`start_ns`, on the machine's monotonic
    clock, so the stamps of all processes compare). A closed loop's clients are split the
    same way. The whole run is `Part()`."""

    shard: int = 0
    procs: int = 1
    start_ns: int | None = None

    def clients(self, concurrency: int) -> int:
        return concurrency // self.procs + (1 if self.shard < concurrency % self.procs else 0)


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
    part: Part = Part(),
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
    `part` runs this process's share of a run that several processes send.
    """
    gc.collect()  # before the clock starts: then the collector stays off for the whole run
    cpu0 = time.process_time()
    ticker = LoopTicker()
    with gc_paused:  # a collection between two requests would land on a scheduled send (tens of ms)
        ticker.start()
        try:
            if profile.open_loop:
                result = await _open_loop(profile, send, prepare, duration_s, requests, max_in_flight, stop, part)
            else:
                result = await _closed_loop(profile, send, prepare, duration_s, requests, stop, part)
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
    part: Part,
) -> RunResult:
    offsets, window = profile.offsets(duration_s, requests)
    mine = range(part.shard, len(offsets), part.procs)
    items = {i: prepare(i) for i in mine}
    records: dict[int, RequestRecord] = {}
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
    start = part.start_ns or time.perf_counter_ns()
    for i in mine:
        due = start + int(offsets[i] * NS)
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
    indices = sorted(records)
    done = [records[i] for i in indices]
    end = max((r.end_ns for r in done), default=time.perf_counter_ns())
    return RunResult(profile, done, start, end, window, cap, state["peak"], state["waits"], indices=indices)


async def _closed_loop(
    profile: Profile,
    send: Send,
    prepare: Prepare,
    duration_s: float | None,
    requests: int | None,
    stop: Callable[[], bool],
    part: Part,
) -> RunResult:
    if duration_s is None and requests is None:
        raise ValueError("a closed-loop run needs a duration or a request count")
    records: dict[int, RequestRecord] = {}
    counter = iter(range(part.shard, requests if requests is not None else 1 << 62, part.procs))
    start = part.start_ns or time.perf_counter_ns()
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

    await asyncio.gather(*(client() for _ in range(part.clients(profile.concurrency))))
    indices = sorted(records)
    done = [records[i] for i in indices]
    end = max((r.end_ns for r in done), default=time.perf_counter_ns())
    result = RunResult(profile, done, start, end, 0.0, profile.concurrency, state["peak"], 0, indices=indices)
    result.window_s = result.span_s
    return result
