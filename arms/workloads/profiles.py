"""Load profiles: when each request of a load is sent, whether the client kept to it, and
what a load run carried.

Two families of profile:

- **closed loop** (`synchronous()`, `concurrent(n)`): n clients, each sending its next
  request when its previous one ended. The server sets the pace, so an overloaded server
  slows the load down and hides its own queue (coordinated omission). They measure what n
  users see; the sweep uses them for its two ends.
- **open loop** (`constant(rate)`, `poisson(rate, seed)`, `trace(times, name)`: a recorded
  trace's send times, `arms.workloads.traces`): every send time is fixed before
  the run, and requests go out on it whether or not earlier ones finished. A server that
  cannot keep up shows a queue and growing latency, as it would under real traffic.
  Constant: every 1/rate s. Poisson: a Poisson process *given its count*: n = rate x
  duration arrivals (rounded), at times drawn uniformly over the window n / rate and sorted
  (how a Poisson process's arrivals lie once their number is known), so the bursts are
  Poisson's and the offered rate is the labelled one exactly. Unconditioned, a 3 s step
  at 3 req/s offers 9 +- 3 requests: a third off its label, and the label is what the
  curve plots.

Every request keeps its scheduled send (`RequestRecord.scheduled_ns`) beside its actual one
(`send_ns`, when its headers were written to the socket); `schedule_lag_s` is the
difference. The open-loop dispatcher never waits for a response, so it cannot turn into a
closed loop; a client that falls behind its own schedule shows it in the lag, with numbers.
The one limit is `max_in_flight` (the connection pool is sized to it, so the pool never
throttles silently below it): a send that finds it full waits for a request to end, and
every such wait is counted (`RunResult.cap_waits`) and reported; its wait is in its lag.
For closed-loop profiles the scheduled send is the moment the client was ready, so their
lag is the client's own overhead.

`sweep` is a plan of runs (GuideLLM's): synchronous, then maximum throughput (concurrent
with a high n), then `count` rates evenly spaced between the two measured throughputs
(`sweep_rates`); `knee` finds the highest rate whose goodput holds.

Per-run numbers, defined here once (`run_stats`):

- `window_s`: the time the load was offered. Open loop: the schedule's length (n / rate);
  closed loop: from the first send to the last end.
- `span_s`: the run's wall time, from its start to the end of its last response;
  `drain_s` = span_s - window_s, the time the last requests took to come back after the
  window (0 for a closed loop), reported apart.
- Every rate is per the window, one denominator: `offered_rps` = requests offered /
  window_s; `request_throughput_rps` = succeeded requests / window_s; `goodput_rps` =
  requests that met every latency target / window_s; `output_tps` = completion tokens of
  succeeded requests / window_s. So goodput <= throughput <= offered, always. Failed,
  timed-out and not-run requests are misses. Over the window, not the span, so the drain
  of the last requests sent is not held against a rate the server carried; a growing queue
  shows instead as missed TTFT or E2E targets (which is why a sweep needs one of those: a
  TPOT target alone cannot see a queue) and as a long drain.
- `target_attainment` = met / offered. A rate *holds* when attainment >= the sweep's
  fraction, i.e. goodput_rps >= fraction x offered_rps (fraction 0.9: the targets hold at
  the 90th percentile of requests, failures counted).
- Latency percentiles (p50/p90/p99) are over succeeded requests; ITL percentiles over every
  gap of every succeeded request (pooled, as per-request ITLs have different counts).
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from arms.client import gc_paused
from arms.measures import (
    NS,
    SEND_FALLBACK,
    SOURCE_CLIENT_ESTIMATE,
    SOURCE_SERVER,
    STAMP_DATA_RECEIVED,
    RequestRecord,
    completion_tokens,
    e2e_s,
    itl_s,
    percentile,
    schedule_lag_s,
    tpot_s,
    ttft_s,
)
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import CONSTANT_SCENARIO_PREFIX, POISSON_SCENARIO_PREFIX, TRACE_SCENARIO_PREFIX, is_open_loop  # noqa: F401 - re-exported for the probe


class Kind(StrEnum):
    SYNCHRONOUS = "synchronous"
    CONCURRENT = "concurrent"
    CONSTANT = "constant"
    POISSON = "poisson"
    TRACE = "trace"
    SWEEP = "sweep"


OPEN_LOOP = frozenset({Kind.CONSTANT, Kind.POISSON, Kind.TRACE})
SCENARIO_PREFIX = {
    Kind.CONSTANT: CONSTANT_SCENARIO_PREFIX,
    Kind.POISSON: POISSON_SCENARIO_PREFIX,
    Kind.TRACE: TRACE_SCENARIO_PREFIX,
}
"""Open-loop runs are stored under `<prefix><rate>`; every other scenario is closed loop."""


def rate_text(rate: float) -> str:
    """A rate as scenario names write it: three significant digits ("2", "1.25", "0.333")."""
    return f"{rate:.3g}"


def round_rate(rate: float) -> float:
    """The rate a sweep actually runs: rounded to what its scenario name says."""
    return float(rate_text(rate))


@dataclass(frozen=True)
class Profile:
    """One load run's sending pattern. Build it with the functions below."""

    kind: Kind
    concurrency: int = 1
    rate: float = 0.0
    seed: int = 0
    times: tuple[float, ...] = ()  # trace: the send times, seconds from the start
    label: str = ""  # trace: the trace's name, in the scenario

    @property
    def open_loop(self) -> bool:
        return self.kind in OPEN_LOOP

    @property
    def scenario(self) -> str:
        """The cell name its measurements are stored under: `synchronous`,
        `concurrency=8`, `rate=2` (constant), `poisson=2`."""
        if self.kind == Kind.SYNCHRONOUS:
            return "synchronous"
        if self.kind == Kind.CONCURRENT:
            return f"concurrency={self.concurrency}"
        if self.kind == Kind.TRACE:
            return SCENARIO_PREFIX[self.kind] + self.label
        return SCENARIO_PREFIX[self.kind] + rate_text(self.rate)

    def offsets(self, duration_s: float | None, requests: int | None) -> tuple[list[float], float]:
        """Open loop: the send times (seconds from the start) and the window they span,
        n / rate for n sends, so n / window is the rate the profile is labelled with.

        n: with a duration, the sends that fit in it (a constant rate: every 1/rate s
        before the duration; Poisson: rate x duration, rounded, at least one); with a
        request count, that many; with both, the fewer. Constant sends go at i / rate;
        Poisson ones at n uniform draws over the window, sorted (see the module doc)."""
        if not self.open_loop:
            raise ValueError(f"{self.kind} is a closed-loop profile: it has no schedule")
        if self.kind == Kind.TRACE:
            return _trace_offsets(self.times, duration_s, requests)
        if duration_s is None and requests is None:
            raise ValueError("an open-loop run needs a duration or a request count")
        counts = []
        if duration_s is not None:
            fit = (
                math.ceil(duration_s * self.rate - 1e-9)
                if self.kind == Kind.CONSTANT
                else round(duration_s * self.rate)
            )
            counts.append(max(1, fit))
        if requests is not None:
            counts.append(requests)
        n = min(counts)
        window = n / self.rate
        if self.kind == Kind.CONSTANT:
            return [i / self.rate for i in range(n)], window
        rng = random.Random(self.seed)
        return sorted(rng.uniform(0.0, window) for _ in range(n)), window


