"""The catalogue's entries for what a probe run costs on the machine: energy, power,
accelerator memory and clocks, read around every probe run by `arms.telemetry` and
stored as one summary row each under scenario `telemetry`. Per probe run, so per block:
every gate, interval, Holm family and adaptive stop applies to them unchanged. A machine
with nothing to read stores none of them (and the pages say "not measured"), never 0."""

from __future__ import annotations

from campaign.core.metrics.entry import ALL_PROBES, _m

# the scenario of every telemetry row (docs/metrics.md says so once, above its table)
TELEMETRY = "telemetry"

ENERGY_J = _m("energy_j", "J", "energy the devices used over the run", ALL_PROBES, TELEMETRY, False)
ENERGY_PER_OUTPUT_TOKEN_J = _m(
    "energy_per_output_token_j",
    "J/token",
    "energy over the run's output tokens",
    ALL_PROBES,
    TELEMETRY,
    False,
)
ENERGY_PER_OUTPUT_TOKEN_NET_J = _m(
    "energy_per_output_token_net_j",
    "J/token",
    "the same, net of idle power",
    ALL_PROBES,
    TELEMETRY,
    False,
)
POWER_MEAN_W = _m("power_mean_w", "W", "mean power over the run", ALL_PROBES, TELEMETRY, False)
POWER_IDLE_W = _m("power_idle_w", "W", "idle power just before the run", ALL_PROBES, TELEMETRY)
POWER_PEAK_W = _m("power_peak_w", "W", "highest power read", ALL_PROBES, TELEMETRY, False)
ACCEL_MEM_PEAK_BYTES = _m(
    "accel_mem_peak_bytes", "bytes", "most accelerator memory in use", ALL_PROBES, TELEMETRY, False
)
ACCEL_UTIL_MEAN = _m("accel_util_mean", "share", "mean share of time busy", ALL_PROBES, TELEMETRY, None)
CLOCK_THROTTLED_SHARE = _m(
    "clock_throttled_share",
    "share",
    "share of readings with a clock held down",
    ALL_PROBES,
    TELEMETRY,
    False,
)
ACCEL_OTHER_PROCESSES = _m(
    "accel_other_processes",
    "count",
    "most processes not the server's seen on its devices",
    ALL_PROBES,
    TELEMETRY,
)
ACCEL_POWER_LIMIT_W = _m(
    "accel_power_limit_w",
    "W",
    "the devices' power limit; its source names them",
    ALL_PROBES,
    TELEMETRY,
)
