"""MTPLX (`mtplx serve`, native multi-token prediction on Apple silicon) as a runtime.

What it reports, and where:
- cached prompt tokens per request: `usage.prompt_tokens_details.cached_tokens`.
- `/metrics` is JSON, not Prometheus: its documented blocks are `latest` (the last turn),
  `recent` (the last 32 turns) and `tool_parse_counters`. Cumulative counters are read
  from a `totals` block and queue state from `scheduler` -- a shape recorded in
  tests/fixtures/runtimes/mtplx_metrics.json from the documented fields; a build without
  those blocks simply reports no counters (never wrong ones).
- speculation: MTP depth is `recipe.draft_k` (`--generation-mode mtp --depth K`);
  without speculation the server runs target-only (`--generation-mode ar`). Per request,
  `x_metrics.mtp_drafted` / `x_metrics.mtp_accepted` where present.
- per-session cache cap: only when `options.session_cap_flag` names the flag of the
  build in use (the flag has changed between releases).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from arms.runtimes.base import HealthStatus
from arms.runtimes.launching import HOST_PORT, Const, Flag, LaunchFacts, Row, Rows, RuntimeOptions, fixed, flag
from arms.runtimes.openai_compat import OpenAICompatAdapter, size_string
from arms.runtimes.registry import register
from arms.runtimes.start_failures import BLOCKED_ANYWHERE, StartFailures
from arms.runtimes.telemetry import Telemetry


class MtplxOptions(RuntimeOptions):
    profile: str | None = Field(None, min_length=1, description="the server's --profile")
    session_cap_flag: str | None = Field(
        None,
        min_length=1,
        description="the flag that caps one session's cache (recipe.session_cache_cap), where the build has one",
    )


def session_cap(facts: LaunchFacts) -> list[Flag]:
    """The per-session cap, under the flag `options.session_cap_flag` names."""
    return [fixed(facts["options.session_cap_flag"], size_string(facts["session_cache_cap"]))]


@register
@dataclass(frozen=True)
class MtplxAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "mtplx"
    description: ClassVar[str] = "MTPLX server (native MTP speculative decoding)"
    options_model: ClassVar[type[RuntimeOptions]] = MtplxOptions
    default_argv: ClassVar[tuple[str, ...]] = ("mtplx", "serve")
    flags: ClassVar[tuple[Row, ...]] = (
        flag("--model", "model"),
        flag("--model-id", "served_id", when="served_id"),
        *HOST_PORT,
        flag("--context-window", "context"),
        flag("--prefill-chunk-tokens", "prefill_chunk"),
        flag("--generation-mode", Const("mtp"), when="speculative"),
        flag("--depth", "draft_k", when="speculative"),
        flag("--generation-mode", Const("ar"), unless="speculative"),
        flag("--ssd-session-cache", Const("off"), unless="prefix_cache"),
        Rows(session_cap, when=("session_cache_cap", "options.session_cap_flag")),
        flag("--profile", "options.profile", when="options.profile"),
    )
    telemetry: ClassVar[Telemetry] = Telemetry(
        metrics_format="json",
        metric_names={
            "prompt_tokens": "totals.prompt_tokens",
            "cached_prompt_tokens": "totals.cached_tokens",
            "generation_tokens": "totals.completion_tokens",
            "cache_lookups": "totals.session_lookups",
            "cache_hits": "totals.session_hits",
            "draft_tokens": "totals.mtp_drafted_tokens",
            "accepted_tokens": "totals.mtp_accepted_tokens",
            "queue_depth": "scheduler.waiting",
            "slots_busy": "scheduler.running",
            "memory_bytes": "memory.active_bytes",
        },
        request_counter_fields=(
            "x_metrics",
            {"draft_tokens": "mtp_drafted", "accepted_tokens": "mtp_accepted"},
        ),
    )
    # MTPLX is built on macOS's own libraries: elsewhere it installs, then fails to load the
    # model in these words (mtplx 2.12.2 on Linux with mlx-cpu: "RuntimeError: MTPLX runtime
    # dependencies are unavailable: /usr/lib/libSystem.B.dylib: cannot open shared object
    # file"): this machine cannot serve it, whatever the recipe
    start_failures: ClassVar[StartFailures] = StartFailures(
        blocked_patterns=(
            r"MTPLX runtime dependencies are unavailable",
            r"libSystem\.B\.dylib",
            *BLOCKED_ANYWHERE,
        ),
    )
    # `/health` reports the load state; ready once it is not loading or warming up
    health_status: ClassVar[HealthStatus | None] = HealthStatus(
        waiting=("loading", "warming_up", "starting"), unreadable=True, casefold=True
    )
