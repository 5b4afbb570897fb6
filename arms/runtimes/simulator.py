"""The embedded simulator as a runtime: the recipe becomes a simulator profile.

The runtime entry's `options.profile` holds engine knobs (rates, time scale, faults); the
arm's recipe supplies slots, chunks, cache sizes and speculation, as it would for a real
runtime, so the same campaign file shape serves both. Each server start gets the launch's
`run_seed`, from which the simulator draws that start's rate factor (run-to-run variation,
`arms.simulator.variation`); `run_sd`, `drift_sd_per_min` and their kin are profile knobs
like any other (runtime `options.profile`, an arm's `simulate`, `sim.*` overrides).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field

from arms.runtimes.base import RuntimeAdapter
from arms.runtimes.launching import HOST_PORT, LaunchContext, LaunchFacts, Row, RuntimeOptions, flag
from arms.runtimes.registry import register
from arms.runtimes.start_failures import StartFailures
from arms.runtimes.telemetry import Telemetry
from arms.simulator.profile import SimProfile
from campaign.core.schema import OverrideKeys

REFUSED_EXIT_CODE = 3


class SimulatorOptions(RuntimeOptions):
    profile: SimProfile = Field(
        default_factory=SimProfile,
        description="the simulated engine's fields (arms.simulator.profile.SimProfile): rates, time scale, faults",
    )
    reference_bits: float | None = Field(
        None,
        gt=0,
        description="bits per weight the profile's decode_tps is for: a model's decode_tps becomes decode_tps x reference_bits / its bits_per_weight (unset: as written)",
    )
    session_cap_bounds_reuse: bool = Field(
        False,
        description="true: a prompt longer than the recipe's session_cache_cap reuses nothing (like MTPLX's session bank); false: a longer cache entry is only not stored",
    )


def profile_for(ctx: LaunchContext, options: SimulatorOptions) -> dict[str, Any]:
    """The simulator's profile for this launch: `options` (the runtime's, as the launch
    validated them) first, then the recipe, the arm's `simulate` and `sim.*` overrides."""
    recipe = ctx.arm.recipe
    # only what the file set: the simulator fills the rest from its own defaults
    profile: dict[str, Any] = options.profile.model_dump(exclude_unset=True)
    profile.update(
        model=ctx.model.request_id,
        slots=recipe.slots,
        ctx_size=ctx.arm.context,
        prefill_chunk=recipe.prefill_chunk,
        seed=ctx.seed,
        run_seed=ctx.run_seed,
    )
    if recipe.interleave_chunk is not None:
        profile["interleave_chunk"] = recipe.interleave_chunk
    kv = ctx.model.kv_bytes_per_token
    profile["prefix_cache_tokens"] = (recipe.prefix_cache // kv) if recipe.prefix_cache else 0
    if recipe.session_cache_cap is not None:
        cap = recipe.session_cache_cap // kv
        # Engines differ in what a per-session cap bounds: entries of a prefix cache
        # (llama.cpp-like), or the session bank that holds all of a session's KV
        # (MTPLX-like: a prompt the bank cannot hold reuses nothing).
        if options.session_cap_bounds_reuse:
            profile["reuse_ceiling_tokens"] = max(1, cap)
        else:
            profile["session_cap_tokens"] = cap
    profile["draft_k"] = recipe.draft_k if recipe.speculative else 0
    # Quants: fewer bits per weight decode faster on a memory-bound engine.
    if options.reference_bits and "decode_tps" in profile:
        profile["decode_tps"] = profile["decode_tps"] * options.reference_bits / ctx.model.bits_per_weight
    profile.update(ctx.arm.simulate)
    profile.update(OverrideKeys.of(ctx.overrides).sim)
    return profile


_STYLE_FIELDS = {
    "openai": "usage.prompt_tokens_details.cached_tokens",
    "llamacpp": "timings.cache_n",
    "omlx": "usage.cached_tokens",
    "dspark": "x_mlx_dspark.cached_tokens",
}


def profile_json(facts: LaunchFacts) -> str:
    return json.dumps(profile_for(facts.ctx, facts.opts_as(SimulatorOptions)), sort_keys=True)


@register
@dataclass(frozen=True)
class SimulatorAdapter(RuntimeAdapter):
    """The argv is always the embedded simulator's own (the runtime entry's argv and the
    recipe's extra_args do not apply); the profile carries everything."""

    name: ClassVar[str] = "simulator"
    simulated: ClassVar[bool] = True
    description: ClassVar[str] = "embedded serving simulator (rows are marked simulated)"
    options_model: ClassVar[type[RuntimeOptions]] = SimulatorOptions
    default_argv: ClassVar[tuple[str, ...]] = ("{python}", "-m", "arms.simulator")
    uses_runtime_argv: ClassVar[bool] = False
    appends_extra_args: ClassVar[bool] = False
    search_fields: ClassVar[frozenset[str]] = RuntimeAdapter.search_fields | {"interleave_chunk"}
    flags: ClassVar[tuple[Row, ...]] = (*HOST_PORT, flag("--profile-json", profile_json))

    cache_flush: ClassVar[str | None] = "/flush_cache"
    telemetry: ClassVar[Telemetry] = Telemetry(
        metric_names={
            "cache_lookups": "sim_cache_lookups_total",
            "cache_hits": "sim_cache_hits_total",
            "prompt_tokens": "sim_prompt_tokens_total",
            "cached_prompt_tokens": "sim_prompt_tokens_cached_total",
            "generation_tokens": "sim_generation_tokens_total",
            "draft_tokens": "sim_draft_tokens_total",
            "accepted_tokens": "sim_draft_accepted_tokens_total",
            "queue_depth": "sim_requests_deferred",
            "slots_busy": "sim_slots_busy",
            "memory_bytes": "sim_memory_bytes",
        }
    )
    # the simulator refuses a recipe it cannot serve with its own exit code
    start_failures: ClassVar[StartFailures] = StartFailures(blocked_exit_codes=frozenset({REFUSED_EXIT_CODE}))

    def template_values(self, ctx: LaunchContext, opts: RuntimeOptions) -> dict[str, Any]:
        return {**super().template_values(ctx, opts), "python": sys.executable}

    def launch_cached_tokens_field(self, facts: LaunchFacts) -> str | None:
        """A profile's `cached_tokens_style` makes the simulator answer like another runtime."""
        style = profile_for(facts.ctx, facts.opts_as(SimulatorOptions)).get("cached_tokens_style")
        return _STYLE_FIELDS[style] if style else None

    def version(self, identity: Mapping[str, Any]) -> str:
        """The simulator's build as its /v1/models says (the profile's `build`)."""
        for entry in identity.get("models_meta") or []:
            meta = entry.get("meta") if isinstance(entry, Mapping) else None
            if isinstance(meta, Mapping) and meta.get("build"):
                return f"simulator build {meta['build']}"
        return "simulator"
