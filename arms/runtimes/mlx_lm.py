"""mlx-lm's `mlx_lm.server` (Apple silicon) as a runtime.

What it reports, and where:
- cached prompt tokens per request: `usage.prompt_tokens_details.cached_tokens`
  (the LRU prompt cache's reuse).
- no /metrics endpoint at all: no queue depth, no cache or draft counters
  (`metrics_path` is None, so probes do not ask).
- speculation only with a draft model (`--draft-model`, `--num-draft-tokens`).
- requests name the model `default_model` (mlx-lm's name for its `--model`): any other
  name is taken as a Hugging Face repo to load, and answered 404 when there is none.
- health: `/health`; identity: `/v1/models` (the Hugging Face cache scan, then the
  loaded folder's resolved path; where the cache folder does not exist the scan fails
  after the status line and the body is empty).
- model: a folder (config.json, safetensors, tokenizer); `options.gguf` writes it on
  first use from a GGUF (`arms.runtimes.mlx_model`), so the arm serves the same weights a
  llama.cpp arm serves.

Run for real in the test suite on CPU (mlx-cpu on Linux): `tests/e2e/test_mlx_lm.py`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from arms.runtimes.dialect import Dialect
from arms.runtimes.launching import HOST_PORT, Const, LaunchFacts, Row, RuntimeOptions, flag
from arms.runtimes.mlx_model import MlxFolderOptions, prepared_folder
from arms.runtimes.openai_compat import OpenAICompatAdapter, expand_path
from arms.runtimes.registry import register
from arms.runtimes.telemetry import Telemetry


def draft_model(facts: LaunchFacts) -> str:
    """The draft model: mlx-lm speculates with nothing else, so a recipe without one is refused."""
    if not facts.recipe.draft:
        raise ValueError(f"arm {facts.ctx.arm.id!r}: mlx-lm speculates only with a draft model; set recipe.draft")
    return expand_path(facts.recipe.draft)


@register
@dataclass(frozen=True)
class MlxLmAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "mlx-lm"
    distribution: ClassVar[str] = "mlx-lm"
    description: ClassVar[str] = "mlx-lm HTTP server (mlx_lm.server)"
    # the campaign's interpreter: a console script is on PATH only in an activated venv
    default_argv: ClassVar[tuple[str, ...]] = (sys.executable, "-m", "mlx_lm", "server")
    flags: ClassVar[tuple[Row, ...]] = (
        flag("--model", prepared_folder),
        *HOST_PORT,
        flag("--decode-concurrency", "slots"),
        flag("--prompt-concurrency", "slots"),
        flag("--prefill-step-size", "prefill_chunk"),
        flag("--prompt-cache-bytes", "prefix_cache", when="prefix_cache"),
        flag("--prompt-cache-size", Const(0), unless="prefix_cache"),
        flag("--draft-model", draft_model, when="speculative"),
        flag("--num-draft-tokens", "draft_k", when="speculative"),
    )
    telemetry: ClassVar[Telemetry] = Telemetry(metrics_path=None)  # no metrics page
    dialect: ClassVar[Dialect] = Dialect(request_model="default_model")  # its name for --model; others it loads
    options_model: ClassVar[type[RuntimeOptions]] = MlxFolderOptions
