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

from collections.abc import Mapping
from typing import Any, ClassVar

from arms.runtimes import prometheus
from arms.runtimes.base import LaunchContext, LaunchSpec
from arms.runtimes.external import OpenAICompatAdapter, add_flag, expand_path
from arms.runtimes.registry import register

GIB = 1024**3
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE", "DFLASH", "DSPARK")


def add_spec_flags(argv: list[str], recipe: Any, options: Mapping[str, Any]) -> None:
    """EAGLE-style flags: steps = draft_k - 1, top-k 1, draft tokens = draft_k."""
    draft = recipe.draft or ""
    if draft.upper() in SPEC_ALGORITHMS:
        algorithm = draft.upper()
    else:
        algorithm = str(options.get("spec_algorithm", "EAGLE" if draft else "NGRAM")).upper()
        if draft:
            add_flag(argv, "--speculative-draft-model-path", expand_path(draft))
    add_flag(argv, "--speculative-algorithm", algorithm)
    if algorithm in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        add_flag(argv, "--speculative-num-steps", max(1, recipe.draft_k - 1))
        add_flag(argv, "--speculative-eagle-topk", 1)
    add_flag(argv, "--speculative-num-draft-tokens", recipe.draft_k)


@register
class SglangAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "sglang"
    description: ClassVar[str] = "SGLang server (RadixAttention prefix cache)"
    cached_tokens_field: ClassVar[str] = "usage.prompt_tokens_details.cached_tokens"
    metric_names: ClassVar[Mapping[str, str]] = {
        "prompt_tokens": "sglang:prompt_tokens_total",
        "cached_prompt_tokens": "sglang:cached_tokens_total",
        "generation_tokens": "sglang:generation_tokens_total",
        "queue_depth": "sglang:num_queue_reqs",
        "slots_busy": "sglang:num_running_reqs",
    }
    identity_path: ClassVar[str | None] = "/get_model_info"
    blocked_patterns: ClassVar[tuple[str, ...]] = (
        r"No CUDA GPUs are available",
        r"No module named 'sgl_kernel'",
        *OpenAICompatAdapter.blocked_patterns,
    )

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        if ctx.runtime.url:
            return None
        options = ctx.runtime.options
        recipe = ctx.arm.recipe
        argv = self.format_argv(ctx, ["python3", "-m", "sglang.launch_server"])
        add_flag(argv, ("--model-path", "--model"), self.template_values(ctx)["model"])
        add_flag(argv, "--host", ctx.host)
        add_flag(argv, "--port", ctx.port)
        if ctx.model.served_id:
            add_flag(argv, "--served-model-name", ctx.model.served_id)
        add_flag(argv, "--context-length", ctx.arm.context)
        add_flag(argv, "--max-running-requests", recipe.slots)
        add_flag(argv, "--chunked-prefill-size", recipe.prefill_chunk)
        if not recipe.prefix_cache:
            add_flag(argv, "--disable-radix-cache")
        elif options.get("hierarchical_cache"):
            # the radix cache lives in the KV pool; bytes here size the host-memory tier
            add_flag(argv, "--enable-hierarchical-cache")
            add_flag(argv, "--hicache-size", max(1, recipe.prefix_cache // GIB))
        add_flag(argv, "--enable-cache-report")
        add_flag(argv, "--enable-metrics")
        if recipe.speculative:
            add_spec_flags(argv, recipe, options)
        if ctx.tools and options.get("tool_call_parser"):
            add_flag(argv, "--tool-call-parser", options["tool_call_parser"])
        return self.spec(ctx, argv)

    def read_metrics(self, text: str) -> dict[str, float]:
        out = super().read_metrics(text)
        raw = prometheus.parse(text)
        if "sglang:spec_accept_length" in raw:
            out["spec_accept_length"] = raw["sglang:spec_accept_length"]
        return out

    def parse_identity(self, doc: Any) -> dict[str, Any]:
        if not isinstance(doc, Mapping):
            return {}
        keys = ("model_path", "tokenizer_path", "is_generation", "served_model_name")
        return {k: doc[k] for k in keys if k in doc}
