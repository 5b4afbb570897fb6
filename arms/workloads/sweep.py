"""A load sweep's plan and its answer: the rates it runs (`sweep_rates`) and the highest
that held its targets (`knee`).

A sweep is a plan of runs (GuideLLM's): synchronous, then maximum throughput (concurrent
with a high n), then `count` rates evenly spaced between the two measured throughputs;
the load probe (`arms.probes.load`) runs them. A rate holds when its target attainment
reaches the sweep's fraction (`arms.workloads.load_stats`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from arms.workloads.profiles import Kind, round_rate


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


@dataclass(frozen=True)
class Point:
    """One run of a sweep, as the knee sees it."""

    scenario: str
    offered_rps: float
    goodput_rps: float
    attainment: float
    open_loop: bool = True


@dataclass(frozen=True)
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
