"""The simulated accelerator as a telemetry source: `GET /device` of a simulator server
(`arms.simulator.power`), read the way NVML is read, so the sampler, the metrics, the
gates and the pages run end to end on any machine."""

from __future__ import annotations

import httpx

from arms import tls
from arms.telemetry.device import DeviceInfo, DeviceLost, DeviceReading

TIMEOUT_S = 5.0


class SimulatedDevice:
    """One simulator server's device. Utilisation is the share of device time between two
    readings that the engine was running a step (from its cumulative busy seconds)."""

    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(timeout=TIMEOUT_S, verify=tls.verified())
        self._last: tuple[float, float] | None = None  # (t_s, busy_s) of the last reading
        self._info: DeviceInfo | None = None

    def _get(self) -> dict:
        try:
            response = self._client.get(f"{self.base_url}/device")
            response.raise_for_status()
            return dict(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            raise DeviceLost(f"{self.base_url}/device: {exc}") from exc

    def info(self) -> DeviceInfo:
        if self._info is None:
            d = self._get()
            self._info = DeviceInfo(str(d["name"]), "simulated", self.base_url, float(d["power_limit_w"]))
        return self._info

    def read(self) -> DeviceReading:
        d = self._get()
        t, busy = float(d["t_s"]), float(d["busy_s"])
        util = None
        if self._last is not None and t > self._last[0]:
            util = min(1.0, max(0.0, (busy - self._last[1]) / (t - self._last[0])))
        self._last = (t, busy)
        return DeviceReading(
            t_s=t,
            energy_j=float(d["energy_j"]),
            power_w=float(d["power_w"]),
            mem_used_bytes=int(d["mem_used_bytes"]),
            util=util,
            temperature_c=float(d["temperature_c"]),
            throttled=bool(d["throttled"]),
            throttle_reasons=tuple(d["throttle_reasons"]),
            other_processes=int(d["other_processes"]),
        )

    def close(self) -> None:
        self._client.close()
