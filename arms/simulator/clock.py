"""Model-time clocks for the engine.

The engine reasons in model seconds. `ScaledClock` maps them onto the wall clock through
`time_scale` (what the HTTP server uses); `VirtualClock` jumps instantly, so in-process
tests can assert exact model-time TTFTs without wall-clock jitter.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """What the scheduler needs from time."""

    def now(self) -> float:
        """Current model time in seconds."""
        ...

    async def sleep_until(self, t: float) -> None:
        """Return once model time has reached `t`."""
        ...


class ScaledClock:
    """Model time = wall time since creation x time_scale."""

    def __init__(self, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale
        self._t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.time_scale

    async def sleep_until(self, t: float) -> None:
        delay = (t - self.now()) / self.time_scale
        # Always yield, so a burst of zero-length steps cannot starve the HTTP handlers.
        await asyncio.sleep(max(0.0, delay))


class VirtualClock:
    """A clock that advances only when the scheduler sleeps, and then instantly."""

    def __init__(self, settle_yields: int = 8) -> None:
        self._now = 0.0
        self.settle_yields = settle_yields

    def now(self) -> float:
        return self._now

    async def sleep_until(self, t: float) -> None:
        self._now = max(self._now, t)
        # Several yields, so consumers woken by the previous step can react (and submit
        # follow-up turns) before virtual time moves on.
        for _ in range(self.settle_yields):
            await asyncio.sleep(0)
