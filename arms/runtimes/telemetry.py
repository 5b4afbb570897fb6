"""Telemetry: where a runtime reports what it did, and how to read it.

Why a value of its own: the probes need to know where the server counts prefix-cache
hits, drafted tokens and queue depth (a Prometheus page, a JSON document, a field of
each response, its log), in which unit, and where it reports a request's cached prompt
tokens; they need nothing about how the server was started. So an adapter sets one
`Telemetry` (`RuntimeAdapter.telemetry`), the probe target carries it, and the probes
read every number through it under the logical names below.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arms.runtimes import prometheus

# Logical counter names the probes use; a runtime's telemetry maps each to its own name.
COUNTERS = (
    "cache_lookups",
    "cache_hits",
    "prompt_tokens",
    "cached_prompt_tokens",
    "generation_tokens",
    "draft_tokens",
    "accepted_tokens",
)
GAUGES = ("queue_depth", "slots_busy", "memory_bytes")
CACHE_COUNTERS = ("cache_lookups", "cache_hits")
OPENAI_CACHED_FIELD = "usage.prompt_tokens_details.cached_tokens"


def dig(obj: Any, dotted: str) -> Any:
    """`a.b.c` lookup through nested mappings; None when any step is missing."""
    for part in dotted.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def json_metrics(text: str, paths: Mapping[str, str]) -> dict[str, float]:
    """Logical counters from a JSON metrics document, each read at its dotted path."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, float] = {}
    for logical, path in paths.items():
        value = dig(doc, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[logical] = float(value)
    return out


def numbers_in(block: Any, fields: Mapping[str, str]) -> dict[str, float]:
    """Logical name -> number, for each field of `fields` that `block` holds as a number."""
    if not isinstance(block, Mapping):
        return {}
    return {
        logical: float(block[key])
        for logical, key in fields.items()
        if isinstance(block.get(key), (int, float)) and not isinstance(block.get(key), bool)
    }


@dataclass(frozen=True)
class Telemetry:
    """One runtime's reporting, as data; a runtime whose numbers need logic to read
    (llama.cpp's log, its prompt-token total) subclasses and overrides a method."""

    # logical counter/gauge name -> the runtime's metric name (Prometheus) or dotted path (JSON)
    metric_names: Mapping[str, str] = field(default_factory=dict)
    # more values read from the page beside the logical counters (not counters themselves)
    extra_metrics: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str | None = "/metrics"
    metrics_format: str = "prometheus"  # or "json"
    # logical counter -> a source other than `metrics_path:metric_name`, for the record
    counter_source_overrides: Mapping[str, str] = field(default_factory=dict)
    # what one unit of a cache counter is: the runtimes differ (vLLM counts prefix-cache
    # queries and hits in tokens; llama.cpp's log lines and the simulator's admissions are
    # requests), so counts are stored with their unit and only compared within it
    cache_counter_unit: str = "requests"
    # where a response reports its cached prompt tokens (a field of metrics.CACHED_FIELDS)
    cached_tokens_field: str = OPENAI_CACHED_FIELD
    # (response block, logical name -> field) of per-request counters; None: none reported
    request_counter_fields: tuple[str, Mapping[str, str]] | None = None
    # logical counters `log_counters()` finds in the server log; empty = the log is not read
    log_counter_names: tuple[str, ...] = ()

    @property
    def reads_metrics(self) -> bool:
        """Whether there is a metrics page worth asking for."""
        return bool(self.metrics_path and self.metric_names)

    def read_metrics(self, text: str) -> dict[str, float]:
        """Counters and gauges under their logical names (and `extra_metrics` under theirs)."""
        names = {**self.metric_names, **self.extra_metrics}
        if self.metrics_format == "json":
            return json_metrics(text, names)
        raw = prometheus.parse(text)
        return {logical: raw[name] for logical, name in names.items() if name in raw}

    def counter_sources(self) -> dict[str, str]:
        """What each logical counter is read from, for the record (stored as `source`)."""
        sources = {logical: f"{self.metrics_path}:{name}" for logical, name in self.metric_names.items()}
        return {**sources, **self.counter_source_overrides}

    def counter_unit(self, name: str) -> str:
        """The unit a logical counter is stored in (see `cache_counter_unit`)."""
        if name in CACHE_COUNTERS:
            return self.cache_counter_unit
        return "tokens" if "tokens" in name else "count"

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        """Counters carried by one response (draft/accepted tokens) under logical names.

        Runtimes without a /metrics endpoint still report speculation per request; this
        is where a probe finds it. Empty where the runtime reports none.
        """
        if self.request_counter_fields is None:
            return {}
        block, fields = self.request_counter_fields
        return numbers_in(payload.get(block), fields)

    def log_counters(self, log_text: str) -> dict[str, float]:
        """Cumulative counters only the server log reveals (llama.cpp's prompt-cache hits)."""
        return {}

    def log_counters_enabled(self, argv: Sequence[str]) -> bool:
        """Whether a server started with `argv` writes the lines `log_counters` counts. When
        it does not, its log is not read, so a count of 0 is never reported for events the
        log could not have shown."""
        return bool(self.log_counter_names)
