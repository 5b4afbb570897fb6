"""What a probe run cost on the machine (`arms.telemetry`): energy from counters, their
wraps and the power x time fallback, a device lost mid-run, nothing readable meaning
"not measured" (never 0), throttling, other processes, idle power, and which GPUs
CUDA_VISIBLE_DEVICES leaves visible. NVML is a fake module and RAPL a fake sysfs tree."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from arms.telemetry.device import DeviceInfo, DeviceLost, DeviceReading
from arms.telemetry.nvml import ENERGY_WRAP_J, NvmlDevice, nvml_devices, visible_indices
from arms.telemetry.rapl import RaplDevice, rapl_devices
from arms.telemetry.sampler import Telemetry, TelemetrySampler, summarise

# ---- fakes -------------------------------------------------------------------------------


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801 - pynvml's own name
    def __init__(self) -> None:
        super().__init__(15)


NOT_SUPPORTED = 3


@dataclass
class FakeGpu:
    """One GPU's answers. A list answers one item per call and then repeats its last; None
    for a field means NVML says NotSupported."""

    name: bytes | str = b"NVIDIA H200"
    uuid: str = "GPU-aaaa"
    limit_mw: int | None = 700_000
    energy_mj: list[int] | None = field(default_factory=lambda: [1_000_000])
    power_mw: int | None = 300_000
    used: int | None = 40 * 2**30
    util: int | None = 87
    reasons: list[int] | None = field(default_factory=lambda: [0])
    pids: list[int] | None = field(default_factory=list)
    lost: bool = False
    error_code: int | None = None  # every call raises NVMLError(error_code)


def _next(values: list[int]) -> int:
    return values.pop(0) if len(values) > 1 else values[0]


class FakeNvml:
    """The part of pynvml the NVML device uses, over a list of FakeGpu."""

    NVMLError = NVMLError
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_ERROR_UNINITIALIZED = 1
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_RESET_REQUIRED = 16
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, *gpus: FakeGpu, legacy: bool = False, init_fails: bool = False):
        self.gpus = list(gpus)
        self.inits = 0
        self.init_fails = init_fails
        self.event_reason_calls = 0
        if not legacy:  # nvidia-ml-py >= 12.535 has the new name; older ones only the throttle one
            self.nvmlDeviceGetCurrentClocksEventReasons = self._event_reasons

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise NVMLError(9)  # driver not loaded
        self.inits += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)
        return self.gpus[index]

    def _check(self, gpu: FakeGpu, value: object) -> None:
        if gpu.lost:
            raise NVMLError_GpuIsLost()
        if gpu.error_code is not None:
            raise NVMLError(gpu.error_code)
        if value is None:
            raise NVMLError(NOT_SUPPORTED)

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes | str:
        self._check(gpu, gpu.name)
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        self._check(gpu, gpu.uuid)
        return gpu.uuid

    def nvmlDeviceGetPowerManagementLimit(self, gpu: FakeGpu) -> int:
        self._check(gpu, gpu.limit_mw)
        assert gpu.limit_mw is not None
        return gpu.limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self._check(gpu, gpu.energy_mj)
        assert gpu.energy_mj is not None
        return _next(gpu.energy_mj)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._check(gpu, gpu.power_mw)
        assert gpu.power_mw is not None
        return gpu.power_mw

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> object:
        self._check(gpu, gpu.used)
        return type("Memory", (), {"used": gpu.used, "total": 141 * 2**30})()

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> object:
        self._check(gpu, gpu.util)
        return type("Rates", (), {"gpu": gpu.util, "memory": 10})()

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, kind: int) -> int:
        self._check(gpu, kind)
        return {1: 1980, 2: 2619}[kind]

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        self._check(gpu, sensor)
        return 61

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:
        self._check(gpu, gpu.reasons)
        assert gpu.reasons is not None
        return _next(gpu.reasons)

    def _event_reasons(self, gpu: FakeGpu) -> int:
        self.event_reason_calls += 1
        return self.nvmlDeviceGetCurrentClocksThrottleReasons(gpu)

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[object]:
        self._check(gpu, gpu.pids)
        return [type("Process", (), {"pid": pid, "usedGpuMemory": 0})() for pid in gpu.pids or []]


class Scripted:
    """A device whose n-th read (from 0) is `script(n)`: a reading, or an exception to raise."""

    def __init__(self, script: Callable[[int], DeviceReading | Exception], name: str = "Sim"):
        self.script = script
        self.name = name
        self.calls = 0

    def info(self) -> DeviceInfo:
        return DeviceInfo(name=self.name, source="simulated", device_id=f"sim:{self.name}")

    def read(self) -> DeviceReading:
        out = self.script(self.calls)
        self.calls += 1
        if isinstance(out, Exception):
            raise out
        return out


def _wait_for(done: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the sampler's thread did not read in time"
        time.sleep(0.005)


def _rapl_zone(root: Path, zone: str, name: str, energy_uj: int | None, max_uj: int = 262_143_328_850) -> Path:
    path = root / zone
    path.mkdir(parents=True)
    (path / "name").write_text(f"{name}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    if energy_uj is not None:
        (path / "energy_uj").write_text(f"{energy_uj}\n")
    return path


# ---- energy ------------------------------------------------------------------------------


def test_energy_is_the_sum_of_counter_deltas_on_the_device_clock() -> None:
    """The counter is the exact energy between readings; power readings (a decoy here) and
    wall time must not enter, or the simulator's model-time joules would be wrong."""
    device = Scripted(lambda n: DeviceReading(t_s=10.0 + n, energy_j=5_000.0 + 250.0 * n, power_w=999.0))
    sampler = TelemetrySampler([device], period_s=0.01)
    sampler.start()
    _wait_for(lambda: device.calls >= 4)
    result = sampler.stop()
    intervals = device.calls - 1
    assert result.energy_j == pytest.approx(250.0 * intervals)
    assert result.duration_s == pytest.approx(float(intervals))
    assert result.power_mean_w == pytest.approx(250.0)
    assert result.energy_method == "counter"
    assert result.measured
    assert len(result.series) == device.calls


