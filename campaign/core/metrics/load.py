"""The catalogue's entries for load: agent-load's conversations (and their baseline
pass), the load probe's runs and sweeps, and the percentiles of a run's latencies."""

from __future__ import annotations

from campaign.core.metrics.entry import AGENT_LOAD, LOAD, LOAD_RUNS, Metric, _m
from campaign.core.metrics.single import ERROR_RATE, REQUESTS, REQUESTS_FAILED, REQUESTS_RETRIED

# -- agent load: how TTFT grows over the turns of a conversation
TTFT_FIRST_TURN_S = _m(
    "ttft_first_turn_s",
    "s",
    "median TTFT of the first turns (the turn series' first point)",
    (AGENT_LOAD,),
    "summary",
    False,
)
TTFT_FIRST_S = _m(
    "ttft_first_s", "s", "TTFT of the first turns (one row per conversation)", (AGENT_LOAD,), "summary", False
)
TTFT_FIRST_MEDIAN_S = _m(
    "ttft_first_median_s",
    "s",
    "median TTFT of the first turns (a gate reads it over ttft_first_s)",
    (AGENT_LOAD,),
    "summary",
    False,
)
TTFT_SECOND_TURN_S = _m("ttft_second_turn_s", "s", "median TTFT of the second turns", (AGENT_LOAD,), "summary", False)
TTFT_LAST_TURN_S = _m("ttft_last_turn_s", "s", "median TTFT of the last turns", (AGENT_LOAD,), "summary", False)
TTFT_LATER_S = _m(
    "ttft_later_s", "s", "TTFT of the turns after the first (one row per turn)", (AGENT_LOAD,), "summary", False
)
TTFT_LATER_MEDIAN_S = _m(
    "ttft_later_median_s", "s", "median TTFT of the turns after the first", (AGENT_LOAD,), "summary", False
)
TTFT_LATER_MAX_S = _m(
    "ttft_later_max_s", "s", "the slowest TTFT of the turns after the first", (AGENT_LOAD,), "summary", False
)
TTFT_GROWTH_RATIO = _m(
    "ttft_growth_ratio",
    "x",
    "ttft_last_turn_s / ttft_second_turn_s: above 1, TTFT grows turn over turn",
    (AGENT_LOAD,),
    "summary",
    False,
)
REQUESTS_IN_FLIGHT_MAX = _m(
    "requests_in_flight_max",
    "requests",
    "the most requests the client had in flight at once (a fan-out holds several per conversation)",
    (AGENT_LOAD,),
    "summary",
)
BRANCH_TTFT_MEDIAN_S = _m(
    "branch_ttft_median_s",
    "s",
    "median TTFT of the fan-out branch requests (fan_out > 1)",
    (AGENT_LOAD,),
    "summary",
    False,
)
BRANCH_TTFT_MAX_S = _m(
    "branch_ttft_max_s", "s", "the slowest TTFT of the fan-out branch requests", (AGENT_LOAD,), "summary", False
)
FAN_OUT_WAIT_MEDIAN_S = _m(
    "fan_out_wait_median_s",
    "s",
    "median time from a fan-out's first branch sent to its last answered: what each merge waited on",
    (AGENT_LOAD,),
    "summary",
    False,
)
FAN_OUT_WAIT_MAX_S = _m(
    "fan_out_wait_max_s", "s", "the longest wait of a merge on its branches", (AGENT_LOAD,), "summary", False
)

