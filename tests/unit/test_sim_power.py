"""The simulated accelerator's power model (`arms.simulator.power`): what its readings say
and why batching shows as less energy per token, as on a GPU."""

from __future__ import annotations

import pytest

from arms.simulator.power import PowerMeter
from arms.simulator.profile import SimProfile


def test_energy_is_idle_plus_busy_plus_per_token_and_batching_shares_the_busy_floor() -> None:
    """One token per step against four per (slower) step: the busy floor is paid per step,
    so the batch spends less energy per token, and the counter is idle x time plus the
    steps' energy."""
    p = SimProfile(power_run_sd=0.0, idle_w=50.0, busy_w=40.0, decode_j_per_token=0.2, prefill_j_per_token=0.01)
    single, batched = PowerMeter(p), PowerMeter(p)
    for k in range(100):
        single.on_step(k * 0.02, 0.02, 0, 1)
        batched.on_step(k * 0.029, 0.029, 0, 4)
    per_token_single = single.dynamic_j / 100
    per_token_batched = batched.dynamic_j / 400
    assert per_token_single == pytest.approx(40.0 * 0.02 + 0.2)
    assert per_token_batched == pytest.approx((40.0 * 0.029 + 0.8) / 4)
    assert per_token_batched < 0.5 * per_token_single
    reading = single.reading(10.0, 123)
    assert reading["energy_j"] == pytest.approx(50.0 * 10.0 + single.dynamic_j)
    assert reading["power_w"] == 50.0 and reading["mem_used_bytes"] == 123  # no step runs at t=10
    assert single.reading(1.99, 0)["power_w"] == pytest.approx(50.0 + (40.0 * 0.02 + 0.2) / 0.02)


def test_each_start_draws_its_own_busy_power_and_the_cap_reports_throttling() -> None:
    """Energy per token varies between server starts as speed does (so a verdict on it
    needs blocks); a step drawing over the power limit reads as a capped clock."""
    factors = {PowerMeter(SimProfile(run_seed=k)).factor for k in range(8)}
    assert len(factors) == 8 and all(0.85 < f < 1.15 for f in factors)
    assert PowerMeter(SimProfile(power_run_sd=0.0)).factor == 1.0
    capped = PowerMeter(SimProfile(power_run_sd=0.0, idle_w=60.0, power_limit_w=100.0, busy_w=30.0))
    capped.on_step(0.0, 0.01, 0, 8)  # 30 W + 8 x 0.25 J in 10 ms: far over 100 W
    reading = capped.reading(0.005, 0)
    assert reading["throttled"] and reading["throttle_reasons"] == ["sw_power_cap"]
    assert not capped.reading(1.0, 0)["throttled"]
