"""One load run sent by several client processes: one schedule, one clock.

A single asyncio process stamps every byte of every stream it reads. When a server
sends tokens for hundreds of streams in the same decode step, they arrive together and
the process reads them one after another: the last stream's stamp is late by the time
the others took (`benchmarks/client_capacity.py` measures how much). Splitting the
streams over processes splits those bursts.

Each worker process sends the requests whose index is its shard modulo the process
count (`dispatch.Part`), from one start time the parent sets after every worker has
opened its connections. `time.perf_counter_ns` reads the machine's monotonic clock, so
the workers' stamps and the parent's compare directly. The parent gets every record
back and merges them in request order into one `RunResult`, as if one process had sent
them; the client CPU share it reports is the busiest process's.

What a worker sends is a `Requester`: picklable (it crosses to a fresh process), it
opens the HTTP client, builds request i and sends it. Workers are fresh interpreters
(`python -m arms.workloads.shards`), not forks: the parent runs an event loop and
threads, which a fork would copy mid-flight.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
import traceback
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import httpx

from arms.client import make_http_client, stream_chat, warm_connections
from arms.measures import NS, RequestRecord
from arms.workloads import dispatch
from arms.workloads.dispatch import Part, RunResult
from arms.workloads.profiles import Profile

STREAMS_PER_PROC = 128  # `auto`: a process per this many streams held open at once
START_MARGIN_S = 0.05  # the shared start, after the last worker said it was ready
READY_TIMEOUT_S = 120.0  # a worker that has not imported and connected by then is broken


class Requester(Protocol):
    """What a worker needs to send a run's requests; crosses to the worker by pickle."""

    def client(self, pool: int) -> AbstractAsyncContextManager[httpx.AsyncClient]: ...

    def prepare(self, i: int) -> Any: ...

    async def send(self, http: httpx.AsyncClient, i: int, item: Any) -> RequestRecord: ...

    def stopped(self) -> bool: ...

    async def warm(self, http: httpx.AsyncClient, connections: int) -> int: ...


def auto_procs(streams: int) -> int:
    """Processes for `streams` held open at once: one per STREAMS_PER_PROC, at most the
    machine's cores less one (the server under test, or the rest of the machine, keeps one)."""
    cores = os.cpu_count() or 1
    return max(1, min(math.ceil(streams / STREAMS_PER_PROC), cores - 1))


@dataclass(frozen=True)
class Job:
    """One worker's share of a run."""

    requester: Requester
    profile: Profile
    part: Part
    duration_s: float | None
    requests: int | None
    max_in_flight: int
    warm: int


def _serve_job() -> None:
    """A worker's main (`python -m arms.workloads.shards`): its job arrives on stdin, its
    messages leave on the stdout it had; anything printed goes to stderr instead."""
    out = os.dup(1)
    os.dup2(2, 1)
    inbox, outbox = Connection(0, writable=False), Connection(out, readable=False)
    try:
        job = inbox.recv()
        asyncio.run(_work(inbox, outbox, job))
    except BaseException:
        outbox.send(("error", traceback.format_exc()))


async def _work(inbox: Connection, outbox: Connection, job: Job) -> None:
    async with job.requester.client(job.max_in_flight + 2) as http:
        await job.requester.warm(http, job.warm)
        outbox.send(("ready", None))
        start_ns = inbox.recv()  # nothing else runs in this process until the run starts

        async def send(i: int, item: Any) -> RequestRecord:
            return await job.requester.send(http, i, item)

        result = await dispatch.run(
            job.profile,
            send,
            prepare=job.requester.prepare,
            duration_s=job.duration_s,
            requests=job.requests,
            max_in_flight=job.max_in_flight,
            stop=job.requester.stopped,
            part=Part(job.part.shard, job.part.procs, start_ns),
        )
    outbox.send(("done", result))


class WorkerFailed(RuntimeError):
    """A client process died or raised; its traceback is the message."""