# -- load runs (one row per run) and the sweep's answer
OFFERED_RPS = _m("offered_rps", "req/s", "requests offered per second over the run's window", (LOAD,), LOAD_RUNS)
RATE_RPS = _m("rate_rps", "req/s", "the nominal rate of an open-loop run", (LOAD,), "poisson=R, constant=R")
CONCURRENCY = _m("concurrency", "clients", "closed-loop clients of the run", (LOAD,), "synchronous, concurrency=N")
REQUEST_THROUGHPUT_RPS = _m(
    "request_throughput_rps",
    "req/s",
    "requests that succeeded per second of the run's window",
    (LOAD,),
    LOAD_RUNS,
    True,
)
GOODPUT_RPS = _m(
    "goodput_rps", "req/s", "requests that met every target per second of the run's window", (LOAD,), LOAD_RUNS, True
)
OUTPUT_TPS = _m("output_tps", "tok/s", "output tokens per second of the run's window", (LOAD,), LOAD_RUNS, True)
TARGET_ATTAINMENT = _m("target_attainment", "ratio", "requests within the targets / requests", (LOAD,), LOAD_RUNS, True)
REQUESTS_MET = _m("requests_met", "requests", "requests within the targets", (LOAD,), LOAD_RUNS, True)
IN_FLIGHT_PEAK = _m("in_flight_peak", "requests", "the most requests in flight at once", (LOAD,), LOAD_RUNS)
CLIENT_CPU_SHARE = _m(
    "client_cpu_share",
    "ratio",
    "the client process's CPU time over the run's span: near 1, one core was saturated",
    (LOAD,),
    LOAD_RUNS,
    False,
)
STAMP_FALLBACKS = _m(
    "stamp_fallbacks",
    "requests",
    "succeeded requests whose times fell back from byte-arrival stamping to read time",
    (LOAD,),
    LOAD_RUNS,
    False,
)
IN_FLIGHT_CAP_WAITS = _m(
    "in_flight_cap_waits",
    "count",
    "arrivals that waited for the in-flight cap",
    (LOAD,),
    "poisson=R, constant=R",
    False,
)
WINDOW_S = _m("window_s", "s", "the window the load was offered in", (LOAD,), LOAD_RUNS)
SPAN_S = _m("span_s", "s", "first send to last response, the drain included", (LOAD,), LOAD_RUNS)
DRAIN_S = _m(
    "drain_s",
    "s",
    "how long after the window the last response came back (span_s - window_s)",
    (LOAD,),
    LOAD_RUNS,
    False,
)
SCHEDULE_LAG_S = _m(
    "schedule_lag_s", "s", "how late the client sent a request against its schedule", (LOAD,), LOAD_RUNS, False
)
MAX_GOODPUT_RPS = _m("max_goodput_rps", "req/s", "a sweep's most goodput within the targets", (LOAD,), "sweep", True)
MAX_GOODPUT_OFFERED_RPS = _m(
    "max_goodput_offered_rps", "req/s", "the offered rate of the run that gave max_goodput_rps", (LOAD,), "sweep", True
)
MAX_THROUGHPUT_RPS = _m(
    "max_throughput_rps", "req/s", "a sweep's most requests completed per second", (LOAD,), "sweep", True
)
SYNCHRONOUS_RPS = _m(
    "synchronous_rps", "req/s", "the sweep's one-at-a-time rate, its rates' base", (LOAD,), "sweep", True
)
SWEEP_RUNS = _m("sweep_runs", "count", "runs a sweep made", (LOAD,), "sweep")
SWEEP_RATES_SKIPPED = _m(
    "sweep_rates_skipped",
    "count",
    "planned rates a sweep did not run: it stopped at the first rate that did not hold (its source says why)",
    (LOAD,),
    "sweep",
)
SWEEP_TIME_SAVED_S = _m("sweep_time_saved_s", "s", "the device time those rates would have taken", (LOAD,), "sweep")
SWEEP_FRACTION = _m("sweep_fraction", "ratio", "targets a sweep's run had to meet to count", (LOAD,), "sweep")


# -- percentiles of a load run's latencies (one row per run)


def _percentile(base: str, what: str, p: str) -> Metric:
    return _m(f"{base}_{p}_s", "s", f"{p} of the run's {what}", (LOAD,), LOAD_RUNS, False)


