"""The streaming OpenAI-compatible client that probes use: httpx's API over a timed aiohttp
transport, composed of three parts.

- `arms/transport.py` sends the request and stamps bytes as they arrive: when the
  request was written (`send_stamp_source`) and when each feed of body bytes reached the
  protocol's data_received (`stamp_source`), falling back to read time and saying so.
- `arms/sse.py` splits the body into SSE events, each stamped at its first byte.
- `arms/events.py` turns the events into the record's kinds, tokens, text, usage,
  timings and tool calls.

The hot loop only stamps and buffers bytes; JSON parsing happens after the stream ends, in
batches between which other streams' bytes get stamped, so parsing cost never delays the
stamps of other streams. CPU per event matters as much as the stamps: a client that spends
more than the server streams makes its own lateness (see the transport's notes on what it
skips). `benchmarks/client_accuracy.py` measures the result against plain aiohttp.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx

from arms.events import EventParser
from arms.measures import (
    DONE,
    SEND_FALLBACK,
    SEND_FIRST_ATTEMPT,
    SEND_HEADERS_SENT,
    TOKEN_KINDS,
    RequestRecord,
)
from arms.sse import EventSplitter
from arms.transport import ArrivalIndex, TimedAiohttpTransport, TimedClient, body_reader, post_chat, stamp_source

PARSE_BATCH = 16  # events parsed between yields to the event loop


class _GcPause:
    """Keep the cyclic garbage collector off while streams are in flight.

    A full collection stops every stream at once for tens of milliseconds -- visible as
    a synchronized jump in every stream's inter-token time. Reference counting still
    frees almost everything; the collector runs once the last stream has ended.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._active += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._was_enabled:
                gc.enable()


gc_paused = _GcPause()


def make_http_client(base_url: str, concurrency: int = 16) -> httpx.AsyncClient:
    """One shared pool sized for the probe's concurrency (never a silent cap at 100)."""
    return TimedClient(
        base_url=base_url.rstrip("/"),
        transport=TimedAiohttpTransport(max_connections=max(concurrency, 1) + 4),
        timeout=httpx.Timeout(connect=10.0, read=60.0, write=30.0, pool=None),
    )


async def _read_events(
    read: Callable[[], Awaitable[bytes]],
    arrivals: ArrivalIndex | None,
    events: list[tuple[int, bytes]],
    record: RequestRecord,
) -> None:
    """Split the body into stamped events (appended to `events` as they complete) and set
    `record.stamp_source`, also when the stream breaks."""
    splitter = EventSplitter(events, arrivals.time_of if arrivals is not None else None)
    try:
        await splitter.read_all(read)
    finally:
        record.stamp_source = stamp_source(arrivals is not None, splitter.exact, splitter.late)


_RETRYABLE = (httpx.RemoteProtocolError, httpx.ConnectError)


async def stream_chat(
    http: httpx.AsyncClient,
    body: dict[str, Any],
    *,
    read_timeout: float = 60.0,
    total_timeout: float | None = None,
    label: dict[str, Any] | None = None,
) -> RequestRecord:
    """Send one streaming chat completion and return its raw record; never raises for
    anything the server does (errors land in `record.error`)."""
    with gc_paused:
        return await _stream_chat(http, body, read_timeout, total_timeout, label)


async def _stream_chat(
    http: httpx.AsyncClient,
    body: dict[str, Any],
    read_timeout: float,
    total_timeout: float | None,
    label: dict[str, Any] | None,
) -> RequestRecord:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    record = RequestRecord(label=dict(label or {}))
    first_send = 0  # the first attempt's send time, once a retry needs it
    for attempt in range(2):
        raw_events: list[tuple[int, bytes]] = []
        got_response = False
        fallback_send = time.perf_counter_ns()  # before any wait for a pooled connection
        try:
            async with asyncio.timeout(total_timeout):
                async with post_chat(http, body, read_timeout, fresh=attempt > 0) as response:
                    got_response = True
                    sent = response.extensions.get("send_ns")
                    record.send_ns = fallback_send if sent is None else sent
                    record.send_stamp_source = SEND_FALLBACK if sent is None else SEND_HEADERS_SENT
                    if record.retries:  # the user waited from the first send: so do the times
                        record.send_ns, record.send_stamp_source = first_send, SEND_FIRST_ATTEMPT
                    timed = response.extensions.get("campaign.timed_stream")
                    record.connect_ns = getattr(timed, "connect_ns", None)
                    record.status = response.status_code
                    if response.status_code >= 400:
                        detail = (await response.aread())[:300].decode("utf-8", errors="replace")
                        record.end_ns = time.perf_counter_ns()
                        record.error = f"HTTP {response.status_code}: {detail.strip()}"
                        return record
                    read, arrivals = body_reader(response)
                    await _read_events(read, arrivals, raw_events, record)
                    record.end_ns = time.perf_counter_ns()
        except _RETRYABLE as exc:
            if not got_response and attempt == 0:
                record.retries += 1
                first_send = fallback_send
                continue
            record.error = f"{type(exc).__name__}: {exc}"
        except (httpx.TimeoutException, TimeoutError) as exc:
            record.error = f"timeout: {exc or 'no bytes within the limit'}"
        except httpx.HTTPError as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        if not record.send_ns:
            record.send_ns = fallback_send
            record.send_stamp_source = SEND_FALLBACK
        if not record.end_ns:
            record.end_ns = time.perf_counter_ns()
        parser = EventParser(record)
        for i in range(0, len(raw_events), PARSE_BATCH):
            parser.feed(raw_events[i : i + PARSE_BATCH])
            if len(raw_events) > PARSE_BATCH:
                await asyncio.sleep(0)  # let other streams' bytes be stamped in between
        parser.finish()
        if record.error is None and not any(k == DONE for k in record.event_kind) and record.finish_reason is None:
            record.error = "stream ended without [DONE] or a finish_reason"
        if record.error is None and not any(k in TOKEN_KINDS for k in record.event_kind):
            # a finished stream with nothing in it: never a success with no numbers
            usage = record.usage or {}
            record.error = (
                f"server sent no tokens (finish_reason={record.finish_reason},"
                f" completion_tokens={usage.get('completion_tokens')})"
            )
        return record
    return record


async def warm_connections(http: httpx.AsyncClient, connections: int) -> int:
    """Open `connections` pooled connections before a run (`TimedAiohttpTransport.warm`);
    0 on a client without the timed transport."""
    transport = getattr(http, "timed_transport", None)
    if transport is None or connections <= 0:
        return 0
    return int(await transport.warm(str(http.base_url).rstrip("/") + "/v1/models", connections))


async def get_text(http: httpx.AsyncClient, path: str, timeout: float = 10.0) -> str:
    response = await http.get(path, timeout=timeout)
    response.raise_for_status()
    return response.text
