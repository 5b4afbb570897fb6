"""The catalogue's entries for one request and its probe run: latency and speed, the
cache, the server's counters, the request tally and the tool loop."""

from __future__ import annotations

from campaign.core.metrics.entry import (
    AGENT_LOAD,
    CACHE_CEILING,
    CACHE_PROBE,
    COUNTING,
    DECODE,
    LOAD,
    LOAD_RUNS,
    TALLYING,
    TOOL_LOOP,
    _m,
)

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
