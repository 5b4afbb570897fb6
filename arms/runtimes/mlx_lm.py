"""mlx-lm's `mlx_lm.server` (Apple silicon) as a runtime.

What it reports, and where:
- cached prompt tokens per request: `usage.prompt_tokens_details.cached_tokens`
  (the LRU prompt cache's reuse).
- no /metrics endpoint at all: no queue depth, no cache or draft counters
  (`metrics_path` is None, so probes do not ask).
- speculation only with a draft model (`--draft-model`, `--num-draft-tokens`).
- health: `/health`; identity: `/v1/models` (Hugging Face cache scan; the loaded model
  is the `--model` given here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from arms.runtimes.base import LaunchContext, LaunchSpec
from arms.runtimes.external import OpenAICompatAdapter, add_flag, expand_path
from arms.runtimes.registry import register


@register
class MlxLmAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "mlx-lm"
    description: ClassVar[str] = "mlx-lm HTTP server (mlx_lm.server)"
    cached_tokens_field: ClassVar[str] = "usage.prompt_tokens_details.cached_tokens"
    metric_names: ClassVar[Mapping[str, str]] = {}
    metrics_path: ClassVar[str | None] = None

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        if ctx.runtime.url:
            return None
        recipe = ctx.arm.recipe
        argv = self.format_argv(ctx, ["mlx_lm.server"])
        add_flag(argv, "--model", self.template_values(ctx)["model"])
        add_flag(argv, "--host", ctx.host)
        add_flag(argv, "--port", ctx.port)
        add_flag(argv, "--decode-concurrency", recipe.slots)
        add_flag(argv, "--prompt-concurrency", recipe.slots)
        add_flag(argv, "--prefill-step-size", recipe.prefill_chunk)
        if recipe.prefix_cache:
            add_flag(argv, "--prompt-cache-bytes", recipe.prefix_cache)
        else:
            add_flag(argv, "--prompt-cache-size", 0)
        if recipe.speculative:
            if not recipe.draft:
                raise ValueError(
                    f"arm {ctx.arm.id!r}: mlx-lm speculates only with a draft model; set recipe.draft"
                )
            add_flag(argv, "--draft-model", expand_path(recipe.draft))
            add_flag(argv, "--num-draft-tokens", recipe.draft_k)
        return self.spec(ctx, argv)
