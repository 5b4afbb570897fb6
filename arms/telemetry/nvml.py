"""NVIDIA GPUs read through NVML (`pynvml`, from the optional `nvidia-ml-py` package): the
energy counter, power, memory, utilisation, clocks, temperature, throttling and the other
processes on the GPU. The package is imported only when a GPU is asked for, so a machine
without it (or without a GPU) runs everything else; a field the GPU does not support is
None, and a GPU that stops answering raises `DeviceLost`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from arms.telemetry.device import DeviceInfo, DeviceLost, DeviceReading

ENERGY_WRAP_J = 2**64 / 1000  # the counter is an unsigned 64-bit count of mJ
IDLE_REASONS = 0x1 | 0x2  # GPU idle, applications clocks setting: chosen, not held down
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# NVML's return codes that mean the handle no longer reaches the GPU (lost, NVML shut
# down, the handle invalid or gone, the GPU waiting for a reset)
_LOST_CODES = {"NVML_ERROR_GPU_IS_LOST": 15, "NVML_ERROR_UNINITIALIZED": 1, "NVML_ERROR_INVALID_ARGUMENT": 2}
_LOST_CODES |= {"NVML_ERROR_NOT_FOUND": 6, "NVML_ERROR_RESET_REQUIRED": 16}

_init_lock = threading.Lock()
_initialised: dict[int, Any] = {}  # id(module) -> module (kept, so its id is not reused)


def _init(nvml: Any) -> None:
    """`nvmlInit` once per module (the library counts its inits; one is enough)."""
    with _init_lock:
        if id(nvml) not in _initialised:
            nvml.nvmlInit()
            _initialised[id(nvml)] = nvml


def _import() -> Any:
    import pynvml  # nvidia-ml-py: optional, only where a GPU is read

    return pynvml


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _lost(nvml: Any, error: Exception) -> bool:
    lost_class = getattr(nvml, "NVMLError_GpuIsLost", None)
    if lost_class is not None and isinstance(error, lost_class):
        return True
    codes = {getattr(nvml, name, default) for name, default in _LOST_CODES.items()}
    return getattr(error, "value", None) in codes


class NvmlDevice:
    """One GPU by its NVML index. `server_pids` are the server's processes on it: every
    other compute process is counted in `other_processes` (another job sharing the GPU)."""

    def __init__(self, index: int, nvml: Any | None = None, server_pids: frozenset[int] = frozenset()):
        self.nvml = _import() if nvml is None else nvml
        self.index = index
        self.server_pids = server_pids
        _init(self.nvml)
        try:
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.nvml.NVMLError as error:
            raise DeviceLost(f"GPU {index}: {error}") from error
        limit_mw = self._field(self.nvml.nvmlDeviceGetPowerManagementLimit)
        uuid = self._field(self.nvml.nvmlDeviceGetUUID)
        self._info = DeviceInfo(
            name=_text(self.nvml.nvmlDeviceGetName(self.handle)),
            source="nvml",
            device_id=_text(uuid) if uuid is not None else f"nvml:{index}",
            power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
        )

    def info(self) -> DeviceInfo:
        return self._info

    def _field(self, call: Callable[..., Any], *args: Any) -> Any:
        """`call(handle, *args)`; None where NVML cannot give it, DeviceLost where the GPU is gone."""
        try:
            return call(self.handle, *args)
        except self.nvml.NVMLError as error:
            if _lost(self.nvml, error):
                raise DeviceLost(f"GPU {self.index}: {error}") from error
            return None

    def read(self) -> DeviceReading:
        nvml = self.nvml
        t_s = time.perf_counter()
        energy_mj = self._field(nvml.nvmlDeviceGetTotalEnergyConsumption)
        power_mw = self._field(nvml.nvmlDeviceGetPowerUsage)
        memory = self._field(nvml.nvmlDeviceGetMemoryInfo)
        rates = self._field(nvml.nvmlDeviceGetUtilizationRates)
        sm_clock = self._field(nvml.nvmlDeviceGetClockInfo, getattr(nvml, "NVML_CLOCK_SM", 1))
        mem_clock = self._field(nvml.nvmlDeviceGetClockInfo, getattr(nvml, "NVML_CLOCK_MEM", 2))
        temperature = self._field(nvml.nvmlDeviceGetTemperature, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        reasons_call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = self._field(reasons_call or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        processes = self._field(nvml.nvmlDeviceGetComputeRunningProcesses)
        held = mask & ~IDLE_REASONS if mask is not None else 0
        return DeviceReading(
            t_s=t_s,
            energy_j=energy_mj / 1000 if energy_mj is not None else None,
            energy_wrap_j=ENERGY_WRAP_J if energy_mj is not None else None,
            power_w=power_mw / 1000 if power_mw is not None else None,
            mem_used_bytes=int(memory.used) if memory is not None else None,
            util=rates.gpu / 100 if rates is not None else None,
            sm_clock_mhz=float(sm_clock) if sm_clock is not None else None,
            mem_clock_mhz=float(mem_clock) if mem_clock is not None else None,
            temperature_c=float(temperature) if temperature is not None else None,
            throttled=bool(held) if mask is not None else None,
            throttle_reasons=_reason_names(held),
            other_processes=(
                sum(1 for p in processes if p.pid not in self.server_pids) if processes is not None else None
            ),
        )


def _reason_names(mask: int) -> tuple[str, ...]:
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    bits = [1 << i for i in range(unknown.bit_length()) if unknown >> i & 1]
    return tuple(sorted(names + [f"0x{bit:x}" for bit in bits]))


def _uuid(nvml: Any, index: int) -> str:
    try:
        return _text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index)))
    except nvml.NVMLError:
        return ""  # matches no CUDA_VISIBLE_DEVICES entry


def visible_indices(env: Mapping[str, str], count: int, uuids: Sequence[str] | None = None) -> list[int]:
    """The NVML indices CUDA_VISIBLE_DEVICES leaves visible, in its order: all `count` when
    unset, none when empty. An entry is an index or, given the GPUs' `uuids` (by index), a
    UUID or a unique prefix of one; as in CUDA, the list ends at the first entry that names
    no GPU. Without `uuids`, an entry that is not an integer is skipped."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(count))
    found: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        index: int | None
        try:
            index = int(entry)
        except ValueError:
            if uuids is None:
                continue
            matches = [i for i, uuid in enumerate(uuids) if entry and uuid.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        if index is None or not 0 <= index < count:
            break
        if index not in found:
            found.append(index)
    return found


def nvml_devices(
    env: Mapping[str, str], server_pids: frozenset[int] = frozenset(), nvml: Any | None = None
) -> list[NvmlDevice]:
    """The GPUs this process's CUDA_VISIBLE_DEVICES leaves visible; [] where pynvml is not
    installed or NVML does not start (no driver, no GPU). A GPU that does not answer is left out."""
    try:
        module = _import() if nvml is None else nvml
        _init(module)
        count = int(module.nvmlDeviceGetCount())
    except Exception:  # ImportError, NVMLError (driver, library) or anything the binding raises
        return []
    devices = []
    for index in visible_indices(env, count, [_uuid(module, i) for i in range(count)]):
        try:
            devices.append(NvmlDevice(index, module, server_pids))
        except (DeviceLost, module.NVMLError):
            continue
    return devices
