"""A probe run's telemetry as rows: one summary row per metric (scenario `telemetry`,
`campaign.core.metrics.energy`) and the power, utilisation and memory series as samples.
Energy per output token divides by the tokens the run's requests generated, counted as
the requests pass to the sink (`CountingSink`). Nothing measured, nothing stored: a
missing row is "not measured", a 0 would be a claim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arms.measures import RequestRecord, completion_tokens
from arms.probes.base import Sink
from arms.telemetry.sampler import Telemetry
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind

SERIES = ("power_w", "accel_util", "accel_mem_bytes")  # the sample series, in `Telemetry.series` order


@dataclass
class CountingSink:
    """A sink that passes everything on and counts the tokens its requests generated,
    and keeps the context its rows were stored at, so the telemetry rows join them."""

    inner: Sink
    output_tokens: int = 0
    context: int | None = None  # the context the probe's own rows were stored at (its first)

    def measurement(self, **row: Any) -> None:
        if self.context is None and "context" in row:
            self.context = int(row["context"])
        self.inner.measurement(**row)

    def request(self, record: RequestRecord, *, scenario: str, mode: Mode | str, trial: int = 0) -> None:
        self.output_tokens += completion_tokens(record)[0] or 0
        self.inner.request(record, scenario=scenario, mode=mode, trial=trial)

    def sample(self, series: str, t_s: float, value: float, label: str = "") -> None:
        self.inner.sample(series, t_s, value, label)

    def warn(self, message: str) -> None:
        self.inner.warn(message)


def record_telemetry(sink: Sink, t: Telemetry, output_tokens: int, *, context: int = 0) -> None:
    """Store one probe run's telemetry (nothing when no device was read)."""
    if not t.devices:
        return

    def put(metric: Metric, value: float | None, source: str = "") -> None:
        if value is None:
            return
        sink.measurement(
            metric=metric,
            value=float(value),
            mode=Mode.CANONICAL,
            scenario=metrics.TELEMETRY,
            context=context,
            kind=SampleKind.SUMMARY,
            source=source,
        )

    devices = "; ".join(d.label for d in t.devices)
    limits = [d.power_limit_w for d in t.devices]
    put(metrics.ACCEL_POWER_LIMIT_W, sum(x for x in limits if x is not None) if None not in limits else None, devices)
    how = t.energy_method + (f"; {t.partial}" if t.partial else "")
    put(metrics.ENERGY_J, t.energy_j, f"{how}, over {t.duration_s:.3g} s")
    if t.energy_j is not None and output_tokens > 0:
        put(metrics.ENERGY_PER_OUTPUT_TOKEN_J, t.energy_j / output_tokens, f"{output_tokens} output tokens; {how}")
        net = t.net_energy_j
        if net is not None:
            put(
                metrics.ENERGY_PER_OUTPUT_TOKEN_NET_J,
                net / output_tokens,
                f"{output_tokens} output tokens, idle {t.power_idle_w:.3g} W x {t.duration_s:.3g} s taken out",
            )
    put(metrics.POWER_MEAN_W, t.power_mean_w, how)
    put(metrics.POWER_IDLE_W, t.power_idle_w, "before the run, the server up and idle")
    put(metrics.POWER_PEAK_W, t.power_peak_w)
    put(metrics.ACCEL_MEM_PEAK_BYTES, t.mem_peak_bytes)
    put(metrics.ACCEL_UTIL_MEAN, t.util_mean)
    put(metrics.CLOCK_THROTTLED_SHARE, t.throttled_share, ", ".join(t.throttle_reasons))
    put(metrics.ACCEL_OTHER_PROCESSES, t.other_processes)
    for t_s, *values in t.series:
        for name, value in zip(SERIES, values, strict=True):
            if value is not None:
                sink.sample(name, t_s, float(value))
