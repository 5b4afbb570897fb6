"""mlx-dspark (`mlx-dspark serve`: DSpark / DFlash / lookup speculation on Apple silicon).

What it reports, and where:
- every response carries an `x_mlx_dspark` block: `cached_tokens` (what the prefix cache
  served; the authoritative field here), `prompt_tokens`, `mode`, `cap`, `accept_len`,
  `target_forwards`, and the drafted/accepted token counts of the request.
  `usage.prompt_tokens_details.cached_tokens` is filled too.
- `/metrics` is JSON ("aggregate counters, allocator memory, memory pressure"); counters
  are read from its `counters` block and `memory.active_bytes`, a shape recorded in
  tests/fixtures/runtimes/mlx_dspark_metrics.json. No queue gauge: requests beyond
  `--max-batch` wait inside the server unreported.
- `/health` answers 200 while loading with `status: loading`; ready means `status: ok`.
- speculation: `recipe.draft` is a mode (`dspark`, `dflash`, `lookup`) or a drafter repo
  or path (`--drafter`, mode `dspark`); `recipe.draft_k` is the per-round cap (`--max-draft`).
  Not speculative = `--mode baseline`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from arms.runtimes.base import LaunchContext, LaunchSpec
from arms.runtimes.external import OpenAICompatAdapter, add_flag, expand_path, numbers_in
from arms.runtimes.registry import register

MIB = 1024**2
MODES = ("dspark", "dflash", "lookup")


@register
class MlxDsparkAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "mlx-dspark"
    description: ClassVar[str] = "mlx-dspark server (speculative decoding with a DSpark drafter)"
    cached_tokens_field: ClassVar[str] = "x_mlx_dspark.cached_tokens"
    metrics_format: ClassVar[str] = "json"
    metric_names: ClassVar[Mapping[str, str]] = {
        "prompt_tokens": "counters.prompt_tokens",
        "cached_prompt_tokens": "counters.cached_tokens",
        "generation_tokens": "counters.completion_tokens",
        "cache_lookups": "counters.prefix_cache_lookups",
        "cache_hits": "counters.prefix_cache_hits",
        "draft_tokens": "counters.drafted_tokens",
        "accepted_tokens": "counters.accepted_tokens",
        "memory_bytes": "memory.active_bytes",
    }
    identity_path: ClassVar[str | None] = "/health"

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        if ctx.runtime.url:
            return None
        options = ctx.runtime.options
        recipe = ctx.arm.recipe
        argv = self.format_argv(ctx, ["mlx-dspark", "serve"])
        add_flag(argv, "--model", self.template_values(ctx)["model"])
        add_flag(argv, "--host", ctx.host)
        add_flag(argv, "--port", ctx.port)
        add_flag(argv, "--context-window", ctx.arm.context)
        add_flag(argv, "--max-batch", recipe.slots)
        if recipe.speculative:
            draft = recipe.draft or "auto"
            if draft in MODES or draft == "auto":
                add_flag(argv, "--mode", draft)
            else:
                add_flag(argv, "--mode", "dspark")
                add_flag(argv, "--drafter", expand_path(draft))
            add_flag(argv, "--max-draft", recipe.draft_k)
        else:
            add_flag(argv, "--mode", "baseline")
        if recipe.prefix_cache:
            add_flag(argv, "--prefix-cache-slots", int(options.get("prefix_cache_slots", max(2, recipe.slots))))
            add_flag(argv, "--prefix-cache-dir", str(Path(ctx.workdir) / "dspark-prefix-cache" / ctx.arm.id))
            add_flag(argv, "--prefix-cache-max-ram-mb", max(1, recipe.prefix_cache // MIB))
        else:
            add_flag(argv, "--no-prefix-cache")
        return self.spec(ctx, argv)

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        return numbers_in(payload.get("x_mlx_dspark"), {"draft_tokens": "drafted", "accepted_tokens": "accepted"})

    def is_ready(self, status_code: int, body: str) -> bool:
        if status_code != 200:
            return False
        try:
            doc = json.loads(body)
        except ValueError:
            return False
        return isinstance(doc, Mapping) and doc.get("status") == "ok"

    def parse_identity(self, doc: Any) -> dict[str, Any]:
        """`/health` names the target, the drafter and the serving policy in force."""
        if not isinstance(doc, Mapping):
            return {}
        keys = ("model", "target", "drafter", "mode", "max_draft", "context_window", "kv_bits")
        return {k: doc[k] for k in keys if k in doc}
