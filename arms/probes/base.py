"""What every probe shares: the target it measures, the sink it writes through, and the
helpers for sampling, server counters and identity.

Why a sink: measurement is separated from output. A probe never knows whether its rows
go to the campaign database (queued to a writer thread, stored in batches) or to a JSON
file from `campaign probe`; it calls the sink as soon as a number exists, and the call
never waits for storage.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import httpx

from arms.client import get_text, make_http_client, stream_chat
from arms.measures import RequestRecord, counter_deltas, extract_cached_tokens, prompt_tokens, record_payload, ttft_s
from arms.probes.failures import StallGuard, record_failure
from arms.runtimes.dialect import Dialect
from arms.runtimes.telemetry import COUNTERS, Telemetry
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind

GREEDY = {"temperature": 0.0}
LENGTH_CONTROLS = ("ignore_eos", "min_tokens")
"""Sampling fields that decide how long a reply is, not how its tokens are drawn: sent in
both modes, so greedy and canonical replies follow the same length rules."""
READ_TIMEOUT_S = 120.0
"""Seconds without a byte before a request counts as stalled, unless the target or the
probe says otherwise: generous, since a queued request on a busy server sends nothing."""


class Speaks(Protocol):
    """What a target needs of a runtime adapter: its telemetry and request dialect."""

    @property
    def telemetry(self) -> Telemetry: ...

    @property
    def dialect(self) -> Dialect: ...


@dataclass
class ProbeTarget:
    """A live server to measure, and how to talk to it.

    `read_timeout` (None: READ_TIMEOUT_S, or the probe's own) applies to every request;
    `stalls` stops the probe from sending after consecutive stalls (see `chat`).
    """

    base_url: str
    model: str
    # where the server reports what it did, and how it wants to be asked: its runtime's
    # (for a server at a URL, the family its /metrics page showed when the flow attached)
    telemetry: Telemetry
    dialect: Dialect
    sampling: dict[str, Any] = field(default_factory=dict)
    simulated: bool = False
    log_path: str | None = None  # the server's log, for counters only the log reveals
    read_timeout: float | None = None
    # where this server reports cached prompt tokens: its telemetry's, unless its launch
    # found another (`LaunchSpec.cached_tokens_field`); '' = the telemetry's
    cached_tokens_field: str = ""
    stalls: StallGuard = field(default_factory=StallGuard, repr=False, compare=False)
    _log_tail: LogTail | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def speaking(cls, runtime: Speaks, **fields: Any) -> ProbeTarget:
        """A target with `runtime`'s telemetry and dialect (an adapter, or the family an
        external server was recognised as), the other fields as given."""
        return cls(telemetry=runtime.telemetry, dialect=runtime.dialect, **fields)

    @property
    def cached_field(self) -> str:
        return self.cached_tokens_field or self.telemetry.cached_tokens_field

    def log_tail(self) -> LogTail | None:
        """The tail reader of this server's log (one per target, so reads resume where the
        last one stopped); None when there is no log or the runtime counts nothing in it."""
        if not self.log_path or not self.telemetry.log_counter_names:
            return None
        if self._log_tail is None or self._log_tail.path != self.log_path:
            self._log_tail = LogTail(self.log_path, self.telemetry.log_counters)
        return self._log_tail

    def sampling_for(self, mode: Mode) -> dict[str, Any]:
        if mode == Mode.GREEDY:
            return {**GREEDY, **self.dialect.sampling({k: self.sampling.get(k) for k in LENGTH_CONTROLS})}
        return self.dialect.sampling(self.sampling)

    def client(self, concurrency: int = 8) -> httpx.AsyncClient:
        return make_http_client(self.base_url, concurrency)


class Sink(Protocol):
    """Where a probe's rows go (`flows.sink.StoreSink`, `MemorySink`).

    `metric` is the catalogue's entry (`campaign.core.metrics.TTFT_S`), never a bare string,
    so a misspelled metric fails where it is written; a plugin probe names a metric of its
    own with a `Metric` of its own. `unit` is left out: the row takes the catalogue's. A
    probe states one only where the unit is the runtime's, not the metric's (the cache
    counters, in `counter_unit`), and it must be one of the metric's units. The one
    exception to the entry is a name that arrives as data, the server counters named by
    the runtime's telemetry (`COUNTERS`): it must be in the catalogue. What is stored is
    the plain name and unit, made in one place for every sink (`campaign.core.metrics.stored`).
    """

    def measurement(
        self,
        *,
        metric: Metric | str,
        value: float,
        mode: Mode | str,
        unit: str | None = None,
        scenario: str = "",
        context: int = 0,
        trial: int = 0,
        kind: SampleKind = SampleKind.SAMPLE,
        source: str = "",
    ) -> None: ...

    def request(self, record: RequestRecord, *, scenario: str, mode: Mode | str, trial: int = 0) -> None: ...

    def sample(self, series: str, t_s: float, value: float, label: str = "") -> None: ...

    def warn(self, message: str) -> None:
        """Something the person running the probe must read (a server far slower than a
        working one, `arms.probes.pace`): shown in the run's output, never a row."""


