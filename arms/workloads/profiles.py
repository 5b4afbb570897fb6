"""Load profiles, the send times of a load; the load probe (`arms.probes.load`) runs them.

A profile says when each request of a load is sent: closed loop, a constant rate, Poisson
arrivals, or a recorded trace's times.

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

A profile only says when; `arms.workloads.dispatch` sends on it and keeps each request's
scheduled send beside its actual one, `arms.workloads.load_stats` defines what a run
carried (goodput, percentiles, schedule lag), and `arms.workloads.sweep` plans a sweep's
rates and finds its knee.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from enum import StrEnum

from campaign.core.states import (  # noqa: F401 - is_open_loop: re-exported beside the profiles that name scenarios
    CONSTANT_SCENARIO_PREFIX,
    POISSON_SCENARIO_PREFIX,
    TRACE_SCENARIO_PREFIX,
    is_open_loop,
)


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
