"""What a load run must show of its client for a gate to read it.

A run is client-bound when the client's own overhead is a material share of what it
measured. Each rule is relative to the run's own numbers where it can be:

- an open-loop run whose schedule lag p99 (`schedule_lag_p99_s`, a new connection's time
  apart) is over the larger of `max_schedule_lag_s` (10 ms, `benchmarks/load_lag.py`'s:
  the lag this client keeps under on two cores up to hundreds of requests per second)
  and `lag_share_of_ttft` (1%) of the run's own TTFT p50: against a server that answers
  in seconds, tens of milliseconds of lag are noise, against one that answers in 50 ms
  they are not. A closed loop has no schedule: its lag is the client's overhead;
- a client process that used more than `max_client_cpu_share` of a core (0.9: the loop
  that stamps every byte had no room);
- an event loop that woke a 10 ms ticker later than `max_loop_lag_s` at p99 (50 ms): a
  neighbour process stealing the core shows here even when the client's own CPU share
  does not;
- times that fell back from byte-arrival stamping to read time (`stamp_fallbacks`).

Any cell a gate reads with such a run, subject or baseline, makes the gate
`inconclusive`, and the reason names the arm, the cell, the run and the rule, with its
numbers. The report's coverage matrix marks runs with the same rule (`run_faults`).
"""

from __future__ import annotations

import pandas as pd
from pydantic import Field

from campaign.core import metrics
from campaign.core.states import SampleKind, is_open_loop
from campaign.store.samples import kinds
from gates.cells import Cell
from gates.rigor import Rigor
from gates.runs import block_of

SWEEP = "sweep"
DEFAULT_MAX_SCHEDULE_LAG_S = 0.010  # benchmarks/load_lag.py's bound (module doc)
DEFAULT_MAX_CLIENT_CPU_SHARE = 0.9  # of one core: the event loop that stamps every byte had no room left
DEFAULT_LAG_SHARE_OF_TTFT = 0.01  # of the run's TTFT p50: lag below it is noise in what the gate reads
DEFAULT_MAX_LOOP_LAG_S = 0.050  # p99 of the 10 ms ticker's lateness: the loop was not the client's


class ClientValidity(Rigor):
    """What a load run must show of the client for a gate to read it (module doc)."""

    max_schedule_lag_s: float = Field(
        default=DEFAULT_MAX_SCHEDULE_LAG_S,
        gt=0,
        description="a run whose schedule lag p99 exceeds this measured the client: a gate reading it is inconclusive",
    )
    lag_share_of_ttft: float = Field(
        default=DEFAULT_LAG_SHARE_OF_TTFT,
        ge=0,
        description="the lag bound is the larger of max_schedule_lag_s and this share of the run's TTFT p50",
    )
    max_loop_lag_s: float = Field(
        default=DEFAULT_MAX_LOOP_LAG_S,
        gt=0,
        description="a run whose event loop woke a 10 ms ticker later than this at p99 was a busy client: inconclusive",
    )
    allow_stamp_fallback: bool = Field(
        default=False,
        description="accept runs whose request times fell back to read time (less exact under load)",
    )
    max_client_cpu_share: float = Field(
        default=DEFAULT_MAX_CLIENT_CPU_SHARE,
        gt=0,
        description="a run whose client used more of a core than this (CPU time / span) may have stamped late: inconclusive",
    )


def client_faults(rows: pd.DataFrame, arm: str, p: ClientValidity, cell: Cell) -> list[str]:
    """Why the arm's runs of one cell (every step's run for a sweep, whose answer rests on
    all its steps) do not measure the server alone, by `run_faults`. Empty when every run
    is valid."""
    mask = (
        (rows["arm_id"] == arm)
        & (rows["probe"] == cell.probe)
        & (kinds(rows) == SampleKind.SUMMARY)
        & (rows["context"] == cell.context)
        & (rows["mode"] == cell.mode)
    )
    if cell.scenario != SWEEP:
        mask &= rows["scenario"] == cell.scenario
    if cell.settings and "settings_hash" in rows:
        mask &= rows["settings_hash"].astype(str) == cell.settings
    return run_faults(rows.loc[mask], arm, p)


def run_faults(part: pd.DataFrame, arm: str, p: ClientValidity | None = None) -> list[str]:
    """Each of `part`'s load runs (summary rows of one arm, by block and scenario) that did
    not measure the server alone, and why (module doc); the report's coverage matrix marks
    them with the same rule at the default bounds."""
    p = p or ClientValidity()
    out: list[str] = []
    if part.empty:
        return out
    for (block, step), run in part.groupby([block_of(part), part["scenario"]], observed=True):

        def value(metric: str, run: pd.DataFrame = run) -> float:
            return float(run.loc[run["metric"] == metric, "value"].max()) if (run["metric"] == metric).any() else 0.0

        lag, fallen, cpu, loop, ttft = (
            value(metrics.SCHEDULE_LAG_P99_S.name),
            value(metrics.STAMP_FALLBACKS.name),
            value(metrics.CLIENT_CPU_SHARE.name),
            value(metrics.LOOP_LAG_P99_S.name),
            value(metrics.TTFT_P50_S.name),
        )
        bound = max(p.max_schedule_lag_s, p.lag_share_of_ttft * ttft)
        if lag > bound and is_open_loop(str(step)):  # a closed loop's lag is its own overhead, no schedule
            why = (
                f"{p.lag_share_of_ttft:.0%} of the run's TTFT p50 {ttft * 1000:.0f} ms"
                if bound > p.max_schedule_lag_s
                else f"{p.max_schedule_lag_s * 1000:g} ms"
            )
            out.append(
                f"{arm} {step} (block {block}): the client fell behind its schedule, lag p99 {lag * 1000:.0f} ms > {why}"
            )
        if loop > p.max_loop_lag_s:
            out.append(
                f"{arm} {step} (block {block}): the client's event loop fell behind its schedule, a 10 ms ticker "
                f"woke p99 {loop * 1000:.0f} ms late > {p.max_loop_lag_s * 1000:g} ms (a busy client or machine)"
            )
        if cpu > p.max_client_cpu_share:
            out.append(
                f"{arm} {step} (block {block}): the client used {cpu:.0%} of a core (over {p.max_client_cpu_share:.0%}): its stamps may be late"
            )
        if fallen and not p.allow_stamp_fallback:
            out.append(f"{arm} {step} (block {block}): {fallen:.0f} requests' times fell back to read time")
    return out
