"""The adapter contract: what the orchestrator needs to know about a runtime.

Runtimes differ in how they start, where they report cached tokens, queue depth and
draft acceptance, and how their start failures read. An adapter turns an arm's recipe
into a launch, and says where each measured number comes from, so probes stay generic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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


# Error-level lines in logs without a format of their own: `ERROR ...` / `FATAL` / `CRITICAL`
# level words, `error: ...`, and Python's final `SomeError: ...` line of a traceback.
_ERROR_LINE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b|^(?i:error|fatal)\b|^[\w.]*(?:Error|Exception):")
CAUSE_GAP = 2  # other lines allowed between two error lines of one cascade
CAUSE_WINDOW = 10  # the cause of exit ends within this many final lines
FINAL_LINES = 3  # the cause when no error-level line is near the end


class LaunchError(RuntimeError):
    """The adapter could not build a launch (no server binary, a model file it could not
    write); the message says what was tried. Raised from `launch()`, it ends the attempt
    `failed` with that message, before any process starts."""


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
    # logical counters `log_counters()` finds in the server log; empty = the log is not read
    log_counter_names: ClassVar[tuple[str, ...]] = ()
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
        """Blocked only when the cause of exit (`exit_cause`) is an external one, quoted word
        for word (with the cascade's first error when that is another line: "failed to load
        model X" says which file, "failed to read key-value pairs" what is wrong with it); a
        blocked-looking warning earlier in the log (a missing optional file) says nothing
        about why the server stopped. Otherwise failed, quoting the first line of the cause
        (the root of the cascade, not its "exiting" epilogue)."""
        lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
        cause = self.exit_cause(lines)
        root = cause[0] if cause and self.is_error_line(cause[0]) else None
        for pattern in self.blocked_patterns:
            for line in cause:
                if re.search(pattern, line, re.IGNORECASE):
                    return StartClassification(True, line if root in (None, line) else f"{line} (first error: {root})")
        quoted = root or (cause[-1] if cause else f"exit code {exit_code}")
        if exit_code is not None and exit_code in self.blocked_exit_codes:
            return StartClassification(True, quoted)
        return StartClassification(False, quoted)

    def is_error_line(self, line: str) -> bool:
        """Whether a log line is error-level. Runtimes with a log format of their own override."""
        return bool(_ERROR_LINE.search(line))

    def exit_cause(self, lines: list[str]) -> list[str]:
        """The lines that say why the server exited.

        The final cascade of error-level lines: the last error line and the error lines before
        it with at most CAUSE_GAP other lines between neighbours (a "cleaning up" line inside
        a cascade), provided it ends within the last CAUSE_WINDOW lines (usage text may
        follow an argument error). Without such a cascade, the last FINAL_LINES lines.
        """
        errors = [i for i, line in enumerate(lines) if self.is_error_line(line)]
        if not errors or len(lines) - 1 - errors[-1] >= CAUSE_WINDOW:
            return lines[-FINAL_LINES:]
        first = len(errors) - 1
        while first > 0 and errors[first] - errors[first - 1] - 1 <= CAUSE_GAP:
            first -= 1
        return [lines[i] for i in errors[first:]]

    def read_metrics(self, text: str) -> dict[str, float]:
        """Counters and gauges under their logical names."""
        raw = prometheus.parse(text)
        return {logical: raw[name] for logical, name in self.metric_names.items() if name in raw}

    def counter_sources(self) -> dict[str, str]:
        """What each logical counter is read from, for the record (stored as `source`)."""
        return {logical: f"{self.metrics_path}:{name}" for logical, name in self.metric_names.items()}

    # what one unit of a cache counter is: the runtimes differ (vLLM counts prefix-cache
    # queries and hits in tokens; llama.cpp's log lines and the simulator's admissions are
    # requests), so counts are stored with their unit and only compared within it
    cache_counter_unit: ClassVar[str] = "requests"

    def counter_unit(self, name: str) -> str:
        """The unit a logical counter is stored in (see `cache_counter_unit`)."""
        if name in ("cache_lookups", "cache_hits"):
            return self.cache_counter_unit
        return "tokens" if "tokens" in name else "count"

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

    def log_counters_enabled(self, argv: Sequence[str]) -> bool:
        """Whether a server started with `argv` writes the lines `log_counters` counts. When
        it does not, its log is not read, so a count of 0 is never reported for events the
        log could not have shown."""
        return bool(self.log_counter_names)

    def sampling(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Vendor sampling as request fields; runtimes without top_k etc. drop them here."""
        return {k: v for k, v in params.items() if v is not None}