def test_a_wrapped_nvml_counter_adds_the_part_before_the_wrap() -> None:
    """NVML's mJ counter is 64-bit: across a wrap the energy is what was left to the wrap
    plus the new count, not a negative delta nor a power x time guess."""
    gpu = FakeGpu(energy_mj=[2**64 - 2_000_000, 1_000_000])
    sampler = TelemetrySampler([NvmlDevice(0, FakeNvml(gpu))], period_s=30.0)  # start and stop read, nothing between
    began = time.monotonic()
    sampler.start()
    result = sampler.stop()
    assert time.monotonic() - began < 2.0  # stop does not wait out the period
    assert result.energy_j == pytest.approx(3000.0)
    assert result.energy_method == "counter"


def test_a_wrapped_rapl_counter_uses_max_energy_range(tmp_path: Path) -> None:
    """RAPL's µJ counter wraps at max_energy_range_uj (minutes at full load on a big CPU)."""
    max_uj = 262_143_328_850
    zone = _rapl_zone(tmp_path, "intel-rapl:0", "package-0", max_uj - 1_000_000, max_uj)
    sampler = TelemetrySampler([RaplDevice(zone)], period_s=30.0)
    sampler.start()
    (zone / "energy_uj").write_text("2000000\n")
    result = sampler.stop()
    assert result.energy_j == pytest.approx(3.0)
    assert result.energy_method == "counter"
    assert result.devices[0].name == "CPU package-0" and result.devices[0].source == "rapl"
    assert result.power_peak_w is None and result.util_mean is None  # RAPL gives energy only


