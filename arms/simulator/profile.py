"""Configuration of the embedded serving simulator.

Every knob that shapes the simulated engine lives here, as one pydantic model, so a
campaign file, the `campaign simulate` CLI and `python -m arms.simulator` all validate a
profile the same way. Durations and rates are in *model time* (seconds as the simulated
hardware would see them); `time_scale` divides every sleep, so a profile can describe a
slow workstation while a test runs in milliseconds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CachedTokensStyle = Literal["openai", "llamacpp", "omlx", "dspark"]

RUN_VARIATION = """Run-to-run variation is off by default for now (every sd 0): the level a
real llama-server varies between restarts on this machine kind is what
`benchmarks/restart_variation.py` measures (decode and prefill, within a run and between
starts), and its numbers have not yet been taken on a quiet machine. Until they are, a
campaign turns variation on per runtime (`[runtimes.options.profile] run_sd = 0.03`) or
per arm (`simulate = { run_sd = 0.03, drift_sd_per_min = 0.005 }`); the calibration
benchmark's model (`gates.calibration.VariationModel`) uses 3% between starts."""
RUN_SD = 0.0
PREFILL_RUN_SD_SCALE = 1.0
RUN_CORR = 1.0
DRIFT_SD_PER_MIN = 0.0


class FaultKnobs(BaseModel):
    """Deliberate misbehaviour, so the orchestrator's failure paths can be exercised.

    Each `*_every` knob counts its own kind of request (chat requests, or streamed chat
    requests) from 1; 0 turns the fault off.
    """

    model_config = ConfigDict(extra="forbid")

    refuse_start: str = Field(
        "", description="If set, print this message to stderr and exit 3 before listening."
    )
    crash_after_requests: int = Field(
        0, ge=0, description="Exit the process (code 1) after this many completed chat requests."
    )
    error_5xx_every: int = Field(0, ge=0, description="Every Nth chat request answers HTTP 503.")
    malformed_every: int = Field(
        0, ge=0, description="Every Nth streamed request carries one non-JSON SSE event."
    )
    stall_every: int = Field(
        0, ge=0, description="Every Nth streamed request stops sending mid-stream."
    )
    stall_after_tokens: int = Field(
        3, ge=0, description="How many tokens a stalled stream sends before it stops."
    )


