"""Run-to-run variation in the simulator: a rate factor per server start, and slow drift.

In process, on a virtual clock, so model times are exact and the file runs in seconds.
The statistical checks use fixed seeds (string-seeded `random.Random` is the same on
every machine), with tolerances that a knob ignored (spread 0) or doubled would fail.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from typing import Any

import pytest

from arms.runtimes.launching import LaunchContext
from arms.runtimes.simulator import SimulatorAdapter, profile_for
from arms.simulator.clock import VirtualClock
from arms.simulator.engine import Engine
from arms.simulator.profile import DRIFT_SD_PER_MIN, RUN_SD, SimProfile
from arms.simulator.variation import DRIFT_STEP_S, RunVariation
from campaign.core.schema import CampaignSpec

STILL = {"run_sd": 0.0, "drift_sd_per_min": 0.0}
EXACT = {
    "slots": 2,
    "prefill_tps": 1000.0,
    "prefill_chunk": 100,
    "step_overhead_s": 0.001,
    "decode_tps": 100.0,
    "batch_penalty": 0.0,
}


def decode_run(profile: SimProfile, *, prompt_tokens: int = 250, max_tokens: int = 20) -> list[float]:
    """Model times of every emission of one request on a fresh engine (one server start)."""

    async def scenario() -> list[float]:
        engine = Engine(profile, clock=VirtualClock(settle_yields=1))
        req = engine.submit([f"p{i}" for i in range(prompt_tokens)], max_tokens=max_tokens)
        times = [em.model_time for em in await req.collect()]
        await engine.stop()
        return times

    return asyncio.run(scenario())


def decode_rate(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0])


def test_still_profile_keeps_the_old_timings_exactly() -> None:
    """run_sd 0 and no drift: every step is the deterministic engine's, whatever run_seed."""
    reference = []
    t = 0.0
    for chunk in (100, 100, 50):  # cold prefill in three chunks; the first token with the last
        t = t + (0.001 + chunk / (1000.0 * 1.0))
        reference.append(t)
    for _ in range(19):
        t = t + (0.001 + 1.0 / 100.0 * (1.0 + 0.0 * 0))
        reference.append(t)
    for run_seed in (0, 1, 12345):
        profile = SimProfile(**EXACT, **STILL, run_seed=run_seed)
        assert not profile.varies
        times = decode_run(profile)
        assert times == reference[2:]  # exact floats, not approximately
        variation = RunVariation(profile)
        assert {variation.decode_factor(x) for x in (0.0, 1.0, 3600.0)} == {1.0}
        assert {variation.prefill_factor(x) for x in (0.0, 1.0, 3600.0)} == {1.0}


def test_variation_is_on_by_default_at_the_measured_level() -> None:
    """The defaults are benchmarks/restart_variation.py's numbers (RUN_VARIATION); the
    deterministic engine is one setting away."""
    profile = SimProfile()
    assert (profile.run_sd, profile.drift_sd_per_min) == (RUN_SD, DRIFT_SD_PER_MIN) == (0.035, 0.02)
    assert profile.effective_prefill_run_sd == pytest.approx(0.077) and profile.run_corr == 0.6
    assert profile.varies and not SimProfile(run_sd=0.0, drift_sd_per_min=0.0).varies


def test_starts_differ_by_run_seed_and_repeat_by_it() -> None:
    rates = {}
    for run_seed in (1, 2):
        profile = SimProfile(**EXACT, run_sd=0.05, drift_sd_per_min=0.0, run_seed=run_seed)
        first, again = decode_run(profile), decode_run(profile)
        assert first == again  # the same start reproduces exactly
        rates[run_seed] = decode_rate(first)
    assert rates[1] != rates[2]
    # and the campaign's seed (one per arm) is part of the draw
    other_arm = decode_rate(decode_run(SimProfile(**EXACT, run_sd=0.05, drift_sd_per_min=0.0, run_seed=1, seed=7)))
    assert other_arm != rates[1]


def spread_over_starts(n: int = 200, **knobs: Any) -> tuple[list[float], list[float]]:
    """Log decode and log prefill rates (relative to the profile's) of n starts, measured
    from the engine's emission times: decode from the gaps, prefill from the cold TTFT."""
    log_decode, log_prefill = [], []
    for run_seed in range(n):
        profile = SimProfile(
            slots=1,
            prefill_tps=1000.0,
            prefill_chunk=1000,
            step_overhead_s=0.0,
            decode_tps=100.0,
            drift_sd_per_min=0.0,
            run_seed=run_seed,
            **knobs,
        )
        times = decode_run(profile, prompt_tokens=500, max_tokens=6)
        log_decode.append(math.log(decode_rate(times) / 100.0))
        log_prefill.append(math.log(500 / times[0] / 1000.0))
    return log_decode, log_prefill


