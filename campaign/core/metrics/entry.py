"""A catalogue entry and the names it is written with: the probes, the `Metric` value,
and the order entries are added in (the catalogue's table is that order)."""

from __future__ import annotations

from dataclasses import dataclass

from campaign.core.states import ProbeName

# the probes' names are `ProbeName`'s (one list for the campaign file, the registry and
# this catalogue), as plain strings: an entry stores and prints them
CACHE_PROBE, DECODE, TOOL_LOOP, AGENT_LOAD, CACHE_CEILING, LOAD = (
    str(ProbeName.CACHE_PROBE),
    str(ProbeName.DECODE),
    str(ProbeName.TOOL_LOOP),
    str(ProbeName.AGENT_LOAD),
    str(ProbeName.CACHE_CEILING),
    str(ProbeName.LOAD),
)
ALL_PROBES = (CACHE_PROBE, DECODE, TOOL_LOOP, AGENT_LOAD, CACHE_CEILING, LOAD)
# probes that read the server's counters (/metrics) around their requests
COUNTING = (CACHE_PROBE, DECODE, AGENT_LOAD, LOAD)
# a probe's own request tally, one row per scenario or summary
TALLYING = ALL_PROBES

# a load run's scenario, one row per run: synchronous, concurrency=N, poisson=R, constant=R
# or trace=<name> (docs/metrics.md says so once, above its tables)
LOAD_RUNS = "each load run"


@dataclass(frozen=True)
class Metric:
    """One stored metric. `higher_is_better` is None where no direction makes sense (a
    count, a target): a comparative gate on it must say which way it reads.

    `unit` is what a row of it is stored in. `also_units` are the other units a row may
    carry, where the unit is the runtime's and not the metric's: the server's cache
    counters, which vLLM counts in tokens and the others in requests (the runtime's
    `counter_unit`). Only there may a row carry another unit than `unit` (`stored`)."""

    name: str
    unit: str
    meaning: str
    probes: tuple[str, ...]
    scenarios: str = ""
    higher_is_better: bool | None = None
    also_units: tuple[str, ...] = ()

    @property
    def units(self) -> tuple[str, ...]:
        """Every unit a row of this metric may be stored in, the catalogue's first."""
        return (self.unit, *self.also_units)

    @property
    def direction(self) -> str:
        return {True: "higher is better", False: "lower is better", None: "no direction"}[self.higher_is_better]


ENTRIES: list[Metric] = []


def _m(
    name: str,
    unit: str,
    meaning: str,
    probes: tuple[str, ...],
    scenarios: str = "",
    better: bool | None = None,
    also_units: tuple[str, ...] = (),
) -> Metric:
    """A catalogue entry, added to `ENTRIES` in the order the entries are written."""
    metric = Metric(name, unit, meaning, probes, scenarios, better, also_units)
    ENTRIES.append(metric)
    return metric