def test_no_energy_counter_falls_back_to_power_times_time() -> None:
    """A GPU without the energy counter (NotSupported) still has joules, from its power
    readings, and the method says they are the coarser kind."""
    gpu = FakeGpu(energy_mj=None, power_mw=300_000)
    sampler = TelemetrySampler([NvmlDevice(0, FakeNvml(gpu))], period_s=0.01)
    sampler.start()
    time.sleep(0.05)
    result = sampler.stop()
    assert result.duration_s > 0
    assert result.energy_j == pytest.approx(300.0 * result.duration_s)
    assert result.power_mean_w == pytest.approx(300.0)
    assert result.energy_method == "power x time"


def test_a_backward_counter_without_a_known_wrap_uses_power_for_that_interval() -> None:
    """A counter that goes back with no wrap point known cannot be trusted for that
    interval: the trapezoid of power covers it, the others keep the counter."""
    infos = [DeviceInfo("Sim", "simulated", "sim:0")]
    readings = [
        DeviceReading(t_s=0.0, energy_j=10.0, power_w=100.0),
        DeviceReading(t_s=1.0, energy_j=20.0, power_w=100.0),
        DeviceReading(t_s=2.0, energy_j=5.0, power_w=300.0),
    ]
    result = summarise(infos, [{0: r} for r in readings])
    assert result.energy_j == pytest.approx(10.0 + 200.0)
    assert result.energy_method == "power x time"
    assert result.power_peak_w == 300.0


# ---- lost devices and nothing to read -----------------------------------------------------


def test_a_device_lost_mid_run_keeps_its_numbers_up_to_then() -> None:
    """A GPU that falls off the bus must not throw the run's telemetry away: what was read
    before stays, the other device goes on, and the summary says the numbers are partial."""
    lost = Scripted(
        lambda n: DeviceLost("GPU is lost") if n >= 2 else DeviceReading(t_s=100.0 + 3.2 * n, energy_j=50.0 * n),
        name="NVIDIA H200",
    )
    healthy = Scripted(lambda n: DeviceReading(t_s=float(n), energy_j=10.0 * n), name="Other")
    sampler = TelemetrySampler([lost, healthy], period_s=0.01)
    sampler.start()
    _wait_for(lambda: healthy.calls >= 5)
    result = sampler.stop()
    assert lost.calls == 3  # read no more once lost
    assert result.energy_j == pytest.approx(50.0 + 10.0 * (healthy.calls - 1))
    assert result.partial.startswith("device 0 (NVIDIA H200 (simulated)) lost after 3.2 s")
    assert "GPU is lost" in result.partial and result.partial.endswith("numbers up to then")


def test_any_read_error_counts_as_a_lost_device_with_its_message() -> None:
    """A source's own failure (not DeviceLost) must not kill the sampler's thread silently."""
    device = Scripted(lambda n: RuntimeError("driver hiccup") if n == 1 else DeviceReading(t_s=float(n), power_w=5.0))
    sampler = TelemetrySampler([device], period_s=0.01)
    sampler.start()
    _wait_for(lambda: device.calls >= 2)
    result = sampler.stop()
    assert device.calls == 2
    assert "driver hiccup" in result.partial and "device 0" in result.partial
    assert result.energy_j is None  # one reading measures no interval


def test_a_device_that_cannot_say_what_it_is_is_lost_before_the_run() -> None:
    """A device whose info() fails (the simulator's server gone) must not stop the sampler
    from being made or the other devices from being read."""

    class Mute(Scripted):
        def info(self) -> DeviceInfo:
            raise DeviceLost("no answer from /device")

    mute = Mute(lambda n: DeviceReading(t_s=float(n), energy_j=1.0 * n))
    healthy = Scripted(lambda n: DeviceReading(t_s=float(n), energy_j=7.0 * n))
    sampler = TelemetrySampler([mute, healthy], period_s=30.0)
    sampler.start()
    result = sampler.stop()
    assert mute.calls == 0
    assert (
        result.partial
        == "device 0 (Mute (unknown)) lost before its first reading (no answer from /device): not measured"
    )
    assert healthy.calls == 2 and result.duration_s == 1.0
    assert result.energy_j is None  # a device with no joules leaves the sum unknown, not short