@dataclass
class MemorySink:
    """Collects rows in memory: for `campaign probe` and for tests."""

    measurements: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def measurement(self, *, metric: Metric | str, unit: str | None = None, **row: Any) -> None:
        row["metric"], row["unit"] = metrics.stored(metric, unit)
        row.setdefault("scenario", "")
        row.setdefault("context", 0)
        row.setdefault("trial", 0)
        row["kind"] = str(row.get("kind", SampleKind.SAMPLE))
        row.setdefault("source", "")
        row["mode"] = str(row["mode"])
        self.measurements.append(row)

    def request(self, record: RequestRecord, *, scenario: str, mode: Mode | str, trial: int = 0) -> None:
        self.requests.append({"scenario": scenario, "mode": str(mode), "trial": trial, **record.to_dict()})

    def sample(self, series: str, t_s: float, value: float, label: str = "") -> None:
        self.samples.append({"series": series, "t_s": t_s, "value": value, "label": label})

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def values(self, metric: Metric | str, **match: Any) -> list[float]:
        name = metric.name if isinstance(metric, Metric) else metric
        return [
            m["value"]
            for m in self.measurements
            if m["metric"] == name and all(str(m.get(k)) == str(v) for k, v in match.items())
        ]


async def chat(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    messages: list[dict[str, Any]],
    mode: Mode,
    max_tokens: int,
    *,
    tools: list[dict[str, Any]] | None = None,
    read_timeout: float | None = None,
    total_timeout: float | None = None,
    extra: dict[str, Any] | None = None,
) -> RequestRecord:
    """One streamed chat request with the target's sampling for `mode`; `extra` fields
    (a probe's own, e.g. decode's ignore_eos) go last and win.

    Every probe's requests pass here, so the stall policy lives here: once the target's
    stall guard has tripped, nothing is sent and the record comes back "not run" at once.
    """
    if target.stalls.tripped:
        return target.stalls.not_run()
    timeout = read_timeout if read_timeout is not None else (target.read_timeout or READ_TIMEOUT_S)
    body: dict[str, Any] = {"model": target.model, "messages": messages, "max_tokens": max_tokens}
    body.update(target.sampling_for(mode))
    if tools:
        body["tools"] = tools
    if extra:  # through the dialect too, which renames or drops what its runtime lacks
        body.update(target.dialect.sampling(extra))
    record = await stream_chat(http, body, read_timeout=timeout, total_timeout=total_timeout)
    target.stalls.observe(record, timeout)
    return record


class LogTail:
    """Cumulative counters of a growing server log, read from where the last read stopped.

    Why: at trace verbosity a server log grows by megabytes over a probe; reading and
    scanning all of it for every counter read costs more each time and competes with the
    streams being timed. Only the bytes added since the last read are scanned (up to the
    last complete line; a half-written line waits for the next read), and the counts are
    added to running totals. A log that shrank or was replaced by a new file (truncation,
    rotation) is read again from its start; the totals keep counting, so they never go
    backwards and per-probe deltas stay right.
    """

    def __init__(self, path: str, count: Callable[[str], Mapping[str, float]]):
        self.path = path
        self.count = count
        self.offset = 0
        self.totals: dict[str, float] = {}
        self.resets = 0
        self._partial = b""
        self._file_id: tuple[int, int] | None = None
        self._lock = threading.Lock()  # one reader at a time (reads run in worker threads)

    def read(self) -> dict[str, float]:
        """The totals after reading what the log gained; raises OSError if it cannot be read."""
        with self._lock:
            with open(self.path, "rb") as fh:
                stat = os.fstat(fh.fileno())
                file_id = (stat.st_dev, stat.st_ino)
                if self._file_id is not None and (file_id != self._file_id or stat.st_size < self.offset):
                    self.offset, self._partial = 0, b""
                    self.resets += 1
                self._file_id = file_id
                fh.seek(self.offset)
                data = fh.read()
            self.offset += len(data)
            data = self._partial + data
            end = data.rfind(b"\n") + 1
            self._partial = data[end:]
            if end:
                for name, value in self.count(data[:end].decode("utf-8", errors="replace")).items():
                    self.totals[name] = self.totals.get(name, 0.0) + float(value)
            for name in self.count(""):  # every counter exists from the first read, even at 0
                self.totals.setdefault(name, 0.0)
            return dict(self.totals)


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