def _trace_offsets(
    times: tuple[float, ...], duration_s: float | None, requests: int | None
) -> tuple[list[float], float]:
    """A trace's send times, those before `duration_s` and within the first `requests`;
    the window is the span they cover plus one mean gap, so that n / window is the
    trace's mean rate over them (evenly spaced sends at 1/r give n / r, as `constant`)."""
    kept = [t for t in times if duration_s is None or t < duration_s][: requests if requests is not None else None]
    if not kept:
        return [], duration_s or 1.0
    n = len(kept)
    window = kept[-1] * n / (n - 1) if n > 1 and kept[-1] > 0 else (duration_s or 1.0)
    return kept, window


def step_seed(seed: int, scenario: str) -> int:
    """The arrival seed of one step of a sweep: its own for every rate (a sweep's steps
    drawn from one seed would share their bursts, so their shortfalls would be
    correlated), the same for the same base seed and step (a run can be repeated)."""
    return zlib.crc32(f"{seed}/{scenario}".encode())


def synchronous() -> Profile:
    """One request at a time: the next is sent when the previous one ended."""
    return Profile(Kind.SYNCHRONOUS, concurrency=1)


def concurrent(n: int) -> Profile:
    """n clients, each sending its next request when its previous one ended (closed loop)."""
    if n < 1:
        raise ValueError(f"concurrency must be >= 1, found {n}")
    return Profile(Kind.CONCURRENT, concurrency=n)


def trace(times: list[float] | tuple[float, ...], label: str) -> Profile:
    """Sends at recorded times (seconds from the start, in order), whatever the server does
    (open loop): a trace replay. `rate` is its mean over the whole trace."""
    if not times:
        raise ValueError("a trace replay needs at least one send time")
    if list(times) != sorted(times) or times[0] < 0:
        raise ValueError("a trace's send times must be >= 0 and in order")
    _, window = _trace_offsets(tuple(times), None, None)
    return Profile(Kind.TRACE, rate=len(times) / window, times=tuple(times), label=label)