def test_nothing_readable_is_not_measured_rather_than_zero() -> None:
    """A machine with nothing to read must say "not measured": a 0 would read as a free run."""
    device = Scripted(lambda n: DeviceReading(t_s=float(n)))
    with TelemetrySampler([device], period_s=0.01) as sampler:
        _wait_for(lambda: device.calls >= 3)
    result = sampler.result
    assert result is not None
    assert result.energy_j is None and result.power_mean_w is None and not result.measured
    assert result.energy_method == ""
    assert result.net_energy_j is None
    nothing = (result.power_peak_w, result.mem_peak_bytes, result.util_mean)
    assert nothing == (None, None, None)
    assert result.throttled_share is None and result.other_processes is None
    assert all(point[1:] == (None, None, None) for point in result.series)
    empty = TelemetrySampler([], period_s=0.01)
    empty.start()
    assert empty.stop().energy_j is None


# ---- NVML fields -------------------------------------------------------------------------


def test_nvml_reads_fields_in_the_readings_units() -> None:
    """mW, mJ and percent become W, J and a share, and the name may come as bytes."""
    fake = FakeNvml(FakeGpu())
    device = NvmlDevice(0, fake)
    reading = device.read()
    assert device.info() == DeviceInfo("NVIDIA H200", "nvml", "GPU-aaaa", 700.0)
    assert reading.energy_j == 1000.0 and reading.energy_wrap_j == ENERGY_WRAP_J
    assert reading.power_w == 300.0 and reading.util == pytest.approx(0.87)
    assert reading.mem_used_bytes == 40 * 2**30
    assert (reading.sm_clock_mhz, reading.mem_clock_mhz, reading.temperature_c) == (1980.0, 2619.0, 61.0)
    NvmlDevice(0, fake)
    assert fake.inits == 1  # nvmlInit once


def test_a_field_nvml_does_not_support_is_none() -> None:
    """NotSupported on one field leaves it unknown; it does not lose the device or read 0."""
    gpu = FakeGpu(limit_mw=None, power_mw=None, used=None, util=None, reasons=None, pids=None)
    device = NvmlDevice(0, FakeNvml(gpu))
    reading = device.read()
    assert device.info().power_limit_w is None
    assert (reading.power_w, reading.mem_used_bytes, reading.util) == (None, None, None)
    assert reading.throttled is None and reading.throttle_reasons == ()
    assert reading.other_processes is None
    assert reading.energy_j == 1000.0


def test_a_lost_gpu_raises_device_lost() -> None:
    """GPU-is-lost, NVML uninitialised and a dead handle all mean the device is gone."""
    gpu = FakeGpu()
    device = NvmlDevice(0, FakeNvml(gpu))
    gpu.lost = True
    with pytest.raises(DeviceLost):
        device.read()
    for code in (1, 2, 15):
        gpu = FakeGpu()
        device = NvmlDevice(0, FakeNvml(gpu))
        gpu.error_code = code
        with pytest.raises(DeviceLost):
            device.read()
    gpu = FakeGpu()
    device = NvmlDevice(0, FakeNvml(gpu))
    gpu.error_code = NOT_SUPPORTED  # every field unsupported: a reading of nothing, not a lost GPU
    reading = device.read()
    assert reading.energy_j is None and reading.power_w is None and reading.throttled is None