@lru_cache(maxsize=16)
def _read_once(read: Callable[..., Any], path: str, args: tuple[Any, ...], stamp: tuple[int, int]) -> Any:
    return read(path, *args)


def read_unchanged(read: Callable[..., Any], path: str, *args: Any) -> Any:
    """`read(path, *args)`, read once while the file is unchanged (its mtime and size):
    a workload file (a trace, a dataset, recorded sessions) is checked when the params are
    validated and read again by every run. A file that cannot be stat'ed is handed to
    `read`, which says why in its own words."""
    try:
        info = os.stat(path)
    except OSError:
        return read(path, *args)
    return _read_once(read, path, args, (info.st_mtime_ns, info.st_size))


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


def record_response(
    sink: Sink,
    target: ProbeTarget,
    record: RequestRecord,
    *,
    mode: Mode,
    scenario: str,
    context: int,
    trial: int,
) -> tuple[int | None, int | None, str] | None:
    """The rows every answered request of a conversation probe writes: its failure, or its
    TTFT, the prompt tokens and the cached tokens the server reported (each only when the
    server gave it: a missing count is no row, never a 0 that reads as one).

    One function so that cache-probe and agent-load store a response the same way, with
    the same metrics, units and sources. Returns None for a failed request, else
    (cached tokens, prompt tokens, the field the cached count came from) for the rows a
    caller adds of its own (cache-probe's reuse, agent-load's decode rate).
    """
    if not record.ok:
        record_failure(sink, record, mode=mode, scenario=scenario, context=context, trial=trial)
        return None
    ttft = ttft_s(record)
    if ttft is not None:
        sink.measurement(metric=metrics.TTFT_S, value=ttft, mode=mode, scenario=scenario, context=context, trial=trial)
    payload = record_payload(record)
    cached, field = extract_cached_tokens(payload, prefer=target.cached_field)
    prompt = prompt_tokens(payload)
    if prompt is not None:
        sink.measurement(
            metric=metrics.PROMPT_TOKENS,
            value=prompt,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=trial,
            source="usage.prompt_tokens",
        )
    if cached is not None:
        sink.measurement(
            metric=metrics.CACHED_TOKENS,
            value=cached,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=trial,
            source=field,
        )
    return cached, prompt, field


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


FINGERPRINT_PROMPT = [{"role": "user", "content": "Identity check. Continue the sequence: one two three four five"}]


async def identify(target: ProbeTarget) -> dict[str, Any]:
    """What the server says it serves, plus a greedy fingerprint of a fixed completion.

    The fingerprint catches two machines serving different weights under one name.
    """
    out: dict[str, Any] = {"served_models": [], "fingerprint": "", "error": ""}
    async with target.client(2) as http:
        try:
            response = await http.get("/v1/models", timeout=10.0)
            response.raise_for_status()
            if response.content.strip():
                data = response.json().get("data", [])
                out["served_models"] = [m.get("id", "") for m in data if isinstance(m, dict)]
                out["models_meta"] = data
            else:  # mlx-lm, when its Hugging Face cache scan fails after the status line
                out["models_note"] = "/v1/models answered 200 with an empty body: no served ids to check"
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            out["error"] = f"/v1/models: {type(exc).__name__}: {exc}"
        record = await chat(http, target, FINGERPRINT_PROMPT, Mode.GREEDY, 16)
        if record.ok:
            out["fingerprint"] = hashlib.sha256(record.text.encode()).hexdigest()[:16]
        else:
            out["error"] = (out["error"] + "; " if out["error"] else "") + f"fingerprint: {record.error}"
    return out
