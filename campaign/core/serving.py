"""What an arm serves and how: the model entry, the runtime entry, the sampling a model
asks for, and the serving recipe whose fields the adapters turn into flags.

Why apart from the campaign file's other tables: these are the values an arm's identity
and its server's command line are made of, read by the adapters, the pooling check and
the pages; the campaign file (`schema`) holds them as its `[[models]]`, `[[runtimes]]` and
`[arms.recipe]` tables.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from campaign.core.units import parse_size

# an id, a device or a host: what can also name a Prefect deployment, tag and limit
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
ID_PATTERN = rf"^{NAME}$"
HOST_PATTERN = rf"^({NAME})?$"  # empty: where `campaign run` runs


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)


class Sampling(Strict):
    """The model vendor's sampling parameters: what `canonical` mode sends.

    `ignore_eos` and `min_tokens` set how long replies are, not how tokens are drawn, so
    greedy requests send them too; a probe's own values win (decode sends both by default,
    so that every trial generates exactly max_tokens).
    """

    temperature: float = Field(default=1.0, ge=0, description="sampling temperature of canonical requests")
    top_p: float | None = Field(default=None, gt=0, le=1, description="nucleus sampling; sent only when set")
    top_k: int | None = Field(default=None, ge=0, description="top-k sampling; sent only when set")
    min_p: float | None = Field(default=None, ge=0, le=1, description="min-p sampling; sent only when set")
    presence_penalty: float | None = Field(default=None, description="sent only when set")
    repetition_penalty: float | None = Field(
        default=None, description="sent only when set, under the runtime's own name (llama.cpp: repeat_penalty)"
    )
    ignore_eos: bool | None = Field(
        default=None, description="keep generating past end-of-sequence (llama.cpp, vLLM, SGLang)"
    )
    min_tokens: int | None = Field(
        default=None, ge=0, description="no end-of-sequence before this many tokens (vLLM, SGLang)"
    )


class ModelEntry(Strict):
    name: str = Field(description="the model's name; an arm names it in `model`")
    quant: str = Field(
        description="the quantisation (q4_k_m, awq, ...); a name may have several entries, one per quant"
    )
    bits_per_weight: float = Field(
        gt=0,
        le=32,
        description="shown in the report; on the simulator, decode speed scales with options.reference_bits / bits_per_weight",
    )
    served_id: str | None = Field(
        default=None, description="the id the server should report; identity is checked against it"
    )
    path: str | None = Field(default=None, description="model file or directory, for runtimes that load one")
    kv_bytes_per_token: int = Field(default=131072, ge=1, description="converts cache sizes in bytes to tokens")
    sampling: Sampling = Field(default_factory=Sampling, description="the vendor's sampling, sent in canonical mode")
    description: str = Field(default="", description="free text, shown in the report")

    @property
    def key(self) -> str:
        return f"{self.name}/{self.quant}"

    @property
    def request_id(self) -> str:
        """The model id requests name: `served_id`, else name-quant (what a runtime that
        takes a served name is launched with, so the two agree)."""
        return self.served_id or f"{self.name}-{self.quant}"


class RuntimeEntry(Strict):
    name: str = Field(pattern=ID_PATTERN, description="the runtime's name; an arm names it in `runtime`")
    adapter: str = Field(
        description="what launches and reads the server: simulator, llamacpp, vllm, sglang, mlx-lm, omlx, mtplx, "
        "mlx-dspark, or external (a server at `url`, never launched); see docs/runtimes.md",
    )
    argv: list[str] = Field(default_factory=list, description="launch argv template; {placeholders} filled per arm")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables added to the server's own")
    health_path: str = Field(default="/health", description="polled after the start; probes begin once it answers 200")
    startup_timeout_s: float = Field(
        default=120.0, gt=0, description="seconds the server gets to become healthy before the start fails"
    )
    url: str | None = Field(default=None, description="external server: measure this URL, launch nothing")
    device: str = Field(default="local", pattern=ID_PATTERN, description="arms on one device never run at once")
    host: str = Field(
        default="",
        pattern=HOST_PATTERN,
        description="the host (a `campaign worker --host NAME`) its arms run on; empty: where `campaign run` runs",
    )
    seeks: str = Field(default="", description="what this runtime offers")
    how: str = Field(default="", description="how it serves (free text, shown in the report)")
    cost: str = Field(default="", description="what it costs")
    options: dict[str, Any] = Field(default_factory=dict, description="adapter-specific settings")


class Recipe(Strict):
    """The serving recipe: the knobs a person tunes."""

    slots: int = Field(
        default=1, ge=1, le=1024, description="sequences the server runs at once (llama.cpp -np, vLLM --max-num-seqs)"
    )
    prefill_chunk: int = Field(
        default=512, ge=1, description="prompt tokens per engine step (llama.cpp -b/-ub, vLLM --max-num-batched-tokens)"
    )
    interleave_chunk: int | None = Field(
        default=None,
        ge=1,
        description="prompt tokens per step while another slot decodes; only the simulator has this knob (absent = prefill_chunk)",
    )
    prefix_cache: int | None = Field(
        default=None, description="prefix-cache size with its unit (8G, 256M, 512MiB); absent = off"
    )
    session_cache_cap: int | None = Field(default=None, description="per-session cache cap with its unit (48G, 512M)")
    speculative: bool = Field(default=False, description="speculative decoding on")
    draft: str | None = Field(default=None, description="draft model or speculative method")
    draft_k: int = Field(default=4, ge=1, le=64, description="tokens drafted per step when speculative")
    offloads: list[str] = Field(
        default_factory=list,
        description="names of work moved off the main path ('specprefill'); part of the recipe and of the 'offloads' "
        "mechanism an attribution gate may credit; no adapter turns them into flags (use extra_args)",
    )
    extra_args: list[str] = Field(default_factory=list, description="appended to the runtime argv")

    @field_validator("prefix_cache", "session_cache_cap", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_size(value)

    @model_validator(mode="after")
    def _draft_needs_spec(self) -> Recipe:
        if self.draft and not self.speculative:
            raise ValueError("draft is set but speculative = false; set speculative = true or remove draft")
        return self


def recipe_differences(a: Recipe, b: Recipe) -> list[str]:
    """The recipe fields in which two recipes differ, in the order Recipe declares them."""
    return [name for name in Recipe.model_fields if getattr(a, name) != getattr(b, name)]
