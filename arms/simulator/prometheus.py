"""Prometheus text exposition of the engine's counters and gauges (`sim_<name>`)."""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "sim_"

HELP: dict[str, str] = {
    "requests_total": "Chat requests accepted by the engine.",
    "prompt_tokens_total": "Prompt tokens of accepted requests.",
    "prompt_tokens_cached_total": "Prompt tokens reused from a slot or the prefix cache.",
    "generation_tokens_total": "Tokens generated.",
    "cache_lookups_total": "Prefix-cache lookups (one per admitted request while the cache is on).",
    "cache_hits_total": "Prefix-cache lookups that beat the slot's own reuse.",
    "draft_tokens_total": "Speculative draft tokens proposed.",
    "draft_accepted_tokens_total": "Speculative draft tokens accepted.",
    "errors_total": "Error answers (HTTP 4xx/5xx) given to chat requests.",
    "requests_deferred": "Requests waiting for a free slot.",
    "slots_busy": "Slots running a request.",
    "memory_bytes": "Modelled resident memory.",
    "prefix_cache_tokens_used": "Tokens held in the prefix cache.",
}


def render_prometheus(counters: Mapping[str, int], gauges: Mapping[str, int]) -> str:
    """Text format 0.0.4: HELP and TYPE lines, then the sample, for every metric."""
    lines: list[str] = []
    for kind, values in (("counter", counters), ("gauge", gauges)):
        for name, value in values.items():
            full = PREFIX + name
            lines.append(f"# HELP {full} {HELP.get(name, name)}")
            lines.append(f"# TYPE {full} {kind}")
            lines.append(f"{full} {value}")
    return "\n".join(lines) + "\n"