def test_throttling_comes_from_the_reason_bits_and_idle_is_not_throttling() -> None:
    """An idle GPU reports the idle bit; counting that as throttling would flag every run."""
    gpu = FakeGpu(reasons=[0x1, 0x1 | 0x2, 0x1 | 0x4 | 0x40, 0x8])
    fake = FakeNvml(gpu)
    device = NvmlDevice(0, fake)
    readings = [device.read() for _ in range(4)]
    assert [r.throttled for r in readings] == [False, False, True, True]
    assert readings[2].throttle_reasons == ("hw_thermal", "sw_power_cap")
    assert readings[3].throttle_reasons == ("hw_slowdown",)
    assert fake.event_reason_calls == 4
    legacy = NvmlDevice(0, FakeNvml(FakeGpu(reasons=[0x20]), legacy=True))
    assert legacy.read().throttle_reasons == ("sw_thermal",)

    infos = [DeviceInfo("A", "simulated", "a"), DeviceInfo("B", "simulated", "b")]
    ticks = [{0: readings[i], 1: DeviceReading(t_s=float(i), throttled=False)} for i in range(4)]
    result = summarise(infos, ticks)
    assert result.throttled_share == pytest.approx(0.5)
    assert result.throttle_reasons == ("hw_slowdown", "hw_thermal", "sw_power_cap")
    quiet = summarise(infos[:1], [{0: DeviceReading(t_s=0.0)}, {0: DeviceReading(t_s=1.0)}])
    assert quiet.throttled_share is None


def test_other_processes_exclude_the_servers_own() -> None:
    """Another job on the GPU makes a run's numbers suspect; the server's processes are not one."""
    gpu = FakeGpu(pids=[100, 101, 555])
    assert NvmlDevice(0, FakeNvml(gpu), server_pids=frozenset({100, 101})).read().other_processes == 1
    assert NvmlDevice(0, FakeNvml(gpu)).read().other_processes == 3
    infos = [DeviceInfo("A", "simulated", "a")]
    ticks = [{0: DeviceReading(t_s=float(i), other_processes=n)} for i, n in enumerate([0, 2, 1])]
    assert summarise(infos, ticks).other_processes == 2


def test_peaks_and_series_sum_the_devices_read_together() -> None:
    """Two GPUs serving one model draw together: the peak is of their sum at one tick, not
    the sum of each one's peak; a device that cannot read memory leaves the sum unknown."""
    infos = [DeviceInfo("A", "simulated", "a"), DeviceInfo("B", "simulated", "b")]
    ticks = [
        {0: DeviceReading(t_s=0.0, power_w=100.0, mem_used_bytes=10, util=0.2), 1: DeviceReading(t_s=5.0, power_w=50.0, mem_used_bytes=1, util=0.4)},
        {0: DeviceReading(t_s=1.0, power_w=300.0, mem_used_bytes=30, util=1.0), 1: DeviceReading(t_s=6.0, power_w=20.0, mem_used_bytes=2, util=0.6)},
        {0: DeviceReading(t_s=2.0, power_w=100.0, util=0.0), 1: DeviceReading(t_s=7.0, power_w=290.0, mem_used_bytes=90)},
    ]  # fmt: skip
    result = summarise(infos, ticks)
    assert result.power_peak_w == 390.0  # 100 + 290, not 300 + 290
    assert result.mem_peak_bytes == 32
    assert result.util_mean == pytest.approx((0.2 + 0.4 + 1.0 + 0.6 + 0.0) / 5)
    assert result.series[0] == (0.0, 150.0, pytest.approx(0.3), 11)
    assert result.series[2] == (2.0, 390.0, 0.0, None)
    assert result.energy_j == pytest.approx(400.0 + 190.0)  # trapezoids, per device on its own clock
    assert result.duration_s == 2.0


# ---- idle and net energy -----------------------------------------------------------------


