"""What every probe shares: the target it measures, the sink it writes through, and the
helpers for sampling, server counters and identity.

Why a sink: measurement is separated from output. A probe never knows whether its rows
go to the campaign database (committed one by one as they exist) or to a JSON file from
`campaign probe`; it calls the sink as soon as a number exists.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from arms.client import get_text, make_http_client, stream_chat
from arms.metrics import RequestRecord, counter_deltas
from arms.runtimes.base import COUNTERS, RuntimeAdapter
from campaign.states import Mode

GREEDY = {"temperature": 0.0}


@dataclass
class ProbeTarget:
    """A live server to measure, and how to talk to it."""

    base_url: str
    model: str
    adapter: RuntimeAdapter
    sampling: dict[str, Any] = field(default_factory=dict)
    simulated: bool = False
    log_path: str | None = None  # the server's log, for counters only the log reveals

    def sampling_for(self, mode: Mode) -> dict[str, Any]:
        if mode == Mode.GREEDY:
            return dict(GREEDY)
        return self.adapter.sampling(self.sampling)

    def client(self, concurrency: int = 8) -> httpx.AsyncClient:
        return make_http_client(self.base_url, concurrency)


class Sink(Protocol):
    def measurement(
        self,
        *,
        metric: str,
        value: float,
        unit: str,
        mode: Mode | str,
        scenario: str = "",
        context: int = 0,
        trial: int = 0,
        source: str = "",
    ) -> None: ...

    def request(self, record: RequestRecord, *, scenario: str, mode: Mode | str, trial: int = 0) -> None: ...

    def sample(self, series: str, t_s: float, value: float, label: str = "") -> None: ...


@dataclass
class MemorySink:
    """Collects rows in memory: for `campaign probe` and for tests."""

    measurements: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def measurement(self, **row: Any) -> None:
        row.setdefault("scenario", "")
        row.setdefault("context", 0)
        row.setdefault("trial", 0)
        row.setdefault("source", "")
        row["mode"] = str(row["mode"])
        self.measurements.append(row)

    def request(self, record: RequestRecord, *, scenario: str, mode: Mode | str, trial: int = 0) -> None:
        self.requests.append({"scenario": scenario, "mode": str(mode), "trial": trial, **record.to_dict()})

    def sample(self, series: str, t_s: float, value: float, label: str = "") -> None:
        self.samples.append({"series": series, "t_s": t_s, "value": value, "label": label})

    def values(self, metric: str, **match: Any) -> list[float]:
        return [
            m["value"]
            for m in self.measurements
            if m["metric"] == metric and all(str(m.get(k)) == str(v) for k, v in match.items())
        ]


async def chat(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    messages: list[dict[str, Any]],
    mode: Mode,
    max_tokens: int,
    *,
    tools: list[dict[str, Any]] | None = None,
    read_timeout: float = 120.0,
    total_timeout: float | None = None,
) -> RequestRecord:
    body: dict[str, Any] = {"model": target.model, "messages": messages, "max_tokens": max_tokens}
    body.update(target.sampling_for(mode))
    if tools:
        body["tools"] = tools
    return await stream_chat(http, body, read_timeout=read_timeout, total_timeout=total_timeout)


async def read_counters(http: httpx.AsyncClient, target: ProbeTarget) -> dict[str, float]:
    """Server counters under logical names; empty when the runtime exposes none."""
    out: dict[str, float] = {}
    path = target.adapter.metrics_path
    if path and target.adapter.metric_names:
        try:
            out = target.adapter.read_metrics(await get_text(http, path))
        except (httpx.HTTPError, ValueError):
            out = {}
    if target.log_path:
        try:
            with open(target.log_path, encoding="utf-8", errors="replace") as fh:
                out.update(target.adapter.log_counters(fh.read()))
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
    sources = target.adapter.counter_sources()
    for name in COUNTERS:
        if name in deltas:
            sink.measurement(
                metric=name, value=deltas[name], unit="count" if "tokens" not in name else "tokens",
                mode=mode, scenario=scenario, context=context, source=sources.get(name, ""),
            )
    return deltas


class QueueSampler:
    """Samples queue depth (and slots busy) every `interval_s` while a load probe runs."""

    def __init__(self, http: httpx.AsyncClient, target: ProbeTarget, sink: Sink, interval_s: float = 0.5):
        self.http, self.target, self.sink, self.interval_s = http, target, sink, interval_s
        self._task: asyncio.Task[None] | None = None
        self.series: list[tuple[float, float]] = []

    async def _run(self) -> None:
        start = time.perf_counter()
        while True:
            values = await read_counters(self.http, self.target)
            t = time.perf_counter() - start
            if "queue_depth" in values:
                self.series.append((t, values["queue_depth"]))
                self.sink.sample("queue_depth", t, values["queue_depth"])
            if "slots_busy" in values:
                self.sink.sample("slots_busy", t, values["slots_busy"])
            await asyncio.sleep(self.interval_s)

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


FINGERPRINT_PROMPT = [
    {"role": "user", "content": "Identity check. Continue the sequence: one two three four five"}
]


async def identify(target: ProbeTarget) -> dict[str, Any]:
    """What the server says it serves, plus a greedy fingerprint of a fixed completion.

    The fingerprint catches two machines serving different weights under one name.
    """
    out: dict[str, Any] = {"served_models": [], "fingerprint": "", "error": ""}
    async with target.client(2) as http:
        try:
            response = await http.get("/v1/models", timeout=10.0)
            response.raise_for_status()
            data = response.json().get("data", [])
            out["served_models"] = [m.get("id", "") for m in data if isinstance(m, dict)]
            out["models_meta"] = data
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            out["error"] = f"/v1/models: {exc}"
        record = await chat(http, target, FINGERPRINT_PROMPT, Mode.GREEDY, 16)
        if record.ok:
            out["fingerprint"] = hashlib.sha256(record.text.encode()).hexdigest()[:16]
        else:
            out["error"] = (out["error"] + "; " if out["error"] else "") + f"fingerprint: {record.error}"
    return out


ProbeFn = Callable[[ProbeTarget, Sink, Any], Awaitable[None]]
