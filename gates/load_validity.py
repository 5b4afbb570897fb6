"""What a load run must show of its client for a gate to read it.

A verdict needs a valid measurement: an open-loop run in which the client fell behind its
own schedule (`schedule_lag_p99_s` over `max_schedule_lag_s`; a closed loop has no
schedule, its lag is the client's overhead) or whose times fell back from
byte-arrival stamping to read time (`stamp_fallbacks`), or whose client process used
more than `max_client_cpu_share` of a core (`client_cpu_share`, default 0.9: the loop that
stamps every byte had no room), measured the client as much as the server. Any cell a
gate reads with such a run, subject or baseline, makes the gate `inconclusive`, and the
reason names the arm, the cell and the run. The default bound, 10 ms, is
`benchmarks/load_lag.py`'s: the lag this client keeps under on two cores up to hundreds
of requests per second (its floor is the event loop's 1 ms timer). The report's coverage
matrix marks runs with the same rule (`run_faults`).
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


class ClientValidity(Rigor):
    """What a load run must show of the client for a gate to read it (module doc)."""

    max_schedule_lag_s: float = Field(
        default=DEFAULT_MAX_SCHEDULE_LAG_S,
        gt=0,
        description="a run whose schedule lag p99 exceeds this measured the client: a gate reading it is inconclusive",
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

        lag, fallen, cpu = (
            value(metrics.SCHEDULE_LAG_P99_S.name),
            value(metrics.STAMP_FALLBACKS.name),
            value(metrics.CLIENT_CPU_SHARE.name),
        )
        if lag > p.max_schedule_lag_s and is_open_loop(
            str(step)
        ):  # a closed loop's lag is its own overhead, no schedule
            out.append(
                f"{arm} {step} (block {block}): the client fell behind its schedule, lag p99 {lag * 1000:.0f} ms > {p.max_schedule_lag_s * 1000:g} ms"
            )
        if cpu > p.max_client_cpu_share:
            out.append(
                f"{arm} {step} (block {block}): the client used {cpu:.0%} of a core (over {p.max_client_cpu_share:.0%}): its stamps may be late"
            )
        if fallen and not p.allow_stamp_fallback:
            out.append(f"{arm} {step} (block {block}): {fallen:.0f} requests' times fell back to read time")
    return out
