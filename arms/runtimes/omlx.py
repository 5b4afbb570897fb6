"""oMLX (`omlx serve`, Apple silicon) as a runtime.

What it reports, and where:
- cached prompt tokens per request: at the top of usage, `usage.cached_tokens`.
- no Prometheus page: no queue depth, no cache or draft counters (`metrics_path` None).
- the model: oMLX serves every model directory under `--model-dir`, each under its
  directory name, so the adapter passes the *parent* of the model's path and the served
  id is the model directory's name.
- prefix cache: the paged SSD cache (`--paged-ssd-cache-dir`, here under the work
  directory) with an in-memory hot tier sized by `recipe.prefix_cache`; the per-session
  cap (`recipe.session_cache_cap`) bounds the SSD cache; no prefix cache = `--no-cache`.
- speculation (MTP, DFlash) and prefill chunking are per-model settings in oMLX's
  `model_settings.json`, not flags: a speculative recipe is the user's statement that
  those settings are on (see docs/runtimes.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from arms.runtimes.base import LaunchContext, LaunchSpec
from arms.runtimes.external import OpenAICompatAdapter, add_flag, expand_path, size_string
from arms.runtimes.registry import register


@register
class OmlxAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "omlx"
    description: ClassVar[str] = "oMLX multi-model server (paged SSD prefix cache)"
    cached_tokens_field: ClassVar[str] = "usage.cached_tokens"
    metric_names: ClassVar[Mapping[str, str]] = {}
    metrics_path: ClassVar[str | None] = None
    identity_path: ClassVar[str | None] = "/v1/models/status"
    blocked_patterns: ClassVar[tuple[str, ...]] = (
        r"compiler is unavailable",
        *OpenAICompatAdapter.blocked_patterns,
    )

    def template_values(self, ctx: LaunchContext) -> dict[str, Any]:
        values = super().template_values(ctx)
        values["model_dir"] = str(Path(values["model"]).parent) if ctx.model.path else ""
        return values

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        if ctx.runtime.url:
            return None
        options = ctx.runtime.options
        recipe = ctx.arm.recipe
        values = self.template_values(ctx)
        argv = self.format_argv(ctx, ["omlx", "serve"])
        if values["model_dir"]:
            add_flag(argv, "--model-dir", values["model_dir"])
        add_flag(argv, "--host", ctx.host)
        add_flag(argv, "--port", ctx.port)
        add_flag(argv, "--max-concurrent-requests", recipe.slots)
        if options.get("base_path"):
            add_flag(argv, "--base-path", expand_path(str(options["base_path"])))
        if recipe.prefix_cache:
            cache_dir = Path(ctx.workdir) / "omlx-ssd-cache" / ctx.arm.id
            add_flag(argv, "--paged-ssd-cache-dir", str(cache_dir))
            add_flag(argv, "--hot-cache-max-size", size_string(recipe.prefix_cache))
            if recipe.session_cache_cap:
                add_flag(argv, "--paged-ssd-cache-max-size", size_string(recipe.session_cache_cap))
        else:
            add_flag(argv, "--no-cache")
        return self.spec(ctx, argv)

    def parse_identity(self, doc: Any) -> dict[str, Any]:
        models = doc.get("models") if isinstance(doc, Mapping) else None
        if not isinstance(models, list):
            return {}
        return {
            "model_status": [
                {k: m.get(k) for k in ("id", "model_type", "max_context_window", "loaded") if k in m}
                for m in models
                if isinstance(m, Mapping)
            ]
        }