def test_spread_of_the_start_factor_is_run_sd() -> None:
    log_decode, log_prefill = spread_over_starts(run_sd=0.05, prefill_run_sd_scale=2.0, run_corr=0.5)
    # sd of 200 normal draws: standard error about 5%, so +-20% is four of them; an ignored
    # knob (0), a doubled one (0.10) or a halved one (0.025) fails
    assert statistics.stdev(log_decode) == pytest.approx(0.05, rel=0.2)
    assert statistics.stdev(log_prefill) == pytest.approx(0.10, rel=0.2)
    assert abs(statistics.fmean(log_decode)) < 4 * 0.05 / math.sqrt(200)  # centred on the profile's rate
    assert statistics.correlation(log_decode, log_prefill) == pytest.approx(0.5, abs=0.2)
    # run_corr 1 (one draw moves both), run_sd 0 turns both off
    tied_decode, tied_prefill = spread_over_starts(n=20, run_sd=0.05, prefill_run_sd_scale=1.0, run_corr=1.0)
    assert tied_decode == pytest.approx(tied_prefill, abs=1e-9)
    off_decode, off_prefill = spread_over_starts(n=5, run_sd=0.0, prefill_run_sd_scale=2.0)
    assert off_decode == pytest.approx([0.0] * 5, abs=1e-12) and off_prefill == pytest.approx([0.0] * 5, abs=1e-12)


def test_drift_grows_like_a_random_walk() -> None:
    """The change of the log-rate over T minutes has sd drift_sd_per_min * sqrt(T)."""
    drift = 0.02
    for minutes in (1.0, 16.0):
        changes = []
        for run_seed in range(300):
            variation = RunVariation(SimProfile(run_sd=0.0, drift_sd_per_min=drift, run_seed=run_seed))
            start = 30.0  # any point of the run: the increments are stationary
            changes.append(math.log(variation.decode_factor(start + 60 * minutes) / variation.decode_factor(start)))
        # 300 draws: standard error of the sd about 4%; +-20% fails a knob ignored or doubled
        assert statistics.stdev(changes) == pytest.approx(drift * math.sqrt(minutes), rel=0.2), minutes
    # the drift starts at 0 with the server, and one walk moves prefill and decode together
    variation = RunVariation(SimProfile(run_sd=0.0, drift_sd_per_min=drift, run_seed=3))
    assert variation.decode_factor(0.0) == 1.0
    assert variation.decode_factor(1234.5) == variation.prefill_factor(1234.5) != 1.0
    # continuous: no jump between two engine steps, even across a grid point of the walk
    before, after = variation.drift(DRIFT_STEP_S * 7 - 1e-3), variation.drift(DRIFT_STEP_S * 7 + 1e-3)
    assert abs(after - before) < 1e-3


def test_engine_steps_follow_the_drift_over_a_long_run() -> None:
    """A decode of 20 model minutes: each step's length is the drifted one, and the rate
    at the end differs from the start by the walk's value there."""
    profile = SimProfile(
        slots=1,
        prefill_tps=1000.0,
        step_overhead_s=0.0,
        decode_tps=1.0,
        batch_penalty=0.0,
        run_sd=0.0,
        drift_sd_per_min=0.05,
        run_seed=11,
    )
    times = decode_run(profile, prompt_tokens=10, max_tokens=1200)
    variation = RunVariation(profile)
    for a, b in zip(times[1:], times[2:]):
        assert b - a == pytest.approx(1.0 / variation.decode_factor(a), rel=1e-12)
    early, late = 1.0 / (times[2] - times[1]), 1.0 / (times[-1] - times[-2])
    assert math.log(late / early) == pytest.approx(variation.drift(times[-2]) - variation.drift(times[1]), abs=1e-9)
    assert times[-1] > 19 * 60  # about 20 minutes of model time
    assert abs(math.log(late / early)) > 1e-3  # it did move


def _spec(options: dict[str, Any], simulate: dict[str, Any] | None = None) -> CampaignSpec:
    arm: dict[str, Any] = {"id": "A", "model": "m", "runtime": "sim", "context": 4096, "recipe": {"slots": 2}}
    if simulate is not None:
        arm["simulate"] = simulate
    return CampaignSpec.model_validate(
        {
            "campaign": {"name": "variation"},
            "models": [{"name": "m", "quant": "q4", "bits_per_weight": 4.5, "served_id": "m-q4"}],
            "runtimes": [{"name": "sim", "adapter": "simulator", "options": options}],
            "arms": [arm],
            "queue": [{"title": "q", "arms": ["A"], "probes": ["decode"]}],
        }
    )


def test_run_seed_and_knobs_reach_the_profile_from_the_launch() -> None:
    spec = _spec({"profile": {"run_sd": 0.03, "drift_sd_per_min": 0.0}})
    arm = spec.arm("A")
    ctx = LaunchContext(arm=arm, model=spec.model_for(arm), runtime=spec.runtime("sim"), port=1, seed=5, run_seed=42)
    profile = SimProfile.model_validate(profile_for(ctx, SimulatorAdapter().read_options(ctx.runtime)))
    assert (profile.run_seed, profile.seed, profile.run_sd, profile.drift_sd_per_min) == (42, 5, 0.03, 0.0)
    # an arm's simulate table wins over the runtime's profile
    spec = _spec({"profile": {"run_sd": 0.03}}, simulate={"run_sd": 0.0})
    arm = spec.arm("A")
    ctx = LaunchContext(arm=arm, model=spec.model_for(arm), runtime=spec.runtime("sim"), port=1)
    profile = SimProfile.model_validate(profile_for(ctx, SimulatorAdapter().read_options(ctx.runtime)))
    assert profile.run_sd == 0.0 and profile.run_seed == 0
    assert profile.drift_sd_per_min == DRIFT_SD_PER_MIN  # not set anywhere: the measured default
