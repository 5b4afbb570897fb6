"""The catalogue of metrics: every number a probe stores, its unit, which way is better,
which probes and scenarios produce it, and what it means.

Why one table in the core: a gate names a metric by a bare string, and before this table
a typo (`tfft_s`) or a metric its probe never writes ran a whole campaign and left the
gate pending for good, and a gate on seconds defaulted to "higher is better". The loader
checks every gate's metric against this table and against the probes of the items that
feed it, gates take their direction from it unless they set one, and the docs and pages
print it. How each number is computed is `arms.metrics` (the definitions); a test runs
every probe on the simulator and fails when a probe writes a metric, or a unit, this
table does not list, so the table cannot drift from what is stored.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

CACHE_PROBE, DECODE, TOOL_LOOP, AGENT_LOAD, CACHE_CEILING, LOAD = (
    "cache-probe", "decode", "tool-loop", "agent-load", "cache-ceiling", "load",
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
    count, a target): a comparative gate on it must say which way it reads."""

    name: str
    unit: str
    meaning: str
    probes: tuple[str, ...]
    scenarios: str = ""
    higher_is_better: bool | None = None

    @property
    def direction(self) -> str:
        return {True: "higher is better", False: "lower is better", None: "no direction"}[self.higher_is_better]


def _m(name: str, unit: str, meaning: str, probes: tuple[str, ...], scenarios: str = "", better: bool | None = None) -> Metric:
    return Metric(name, unit, meaning, probes, scenarios, better)


# the cache probe's scenarios, cold first (it primes nothing): one list for the probe,
# its metrics and the coverage page
CACHE_SCENARIOS = ("cold", "identical", "append", "tool_turn", "middle_mutation")
_CACHE_SCENARIOS = ", ".join(CACHE_SCENARIOS)
_WARM_SCENARIOS = ", ".join(CACHE_SCENARIOS[1:])
_TURNS = "c<conversation>-t<turn> (and baseline-t<turn>; a fan-out branch c<conversation>-t<turn>-b<branch>)"

