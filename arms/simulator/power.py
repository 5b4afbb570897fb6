"""What the simulated accelerator draws: idle power, plus a busy floor while any engine
step runs, plus energy per prompt token prefilled and per token decoded. The busy floor
is paid per step whatever its batch, so more slots decoding together spend less energy
per token, as a GPU's weight reads are shared by a batch.

Each server start draws a factor on the busy part (`power_run_sd`), as its speed varies
(`arms.simulator.variation`), so energy per token differs between server runs and a
verdict on it needs blocks like any other. Energy and time are in model time, so the
joules per token do not depend on `time_scale`. `GET /device` reports a reading
(`reading`), which `arms.telemetry.simulated` reads as it would read NVML.

The knobs are a fixture shaped like a GPU server's power (idle, busy, per token), not a
measurement of any machine.
"""

from __future__ import annotations

import math
import random
from typing import Any

from arms.simulator.profile import SimProfile


class PowerMeter:
    """The energy counter and power gauge of one server start."""

    def __init__(self, profile: SimProfile) -> None:
        self.profile = profile
        z = random.Random(f"power:{profile.seed}:{profile.run_seed}").gauss(0.0, 1.0)
        self.factor = math.exp(profile.power_run_sd * z) if profile.power_run_sd > 0 else 1.0
        self.dynamic_j = 0.0  # everything above idle, so far
        self.busy_s = 0.0
        self._step: tuple[float, float, float] | None = None  # (start, end, watts above idle) of the last step

    def on_step(self, start: float, duration: float, prefill_tokens: int, decode_tokens: int) -> None:
        """Account one engine step of `duration` model seconds starting at `start`."""
        p = self.profile
        joules = self.factor * (
            p.busy_w * duration + p.prefill_j_per_token * prefill_tokens + p.decode_j_per_token * decode_tokens
        )
        self.dynamic_j += joules
        self.busy_s += duration
        self._step = (start, start + duration, joules / duration if duration > 0 else 0.0)

    def power_w(self, now: float) -> float:
        """Power at model time `now`: idle, plus the running step's draw while one runs."""
        step = self._step
        above = step[2] if step is not None and step[0] <= now <= step[1] + 1e-9 else 0.0
        return self.profile.idle_w + above

    def reading(self, now: float, memory_bytes: int) -> dict[str, Any]:
        """What `GET /device` answers: cumulative energy and busy time (model seconds), the
        power now, memory in use, and whether the power cap holds the clock down."""
        p = self.profile
        power = self.power_w(now)
        capped = power > p.power_limit_w
        return {
            "name": p.device_name,
            "power_limit_w": p.power_limit_w,
            "t_s": now,
            "energy_j": p.idle_w * now + self.dynamic_j,
            "power_w": power,
            "busy_s": self.busy_s,
            "mem_used_bytes": memory_bytes,
            "throttled": capped,
            "throttle_reasons": ["sw_power_cap"] if capped else [],
            "temperature_c": 35.0 + 0.1 * (power - p.idle_w),
            "other_processes": 0,
        }
