"""Server counters around a probe: read before and after it, stored as their deltas.

Counters come from the runtime's metrics endpoint, under the logical names its telemetry
gives them, and from its log where only the log reveals them (`arms.probes.log_tail`).
The names stored are the catalogue's (`arms.runtimes.telemetry.COUNTERS`), with the unit
and source the runtime's telemetry states.
"""

from __future__ import annotations

import asyncio

import httpx

from arms.client import get_text
from arms.measures import counter_deltas
from arms.probes.base import ProbeTarget, Sink
from arms.runtimes.telemetry import COUNTERS
from campaign.core.states import Mode


async def read_server_metrics(http: httpx.AsyncClient, target: ProbeTarget, timeout: float = 10.0) -> dict[str, float]:
    """Counters and gauges from the runtime's metrics endpoint, under logical names; {}
    when it has none. Raises httpx.HTTPError or ValueError when the read fails."""
    telemetry = target.telemetry
    if not telemetry.reads_metrics or telemetry.metrics_path is None:
        return {}
    return telemetry.read_metrics(await get_text(http, telemetry.metrics_path, timeout=timeout))


async def read_counters(http: httpx.AsyncClient, target: ProbeTarget, *, log: bool = True) -> dict[str, float]:
    """Server counters under logical names; empty when the runtime exposes none.

    Log counters (`log=True`) are read by the target's LogTail in a worker thread, so the
    file read and the scan never block the event loop the streams are timed on.
    """
    try:
        out = await read_server_metrics(http, target)
    except (httpx.HTTPError, ValueError):
        out = {}
    tail = target.log_tail() if log else None
    if tail is not None:
        try:
            out.update(await asyncio.to_thread(tail.read))
        except OSError:
            pass
    return out


async def record_counter_deltas(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    sink: Sink,
    before: dict[str, float],
    *,
    mode: Mode,
    scenario: str = "",
    context: int = 0,
) -> dict[str, float]:
    after = await read_counters(http, target)
    deltas = counter_deltas(before, after)
    sources = target.telemetry.counter_sources()
    for name in COUNTERS:
        if name in deltas:
            sink.measurement(
                metric=name,
                value=deltas[name],
                unit=target.telemetry.counter_unit(name),
                mode=mode,
                scenario=scenario,
                context=context,
                source=sources.get(name, ""),
            )
    return deltas
