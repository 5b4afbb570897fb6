"""What every probe shares: the target it measures, the sink it writes through, `chat`
(every probe's chat requests pass through it), the rows of an answered request, and the
server's identity. Server counters are read in `arms.probes.counters`, queue depth sampled in
`arms.probes.queue_sampler`.

Why a sink: measurement is separated from output. A probe never knows whether its rows
go to the campaign database (queued to a writer thread, stored in batches) or to a JSON
file from `campaign probe`; it calls the sink as soon as a number exists, and the call
never waits for storage.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import httpx

from arms.client import make_http_client, stream_chat
from arms.measures import RequestRecord, extract_cached_tokens, prompt_tokens, record_payload, ttft_s
from arms.probes.failures import StallGuard, record_failure
from arms.probes.log_tail import LogTail
from arms.runtimes.dialect import Dialect
from arms.runtimes.telemetry import Telemetry
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