_ENTRIES = [
    # -- latency and speed of one request
    _m("ttft_s", "s", "send to the first event carrying content, reasoning or a tool call", (CACHE_PROBE, DECODE, TOOL_LOOP, AGENT_LOAD, LOAD),
       f"cache-probe: {_CACHE_SCENARIOS}; decode: decode; tool-loop: step<N>; agent-load: {_TURNS}; load: {LOAD_RUNS}", False),
    _m("decode_tps", "tok/s", "tokens decoded per second after the first token (the server's count)", (DECODE, AGENT_LOAD), "decode; agent-load turns", True),
    _m("decode_tps_median", "tok/s", "median decode_tps of a decode run's timed requests (one row per run)", (DECODE,), "decode", True),
    _m("decode_tps_spread", "tok/s", "max - min decode_tps of a decode run's timed requests", (DECODE,), "decode", False),
    _m("tpot_s", "s", "time per output token after the first, 1 / decode_tps", (DECODE, AGENT_LOAD, LOAD), "decode; agent-load turns; load runs", False),
    _m("e2e_s", "s", "send to the last byte of the response", (DECODE, LOAD), "decode; load runs", False),
    _m("short_trial", "tokens", "a timed decode request that ended early: the tokens it gave (not timed)", (DECODE,), "decode"),
    # -- the prefix cache
    _m("reuse", "ratio", "cached prompt tokens / prompt tokens, as the server reports them", (CACHE_PROBE, CACHE_CEILING),
       f"cache-probe: {_CACHE_SCENARIOS}; cache-ceiling: len<tokens>", True),
    _m("expected_reuse", "ratio", "the reuse a perfect prefix cache would give this request", (CACHE_PROBE,), _CACHE_SCENARIOS),
    _m("cached_tokens", "tokens", "prompt tokens the server says it took from its cache", (CACHE_PROBE, AGENT_LOAD, LOAD),
       f"{_CACHE_SCENARIOS}; agent-load turns; load trace=<name> requests"),
    _m("implied_cached_tokens", "tokens", "prompt tokens an unbounded prefix cache would serve, from the trace's hash_ids", (LOAD,), "trace=<name> requests"),
    _m("trace_reuse", "ratio", "a trace replay's cached prompt tokens / prompt tokens, as the server reports them", (LOAD,), "trace=<name>", True),
    _m("trace_implied_reuse", "ratio", "the reuse the replayed trace implies (its hash_ids), over the server's prompt tokens", (LOAD,), "trace=<name>"),
    _m("ttft_cold_s", "s", "the TTFT of the same prompt sent cold, beside a warm request", (CACHE_PROBE,), _WARM_SCENARIOS, False),
    _m("warm_speedup", "x", "ttft_cold_s / ttft_s: how much faster the warm request started", (CACHE_PROBE,), _WARM_SCENARIOS, True),
    _m("reuse_ceiling_tokens", "tokens", "the longest prompt the cache still reused", (CACHE_CEILING,), "summary", True),
    _m("reuse_dies_at_tokens", "tokens", "the shortest prompt the cache no longer reused", (CACHE_CEILING,), "summary", True),
    _m("reuse_holds_to_limit", "bool", "1 when reuse held up to the largest prompt tried", (CACHE_CEILING,), "summary", True),
    _m("ceiling_search_error_at", "tokens", "the prompt length at which the ceiling search hit a failed request", (CACHE_CEILING,), "summary"),
    # -- the server's counters around a probe run (deltas over the run)
    _m("cache_lookups", "requests", "prefix-cache lookups the server counted", COUNTING, "per probe run"),
    _m("cache_hits", "requests", "prefix-cache lookups that hit, as the server counted", COUNTING, "per probe run"),
    _m("cached_prompt_tokens", "tokens", "prompt tokens served from the cache, the server's counter", COUNTING, "per probe run"),
    _m("generation_tokens", "tokens", "tokens generated, the server's counter", COUNTING, "per probe run"),
    _m("draft_tokens", "tokens", "speculative tokens drafted, the server's counter", COUNTING, "per probe run"),
    _m("accepted_tokens", "tokens", "drafted tokens the target model accepted, the server's counter", COUNTING, "per probe run"),
    _m("target_forwards", "count", "forward passes of the target model over a decode run's timed responses, the server's per-response count (mlx-dspark): one a token without speculation, fewer when drafts are accepted", (DECODE,), "decode"),
    _m("prompt_tokens", "tokens", "prompt tokens of a request, as the server counted them", (CACHE_PROBE, DECODE, AGENT_LOAD, CACHE_CEILING, LOAD), "every request"),
    _m("prompt_tokens_target", "tokens", "the prompt size the probe aimed at", (DECODE, CACHE_CEILING), "decode; len<tokens>"),
    _m("sessions_replayed", "count", "recorded sessions agent-load replayed; its source names the file, the history sent and the concurrency", (AGENT_LOAD,), "load"),
    _m("system_tokens_target", "tokens", "agent-load's shared system prompt size, aimed at", (AGENT_LOAD,), "baseline, load"),
    _m("task_tokens_target", "tokens", "agent-load's per-conversation task size, aimed at", (AGENT_LOAD,), "baseline, load"),
    _m("turn_tokens_target", "tokens", "agent-load's per-turn addition, aimed at", (AGENT_LOAD,), "baseline, load"),
    _m("queue_depth_max", "requests", "the most requests the server held waiting, sampled", (AGENT_LOAD, LOAD), "per run"),
    _m("queue_depth_mean", "requests", "mean requests the server held waiting, sampled", (LOAD,), LOAD_RUNS),
    _m("queue_samples", "count", "queue-depth samples taken", (AGENT_LOAD, LOAD), "per run"),
    _m("queue_sample_gaps", "count", "queue-depth samples that failed to read", (AGENT_LOAD, LOAD), "per run"),
    _m("queue_ticks_skipped", "count", "sampling ticks a slow read covered", (AGENT_LOAD, LOAD), "per run"),
    # -- the tally of requests
    _m("requests", "requests", "requests sent", TALLYING, "per scenario or summary"),
    _m("requests_failed", "requests", "requests that failed", TALLYING, "per scenario or summary", False),
    _m("requests_retried", "requests", "requests retried after a dropped connection", TALLYING, "per scenario or summary", False),
    _m("error_rate", "ratio", "requests_failed / requests", TALLYING, "per scenario or summary", False),
    # -- tool loops
    _m("tool_loop_pass", "bool", "1 when a tool-loop trial reached the right answer", (TOOL_LOOP,), "user:<name>", True),
    _m("tool_loop_passes", "count", "tool-loop trials that passed", (TOOL_LOOP,), "summary", True),
    _m("tool_loop_trials", "count", "tool-loop trials run", (TOOL_LOOP,), "summary"),
    _m("tool_calls", "count", "tool calls a trial made", (TOOL_LOOP,), "user:<name>"),
    # -- agent load: how TTFT grows over the turns of a conversation
    _m("ttft_first_turn_s", "s", "median TTFT of the first turns", (AGENT_LOAD,), "summary", False),
    _m("ttft_second_turn_s", "s", "median TTFT of the second turns", (AGENT_LOAD,), "summary", False),
    _m("ttft_last_turn_s", "s", "median TTFT of the last turns", (AGENT_LOAD,), "summary", False),
    _m("ttft_later_s", "s", "TTFT of the turns after the first (one row per turn)", (AGENT_LOAD,), "summary", False),
    _m("ttft_later_median_s", "s", "median TTFT of the turns after the first", (AGENT_LOAD,), "summary", False),
    _m("ttft_later_max_s", "s", "the slowest TTFT of the turns after the first", (AGENT_LOAD,), "summary", False),
    _m("ttft_growth_ratio", "x", "ttft_last_turn_s / ttft_second_turn_s: above 1, TTFT grows turn over turn", (AGENT_LOAD,), "summary", False),
    _m("requests_in_flight_max", "requests", "the most requests the client had in flight at once (a fan-out holds several per conversation)", (AGENT_LOAD,), "summary"),
    _m("branch_ttft_median_s", "s", "median TTFT of the fan-out branch requests (fan_out > 1)", (AGENT_LOAD,), "summary", False),
    _m("branch_ttft_max_s", "s", "the slowest TTFT of the fan-out branch requests", (AGENT_LOAD,), "summary", False),
    _m("fan_out_wait_median_s", "s", "median time from a fan-out's first branch sent to its last answered: what each merge waited on", (AGENT_LOAD,), "summary", False),
    _m("fan_out_wait_max_s", "s", "the longest wait of a merge on its branches", (AGENT_LOAD,), "summary", False),
    # -- load runs (one row per run) and the sweep's answer
    _m("offered_rps", "req/s", "requests offered per second over the run's window", (LOAD,), LOAD_RUNS),
    _m("rate_rps", "req/s", "the nominal rate of an open-loop run", (LOAD,), "poisson=R, constant=R"),
    _m("concurrency", "clients", "closed-loop clients of the run", (LOAD,), "synchronous, concurrency=N"),
    _m("request_throughput_rps", "req/s", "requests that succeeded per second of the run's window", (LOAD,), LOAD_RUNS, True),
    _m("goodput_rps", "req/s", "requests that met every target per second of the run's window", (LOAD,), LOAD_RUNS, True),
    _m("output_tps", "tok/s", "output tokens per second of the run's window", (LOAD,), LOAD_RUNS, True),
    _m("target_attainment", "ratio", "requests within the targets / requests", (LOAD,), LOAD_RUNS, True),
    _m("requests_met", "requests", "requests within the targets", (LOAD,), LOAD_RUNS, True),
    _m("in_flight_peak", "requests", "the most requests in flight at once", (LOAD,), LOAD_RUNS),
    _m("client_cpu_share", "ratio", "the client process's CPU time over the run's span: near 1, one core was saturated", (LOAD,), LOAD_RUNS, False),
    _m("stamp_fallbacks", "requests", "succeeded requests whose times fell back from byte-arrival stamping to read time", (LOAD,), LOAD_RUNS, False),
    _m("in_flight_cap_waits", "count", "arrivals that waited for the in-flight cap", (LOAD,), "poisson=R, constant=R", False),
    _m("window_s", "s", "the window the load was offered in", (LOAD,), LOAD_RUNS),
    _m("span_s", "s", "first send to last response, the drain included", (LOAD,), LOAD_RUNS),
    _m("drain_s", "s", "how long after the window the last response came back (span_s - window_s)", (LOAD,), LOAD_RUNS, False),
    _m("schedule_lag_s", "s", "how late the client sent a request against its schedule", (LOAD,), LOAD_RUNS, False),
    _m("max_goodput_rps", "req/s", "a sweep's most goodput within the targets", (LOAD,), "sweep", True),
    _m("max_goodput_offered_rps", "req/s", "the offered rate of the run that gave max_goodput_rps", (LOAD,), "sweep", True),
    _m("max_throughput_rps", "req/s", "a sweep's most requests completed per second", (LOAD,), "sweep", True),
    _m("synchronous_rps", "req/s", "the sweep's one-at-a-time rate, its rates' base", (LOAD,), "sweep", True),
    _m("sweep_runs", "count", "runs a sweep made", (LOAD,), "sweep"),
    _m("sweep_rates_skipped", "count", "planned rates a sweep did not run: it stopped at the first rate that did not hold (its source says why)", (LOAD,), "sweep"),
    _m("sweep_time_saved_s", "s", "the device time those rates would have taken", (LOAD,), "sweep"),
    _m("sweep_fraction", "ratio", "targets a sweep's run had to meet to count", (LOAD,), "sweep"),
]

