"""What one probe run cost on the machine, read from its devices while it runs.

A background thread reads every device on a fixed schedule; `stop` turns the readings
into a `Telemetry` summary. Energy comes from each device's cumulative counter where it
has one (exact between readings, whatever happens in between) and from the trapezoid of
its power readings where it has not (the method says which). Time for the maths is the
devices' own clocks (`DeviceReading.t_s`; the simulator's is model time), wall time only
paces the reads. A number no device can give stays None: "not measured" is not "zero".
A device that stops answering ends its readings there and the summary says so."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from arms.telemetry.device import Device, DeviceInfo, DeviceLost, DeviceReading

COUNTER = "counter"
POWER_X_TIME = "power x time"

Tick = dict[int, DeviceReading]  # device index -> its reading at one tick
SeriesPoint = tuple[float, float | None, float | None, int | None]  # t_s, power_w, util, mem_used_bytes


@dataclass(frozen=True)
class Telemetry:
    """The summary of one probe run's readings, over all its devices.

    `duration_s` is device-clock seconds from the first reading to the last (the longest
    over devices); `power_mean_w` is `energy_j / duration_s`; peaks and the series sum the
    devices read at the same tick (a sum is None when a device read at that tick lacks the
    field); `util_mean` is the mean over readings and devices. `partial` says which device
    stopped answering and when; the numbers keep what was read before."""

    devices: tuple[DeviceInfo, ...]
    duration_s: float
    energy_j: float | None = None
    energy_method: str = ""  # counter | power x time | "" (not measured)
    partial: str = ""
    power_idle_w: float | None = None
    power_mean_w: float | None = None
    power_peak_w: float | None = None
    mem_peak_bytes: int | None = None
    util_mean: float | None = None
    throttled_share: float | None = None  # share of ticks in which any device was throttled
    throttle_reasons: tuple[str, ...] = ()
    other_processes: int | None = None  # the most seen at once on any device
    series: tuple[SeriesPoint, ...] = ()

    @property
    def measured(self) -> bool:
        return self.energy_j is not None

    @property
    def net_energy_j(self) -> float | None:
        """Energy above what the devices draw idle over the same time."""
        if self.energy_j is None or self.power_idle_w is None:
            return None
        return self.energy_j - self.power_idle_w * self.duration_s


def device_energy(readings: Sequence[DeviceReading]) -> tuple[float | None, str]:
    """Energy (J) one device used between its first and last reading, and the method.

    Counter deltas where both readings have the counter (a counter that went backwards
    wrapped at `energy_wrap_j`); the trapezoid of power_w over t_s for an interval without
    them, or that wrapped at an unknown point. None when an interval has neither, or when
    there are fewer than two readings (no interval was measured)."""
    if len(readings) < 2:
        return None, ""
    total, method = 0.0, COUNTER
    for old, new in zip(readings, readings[1:]):
        delta = _counter_delta(old, new)
        if delta is None:
            delta = _trapezoid(old, new)
            if delta is None:
                return None, ""
            method = POWER_X_TIME
        total += delta
    return total, method


def _counter_delta(old: DeviceReading, new: DeviceReading) -> float | None:
    if old.energy_j is None or new.energy_j is None:
        return None
    if new.energy_j >= old.energy_j:
        return new.energy_j - old.energy_j
    wrap = new.energy_wrap_j if new.energy_wrap_j is not None else old.energy_wrap_j
    if wrap is None:
        return None
    return (wrap - old.energy_j) + new.energy_j


def _trapezoid(old: DeviceReading, new: DeviceReading) -> float | None:
    powers = [p for p in (old.power_w, new.power_w) if p is not None]
    if not powers:
        return None
    return sum(powers) / len(powers) * (new.t_s - old.t_s)


def _span(readings: Sequence[DeviceReading]) -> float:
    return readings[-1].t_s - readings[0].t_s if readings else 0.0


def _sum_or_none(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def summarise(
    infos: Sequence[DeviceInfo], ticks: Sequence[Tick], partial: str = "", power_idle_w: float | None = None
) -> Telemetry:
    """The summary of `ticks` (each: the readings taken together, by device index)."""
    per_device: list[list[DeviceReading]] = [[] for _ in infos]
    for tick in ticks:
        for index, reading in tick.items():
            per_device[index].append(reading)
    starts = {i: r[0].t_s for i, r in enumerate(per_device) if r}

    energies = [device_energy(r) for r in per_device]
    energy_j: float | None = None
    method = ""
    if energies and all(e is not None for e, _ in energies):
        energy_j = sum(e for e, _ in energies if e is not None)
        method = POWER_X_TIME if any(m == POWER_X_TIME for _, m in energies) else COUNTER
    duration = max((_span(r) for r in per_device), default=0.0)

    series: list[SeriesPoint] = []
    throttle_ticks = throttled_ticks = 0
    for tick in ticks:
        if not tick:
            continue
        readings = list(tick.values())
        t = max(r.t_s - starts[i] for i, r in tick.items())
        power = _sum_or_none([r.power_w for r in readings])
        tick_utils = [u for u in (r.util for r in readings) if u is not None]
        tick_mems = [r.mem_used_bytes for r in readings]
        mem = None if None in tick_mems else sum(m for m in tick_mems if m is not None)
        series.append((t, power, statistics.fmean(tick_utils) if tick_utils else None, mem))
        flags = [r.throttled for r in readings if r.throttled is not None]
        if flags:
            throttle_ticks += 1
            throttled_ticks += any(flags)

    every = [r for rs in per_device for r in rs]
    utils = [u for u in (r.util for r in every) if u is not None]
    powers = [p for p in (point[1] for point in series) if p is not None]
    mems = [m for m in (point[3] for point in series) if m is not None]
    others = [n for n in (r.other_processes for r in every) if n is not None]
    return Telemetry(
        devices=tuple(infos),
        duration_s=duration,
        energy_j=energy_j,
        energy_method=method,
        partial=partial,
        power_idle_w=power_idle_w,
        power_mean_w=energy_j / duration if energy_j is not None and duration > 0 else None,
        power_peak_w=max(powers) if powers else None,
        mem_peak_bytes=max(mems) if mems else None,
        util_mean=statistics.fmean(utils) if utils else None,
        throttled_share=throttled_ticks / throttle_ticks if throttle_ticks else None,
        throttle_reasons=tuple(sorted({reason for r in every for reason in r.throttle_reasons})),
        other_processes=max(others) if others else None,
        series=tuple(series),
    )


class TelemetrySampler:
    """Reads `devices` every `period_s` seconds between `start` and `stop` (or around a
    `with` block, whose summary is kept in `result`). A device whose read raises is read no
    more: `DeviceLost` or any other error, the summary keeps what it read before and says
    so in `partial`."""

    def __init__(self, devices: Sequence[Device], period_s: float = 0.5):
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, not {period_s}")
        self.devices = tuple(devices)
        self.period_s = period_s
        self._unanswered: dict[int, str] = {}  # device index -> why it did not say what it is
        self.infos = tuple(self._info(index, device) for index, device in enumerate(self.devices))
        self.power_idle_w: float | None = None
        self.result: Telemetry | None = None
        self._ticks: list[Tick] = []
        self._lost: dict[int, str] = {}  # device index -> why it stopped answering
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _info(self, index: int, device: Device) -> DeviceInfo:
        try:
            return device.info()
        except Exception as error:  # a device that does not answer is lost before its first reading
            self._unanswered[index] = _why(error)
            return DeviceInfo(name=type(device).__name__, source="unknown", device_id=f"device {index}")

    def _read(self, active: set[int], lost: dict[int, str]) -> Tick:
        """One reading of each device in `active`; one that fails leaves `active` for `lost`."""
        tick: Tick = {}
        for index in sorted(active):
            try:
                tick[index] = self.devices[index].read()
            except Exception as error:  # DeviceLost, or a source's own failure: lost too
                lost[index] = _why(error)
        active.difference_update(lost)
        return tick

    def measure_idle(self, seconds: float) -> float | None:
        """The devices' power (W, summed) over `seconds` with nothing running: counter energy
        over device time where a device has a counter, else the mean of its power readings.
        Devices that give neither are left out; None when none gives either."""
        if self._thread is not None:
            raise RuntimeError("measure_idle while the sampler runs would count the run as idle")
        lost = dict(self._unanswered)
        active = set(range(len(self.devices))) - set(lost)
        readings: list[list[DeviceReading]] = [[] for _ in self.devices]

        def read() -> None:
            for index, reading in self._read(active, lost).items():
                readings[index].append(reading)

        end = time.monotonic() + seconds
        read()
        while (left := end - time.monotonic()) > 0 and active:
            time.sleep(min(self.period_s, left))
            read()
        idle = [_idle_power(r) for r in readings]
        known = [w for w in idle if w is not None]
        self.power_idle_w = sum(known) if known else None
        return self.power_idle_w

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the sampler is already running")
        self._ticks, self._lost, self.result = [], dict(self._unanswered), None
        self._stop.clear()
        active = set(range(len(self.devices))) - set(self._lost)
        self._ticks.append(self._read(active, self._lost))
        self._thread = threading.Thread(target=self._run, args=(active,), name="telemetry-sampler", daemon=True)
        self._thread.start()

    def _run(self, active: set[int]) -> None:
        # ticks on a fixed grid, so a slow read does not stretch the schedule; a tick
        # missed while a read ran is skipped, not made up in a burst
        start = time.monotonic()
        tick = 1
        while active and not self._stop.wait(max(0.0, start + tick * self.period_s - time.monotonic())):
            self._ticks.append(self._read(active, self._lost))
            tick = max(tick + 1, int((time.monotonic() - start) / self.period_s) + 1)

    def stop(self) -> Telemetry:
        """Stops the reads, takes a last reading of each device still answering, and
        returns the summary (kept in `result`)."""
        if self._thread is None:
            raise RuntimeError("the sampler was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        active = set(range(len(self.devices))) - set(self._lost)
        self._ticks.append(self._read(active, self._lost))
        self.result = summarise(self.infos, self._ticks, self._partial(), self.power_idle_w)
        return self.result

    def _partial(self) -> str:
        notes = []
        for index, why in sorted(self._lost.items()):
            readings = [tick[index] for tick in self._ticks if index in tick]
            label = f"device {index} ({self.infos[index].label})"
            because = f" ({why})" if why else ""
            if readings:
                notes.append(f"{label} lost after {_span(readings):.1f} s{because}: numbers up to then")
            else:
                notes.append(f"{label} lost before its first reading{because}: not measured")
        return "; ".join(notes)

    def __enter__(self) -> TelemetrySampler:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


def _why(error: Exception) -> str:
    return str(error) if isinstance(error, DeviceLost) else f"{type(error).__name__}: {error}"


def _idle_power(readings: Sequence[DeviceReading]) -> float | None:
    energy, method = device_energy(readings)
    span = _span(readings)
    if energy is not None and method == COUNTER and span > 0:
        return energy / span
    powers = [r.power_w for r in readings if r.power_w is not None]
    return statistics.fmean(powers) if powers else None
