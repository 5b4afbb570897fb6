"""The catalogue of metrics: every number a probe stores, its unit, which way is better,
which probes and scenarios produce it, and what it means.

Why one table in the core: a gate names a metric by a bare string, and before this table
a typo (`tfft_s`) or a metric its probe never writes ran a whole campaign and left the
gate pending for good, and a gate on seconds defaulted to "higher is better". The loader
checks every gate's metric against this table and against the probes of the items that
feed it, gates take their direction from it unless they set one, and the docs and pages
print it. How each number is computed is `arms.measures` (the definitions); a test runs
every probe on the simulator and fails when a probe writes a metric, or a unit, this
table does not list, so the table cannot drift from what is stored.

Why a constant per entry (`TTFT_S`, `REUSE`, ...): the code names a metric through this
module, never by a bare string, so a misspelled name is an AttributeError or an
ImportError where it is written, not a row no gate ever reads, and a unit is stated once,
here. A probe hands the entry to its sink (`Sink.measurement(metric=TTFT_S, ...)`) and
the sink stores its name and unit (`stored`); code that reads rows compares with
`TTFT_S.name`. The strings stay where a person writes them: a campaign file's gate
parameters, the docs, this table. `tests/unit/test_metric_names.py` keeps it so.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

CACHE_PROBE, DECODE, TOOL_LOOP, AGENT_LOAD, CACHE_CEILING, LOAD = (
    "cache-probe",
    "decode",
    "tool-loop",
    "agent-load",
    "cache-ceiling",
    "load",
)
ALL_PROBES = (CACHE_PROBE, DECODE, TOOL_LOOP, AGENT_LOAD, CACHE_CEILING, LOAD)
# probes that read the server's counters (/metrics) around their requests
COUNTING = (CACHE_PROBE, DECODE, AGENT_LOAD, LOAD)
# a probe's own request tally, one row per scenario or summary
TALLYING = ALL_PROBES

LOAD_RUNS = "each run: synchronous, concurrency=N, poisson=R, constant=R"


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


_ENTRIES: list[Metric] = []


def _m(
    name: str,
    unit: str,
    meaning: str,
    probes: tuple[str, ...],
    scenarios: str = "",
    better: bool | None = None,
    also_units: tuple[str, ...] = (),
) -> Metric:
    """A catalogue entry, added to `_ENTRIES` in the order the table below is written."""
    metric = Metric(name, unit, meaning, probes, scenarios, better, also_units)
    _ENTRIES.append(metric)
    return metric


# the cache probe's scenarios, cold first (it primes nothing): one list for the probe,
# its metrics and the coverage page
CACHE_SCENARIOS = ("cold", "identical", "append", "tool_turn", "middle_mutation")
_CACHE_SCENARIOS = ", ".join(CACHE_SCENARIOS)
_WARM_SCENARIOS = ", ".join(CACHE_SCENARIOS[1:])
_TURNS = "c<conversation>-t<turn> (and baseline-t<turn>; a fan-out branch c<conversation>-t<turn>-b<branch>)"

# -- latency and speed of one request
TTFT_S = _m(
    "ttft_s",
    "s",
    "send to the first event carrying content, reasoning or a tool call",
    (CACHE_PROBE, DECODE, TOOL_LOOP, AGENT_LOAD, LOAD),
    f"cache-probe: {_CACHE_SCENARIOS}; decode: decode; tool-loop: step<N>; agent-load: {_TURNS}; load: {LOAD_RUNS}",
    False,
)
DECODE_TPS = _m(
    "decode_tps",
    "tok/s",
    "tokens decoded per second after the first token (the server's count)",
    (DECODE, AGENT_LOAD),
    "decode; agent-load turns",
    True,
)
DECODE_TPS_MEDIAN = _m(
    "decode_tps_median",
    "tok/s",
    "median decode_tps of a decode run's timed requests (one row per run)",
    (DECODE,),
    "decode",
    True,
)
DECODE_TPS_SPREAD = _m(
    "decode_tps_spread", "tok/s", "max - min decode_tps of a decode run's timed requests", (DECODE,), "decode", False
)
TPOT_S = _m(
    "tpot_s",
    "s",
    "time per output token after the first, 1 / decode_tps",
    (DECODE, AGENT_LOAD, LOAD),
    "decode; agent-load turns; load runs",
    False,
)
E2E_S = _m("e2e_s", "s", "send to the last byte of the response", (DECODE, LOAD), "decode; load runs", False)
SHORT_TRIAL = _m(
    "short_trial",
    "tokens",
    "a timed decode request that ended early: the tokens it gave (not timed)",
    (DECODE,),
    "decode",
)

# -- the prefix cache
REUSE = _m(
    "reuse",
    "ratio",
    "cached prompt tokens / prompt tokens, as the server reports them",
    (CACHE_PROBE, CACHE_CEILING),
    f"cache-probe: {_CACHE_SCENARIOS}; cache-ceiling: len<tokens>",
    True,
)
EXPECTED_REUSE = _m(
    "expected_reuse",
    "ratio",
    "the reuse a perfect prefix cache would give this request",
    (CACHE_PROBE,),
    _CACHE_SCENARIOS,
)
CACHED_TOKENS = _m(
    "cached_tokens",
    "tokens",
    "prompt tokens the server says it took from its cache",
    (CACHE_PROBE, AGENT_LOAD, LOAD),
    f"{_CACHE_SCENARIOS}; agent-load turns; load trace=<name> requests",
)
IMPLIED_CACHED_TOKENS = _m(
    "implied_cached_tokens",
    "tokens",
    "prompt tokens an unbounded prefix cache would serve, from the trace's hash_ids",
    (LOAD,),
    "trace=<name> requests",
)
TRACE_REUSE = _m(
    "trace_reuse",
    "ratio",
    "a trace replay's cached prompt tokens / prompt tokens, as the server reports them",
    (LOAD,),
    "trace=<name>",
    True,
)
TRACE_IMPLIED_REUSE = _m(
    "trace_implied_reuse",
    "ratio",
    "the reuse the replayed trace implies (its hash_ids), over the server's prompt tokens",
    (LOAD,),
    "trace=<name>",
)
TTFT_COLD_S = _m(
    "ttft_cold_s",
    "s",
    "the TTFT of the same prompt sent cold, beside a warm request",
    (CACHE_PROBE,),
    _WARM_SCENARIOS,
    False,
)
WARM_SPEEDUP = _m(
    "warm_speedup",
    "x",
    "ttft_cold_s / ttft_s: how much faster the warm request started",
    (CACHE_PROBE,),
    _WARM_SCENARIOS,
    True,
)
REUSE_CEILING_TOKENS = _m(
    "reuse_ceiling_tokens", "tokens", "the longest prompt the cache still reused", (CACHE_CEILING,), "summary", True
)
REUSE_DIES_AT_TOKENS = _m(
    "reuse_dies_at_tokens",
    "tokens",
    "the shortest prompt the cache no longer reused",
    (CACHE_CEILING,),
    "summary",
    True,
)
REUSE_HOLDS_TO_LIMIT = _m(
    "reuse_holds_to_limit",
    "bool",
    "1 when reuse held up to the largest prompt tried",
    (CACHE_CEILING,),
    "summary",
    True,
)
CEILING_SEARCH_ERROR_AT = _m(
    "ceiling_search_error_at",
    "tokens",
    "the prompt length at which the ceiling search hit a failed request",
    (CACHE_CEILING,),
    "summary",
)

# -- the server's counters around a probe run (deltas over the run)
# (a cache counter's unit is the runtime's: vLLM counts lookups and hits in tokens)
CACHE_LOOKUPS = _m(
    "cache_lookups",
    "requests",
    "prefix-cache lookups the server counted",
    COUNTING,
    "per probe run",
    also_units=("tokens",),
)
CACHE_HITS = _m(
    "cache_hits",
    "requests",
    "prefix-cache lookups that hit, as the server counted",
    COUNTING,
    "per probe run",
    also_units=("tokens",),
)
CACHED_PROMPT_TOKENS = _m(
    "cached_prompt_tokens",
    "tokens",
    "prompt tokens served from the cache, the server's counter",
    COUNTING,
    "per probe run",
)
GENERATION_TOKENS = _m(
    "generation_tokens", "tokens", "tokens generated, the server's counter", COUNTING, "per probe run"
)
DRAFT_TOKENS = _m(
    "draft_tokens", "tokens", "speculative tokens drafted, the server's counter", COUNTING, "per probe run"
)
ACCEPTED_TOKENS = _m(
    "accepted_tokens",
    "tokens",
    "drafted tokens the target model accepted, the server's counter",
    COUNTING,
    "per probe run",
)
TARGET_FORWARDS = _m(
    "target_forwards",
    "count",
    "forward passes of the target model over a decode run's timed responses, the server's per-response count (mlx-dspark): one a token without speculation, fewer when drafts are accepted",
    (DECODE,),
    "decode",
)
PROMPT_TOKENS = _m(
    "prompt_tokens",
    "tokens",
    "prompt tokens of a request, as the server counted them",
    (CACHE_PROBE, DECODE, AGENT_LOAD, CACHE_CEILING, LOAD),
    "every request",
)
PROMPT_TOKENS_TARGET = _m(
    "prompt_tokens_target",
    "tokens",
    "the prompt size the probe aimed at",
    (DECODE, CACHE_CEILING),
    "decode; len<tokens>",
)
SESSIONS_REPLAYED = _m(
    "sessions_replayed",
    "count",
    "recorded sessions agent-load replayed; its source names the file, the history sent and the concurrency",
    (AGENT_LOAD,),
    "load",
)
SYSTEM_TOKENS_TARGET = _m(
    "system_tokens_target",
    "tokens",
    "agent-load's shared system prompt size, aimed at",
    (AGENT_LOAD,),
    "baseline, load",
)
TASK_TOKENS_TARGET = _m(
    "task_tokens_target", "tokens", "agent-load's per-conversation task size, aimed at", (AGENT_LOAD,), "baseline, load"
)
TURN_TOKENS_TARGET = _m(
    "turn_tokens_target", "tokens", "agent-load's per-turn addition, aimed at", (AGENT_LOAD,), "baseline, load"
)
QUEUE_DEPTH_MAX = _m(
    "queue_depth_max", "requests", "the most requests the server held waiting, sampled", (AGENT_LOAD, LOAD), "per run"
)
QUEUE_DEPTH_MEAN = _m(
    "queue_depth_mean", "requests", "mean requests the server held waiting, sampled", (LOAD,), LOAD_RUNS
)
QUEUE_SAMPLES = _m("queue_samples", "count", "queue-depth samples taken", (AGENT_LOAD, LOAD), "per run")
QUEUE_SAMPLE_GAPS = _m(
    "queue_sample_gaps", "count", "queue-depth samples that failed to read", (AGENT_LOAD, LOAD), "per run"
)
QUEUE_TICKS_SKIPPED = _m(
    "queue_ticks_skipped", "count", "sampling ticks a slow read covered", (AGENT_LOAD, LOAD), "per run"
)

# -- the tally of requests
REQUESTS = _m("requests", "requests", "requests sent", TALLYING, "per scenario or summary")
REQUESTS_FAILED = _m("requests_failed", "requests", "requests that failed", TALLYING, "per scenario or summary", False)
REQUESTS_RETRIED = _m(
    "requests_retried",
    "requests",
    "requests retried after a dropped connection",
    TALLYING,
    "per scenario or summary",
    False,
)
ERROR_RATE = _m("error_rate", "ratio", "requests_failed / requests", TALLYING, "per scenario or summary", False)

# -- tool loops
TOOL_LOOP_PASS = _m(
    "tool_loop_pass", "bool", "1 when a tool-loop trial reached the right answer", (TOOL_LOOP,), "user:<name>", True
)
TOOL_LOOP_PASSES = _m("tool_loop_passes", "count", "tool-loop trials that passed", (TOOL_LOOP,), "summary", True)
TOOL_LOOP_TRIALS = _m("tool_loop_trials", "count", "tool-loop trials run", (TOOL_LOOP,), "summary")
TOOL_CALLS = _m("tool_calls", "count", "tool calls a trial made", (TOOL_LOOP,), "user:<name>")

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

METRICS: dict[str, Metric] = {m.name: m for m in _ENTRIES}


# -- rows stored beside the catalogue
# A failed request's own row and the failed requests of each error kind
# (`arms.probes.failures`): the gates and the pages read them by name or by pattern, a
# campaign file's gate never names one, so they are not in METRICS (nor in
# docs/metrics.md). They are named here all the same, so no probe writes them by a string.

ERRORS = Metric("errors", "count", "a request that failed (value 1); its source is the error kind", ALL_PROBES)
NOT_RUN = Metric("not_run", "count", "a request the stall guard kept from being sent (value 1)", ALL_PROBES)
REQUESTS_NOT_RUN = Metric(
    "requests_not_run",
    "requests",
    "requests the stall guard never sent (neither requests nor failures)",
    TALLYING,
    "per scenario or summary",
)
FAILED_KIND_PREFIX = f"{REQUESTS_FAILED.name}_"


def requests_failed_of(slug: str) -> Metric:
    """`requests_failed_<kind>`: the requests that failed with one error kind (its slug,
    `arms.probes.failures.kind_slug`)."""
    return Metric(
        f"{FAILED_KIND_PREFIX}{slug}",
        REQUESTS_FAILED.unit,
        f"requests that failed with {slug}",
        TALLYING,
        "per scenario or summary",
        False,
    )


def baseline(metric: Metric) -> Metric:
    """The copy of `metric` that agent-load's baseline pass writes (`baseline_<name>`): the
    catalogue's entry, a KeyError when it has none; for a row beside the catalogue (a
    failure count by kind), one named the same way."""
    name = f"baseline_{metric.name}"
    if metric.name in METRICS:
        return METRICS[name]
    return replace(
        metric,
        name=name,
        meaning=f"{metric.meaning}, in the baseline pass (one conversation alone)",
        probes=(AGENT_LOAD,),
        scenarios="summary",
    )


def stored(metric: Metric | str, unit: str | None = None) -> tuple[str, str]:
    """The (name, unit) a measurement row keeps: the one place both probe sinks turn what
    a probe wrote into the plain strings the store holds.

    The unit is the catalogue's: a probe states one only where it is the runtime's (a
    metric with `also_units`: the cache counters, in the runtime's `counter_unit`), and it
    must be one of the metric's units. A name is taken in place of the entry only where
    it comes as data (the server counters, named by the runtime's telemetry), and must be
    in the catalogue. Anything else is a ValueError at the call, where it was written.
    """
    if isinstance(metric, str):
        entry = METRICS.get(metric)
        if entry is None:
            raise ValueError(
                f"measurement {metric!r}: not a metric of the catalogue (campaign.core.metrics){suggest(metric)}"
            )
        metric = entry
    if unit is None or unit == metric.unit:
        return metric.name, metric.unit
    if unit not in metric.also_units:
        raise ValueError(
            f"measurement {metric.name!r} in {unit!r}: the catalogue stores it in {' or '.join(metric.units)}"
        )
    return metric.name, unit


def get(name: str) -> Metric | None:
    return METRICS.get(name)


def direction(name: str) -> bool | None:
    """True if higher is better, False if lower is, None if the catalogue does not say."""
    metric = METRICS.get(name)
    return metric.higher_is_better if metric else None


def suggest(name: str) -> str:
    """' (did you mean ttft_s?)' for a misspelled name, '' when nothing is close."""
    close = difflib.get_close_matches(name, list(METRICS), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def produced_by(name: str) -> tuple[str, ...]:
    metric = METRICS.get(name)
    return metric.probes if metric else ()


def markdown() -> str:
    """docs/metrics.md: the catalogue as a table per probe (a test keeps the file current;
    write it with `python -m campaign.core.metrics > docs/metrics.md`)."""
    lines = [
        "# Metrics",
        "",
        "Every metric a probe stores, from the catalogue in `campaign/core/metrics.py` (this file is",
        "generated from it: `python -m campaign.core.metrics > docs/metrics.md`). A gate names one by",
        "`metric` (and `also_metric`, `guard_metric`, ...); `campaign check` refuses a name that is",
        "not here or that no probe of the gate's items stores. A comparative gate reads the",
        "direction given here unless it sets `higher_is_better`; how each number is computed is",
        'in `docs/measurement.md` ("Measurement definitions").',
    ]
    for probe in ALL_PROBES:
        lines += ["", f"## {probe}", "", *probe_table(probe)]
    return "\n".join(lines) + "\n"


def probe_table(probe: str) -> list[str]:
    """The metrics `probe` stores, as a markdown table (metrics.md and probes.md)."""
    rows = ["| metric | unit | direction | scenarios | meaning |", "| --- | --- | --- | --- | --- |"]
    for m in sorted((m for m in METRICS.values() if probe in m.probes), key=lambda m: m.name):
        rows.append(f"| `{m.name}` | {m.unit} | {m.direction} | {m.scenarios} | {m.meaning} |")
    return rows


if __name__ == "__main__":
    print(markdown(), end="")
