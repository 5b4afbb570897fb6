"""mlx-dspark (`mlx-dspark serve`: DSpark / DFlash / lookup speculation on Apple silicon).

What it reports, and where:
- every response carries an `x_mlx_dspark` block: `cached_tokens` (what the prefix cache
  served; the authoritative field here), `prompt_tokens`, `mode`, `cap`, `accept_len`,
  `target_forwards` and timings. It has no drafted/accepted token counts, so those are
  never read; `target_forwards` is (summed over a decode run's timed responses, beside
  the tokens they generated: one forward a token in baseline mode, fewer when drafts
  were accepted). `usage.prompt_tokens_details.cached_tokens` is filled too.
- `/metrics` is JSON (shape of mlx-dspark 0.20.3, read from its server and recorded in
  tests/fixtures/runtimes/mlx_dspark_metrics.json): cumulative `prompt_tokens` and
  `completion_tokens` at the top; the prefix cache under `prefix_cache` (`hits`,
  `partial_hits`, `reused_tokens`: no lookup count); speculation under `rounds` as
  ratios only (`draft_acceptance`, `mean_accept_len`), returned under those names, not
  as drafted/accepted counters it does not keep; the allocator under
  `memory.active_bytes`. No queue gauge: requests beyond `--max-batch` wait inside the
  server unreported.
- `/health` answers 200 while loading with `status: loading`; ready means `status: ok`.
- speculation: `recipe.draft` is a mode (`dspark`, `dflash`, `lookup`) or a drafter repo
  or path (`--drafter`, mode `dspark`); `recipe.draft_k` is the per-round cap (`--max-draft`).
  Not speculative = `--mode baseline`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from arms.runtimes.base import HealthStatus
from arms.runtimes.launching import (
    HOST_PORT,
    Const,
    Flag,
    LaunchFacts,
    Row,
    Rows,
    RuntimeOptions,
    fixed,
    flag,
    whole,
    workdir_path,
)
from arms.runtimes.mlx_model import MlxFolderOptions, prepared_folder
from arms.runtimes.openai_compat import OpenAICompatAdapter, expand_path
from arms.runtimes.registry import register
from arms.runtimes.telemetry import Telemetry

MIB = 1024**2
MODES = ("dspark", "dflash", "lookup")


class MlxDsparkOptions(MlxFolderOptions):
    prefix_cache_slots: int | None = Field(
        None,
        ge=1,
        description="prefix-cache entries kept (--prefix-cache-slots; unset: as many as the slots, at least 2)",
    )


def mode_flags(facts: LaunchFacts) -> list[Flag]:
    """`recipe.draft` is a mode, or a drafter (mode `dspark`); none = `auto`."""
    draft = facts.recipe.draft or "auto"
    if draft in MODES or draft == "auto":
        return [fixed("--mode", draft)]
    return [fixed("--mode", "dspark"), fixed("--drafter", expand_path(draft))]


@register
@dataclass(frozen=True)
class MlxDsparkAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "mlx-dspark"
    distribution: ClassVar[str] = "mlx-dspark"
    description: ClassVar[str] = "mlx-dspark server (speculative decoding with a DSpark drafter)"
    options_model: ClassVar[type[RuntimeOptions]] = MlxDsparkOptions
    telemetry: ClassVar[Telemetry] = Telemetry(
        cached_tokens_field="x_mlx_dspark.cached_tokens",
        metrics_format="json",
        metric_names={
            "prompt_tokens": "prompt_tokens",
            "cached_prompt_tokens": "prefix_cache.reused_tokens",
            "generation_tokens": "completion_tokens",
            "cache_hits": "prefix_cache.hits",
            "memory_bytes": "memory.active_bytes",
        },
        # ratios over the server's life, not counters: kept under their own names
        extra_metrics={
            "draft_acceptance": "rounds.draft_acceptance",
            "spec_accept_length": "rounds.mean_accept_len",
            "cache_partial_hits": "prefix_cache.partial_hits",
        },
        # per response: the target model's forward passes, the one speculation count it gives
        request_counter_fields=("x_mlx_dspark", {"target_forwards": "target_forwards"}),
    )
    # the campaign's interpreter: a console script is on PATH only in an activated venv
    default_argv: ClassVar[tuple[str, ...]] = (sys.executable, "-m", "mlx_dspark", "serve")
    flags: ClassVar[tuple[Row, ...]] = (
        flag("--model", prepared_folder),
        *HOST_PORT,
        flag("--context-window", "context"),
        flag("--max-batch", "slots"),
        Rows(mode_flags, when="speculative"),
        flag("--max-draft", "draft_k", when="speculative"),
        flag("--mode", Const("baseline"), unless="speculative"),
        flag(
            "--prefix-cache-slots",
            lambda facts: facts["options.prefix_cache_slots"] or max(2, facts["slots"]),
            when="prefix_cache",
        ),
        flag("--prefix-cache-dir", workdir_path("dspark-prefix-cache"), when="prefix_cache"),
        flag("--prefix-cache-max-ram-mb", whole("prefix_cache", MIB), when="prefix_cache"),
        flag("--no-prefix-cache", unless="prefix_cache"),
    )
    health_status: ClassVar[HealthStatus | None] = HealthStatus(ready=("ok",))
    # `/health` names the target, the drafter and the serving policy in force
    identity_path: ClassVar[str | None] = "/health"
    identity_keys: ClassVar[tuple[str, ...]] = (
        "model",
        "target",
        "drafter",
        "mode",
        "max_draft",
        "context_window",
        "kv_bits",
    )
