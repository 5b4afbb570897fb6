"""Which devices belong to a server, by where it runs: the simulator's own device; NVIDIA
GPUs through NVML (those its CUDA_VISIBLE_DEVICES lets it see, with its own processes
told apart from others on them); else the CPU packages through RAPL where the kernel
exposes them; else none, and the rows say "not measured on this machine".

NVML (nvidia-ml-py) rather than Zeus: the sampler needs NVML's own counters and states
(total energy, clocks, throttle reasons, the processes on a device), which Zeus wraps
behind its measurement windows, and one small optional dependency is enough for the
one accelerator family we can check; RAPL is read from sysfs, which needs no library.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from arms.telemetry.device import Device


class Where(StrEnum):
    """Where a probe's server runs, as far as its devices can be read."""

    SIMULATED = "simulated"  # the simulator: its /device
    LOCAL = "local"  # a server process on this machine: NVML, else RAPL
    NONE = "none"  # a server elsewhere (at a URL on another host): nothing here is its


def devices_for(
    where: Where, base_url: str, env: Mapping[str, str] | None = None, server_pids: frozenset[int] = frozenset()
) -> list[Device]:
    """The devices of a server; [] when none can be read (nothing is then stored)."""
    if where == Where.SIMULATED:
        from arms.telemetry.simulated import SimulatedDevice

        return [SimulatedDevice(base_url)]
    if where == Where.NONE:
        return []
    from arms.telemetry.nvml import nvml_devices

    found: list[Device] = list(nvml_devices(env or {}, server_pids))
    if found:
        return found
    from arms.telemetry.rapl import rapl_devices

    return list(rapl_devices())


def where_of(simulated: bool, local_process: bool, base_url: str) -> Where:
    """A simulator reads its own device; a server this campaign started, or one at a
    loopback URL, runs here; any other URL may be another machine's."""
    if simulated:
        return Where.SIMULATED
    if local_process:
        return Where.LOCAL
    from urllib.parse import urlparse

    host = urlparse(base_url).hostname or ""
    return Where.LOCAL if host in ("127.0.0.1", "localhost", "::1") else Where.NONE
