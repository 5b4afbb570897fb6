"""Where a load run's warm-up and cool-down end: MSER-5 on its per-second token series.

Why: a load run starts with the server's queue filling and ends with it draining; its
whole-run averages mix both into the steady state a recipe would serve at. MSER-5 (White
1997; the marginal standard error rule on batch means of 5) picks the truncation that
minimises the standard error of the mean that is left, the rule AIPerf's plans name.
Applied forwards it finds where the warm-up ends, applied to the reversed series where
the cool-down begins. A truncation of half the series or more means the run never reached
a steady state: its whole-run numbers are all there is, and they are said to be so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BATCH = 5


def mser5(series: Sequence[float]) -> int | None:
    """How many leading points to drop (a multiple of 5), or None when the best truncation
    is half the series or more (no steady state) or there are fewer than 4 batches."""
    batches = [sum(series[i : i + BATCH]) / BATCH for i in range(0, len(series) - BATCH + 1, BATCH)]
    n = len(batches)
    if n < 4:
        return None
    best, best_d = float("inf"), 0
    for d in range(n // 2 + 1):
        rest = batches[d:]
        mean = sum(rest) / len(rest)
        score = sum((x - mean) ** 2 for x in rest) / len(rest) ** 2
        if score < best:
            best, best_d = score, d
    return None if best_d >= n // 2 else best_d * BATCH


@dataclass(frozen=True)
class Steady:
    """A run's steady window, in seconds from its start, and its mean rate."""

    start_s: float
    end_s: float
    rate: float

    @property
    def window_s(self) -> float:
        return self.end_s - self.start_s


def steady_window(per_second: Sequence[float]) -> Steady | None:
    """The steady window of a per-second series: warm-up dropped from the front (MSER-5),
    cool-down from the back (MSER-5 on the reversed series); None when either never
    settles or nothing is left."""
    head = mser5(per_second)
    if head is None:
        return None
    tail = mser5(list(reversed(per_second[head:])))
    if tail is None:
        return None
    end = len(per_second) - tail
    if end - head < BATCH:
        return None
    kept = per_second[head:end]
    return Steady(float(head), float(end), sum(kept) / len(kept))


def per_second(times_ns: Sequence[int], start_ns: int, end_ns: int) -> list[float]:
    """Events per whole second of the run, from its start (the last partial second left out)."""
    seconds = int((end_ns - start_ns) // 1_000_000_000)
    counts = [0.0] * max(0, seconds)
    for t in times_ns:
        i = (t - start_ns) // 1_000_000_000
        if 0 <= i < seconds:
            counts[i] += 1
    return counts
