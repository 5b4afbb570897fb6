"""CPU packages read through Linux powercap (RAPL): a cumulative energy counter per
package, so a run on CPUs has its joules too. Only energy is read; every other field is
None. Recent kernels let only root read the counter, so a machine may have none."""

from __future__ import annotations

import re
import time
from pathlib import Path

from arms.telemetry.device import DeviceInfo, DeviceLost, DeviceReading

_PACKAGE_ZONE = re.compile(r"intel-rapl:(\d+)")  # a package; intel-rapl:0:0 (its core) is inside it


def _read_uj(path: Path) -> int:
    return int(path.read_text(encoding="ascii").strip())


class RaplDevice:
    """One powercap zone, e.g. /sys/class/powercap/intel-rapl:0 ("package-0")."""

    def __init__(self, path: Path):
        self.path = path
        try:
            name = (path / "name").read_text(encoding="utf-8").strip()
        except OSError:
            name = path.name
        try:
            wrap_j: float | None = _read_uj(path / "max_energy_range_uj") / 1e6
        except (OSError, ValueError):
            wrap_j = None
        self.energy_wrap_j = wrap_j
        self._info = DeviceInfo(name=f"CPU {name}", source="rapl", device_id=path.name)

    def info(self) -> DeviceInfo:
        return self._info

    def read(self) -> DeviceReading:
        t_s = time.perf_counter()
        try:
            energy_uj = _read_uj(self.path / "energy_uj")
        except (OSError, ValueError) as error:
            raise DeviceLost(f"{self.path}: {error}") from error
        return DeviceReading(t_s=t_s, energy_j=energy_uj / 1e6, energy_wrap_j=self.energy_wrap_j)


def rapl_devices(root: Path = Path("/sys/class/powercap")) -> list[RaplDevice]:
    """The package zones under `root` whose counter this process can read; [] otherwise."""
    try:
        zones = [(int(m.group(1)), p) for p in root.iterdir() if (m := _PACKAGE_ZONE.fullmatch(p.name))]
    except OSError:
        return []
    devices = []
    for _, path in sorted(zones):
        try:
            _read_uj(path / "energy_uj")
        except (OSError, ValueError):
            continue
        devices.append(RaplDevice(path))
    return devices
