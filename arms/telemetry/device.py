"""One device a server runs on, as the telemetry sampler sees it: what it is (`DeviceInfo`,
so arms on different devices are not compared on energy) and one reading of it
(`DeviceReading`). Every field a source cannot read is None, never 0: a machine with
nothing to read says "not measured", not "used nothing"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class DeviceLost(RuntimeError):
    """The device stopped answering (unplugged, driver reset, the server's process gone):
    the sampler keeps what it read before and marks the run's numbers as partial."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the device is: its name (the model, e.g. "NVIDIA H200"), the source that reads
    it, its power limit (W) where the source knows one, and an id unique on the machine."""

    name: str
    source: str  # nvml | rapl | simulated
    device_id: str
    power_limit_w: float | None = None

    @property
    def label(self) -> str:
        limit = f", {self.power_limit_w:g} W limit" if self.power_limit_w is not None else ""
        return f"{self.name} ({self.source}{limit})"


@dataclass(frozen=True)
class DeviceReading:
    """One reading. `t_s` is on the device's own clock (seconds; the simulator's is model
    time, so its joules and seconds agree). `energy_j` is a cumulative counter (it may
    wrap at `energy_wrap_j`); None where the device has none, and power x time is used."""

    t_s: float
    energy_j: float | None = None
    energy_wrap_j: float | None = None
    power_w: float | None = None
    mem_used_bytes: int | None = None
    util: float | None = None  # 0..1, share of the interval the accelerator was busy
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_c: float | None = None
    throttled: bool | None = None  # a clock held down by power, heat or a slowdown (not idle)
    throttle_reasons: tuple[str, ...] = ()
    other_processes: int | None = None  # processes on the device that are not the server's


class Device(Protocol):
    """A source of readings for one device."""

    def info(self) -> DeviceInfo: ...

    def read(self) -> DeviceReading:
        """One reading now; raises DeviceLost when the device no longer answers."""
        ...
