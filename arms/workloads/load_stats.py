"""What a load run carried: whether a request met its latency targets (`meets`), and the
run's numbers (`run_stats`), each defined here once.

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
  the 90th percentile of requests, failures counted; `arms.workloads.sweep`).
- Latency percentiles (p50/p90/p99) are over succeeded requests; ITL percentiles over every
  gap of every succeeded request (pooled, as per-request ITLs have different counts).
- Schedule lag (p50/p99/max) is each send's actual time minus its scheduled one
  (`arms.workloads.dispatch`), over every request sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from arms.measures import (
    NS,
    SEND_FALLBACK,
    SOURCE_CLIENT_ESTIMATE,
    SOURCE_SERVER,
    STAMP_DATA_RECEIVED,
    RequestRecord,
    completion_tokens,
    connect_s,
    e2e_s,
    itl_s,
    percentile,
    schedule_lag_s,
    token_event_times,
    tpot_s,
    ttft_s,
)
from arms.workloads.dispatch import RunResult
from arms.workloads.steady import per_second, steady_window
from campaign.core import metrics
from campaign.core.metrics import Metric

TargetName = Literal["ttft_s", "tpot_s", "e2e_s"]
"""A latency target's name (a campaign file's target keys, spelled out as a Literal must):
each one a key of `_TARGET_FNS`, the catalogue's name of the latency it limits."""
QUEUE_TARGETS = frozenset({metrics.TTFT_S.name, metrics.E2E_S.name})
"""Targets a growing queue breaks (a queued request waits before its first token)."""


def _tpot(record: RequestRecord) -> float | None:
    return tpot_s(record)[0]


_TARGET_FNS: dict[str, Callable[[RequestRecord], float | None]] = {
    metrics.TTFT_S.name: ttft_s,
    metrics.TPOT_S.name: _tpot,
    metrics.E2E_S.name: e2e_s,
}


def meets(record: RequestRecord, targets: Mapping[TargetName, float]) -> bool:
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


def targets_text(targets: Mapping[TargetName, float]) -> str:
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


def run_stats(result: RunResult, targets: Mapping[TargetName, float]) -> list[Stat]:
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
                result.client_cpu_s / span,
                f"{result.cpu_s:.3g} s of the client's CPU over {span:.3g} s"
                + (f"; {result.procs} client processes, the busiest's share" if result.procs > 1 else ""),
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
    # a closed loop sends its next request when the last one ended: a slow response delays
    # the sends after it, and the latencies of the requests it kept from being sent are never
    # measured (coordinated omission). Its percentiles are per request as sent, and say so;
    # an open loop keeps its schedule, so its latencies are not subject to it
    omission = "" if result.profile.open_loop else "; closed loop: subject to coordinated omission"
    for fn, rows in LATENCIES:
        values = [v for r in ok if (v := fn(r)) is not None]
        if values:
            out.extend(
                Stat(row, percentile(values, q) or 0.0, f"{len(values)} requests{omission}")
                for q, row in zip(PERCENTILES, rows, strict=True)
            )
    gaps = [g for r in ok for g in itl_s(r)]
    if gaps:
        out.extend(
            Stat(row, percentile(gaps, q) or 0.0, f"{len(gaps)} gaps")
            for q, row in zip(PERCENTILES, ITL_PERCENTILES, strict=True)
        )
    series = per_second([t for r in ok for t in token_event_times(r)], result.start_ns, result.end_ns)
    steady = steady_window(series)
    if steady is None:
        out.append(Stat(metrics.STEADY_WINDOW_S, 0.0, f"never reached a steady state over {len(series)} s (MSER-5)"))
    else:
        where = f"{steady.start_s:.0f}-{steady.end_s:.0f} s of {len(series)} s (MSER-5)"
        out.append(Stat(metrics.STEADY_WINDOW_S, steady.window_s, where))
        out.append(Stat(metrics.STEADY_OUTPUT_TPS, steady.rate, where))
    connects = [v for r in records if (v := connect_s(r)) is not None]
    out.append(Stat(metrics.CONNECTS, float(len(connects)), "requests that opened a connection"))
    if connects:
        out.append(Stat(metrics.CONNECT_P50_S, percentile(connects, 50) or 0.0, f"{len(connects)} connects"))
        out.append(Stat(metrics.CONNECT_P99_S, percentile(connects, 99) or 0.0, f"{len(connects)} connects"))
    if result.loop_lags_ns:
        loop = [v / NS for v in result.loop_lags_ns]
        out.append(Stat(metrics.LOOP_LAG_P99_S, percentile(loop, 99) or 0.0, f"{len(loop)} ticks of 10 ms"))
    lags = [v for r in records if (v := schedule_lag_s(r)) is not None]
    if lags:
        out.append(Stat(metrics.SCHEDULE_LAG_P50_S, percentile(lags, 50) or 0.0, f"{len(lags)} sends"))
        out.append(Stat(metrics.SCHEDULE_LAG_P99_S, percentile(lags, 99) or 0.0, f"{len(lags)} sends"))
        out.append(Stat(metrics.SCHEDULE_LAG_MAX_S, max(lags), f"{len(lags)} sends"))
    return out
