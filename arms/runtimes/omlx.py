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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from arms.runtimes.launching import HOST_PORT, LaunchContext, LaunchFacts, Row, RuntimeOptions, flag, workdir_path
from arms.runtimes.openai_compat import OpenAICompatAdapter, expand_path, size_string
from arms.runtimes.registry import register
from arms.runtimes.start_failures import BLOCKED_ANYWHERE, StartFailures
from arms.runtimes.telemetry import Telemetry


class OmlxOptions(RuntimeOptions):
    base_path: str | None = Field(None, min_length=1, description="the server's --base-path (models and its SSD cache)")


def size_of(fact: str) -> Callable[[LaunchFacts], str]:
    """Bytes as the `8GB` / `512MB` strings oMLX parses."""
    return lambda facts: size_string(facts[fact])


@register
@dataclass(frozen=True)
class OmlxAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "omlx"
    description: ClassVar[str] = "oMLX multi-model server (paged SSD prefix cache)"
    options_model: ClassVar[type[RuntimeOptions]] = OmlxOptions
    telemetry: ClassVar[Telemetry] = Telemetry(cached_tokens_field="usage.cached_tokens", metrics_path=None)
    start_failures: ClassVar[StartFailures] = StartFailures(
        blocked_patterns=(
            r"compiler is unavailable",
            *BLOCKED_ANYWHERE,
        ),
    )
    default_argv: ClassVar[tuple[str, ...]] = ("omlx", "serve")
    flags: ClassVar[tuple[Row, ...]] = (
        flag("--model-dir", "model_dir", when="model_dir"),
        *HOST_PORT,
        flag("--max-concurrent-requests", "slots"),
        flag("--base-path", lambda facts: expand_path(facts["options.base_path"]), when="options.base_path"),
        flag("--paged-ssd-cache-dir", workdir_path("omlx-ssd-cache"), when="prefix_cache"),
        flag("--hot-cache-max-size", size_of("prefix_cache"), when="prefix_cache"),
        flag("--paged-ssd-cache-max-size", size_of("session_cache_cap"), when=("prefix_cache", "session_cache_cap")),
        flag("--no-cache", unless="prefix_cache"),
    )
    identity_path: ClassVar[str | None] = "/v1/models/status"

    def template_values(self, ctx: LaunchContext, opts: RuntimeOptions) -> dict[str, Any]:
        values = super().template_values(ctx, opts)
        values["model_dir"] = str(Path(values["model"]).parent) if ctx.model.path else ""
        return values

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