def constant(rate: float) -> Profile:
    """One request every 1/rate seconds, whatever the server does (open loop)."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s, found {rate}")
    return Profile(Kind.CONSTANT, rate=rate)


def poisson(rate: float, seed: int = 0) -> Profile:
    """Poisson arrivals at `rate`, given their count (see the module doc), drawn from a
    generator seeded by `seed`, so a run can be repeated with the same arrivals (open loop)."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s, found {rate}")
    return Profile(Kind.POISSON, rate=rate, seed=seed)


# -- running a profile ---------------------------------------------------------------------------


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

    @property
    def span_s(self) -> float:
        return max(0.0, (self.end_ns - self.start_ns) / NS)


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
    with gc_paused:  # a collection between two requests would land on a scheduled send (tens of ms)
        if profile.open_loop:
            result = await _open_loop(profile, send, prepare, duration_s, requests, max_in_flight, stop)
        else:
            result = await _closed_loop(profile, send, prepare, duration_s, requests, stop)
    result.cpu_s = time.process_time() - cpu0
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


# -- what a run carried ---------------------------------------------------------------------------

QUEUE_TARGETS = frozenset({metrics.TTFT_S.name, metrics.E2E_S.name})
"""Targets a growing queue breaks (a queued request waits before its first token)."""


def _tpot(record: RequestRecord) -> float | None:
    return tpot_s(record)[0]


_TARGET_FNS: dict[str, Callable[[RequestRecord], float | None]] = {
    metrics.TTFT_S.name: ttft_s,
    metrics.TPOT_S.name: _tpot,
    metrics.E2E_S.name: e2e_s,
}


def meets(record: RequestRecord, targets: Mapping[str, float]) -> bool:
    """Whether one request met every target. A failed request never does. A reply of one
    token has no TPOT (nothing was decoded after the first token), so a TPOT target cannot
    be missed by it; any other missing value is a miss."""
    if not record.ok:
        return False
    for name, limit in targets.items():
        value = _TARGET_FNS[name](record)
        if value is None:
            if name == metrics.TPOT_S.name:
                continue
            return False
        if value > limit:
            return False
    return True


def targets_text(targets: Mapping[str, float]) -> str:
    return ", ".join(f"{name} <= {value:g}" for name, value in targets.items()) or "no targets"


@dataclass(frozen=True)
class Stat:
    metric: Metric  # its unit is the catalogue's
    value: float
    source: str = ""


PERCENTILES = (50, 90, 99)
# each latency's definition and the rows of its PERCENTILES
LATENCIES: tuple[tuple[Callable[[RequestRecord], float | None], tuple[Metric, ...]], ...] = (
    (ttft_s, (metrics.TTFT_P50_S, metrics.TTFT_P90_S, metrics.TTFT_P99_S)),
    (_tpot, (metrics.TPOT_P50_S, metrics.TPOT_P90_S, metrics.TPOT_P99_S)),
    (e2e_s, (metrics.E2E_P50_S, metrics.E2E_P90_S, metrics.E2E_P99_S)),
)
ITL_PERCENTILES = (metrics.ITL_P50_S, metrics.ITL_P90_S, metrics.ITL_P99_S)