def test_idle_power_from_the_counter_or_the_mean_power_and_net_energy() -> None:
    """Net energy is what the run added over an idle machine: the idle power comes from the
    counter where there is one (a decoy power reading here), else from mean power readings."""
    state = {"run": False}

    def counted(n: int) -> DeviceReading:
        return DeviceReading(t_s=float(n), energy_j=(100.0 if state["run"] else 40.0) * n, power_w=999.0)

    with_counter = Scripted(counted)
    without = Scripted(lambda n: DeviceReading(t_s=float(n), power_w=20.0 + 10.0 * (n % 2)))
    sampler = TelemetrySampler([with_counter, without], period_s=0.01)
    idle = sampler.measure_idle(0.05)
    assert without.calls >= 2
    assert idle == pytest.approx(40.0 + sum(20.0 + 10.0 * (n % 2) for n in range(without.calls)) / without.calls)
    assert sampler.power_idle_w == idle
    sampler = TelemetrySampler([Scripted(counted)], period_s=0.01)
    assert sampler.measure_idle(0.05) == pytest.approx(40.0)
    state["run"] = True
    sampler.start()
    time.sleep(0.03)
    result = sampler.stop()
    assert result.power_idle_w == pytest.approx(40.0)
    assert result.net_energy_j == pytest.approx(result.duration_s * (100.0 - 40.0))
    assert TelemetrySampler([Scripted(lambda n: DeviceReading(t_s=float(n)))], 0.01).measure_idle(0.02) is None
    assert Telemetry(devices=(), duration_s=10.0, energy_j=1000.0).net_energy_j is None


# ---- RAPL --------------------------------------------------------------------------------


def test_rapl_devices_are_the_readable_package_zones(tmp_path: Path) -> None:
    """A package zone holds its subzones' energy: counting intel-rapl:0:0 too would count the
    cores twice; a zone whose counter cannot be read (root-only on recent kernels) is left out."""
    _rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5)
    _rapl_zone(tmp_path / "intel-rapl:0", "intel-rapl:0:0", "core", 3)
    _rapl_zone(tmp_path, "intel-rapl:0:0", "core", 3)
    _rapl_zone(tmp_path, "intel-rapl:1", "package-1", None)
    _rapl_zone(tmp_path, "intel-rapl:10", "package-10", 7)
    _rapl_zone(tmp_path, "intel-rapl:2", "package-2", 7)
    _rapl_zone(tmp_path, "intel-rapl-mmio:0", "package-0", 7)
    devices = rapl_devices(tmp_path)
    assert [d.info().name for d in devices] == ["CPU package-0", "CPU package-2", "CPU package-10"]
    assert rapl_devices(tmp_path / "absent") == []
    reading = devices[0].read()
    assert reading.energy_j == 5e-6 and reading.power_w is None and reading.util is None
    (tmp_path / "intel-rapl:0" / "energy_uj").unlink()
    with pytest.raises(DeviceLost):
        devices[0].read()


# ---- which GPUs --------------------------------------------------------------------------


def test_cuda_visible_devices_picks_and_orders_the_gpus() -> None:
    """The server sees only the GPUs CUDA_VISIBLE_DEVICES names, in its order: reading
    others would charge the run for a neighbour's work."""
    assert visible_indices({}, 4) == [0, 1, 2, 3]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": ""}, 4) == []
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "1,0"}, 4) == [1, 0]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": " 2 , 0 "}, 4) == [2, 0]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "0,7,1"}, 4) == [0]  # CUDA stops at the first bad entry
    uuids = ["GPU-aaaa", "GPU-bbbb"]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "GPU-bbbb,0"}, 2, uuids) == [1, 0]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "GPU-bb"}, 2, uuids) == [1]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "GPU-bbbb,1"}, 2) == [1]


def test_nvml_devices_follow_the_environment_and_are_empty_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without nvidia-ml-py or a driver has no GPU telemetry, and says so by an
    empty list rather than by failing the run."""
    fake = FakeNvml(FakeGpu(uuid="GPU-aaaa"), FakeGpu(name="NVIDIA H100", uuid="GPU-bbbb"))
    devices = nvml_devices({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, nvml=fake)
    assert [(d.index, d.info().name) for d in devices] == [(1, "NVIDIA H100")]
    assert len(nvml_devices({}, nvml=fake)) == 2
    assert nvml_devices({}, nvml=FakeNvml(FakeGpu(), init_fails=True)) == []
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert nvml_devices({}) == []
