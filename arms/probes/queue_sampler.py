"""Queue depth sampled on a fixed schedule while a load runs: the series, and the phase's
summary of how many reads were made, failed and skipped."""

from __future__ import annotations

import asyncio
import time

import httpx

from arms.probes.base import ProbeTarget, Sink
from arms.probes.counters import read_server_metrics
from campaign.core import metrics
from campaign.core.states import Mode, SampleKind

SAMPLE_GAP = "sample_gap"  # a sample series: one row per failed read, at its tick


class QueueSampler:
    """Samples queue depth (and slots busy) on a fixed schedule while a load runs.

    Ticks fall at start + k * interval_s, not interval_s after each read returns, so the
    series keeps its stated rate however long a read takes. A tick that passes while the
    previous read is still running is skipped (counted in `skipped`), never made up in a
    burst. A read that fails or times out is a gap: a `sample_gap` row at its time and no
    value for the gauges (the chart breaks there; nothing is carried over or guessed),
    counted in `gaps`. Rows are labelled with the phase (`load`, `baseline`) so the
    report can tell the phases apart. Only the metrics endpoint is read; log counters
    are not needed for gauges. A runtime without a metrics endpoint is not sampled.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        target: ProbeTarget,
        sink: Sink,
        interval_s: float = 0.5,
        *,
        phase: str = "load",
        read_timeout_s: float | None = None,
    ):
        self.http, self.target, self.sink, self.interval_s = http, target, sink, interval_s
        self.phase = phase
        self.read_timeout_s = read_timeout_s if read_timeout_s is not None else max(2.0, 4 * interval_s)
        self._task: asyncio.Task[None] | None = None
        self.series: list[tuple[float, float]] = []
        self.reads = 0
        self.gaps = 0
        self.skipped = 0
        self.first_error = ""

    @property
    def active(self) -> bool:
        return self.target.telemetry.reads_metrics

    async def _run(self) -> None:
        if not self.active:
            return
        start = time.perf_counter()
        tick = 0
        while True:
            t = time.perf_counter() - start
            try:
                values = await read_server_metrics(self.http, self.target, timeout=self.read_timeout_s)
                self.reads += 1
            except (httpx.HTTPError, ValueError, OSError) as exc:
                self.reads += 1
                self.gaps += 1
                self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"[:200]
                self.sink.sample(SAMPLE_GAP, t, 1.0, self.phase)
            else:
                if "queue_depth" in values:
                    self.series.append((t, values["queue_depth"]))
                    self.sink.sample("queue_depth", t, values["queue_depth"], self.phase)
                if "slots_busy" in values:
                    self.sink.sample("slots_busy", t, values["slots_busy"], self.phase)
            tick += 1
            now = time.perf_counter() - start
            if now >= tick * self.interval_s:  # the read overran: skip the ticks it covered
                late = int(now // self.interval_s) + 1
                self.skipped += late - tick
                tick = late
            await asyncio.sleep(tick * self.interval_s - now)

    def record(self, *, mode: Mode | str, scenario: str, context: int = 0) -> None:
        """The phase's summary rows: highest queue depth, and how many reads were made,
        failed (gaps) and skipped, so a sparse series is never mistaken for a quiet one."""
        if not self.active:
            return
        if self.series:
            self.sink.measurement(
                metric=metrics.QUEUE_DEPTH_MAX,
                value=max(v for _, v in self.series),
                mode=mode,
                scenario=scenario,
                context=context,
                kind=SampleKind.SUMMARY,
            )
        for metric, value, source in (
            (metrics.QUEUE_SAMPLES, self.reads, f"every {self.interval_s:g} s"),
            (metrics.QUEUE_SAMPLE_GAPS, self.gaps, self.first_error),
            (metrics.QUEUE_TICKS_SKIPPED, self.skipped, ""),
        ):
            self.sink.measurement(
                metric=metric,
                value=value,
                mode=mode,
                scenario=scenario,
                context=context,
                kind=SampleKind.SUMMARY,
                source=source,
            )

    async def __aenter__(self) -> QueueSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