def run_stats(result: RunResult, targets: Mapping[str, float]) -> list[Stat]:
    """The run's numbers as (metric, value, source), by the definitions in the module
    doc. Percentiles of a latency nobody produced are left out, never written as 0."""
    records = result.records
    ok = [r for r in records if r.ok]
    offered = len(records)
    met = sum(1 for r in records if meets(r, targets))
    span, window = result.span_s, result.window_s
    tokens, sources = 0, set()
    for r in ok:
        n, source = completion_tokens(r)
        tokens += n or 0
        sources.add(source)
    token_source = SOURCE_CLIENT_ESTIMATE if SOURCE_CLIENT_ESTIMATE in sources else SOURCE_SERVER
    per_s = lambda count, over: count / over if over > 0 else 0.0  # noqa: E731
    over = f"over the {window:.3g} s window"
    out = [
        Stat(metrics.OFFERED_RPS, per_s(offered, window), f"{offered} requests {over}"),
        Stat(metrics.REQUEST_THROUGHPUT_RPS, per_s(len(ok), window), f"{len(ok)} succeeded {over}"),
        Stat(metrics.OUTPUT_TPS, per_s(tokens, window), f"{token_source}, {over}"),
        Stat(metrics.GOODPUT_RPS, per_s(met, window), f"{met} of {offered} met {targets_text(targets)}, {over}"),
        Stat(metrics.REQUESTS_MET, met, targets_text(targets)),
        Stat(metrics.WINDOW_S, window, "the schedule" if result.profile.open_loop else "first send to last end"),
        Stat(metrics.SPAN_S, span, "first send to last end"),
        Stat(metrics.DRAIN_S, max(0.0, span - window), "last end after the window"),
        Stat(metrics.IN_FLIGHT_PEAK, result.peak_in_flight, f"cap {result.max_in_flight}"),
    ]
    if offered:
        out.append(Stat(metrics.TARGET_ATTAINMENT, met / offered, f"{met}/{offered}"))
    if span > 0:
        out.append(
            Stat(
                metrics.CLIENT_CPU_SHARE,
                result.cpu_s / span,
                f"{result.cpu_s:.3g} s of the client's CPU over {span:.3g} s",
            )
        )
    fallen = sum(1 for r in ok if r.stamp_source != STAMP_DATA_RECEIVED or r.send_stamp_source == SEND_FALLBACK)
    out.append(
        Stat(
            metrics.STAMP_FALLBACKS,
            fallen,
            f"of {len(ok)} succeeded: times taken at read time, not at byte arrival and header write",
        )
    )
    if result.profile.open_loop:
        out.append(
            Stat(
                metrics.IN_FLIGHT_CAP_WAITS,
                result.cap_waits,
                f"sends that waited for the cap of {result.max_in_flight} in flight",
            )
        )
    for fn, rows in LATENCIES:
        values = [v for r in ok if (v := fn(r)) is not None]
        if values:
            out.extend(
                Stat(row, percentile(values, q) or 0.0, f"{len(values)} requests")
                for q, row in zip(PERCENTILES, rows, strict=True)
            )
    gaps = [g for r in ok for g in itl_s(r)]
    if gaps:
        out.extend(
            Stat(row, percentile(gaps, q) or 0.0, f"{len(gaps)} gaps")
            for q, row in zip(PERCENTILES, ITL_PERCENTILES, strict=True)
        )
    lags = [v for r in records if (v := schedule_lag_s(r)) is not None]
    if lags:
        out.append(Stat(metrics.SCHEDULE_LAG_P50_S, percentile(lags, 50) or 0.0, f"{len(lags)} sends"))
        out.append(Stat(metrics.SCHEDULE_LAG_P99_S, percentile(lags, 99) or 0.0, f"{len(lags)} sends"))
        out.append(Stat(metrics.SCHEDULE_LAG_MAX_S, max(lags), f"{len(lags)} sends"))
    return out


# -- the sweep ------------------------------------------------------------------------------------


def sweep_rates(synchronous_rps: float, max_rps: float, count: int) -> list[float]:
    """`count` rates evenly spaced above the synchronous throughput up to the maximum one
    (the last is the maximum), rounded as their scenario names say; duplicates that rounding
    makes are dropped. If the maximum is not above the synchronous rate (the server does not
    scale with concurrency), they are spaced up to twice the synchronous rate instead, so
    the sweep still shows where it breaks."""
    low = synchronous_rps
    high = max_rps if max_rps > synchronous_rps * 1.05 else synchronous_rps * 2
    out: list[float] = []
    for i in range(1, count + 1):
        rate = round_rate(low + (high - low) * i / count)
        if rate > 0 and rate not in out:
            out.append(rate)
    return out


@dataclass
class Point:
    """One run of a sweep, as the knee sees it."""

    scenario: str
    offered_rps: float
    goodput_rps: float
    attainment: float
    open_loop: bool = True


@dataclass
class Knee:
    """The highest rate that held, and why the next did not."""

    point: Point | None
    broke_at: Point | None
    fraction: float
    checked: list[Point] = field(default_factory=list)

    @property
    def max_goodput_rps(self) -> float:
        return self.point.goodput_rps if self.point else 0.0

    def text(self) -> str:
        if self.point is None:
            first = self.checked[0] if self.checked else None
            if first is None:
                return "nothing ran"
            return (
                f"no rate held: {first.scenario} met the targets for {first.attainment:.0%} (needs {self.fraction:.0%})"
            )
        tail = (
            f"; {self.broke_at.scenario} met {self.broke_at.attainment:.0%}" if self.broke_at else "; every rate held"
        )
        return f"{self.point.scenario}: {self.point.attainment:.0%} met (needs {self.fraction:.0%}){tail}"


def knee(points: Iterable[Point], fraction: float) -> Knee:
    """Walk the points from the lowest offered rate up (synchronous first, then the
    open-loop rates; the closed-loop maximum-throughput run is not a rate anyone offered)
    and stop at the first that does not hold: the last one that did is the knee. A rate
    that holds above one that broke is noise, not capacity, and is not credited."""
    checked = sorted(
        (p for p in points if p.open_loop or p.scenario == Kind.SYNCHRONOUS.value), key=lambda p: p.offered_rps
    )
    best: Point | None = None
    for p in checked:
        if p.attainment + 1e-9 < fraction:
            return Knee(best, p, fraction, checked)
        if best is None or p.goodput_rps >= best.goodput_rps:
            best = p
    return Knee(best, None, fraction, checked)