class _Worker:
    """One client process and its two pipes. Started as a module of its own, not by
    multiprocessing's spawn, which would re-run the caller's main script in the child."""

    def __init__(self, shard: int, job: Job):
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self.shard = shard
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "arms.workloads.shards"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.outbox = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.inbox = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.outbox.send(job)

    def receive(self, timeout: float | None) -> Any:
        if timeout is not None and not self.inbox.poll(timeout):
            raise WorkerFailed(f"client process {self.shard} did not answer within {timeout:g} s")
        try:
            kind, value = self.inbox.recv()
        except EOFError:
            raise WorkerFailed(
                f"client process {self.shard} ended without a result (exit {self.proc.wait(5)})"
            ) from None
        if kind == "error":
            raise WorkerFailed(f"client process {self.shard} failed:\n{value}")
        return value

    def close(self) -> None:
        for conn in (self.outbox, self.inbox):
            conn.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def run(
    requester: Requester,
    profile: Profile,
    *,
    procs: int,
    duration_s: float | None,
    requests: int | None,
    max_in_flight: int,
    warm: int,
) -> RunResult:
    """Send one run over `procs` worker processes; the merged result, in request order.
    Awaits the workers from threads, so the caller's loop (its queue sampler) runs on."""
    cap = math.ceil(max_in_flight / procs)
    workers: list[_Worker] = []
    try:
        for shard in range(procs):
            job = Job(requester, profile, Part(shard, procs), duration_s, requests, cap, math.ceil(warm / procs))
            workers.append(await asyncio.to_thread(_Worker, shard, job))
        for worker in workers:
            await asyncio.to_thread(worker.receive, READY_TIMEOUT_S)
        start_ns = time.perf_counter_ns() + int(START_MARGIN_S * NS)
        for worker in workers:
            worker.outbox.send(start_ns)
        parts = await asyncio.gather(*(asyncio.to_thread(w.receive, None) for w in workers))
    finally:
        for worker in workers:
            await asyncio.to_thread(worker.close)
    return merge(profile, list(parts), start_ns, max_in_flight)


def merge(profile: Profile, parts: list[RunResult], start_ns: int, max_in_flight: int) -> RunResult:
    """One result from the workers' parts: records in request order, the peak in flight
    counted over all of them (not the sum of each worker's peak), CPU summed with the
    busiest process's kept apart."""
    pairs = sorted((i, r) for part in parts for i, r in zip(part.indices, part.records, strict=True))
    records = [r for _, r in pairs]
    end = max((r.end_ns for r in records), default=start_ns)
    result = RunResult(
        profile,
        records,
        start_ns,
        end,
        max((p.window_s for p in parts), default=0.0),
        max_in_flight,
        peak_in_flight(records),
        sum(p.cap_waits for p in parts),
        cpu_s=sum(p.cpu_s for p in parts),
        loop_lags_ns=[lag for p in parts for lag in p.loop_lags_ns],
        indices=[i for i, _ in pairs],
        procs=len(parts),
        busiest_cpu_s=max((p.cpu_s for p in parts), default=0.0),
    )
    if not profile.open_loop:
        result.window_s = result.span_s
    return result


def peak_in_flight(records: list[RequestRecord]) -> int:
    """The most requests in flight at once (from send to end), over all processes."""
    events = sorted([(r.send_ns, 1) for r in records] + [(r.end_ns, -1) for r in records], key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


@dataclass(frozen=True)
class FixedRequests:
    """A requester that sends one fixed chat body to `base_url` every time: what a client
    benchmark needs (`benchmarks/client_capacity.py`), with nothing of a probe's."""

    base_url: str
    body: dict[str, Any]
    read_timeout: float = 60.0

    def client(self, pool: int) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        return make_http_client(self.base_url, pool)

    async def warm(self, http: httpx.AsyncClient, connections: int) -> int:
        return await warm_connections(http, connections)

    def prepare(self, i: int) -> Any:
        return self.body

    async def send(self, http: httpx.AsyncClient, i: int, item: Any) -> RequestRecord:
        return await stream_chat(http, item, read_timeout=self.read_timeout)

    def stopped(self) -> bool:
        return False


if __name__ == "__main__":
    _serve_job()
