"""SGLang (`python -m sglang.launch_server`) as a runtime.

What it reports, and where:
- cached prompt tokens per request: `usage.prompt_tokens_details.cached_tokens`, only
  with `--enable-cache-report` (always passed here).
- counters need `--enable-metrics` (always passed): queue depth `sglang:num_queue_reqs`,
  running `sglang:num_running_reqs`, `sglang:prompt_tokens_total`,
  `sglang:cached_tokens_total` (labelled by cache source; summed), `sglang:generation_tokens_total`.
- prefix-cache lookups/hits: no counters (RadixAttention reports a hit *rate* gauge).
- speculation: no cumulative draft/accepted counters; `sglang:spec_accept_length` is a
  recent-interval gauge, returned as `spec_accept_length` beside the logical names.
- identity: `/get_model_info` (model and tokenizer paths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from arms.runtimes.launching import HOST_PORT, Flag, LaunchFacts, Row, Rows, RuntimeOptions, fixed, flag, whole
from arms.runtimes.openai_compat import OpenAICompatAdapter, expand_path
from arms.runtimes.registry import register
from arms.runtimes.start_failures import BLOCKED_ANYWHERE, StartFailures
from arms.runtimes.telemetry import Telemetry

GIB = 1024**3
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE", "DFLASH", "DSPARK")


class SglangOptions(RuntimeOptions):
    spec_algorithm: str | None = Field(
        None,
        min_length=1,
        description="speculative algorithm, any case (unset: EAGLE with a draft model, else NGRAM)",
    )
    hierarchical_cache: bool = Field(
        False,
        description="turn on the hierarchical (host-memory) cache, as much as recipe.prefix_cache (--hicache-size)",
    )
    tool_call_parser: str | None = Field(
        None, min_length=1, description="tool-call parser (--tool-call-parser), for probes that send tools"
    )


def spec_flags(facts: LaunchFacts) -> list[Flag]:
    """EAGLE-style flags: steps = draft_k - 1, top-k 1, draft tokens = draft_k."""
    recipe = facts.recipe
    draft = recipe.draft or ""
    out: list[Flag] = []
    if draft.upper() in SPEC_ALGORITHMS:
        algorithm = draft.upper()
    else:
        algorithm = (facts.opts_as(SglangOptions).spec_algorithm or ("EAGLE" if draft else "NGRAM")).upper()
        if draft:
            out.append(fixed("--speculative-draft-model-path", expand_path(draft)))
    out.append(fixed("--speculative-algorithm", algorithm))
    if algorithm in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        out += [fixed("--speculative-num-steps", max(1, recipe.draft_k - 1)), fixed("--speculative-eagle-topk", 1)]
    out.append(fixed("--speculative-num-draft-tokens", recipe.draft_k))
    return out


HICACHE = ("prefix_cache", "options.hierarchical_cache")


@register
@dataclass(frozen=True)
class SglangAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "sglang"
    distribution: ClassVar[str] = "sglang"
    cache_flush: ClassVar[str | None] = "/flush_cache"  # documented; SGLang cannot run here
    description: ClassVar[str] = "SGLang server (RadixAttention prefix cache)"
    options_model: ClassVar[type[RuntimeOptions]] = SglangOptions
    default_argv: ClassVar[tuple[str, ...]] = ("python3", "-m", "sglang.launch_server")
    flags: ClassVar[tuple[Row, ...]] = (
        flag(("--model-path", "--model"), "model"),
        *HOST_PORT,
        flag("--served-model-name", lambda facts: facts.ctx.model.request_id),  # else it serves under the path
        flag("--context-length", "context"),
        flag("--max-running-requests", "slots"),
        flag("--chunked-prefill-size", "prefill_chunk"),
        flag("--disable-radix-cache", unless="prefix_cache"),
        # the radix cache lives in the KV pool; bytes here size the host-memory tier
        flag("--enable-hierarchical-cache", when=HICACHE),
        flag("--hicache-size", whole("prefix_cache", GIB), when=HICACHE),
        flag("--enable-cache-report"),
        flag("--enable-metrics"),
        Rows(spec_flags, when="speculative"),
        flag("--tool-call-parser", "options.tool_call_parser", when=("tools", "options.tool_call_parser")),
    )
    telemetry: ClassVar[Telemetry] = Telemetry(
        metric_names={
            "prompt_tokens": "sglang:prompt_tokens_total",
            "cached_prompt_tokens": "sglang:cached_tokens_total",
            "generation_tokens": "sglang:generation_tokens_total",
            "queue_depth": "sglang:num_queue_reqs",
            "slots_busy": "sglang:num_running_reqs",
        },
        extra_metrics={"spec_accept_length": "sglang:spec_accept_length"},
    )
    start_failures: ClassVar[StartFailures] = StartFailures(
        blocked_patterns=(
            r"No CUDA GPUs are available",
            r"No module named 'sgl_kernel'",
            # PyPI's sglang on a machine without NVIDIA's driver: its kernel package loads libcuda
            r"No accelerator .* is available",
            r"libcuda\.so",
            *BLOCKED_ANYWHERE,
        ),
    )
    identity_path: ClassVar[str | None] = "/get_model_info"
    identity_keys: ClassVar[tuple[str, ...]] = ("model_path", "tokenizer_path", "is_generation", "served_model_name")
