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

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from arms.runtimes.base import LaunchContext, LaunchSpec
from arms.runtimes.external import OpenAICompatAdapter, add_flag, numbers_in, size_string
from arms.runtimes.registry import register


@register
class MtplxAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "mtplx"
    description: ClassVar[str] = "MTPLX server (native MTP speculative decoding)"
    cached_tokens_field: ClassVar[str] = "usage.prompt_tokens_details.cached_tokens"
    metrics_format: ClassVar[str] = "json"
    metric_names: ClassVar[Mapping[str, str]] = {
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
    }

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        if ctx.runtime.url:
            return None
        options = ctx.runtime.options
        recipe = ctx.arm.recipe
        argv = self.format_argv(ctx, ["mtplx", "serve"])
        add_flag(argv, "--model", self.template_values(ctx)["model"])
        if ctx.model.served_id:
            add_flag(argv, "--model-id", ctx.model.served_id)
        add_flag(argv, "--host", ctx.host)
        add_flag(argv, "--port", ctx.port)
        add_flag(argv, "--context-window", ctx.arm.context)
        add_flag(argv, "--prefill-chunk-tokens", recipe.prefill_chunk)
        if recipe.speculative:
            add_flag(argv, "--generation-mode", "mtp")
            add_flag(argv, "--depth", recipe.draft_k)
        else:
            add_flag(argv, "--generation-mode", "ar")
        if not recipe.prefix_cache:
            add_flag(argv, "--ssd-session-cache", "off")
        if recipe.session_cache_cap and options.get("session_cap_flag"):
            add_flag(argv, str(options["session_cap_flag"]), size_string(recipe.session_cache_cap))
        if options.get("profile"):
            add_flag(argv, "--profile", options["profile"])
        return self.spec(ctx, argv)

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        return numbers_in(payload.get("x_metrics"), {"draft_tokens": "mtp_drafted", "accepted_tokens": "mtp_accepted"})

    def is_ready(self, status_code: int, body: str) -> bool:
        """`/health` reports the load state; ready once it is not loading or warming up."""
        if status_code != 200:
            return False
        try:
            doc = json.loads(body)
        except ValueError:
            return True
        state = str(doc.get("status", "ok")).lower() if isinstance(doc, Mapping) else "ok"
        return state not in ("loading", "warming_up", "starting")