# percentiles of a load run's latencies: ttft_p50_s, ..., schedule_lag_p99_s
for _base, _what in (("ttft", "TTFT"), ("tpot", "time per output token"), ("e2e", "end-to-end time"),
                     ("itl", "gap between token events"), ("schedule_lag", "send lag against the schedule")):
    for _p in ("p50", "p90", "p99", "max"):
        _name = f"{_base}_{_p}_s"
        if _base == "schedule_lag" and _p == "p90":
            continue
        if _p == "max" and _base not in ("itl", "schedule_lag"):
            continue
        _ENTRIES.append(_m(_name, "s", f"{_p} of the run's {_what}", (LOAD,), LOAD_RUNS, False))

# agent-load's baseline pass (one conversation alone) writes its own copy of the summary
for _entry in [e for e in _ENTRIES if e.probes == (AGENT_LOAD,) and e.scenarios == "summary"] + [
    e for e in _ENTRIES if e.name in ("requests", "requests_failed", "requests_retried", "error_rate")
]:
    _ENTRIES.append(Metric(f"baseline_{_entry.name}", _entry.unit, f"{_entry.meaning}, in the baseline pass (one conversation alone)",
                           (AGENT_LOAD,), "summary", _entry.higher_is_better))

METRICS: dict[str, Metric] = {m.name: m for m in _ENTRIES}


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
    write it with `python -m campaign.metrics > docs/metrics.md`)."""
    lines = [
        "# Metrics",
        "",
        "Every metric a probe stores, from the catalogue in `campaign/metrics.py` (this file is",
        "generated from it: `python -m campaign.metrics > docs/metrics.md`). A gate names one by",
        "`metric` (and `also_metric`, `guard_metric`, ...); `campaign check` refuses a name that is",
        "not here or that no probe of the gate's items stores. A comparative gate reads the",
        "direction given here unless it sets `higher_is_better`; how each number is computed is",
        "in `docs/guide.md` (\"Measurement definitions\").",
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
