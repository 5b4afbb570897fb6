"""The adapter contract: what the orchestrator needs to know about a runtime.

Runtimes differ in how they start, where they report cached tokens, queue depth and
draft acceptance, and how their start failures read. An adapter turns an arm's recipe
into a launch, and says where each measured number comes from, so probes stay generic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from arms.runtimes import prometheus
from campaign.schema import ArmEntry, ModelEntry, RuntimeEntry


class LaunchSpec(BaseModel):
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/health"
    startup_timeout_s: float = 120.0


@dataclass
class LaunchContext:
    arm: ArmEntry
    model: ModelEntry
    runtime: RuntimeEntry
    port: int
    host: str = "127.0.0.1"
    overrides: dict[str, Any] = field(default_factory=dict)
    workdir: Path = Path(".")
    seed: int = 0
    tools: bool = False


@dataclass
class StartClassification:
    """`blocked` is an external reason (missing component, file, hardware), kept word for word."""

    blocked: bool
    message: str


# Logical counter names the probes use; adapters map each to a runtime's metric name.
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


class RuntimeAdapter:
    name: ClassVar[str] = ""
    simulated: ClassVar[bool] = False
    description: ClassVar[str] = ""
    # where this runtime reports cached prompt tokens (a field of metrics.CACHED_FIELDS)
    cached_tokens_field: ClassVar[str] = "usage.prompt_tokens_details.cached_tokens"
    # logical counter/gauge name -> runtime metric name (Prometheus), absent = not reported
    metric_names: ClassVar[Mapping[str, str]] = {}
    metrics_path: ClassVar[str | None] = "/metrics"
    # start-failure text that means an external blocker, not a broken measurement
    blocked_patterns: ClassVar[tuple[str, ...]] = (
        r"No such file or directory",
        r"failed to (?:open|load) model",
        r"is unavailable",
        r"not supported on this (?:hardware|device|platform)",
    )
    blocked_exit_codes: ClassVar[frozenset[int]] = frozenset()

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        """The argv to start a server for this arm; None when the runtime is external."""
        if ctx.runtime.url:
            return None
        if not ctx.runtime.argv:
            raise ValueError(f"runtime {ctx.runtime.name!r} has no argv and no url")
        values = self.template_values(ctx)
        argv = [part.format(**values) for part in ctx.runtime.argv] + list(ctx.arm.recipe.extra_args)
        return LaunchSpec(
            argv=argv,
            env=dict(ctx.runtime.env),
            health_path=ctx.runtime.health_path,
            startup_timeout_s=ctx.runtime.startup_timeout_s,
        )

    def template_values(self, ctx: LaunchContext) -> dict[str, Any]:
        recipe = ctx.arm.recipe
        return {
            "host": ctx.host,
            "port": ctx.port,
            "model": ctx.model.path or ctx.model.name,
            "model_name": ctx.model.served_id or ctx.model.name,
            "context": ctx.arm.context,
            "slots": recipe.slots,
            "prefill_chunk": recipe.prefill_chunk,
            "draft": recipe.draft or "",
        }

    def base_url(self, ctx: LaunchContext) -> str:
        return (ctx.runtime.url or f"http://{ctx.host}:{ctx.port}").rstrip("/")

    def classify_start_failure(self, exit_code: int | None, log_tail: str) -> StartClassification:
        lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
        for pattern in self.blocked_patterns:
            for line in reversed(lines):
                if re.search(pattern, line, re.IGNORECASE):
                    return StartClassification(True, line)
        last = lines[-1] if lines else f"exit code {exit_code}"
        if exit_code is not None and exit_code in self.blocked_exit_codes:
            return StartClassification(True, last)
        return StartClassification(False, last)

    def read_metrics(self, text: str) -> dict[str, float]:
        """Counters and gauges under their logical names."""
        raw = prometheus.parse(text)
        return {logical: raw[name] for logical, name in self.metric_names.items() if name in raw}

    def counter_sources(self) -> dict[str, str]:
        """What each logical counter is read from, for the record (stored as `source`)."""
        return {logical: f"{self.metrics_path}:{name}" for logical, name in self.metric_names.items()}

    def is_ready(self, status_code: int, body: str) -> bool:
        """Whether a health answer means ready; runtimes that answer 200 while loading override."""
        return status_code == 200

    def identity_extras(self, base_url: str, timeout: float = 5.0) -> dict[str, Any]:
        """What the server says about its model beyond the served id; {} where nothing more."""
        return {}

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        """Counters carried by one response (draft/accepted tokens) under logical names."""
        return {}

    def log_counters(self, log_text: str) -> dict[str, float]:
        """Cumulative counters only the server log reveals (llama.cpp's prompt-cache hits)."""
        return {}

    def sampling(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Vendor sampling as request fields; runtimes without top_k etc. drop them here."""
        return {k: v for k, v in params.items() if v is not None}
