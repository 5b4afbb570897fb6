"""What llama.cpp's `llama-server` reports, and where: its /metrics page, each response's
`timings`, its log (the prompt cache), and `/slots`; read for the adapter in
`arms.runtimes.llamacpp`.

What it reports, and where (checked against a real build, see tests/e2e/test_llamacpp.py):
- cached prompt tokens per request: `timings.cache_n` (also mirrored in
  `usage.prompt_tokens_details.cached_tokens`); prompt tokens = `prompt_n + cache_n`.
- queue depth: the `llamacpp:requests_deferred` gauge (with `--metrics`); slots busy:
  `llamacpp:requests_processing`.
- prompt tokens: `llamacpp:prompt_tokens_total` counts only the tokens it *evaluated*;
  the logical `prompt_tokens` adds `llamacpp:prompt_tokens_cached_total` back, so it
  means "all prompt tokens" as it does for every other runtime.
- speculation: `llamacpp:spec_decode_num_draft_tokens_total` / `..._accepted_tokens_total`,
  and per request `timings.draft_n` / `timings.draft_n_accepted`.
- prefix-cache lookups and hits: no counter exists. Not on `/metrics`
  (`llamacpp:prompt_tokens_cached_total` adds up tokens a slot kept and tokens the prompt
  cache restored alike), not in `/slots` (token counts per slot, nothing about the prompt
  cache), not per request (`timings.cache_n` is the same mix, and the OpenAI stream names
  no slot, so "cached tokens on a slot that did not hold the prefix" cannot be told from
  the client). With `-lv 4` (trace) the server logs each prompt-cache lookup ("looking
  for better prompt") and hit ("found better prompt"), and each slot chosen by affinity
  ("selected slot by LCP similarity"); `cache_events()` counts them, and the probes read
  the log from a saved offset in a worker thread (`arms.probes.log_tail.LogTail`). That is
  what separates slot affinity from the cache. Below trace level the log is not read at
  all (`log_counters_enabled`): no lookups are reported rather than a made-up 0.
  Trace logging stays on during timed probes because its cost is below what can be
  measured: at level 4 llama-server adds ~25 lines (~5 KiB) per request and one line per
  HTTP request, nothing per token, written by its logger thread.
  `benchmarks/llamacpp_log_cost.py` (arm S1 of examples/llamacpp-slots.toml, -lv 4 vs
  -lv 3, 12 interleaved trial pairs, 1 thread) measured the server's CPU time per decoded
  token -1.1% [95% interval -4.5%, +4.5%] and for a 480-token cold prefill +0.5% [-4.6%,
  +4.6%]; wall-clock TTFT and decode rate moved within their (large, on a shared 2-core
  machine) noise. `options.log_verbosity = 3` turns it off.
- per-slot state: `GET /slots` (`parse_slots`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arms.runtimes.telemetry import Telemetry

TRACE_LOG_LEVEL = 4  # llama.cpp's "trace" level: the one at which prompt-cache lookups are logged
SERVER_DEFAULT_LOG_LEVEL = 3  # "info", what llama-server logs without -lv
VERBOSITY_FLAGS = ("-lv", "--verbosity", "--log-verbosity")
_VERBOSE_FLAGS = ("-v", "--verbose", "--log-verbose")  # verbosity "infinity"


# -- per-slot state --------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotState:
    """One llama-server slot as `/slots` shows it."""

    id: int
    n_ctx: int | None
    processing: bool
    task: int | None = None
    prompt_tokens: int | None = None
    prompt_tokens_cached: int | None = None
    prompt_tokens_processed: int | None = None
    decoded: int | None = None
    remaining: int | None = None
    speculative: bool = False


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_slots(payload: Any) -> list[SlotState]:
    """Slots from a `/slots` answer, across llama.cpp versions.

    Newer builds give `next_token` as a list (one entry per parallel sequence) and
    `is_processing`; older ones an object and a numeric `state` (0 = idle). Both parse.
    """
    items = payload.get("slots", []) if isinstance(payload, Mapping) else payload
    out: list[SlotState] = []
    for index, raw in enumerate(items if isinstance(items, list) else []):
        if not isinstance(raw, Mapping):
            continue
        next_token = raw.get("next_token")
        if isinstance(next_token, list):
            next_token = next_token[0] if next_token and isinstance(next_token[0], Mapping) else {}
        if not isinstance(next_token, Mapping):
            next_token = {}
        if "is_processing" in raw:
            processing = bool(raw["is_processing"])
        else:
            processing = _int(raw.get("state")) not in (None, 0)
        number = _int(raw.get("id"))
        out.append(
            SlotState(
                id=number if number is not None else index,
                n_ctx=_int(raw.get("n_ctx")),
                processing=processing,
                task=_int(raw.get("id_task")),
                prompt_tokens=_int(raw.get("n_prompt_tokens")),
                prompt_tokens_cached=_int(raw.get("n_prompt_tokens_cache")),
                prompt_tokens_processed=_int(raw.get("n_prompt_tokens_processed")),
                decoded=_int(next_token.get("n_decoded")),
                remaining=_int(next_token.get("n_remain")),
                speculative=bool(raw.get("speculative", False)),
            )
        )
    return out


# -- what the log says about the prompt cache ---------------------------------------------------

_CACHE_EVENTS = {
    "cache_lookups": "looking for better prompt",
    "cache_hits": "found better prompt",
    "slot_affinity": "selected slot by LCP similarity",
    "slot_lru": "selected slot by LRU",
}


def log_verbosity(argv: Sequence[str]) -> int:
    """The log verbosity llama-server runs at with `argv` (the last setting wins, as in its
    argument parser; `-v` means all levels)."""
    level = SERVER_DEFAULT_LOG_LEVEL
    for i, part in enumerate(argv):
        name, eq, inline = part.partition("=")
        if name in _VERBOSE_FLAGS:
            level = 1_000
        elif name in VERBOSITY_FLAGS:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            try:
                level = int(value)
            except ValueError:
                pass  # llama-server refuses to start; its own error says why
    return level


def cache_events(log_text: str) -> dict[str, int]:
    """Prompt-cache lookups and hits, and how slots were chosen, counted from a server log.

    llama.cpp has no counter for its host-memory prompt cache (`--cache-ram`); at log
    verbosity 4 it logs each lookup and each hit, and each slot chosen by prefix
    similarity (affinity: the conversation's state was already in that slot) or by LRU.
    Counts are cumulative over the text given; diff two reads for a probe's share. The
    phrases are plain text, counted with str.count (a fast scan in C, no regex per line).
    """
    return {name: log_text.count(phrase) for name, phrase in _CACHE_EVENTS.items()}


# -- telemetry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaCppTelemetry(Telemetry):
    """/metrics for tokens and queue, `timings` per response, and the log for the prompt
    cache: llama.cpp has no counter for its host-memory prompt cache (`--cache-ram`)."""

    def read_metrics(self, text: str) -> dict[str, float]:
        out = super().read_metrics(text)
        # llamacpp:prompt_tokens_total excludes cached tokens; logical prompt_tokens is all.
        if "prompt_tokens" in out:
            if "cached_prompt_tokens" in out:
                out["prompt_tokens"] += out["cached_prompt_tokens"]
            else:
                del out["prompt_tokens"]  # an older build: cannot say how many were cached
        return out

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        timings = payload.get("timings") or {}
        out: dict[str, float] = {}
        if isinstance(timings.get("draft_n"), int):
            out["draft_tokens"] = float(timings["draft_n"])
        if isinstance(timings.get("draft_n_accepted"), int):
            out["accepted_tokens"] = float(timings["draft_n_accepted"])
        return out

    def log_counters(self, log_text: str) -> dict[str, float]:
        """Prefix-cache lookups/hits under their logical names, from the server log."""
        events = cache_events(log_text)
        return {"cache_lookups": float(events["cache_lookups"]), "cache_hits": float(events["cache_hits"])}

    def log_counters_enabled(self, argv: Sequence[str]) -> bool:
        """Lookups and hits are logged only at trace level (-lv 4 or more); below it the log
        says nothing about the prompt cache, and 0 hits would be a guess."""
        return log_verbosity(argv) >= TRACE_LOG_LEVEL


TELEMETRY = LlamaCppTelemetry(
    metric_names={
        "prompt_tokens": "llamacpp:prompt_tokens_total",
        "cached_prompt_tokens": "llamacpp:prompt_tokens_cached_total",
        "generation_tokens": "llamacpp:tokens_predicted_total",
        "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
        "queue_depth": "llamacpp:requests_deferred",
        "slots_busy": "llamacpp:requests_processing",
    },
    counter_source_overrides={
        "prompt_tokens": "/metrics:llamacpp:prompt_tokens_total+llamacpp:prompt_tokens_cached_total",
        # read by log_counters(), not from /metrics
        "cache_lookups": "server log: looking for better prompt",
        "cache_hits": "server log: found better prompt",
    },
    cached_tokens_field="timings.cache_n",
    log_counter_names=("cache_lookups", "cache_hits"),
)