TTFT_P50_S, TTFT_P90_S, TTFT_P99_S = (_percentile("ttft", "TTFT", p) for p in ("p50", "p90", "p99"))
TPOT_P50_S, TPOT_P90_S, TPOT_P99_S = (_percentile("tpot", "time per output token", p) for p in ("p50", "p90", "p99"))
E2E_P50_S, E2E_P90_S, E2E_P99_S = (_percentile("e2e", "end-to-end time", p) for p in ("p50", "p90", "p99"))
ITL_P50_S, ITL_P90_S, ITL_P99_S, ITL_MAX_S = (
    _percentile("itl", "gap between token events", p) for p in ("p50", "p90", "p99", "max")
)
SCHEDULE_LAG_P50_S, SCHEDULE_LAG_P99_S, SCHEDULE_LAG_MAX_S = (
    _percentile("schedule_lag", "send lag against the schedule", p) for p in ("p50", "p99", "max")
)
CONNECT_P50_S, CONNECT_P99_S = (
    _percentile("connect", "time to open a new connection, for the requests that opened one", p) for p in ("p50", "p99")
)
CONNECTS = _m("connects", "count", "new connections during the run (after its warm-up)", (LOAD,), LOAD_RUNS)
STEADY_OUTPUT_TPS = _m(
    "steady_output_tps",
    "tok/s",
    "output tokens per second in the run's steady window (MSER-5)",
    (LOAD,),
    LOAD_RUNS,
    True,
)
STEADY_WINDOW_S = _m(
    "steady_window_s", "s", "the steady window's length; 0: the run never reached a steady state", (LOAD,), LOAD_RUNS
)
LOOP_LAG_P99_S = _m(
    "loop_lag_p99_s",
    "s",
    "p99 of how late the client's event loop woke a 10 ms ticker",
    (LOAD,),
    LOAD_RUNS,
    False,
)


# -- agent-load's baseline pass (one conversation alone): its own copy of the summary and
# of the tally (every agent-load summary metric has one: a test holds it to that)


def _baseline(entry: Metric) -> Metric:
    return _m(
        f"baseline_{entry.name}",
        entry.unit,
        f"{entry.meaning}, in the baseline pass (one conversation alone)",
        (AGENT_LOAD,),
        "summary",
        entry.higher_is_better,
    )


BASELINE_TTFT_FIRST_TURN_S = _baseline(TTFT_FIRST_TURN_S)
BASELINE_TTFT_FIRST_S = _baseline(TTFT_FIRST_S)
BASELINE_TTFT_FIRST_MEDIAN_S = _baseline(TTFT_FIRST_MEDIAN_S)
BASELINE_TTFT_SECOND_TURN_S = _baseline(TTFT_SECOND_TURN_S)
BASELINE_TTFT_LAST_TURN_S = _baseline(TTFT_LAST_TURN_S)
BASELINE_TTFT_LATER_S = _baseline(TTFT_LATER_S)
BASELINE_TTFT_LATER_MEDIAN_S = _baseline(TTFT_LATER_MEDIAN_S)
BASELINE_TTFT_LATER_MAX_S = _baseline(TTFT_LATER_MAX_S)
BASELINE_TTFT_GROWTH_RATIO = _baseline(TTFT_GROWTH_RATIO)
BASELINE_REQUESTS_IN_FLIGHT_MAX = _baseline(REQUESTS_IN_FLIGHT_MAX)
BASELINE_BRANCH_TTFT_MEDIAN_S = _baseline(BRANCH_TTFT_MEDIAN_S)
BASELINE_BRANCH_TTFT_MAX_S = _baseline(BRANCH_TTFT_MAX_S)
BASELINE_FAN_OUT_WAIT_MEDIAN_S = _baseline(FAN_OUT_WAIT_MEDIAN_S)
BASELINE_FAN_OUT_WAIT_MAX_S = _baseline(FAN_OUT_WAIT_MAX_S)
BASELINE_REQUESTS = _baseline(REQUESTS)
BASELINE_REQUESTS_FAILED = _baseline(REQUESTS_FAILED)
BASELINE_REQUESTS_RETRIED = _baseline(REQUESTS_RETRIED)
BASELINE_ERROR_RATE = _baseline(ERROR_RATE)