class SimProfile(BaseModel):
    """A model of one serving recipe on one machine (see DESIGN.md, the simulator)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("sim-model", min_length=1, description="Served model id; also seeds greedy text.")
    slots: int = Field(4, ge=1, description="Parallel sequences (llama.cpp --parallel).")
    ctx_size: int = Field(32768, ge=2, description="Per-request limit on prompt + max_tokens.")
    prefill_tps: float = Field(4000.0, gt=0, description="Prompt tokens per second.")
    prefill_chunk: int = Field(512, ge=1, description="Max prefill tokens per engine step.")
    interleave_chunk: int | None = Field(
        None, ge=1, description="Max prefill tokens per step while another slot decodes (None = prefill_chunk)."
    )
    step_overhead_s: float = Field(0.002, ge=0, description="Fixed cost of every engine step.")
    decode_tps: float = Field(60.0, gt=0, description="Single-stream decode rate.")
    batch_penalty: float = Field(
        0.15, ge=0, description="Decode step time grows by this fraction per extra decoding slot."
    )
    kv_read_s_per_ktok: float = Field(
        0.0, ge=0, description="Extra decode step time per 1000 tokens of the longest context in the batch."
    )
    prefix_cache_tokens: int = Field(0, ge=0, description="Prefix cache capacity in tokens; 0 = off.")
    session_cap_tokens: int | None = Field(
        None, ge=0, description="A cache entry longer than this is not stored."
    )
    cache_min_match: int = Field(16, ge=1, description="Shortest prefix worth resuming from.")
    draft_k: int = Field(0, ge=0, description="Speculative draft length; 0 = speculation off.")
    acceptance: float = Field(0.8, ge=0, le=1, description="Per-draft-token acceptance probability.")
    draft_cost: float = Field(
        0.1, ge=0, description="Decode step time is multiplied by 1 + draft_cost * draft_k."
    )
    verify_kv_factor: float = Field(
        1.0, ge=0, description="Multiplies the KV-read term when speculation is on (MTP verify)."
    )
    prefill_speedup: float = Field(1.0, gt=0, description="Divides prefill time (prefill offloads).")
    disable_reuse: bool = Field(
        False, description="Never reuse slot or cache state (models SpecPrefill's cold warm cache)."
    )
    slot_memory_bytes: int = Field(940_000_000, ge=0, description="Resident state per slot.")
    base_memory_bytes: int = Field(2_000_000_000, ge=0, description="Weights and runtime overhead.")
    time_scale: float = Field(1.0, gt=0, description="Wall seconds = model seconds / time_scale.")
    seed: int = Field(0, description="Seeds sampled (non-greedy) text and draft acceptance.")
    default_max_tokens: int = Field(64, ge=1, description="Generation length when the request gives none.")
    reuse_ceiling_tokens: int | None = Field(
        None, ge=1, description="Prompts longer than this reuse nothing (a state bank that cannot hold them)."
    )
    tool_success_rate: float = Field(
        1.0, ge=0, le=1, description="Scripted tool policy: chance that a tool-loop final answer is right."
    )
    cached_tokens_style: CachedTokensStyle = Field(
        "openai", description="Which runtime's response field carries the cached-token count."
    )
    startup_delay_s: float = Field(0.0, ge=0, description="/health answers 503 loading this long.")
    # -- run-to-run variation (arms.simulator.variation); defaults measured, see RUN_VARIATION
    run_sd: float = Field(
        RUN_SD, ge=0, le=2,
        description=(
            "sd of log(decode rate) between server starts: a log-normal factor drawn once per start "
            "from run_seed multiplies the whole decode step's speed (decode_tps and KV read). "
            "0 (with drift_sd_per_min 0) = the deterministic engine. Measured: see RUN_VARIATION."
        ),
    )
    prefill_run_sd_scale: float = Field(
        PREFILL_RUN_SD_SCALE, ge=0,
        description="The prefill factor's sd is run_sd times this (so run_sd = 0 turns both off).",
    )
    run_corr: float = Field(
        RUN_CORR, ge=-1, le=1,
        description="Correlation of one start's prefill and decode draws (1 = one draw moves both).",
    )
    drift_sd_per_min: float = Field(
        DRIFT_SD_PER_MIN, ge=0, le=1,
        description=(
            "Slow drift during a run: a random walk on log(prefill and decode rate) over model time, "
            "sd of its change over one minute (after T minutes: this x sqrt(T)). 0 = none."
        ),
    )
    run_seed: int = Field(
        0, description="Seeds this server start's draw and drift, with seed: random.Random(f'run:{seed}:{run_seed}')."
    )
    faults: FaultKnobs = Field(default_factory=FaultKnobs)

    @property
    def speculative(self) -> bool:
        """Whether speculative decoding is on."""
        return self.draft_k > 0

    @property
    def effective_interleave_chunk(self) -> int:
        """The prefill budget of a step in which some other slot is decoding."""
        return self.interleave_chunk if self.interleave_chunk is not None else self.prefill_chunk

    @property
    def effective_prefill_run_sd(self) -> float:
        """sd of log(prefill rate) between server starts."""
        return self.run_sd * self.prefill_run_sd_scale

    @property
    def varies(self) -> bool:
        """Whether rates vary between starts or during a run (False: deterministic timings)."""
        return self.run_sd > 0 or self.drift_sd_per_min > 0

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes one cached token costs, derived from a full slot's state."""
        return self.slot_memory_bytes / self.ctx_size
