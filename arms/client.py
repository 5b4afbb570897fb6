"""The streaming OpenAI-compatible client: httpx's API over a timed aiohttp transport.

Why a transport of our own: httpx's default async transport falls behind with many
concurrent streams on small machines (seconds of reported TTFT error at 256 streams),
while aiohttp keeps up. Measuring also needs two stamps httpx cannot give: the moment
the request was actually written (after waiting for a pooled connection, not before),
and the arrival of the first byte of each SSE event. The hot loop only stamps and buffers
bytes; JSON parsing happens after the stream ends, so parsing cost never delays the
stamps of other streams. `benchmarks/client_accuracy.py` measures the result.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx

from arms.metrics import (
    CONTENT,
    DONE,
    EMPTY,
    MALFORMED,
    REASONING,
    ROLE,
    TOOL,
    USAGE,
    RequestRecord,
    estimate_tokens,
)

_EXTRA_KEYS = ("timings", "x_mlx_dspark", "x_metrics")
PARSE_BATCH = 16  # events parsed between yields to the event loop

try:  # a faster JSON decoder when present (prefect depends on it); same results
    import orjson

    def _loads(data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(str(exc)) from None

except ImportError:  # pragma: no cover

    def _loads(data: bytes) -> Any:
        return json.loads(data)


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


class ArrivalIndex:
    """Arrival times of a response body's bytes, stamped in the protocol's data_received.

    The stamp is taken when the event loop hands the socket's bytes to aiohttp, before any
    coroutine wakes up to read them; with hundreds of concurrent streams that is where the
    time is still true. `time_of(offset)` answers when the body byte at `offset` arrived.
    """

    __slots__ = ("_stamps", "_pos")

    def __init__(self, stamps: list[tuple[int, int]]):
        self._stamps = stamps  # (perf_counter_ns, total body bytes after that feed), growing
        self._pos = 0

    def time_of(self, offset: int) -> int | None:
        stamps = self._stamps
        pos = self._pos
        while pos < len(stamps) and stamps[pos][1] <= offset:
            pos += 1
        self._pos = pos
        return stamps[pos][0] if pos < len(stamps) else None


def _install_stamper(proto: Any) -> None:
    """Wrap one connection's data_received to stamp each feed of the current response body."""
    if getattr(proto, "_campaign_stamper", False):
        return
    original = proto.data_received

    def data_received(data: bytes) -> None:
        t = time.perf_counter_ns()
        original(data)
        payload = getattr(proto, "_payload", None)
        if payload is None:
            return
        if proto._campaign_payload is not payload:
            proto._campaign_payload = payload
            proto._campaign_stamps = []
        proto._campaign_stamps.append((t, payload.total_bytes))

    proto._campaign_payload = None
    proto._campaign_stamps = []
    proto.data_received = data_received
    proto._campaign_stamper = True


class _StampingConnector(aiohttp.TCPConnector):
    async def _create_connection(self, *args: Any, **kwargs: Any) -> Any:
        proto = await super()._create_connection(*args, **kwargs)
        try:
            _install_stamper(proto)
        except AttributeError:  # an aiohttp without these internals: fall back to read-time stamps
            pass
        return proto


class _TimedStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse):
        self._response = response
        self.arrivals: ArrivalIndex | None = None
        connection = response.connection
        proto = connection.protocol if connection is not None else None
        if proto is not None and getattr(proto, "_campaign_payload", None) is response.content:
            self.arrivals = ArrivalIndex(proto._campaign_stamps)

    async def read_chunk(self) -> bytes:
        """The next body bytes (b"" at the end): the fast path used by `stream_chat`."""
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise httpx.ReadError(f"stream broken: {exc!r}") from exc
        except (aiohttp.SocketTimeoutError, asyncio.TimeoutError) as exc:
            raise httpx.ReadTimeout("stream stalled: no bytes within the read timeout") from exc

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while chunk := await self.read_chunk():
            yield chunk

    async def aclose(self) -> None:
        self._response.release()


class TimedAiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport on aiohttp that records when each request was written.

    The stamp (`perf_counter_ns`) is taken by aiohttp's `on_request_headers_sent` trace
    hook and handed back in `response.extensions["send_ns"]`.
    """

    def __init__(self, max_connections: int = 256, keepalive_expiry: float = 4.0):
        # Servers close idle connections after a few seconds (llama-server: 5 s); letting
        # ours go first avoids writing a request into a connection being closed.
        self.max_connections = max(1, max_connections)
        self.keepalive_expiry = keepalive_expiry
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None

    def _make_session(self, fresh: bool = False) -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()

        async def on_headers_sent(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
            holder = ctx.trace_request_ctx
            if holder is not None:
                holder.send_ns = time.perf_counter_ns()

        trace.on_request_headers_sent.append(on_headers_sent)
        if fresh:  # one new connection per request: for the single retry after a refusal
            connector = _StampingConnector(limit=self.max_connections, force_close=True, ttl_dns_cache=300)
        else:
            connector = _StampingConnector(
                limit=self.max_connections,
                limit_per_host=self.max_connections,
                keepalive_timeout=self.keepalive_expiry,
                ttl_dns_cache=300,
            )
        return aiohttp.ClientSession(
            connector=connector, trace_configs=[trace], auto_decompress=True, timeout=aiohttp.ClientTimeout(total=None)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.extensions.get("campaign.fresh_connection"):
            if self._fresh is None or self._fresh.closed:
                self._fresh = self._make_session(fresh=True)
            session = self._fresh
        else:
            if self._session is None or self._session.closed:
                self._session = self._make_session()
            session = self._session
        spec = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=spec.get("pool"),
            sock_connect=spec.get("connect"),
            sock_read=spec.get("read"),
        )
        holder = SimpleNamespace(send_ns=None)
        body = request.content if request.stream is not None else b""
        try:
            response = await session.request(
                request.method,
                str(request.url),
                headers=[(k.decode(), v.decode()) for k, v in request.headers.raw if k.lower() != b"content-length"],
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
                trace_request_ctx=holder,
                skip_auto_headers=("User-Agent",),
            )
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(f"cannot connect: {exc.os_error or exc}", request=request) from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise httpx.RemoteProtocolError("server closed the connection before responding", request=request) from exc
        except (aiohttp.SocketTimeoutError, asyncio.TimeoutError) as exc:
            raise httpx.ReadTimeout("no response within the read timeout", request=request) from exc
        except aiohttp.ClientOSError as exc:
            raise httpx.ConnectError(f"connection failed: {exc}", request=request) from exc
        except aiohttp.ClientResponseError as exc:
            raise httpx.RemoteProtocolError(f"malformed response: {exc.message}", request=request) from exc
        stream = _TimedStream(response)
        return httpx.Response(
            status_code=response.status,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers],
            stream=stream,
            request=request,
            extensions={"send_ns": holder.send_ns, "http_version": b"HTTP/1.1", "campaign.timed_stream": stream},
        )

    async def aclose(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None


def make_http_client(base_url: str, concurrency: int = 16) -> httpx.AsyncClient:
    """One shared pool sized for the probe's concurrency (never a silent cap at 100)."""
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        transport=TimedAiohttpTransport(max_connections=max(concurrency, 1) + 4),
        timeout=httpx.Timeout(connect=10.0, read=60.0, write=30.0, pool=None),
    )


# -- SSE -------------------------------------------------------------------------------


def _event_data(raw: bytes) -> bytes | None:
    if raw.startswith(b"data: ") and b"\n" not in raw:  # the common one-line event
        return raw[6:].rstrip(b"\r")
    if b"\r" in raw:
        raw = raw.replace(b"\r", b"")
    lines = [line[5:].lstrip() if line.startswith(b"data:") else None for line in raw.split(b"\n")]
    data = [line for line in lines if line is not None]
    if not data:
        return None
    return b"\n".join(data)


class EventParser:
    """Fills a record from stamped raw events: kinds, token counts, text, tool calls, usage.

    Incremental, so `stream_chat` can hand the event loop back between batches: when
    hundreds of streams end at once, their parsing must not delay other streams' stamps.
    """

    def __init__(self, record: RequestRecord):
        self.record = record
        self.tools: dict[int, dict[str, Any]] = {}
        self.text: list[str] = []
        self.reasoning: list[str] = []

    def feed(self, raw_events: list[tuple[int, bytes]]) -> None:
        record = self.record
        for t_ns, raw in raw_events:
            data = _event_data(raw)
            if data is None:
                continue  # comments and keep-alives are not events of the protocol
            if data == b"[DONE]":
                _add(record, t_ns, DONE, 0)
                continue
            try:
                chunk = _loads(data)
                if not isinstance(chunk, dict):
                    raise ValueError("not an object")
            except ValueError:
                record.malformed_events += 1
                _add(record, t_ns, MALFORMED, 0)
                continue
            self._chunk(t_ns, chunk)

    def _chunk(self, t_ns: int, chunk: dict[str, Any]) -> None:
        record = self.record
        if "error" in chunk and not chunk.get("choices"):
            err = chunk["error"]
            record.error = f"server error event: {err.get('message', err) if isinstance(err, dict) else err}"
            _add(record, t_ns, EMPTY, 0)
            return
        if isinstance(chunk.get("usage"), dict):
            record.usage = chunk["usage"]
        for key in _EXTRA_KEYS:
            if isinstance(chunk.get(key), dict):
                if key == "timings":
                    record.timings = chunk[key]
                else:
                    record.extra[key] = chunk[key]
        choices = chunk.get("choices") or []
        if not choices:
            _add(record, t_ns, USAGE if "usage" in chunk else EMPTY, 0)
            return
        choice = choices[0] if isinstance(choices[0], dict) else {}
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or choice.get("message") or {}
        content = delta.get("content") or ""
        thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
        calls = delta.get("tool_calls") or []
        if calls:
            for call in calls:
                _merge_tool_delta(self.tools, call)
            _add(record, t_ns, TOOL, len(calls))
            if content:
                self.text.append(content)
        elif content:
            self.text.append(content)
            _add(record, t_ns, CONTENT, estimate_tokens(content))
        elif thought:
            self.reasoning.append(thought)
            _add(record, t_ns, REASONING, estimate_tokens(thought))
        elif delta.get("role"):
            _add(record, t_ns, ROLE, 0)
        else:
            _add(record, t_ns, EMPTY, 0)

    def finish(self) -> RequestRecord:
        record = self.record
        record.text = "".join(self.text)
        record.reasoning = "".join(self.reasoning)
        record.tool_calls = [self.tools[i] for i in sorted(self.tools)]
        if record.malformed_events and record.error is None:
            record.error = f"malformed SSE: {record.malformed_events} event(s) were not JSON"
        return record


def parse_events(record: RequestRecord, raw_events: list[tuple[int, bytes]]) -> None:
    """Parse all stamped events of one request at once (see `EventParser`)."""
    parser = EventParser(record)
    parser.feed(raw_events)
    parser.finish()


def _add(record: RequestRecord, t_ns: int, kind: str, tokens: int) -> None:
    record.event_ns.append(t_ns)
    record.event_kind.append(kind)
    record.event_tokens.append(tokens)


def _merge_tool_delta(tools: dict[int, dict[str, Any]], call: dict[str, Any]) -> None:
    """Tool calls stream as fragments keyed by index: name once, arguments in pieces."""
    index = call.get("index", len(tools))
    slot = tools.setdefault(index, {"id": None, "name": "", "arguments": ""})
    if call.get("id"):
        slot["id"] = call["id"]
    fn = call.get("function") or {}
    if fn.get("name"):
        slot["name"] += fn["name"] if not slot["name"] else ""
    if fn.get("arguments"):
        slot["arguments"] += fn["arguments"]


# -- the request ---------------------------------------------------------------------

_SEPARATOR = re.compile(rb"\r?\n\r?\n")


async def _read_events(read: Any, arrivals: ArrivalIndex | None) -> list[tuple[int, bytes]]:
    """Split the body into SSE events, each with the arrival time of its first byte.

    Only bytes are handled here; parsing waits until the stream ends so that it never
    delays the stamps of concurrent streams.
    """
    events: list[tuple[int, bytes]] = []
    buffer = b""
    base = 0  # body offset of buffer[0]
    start_ns = 0  # arrival of the first byte of the pending event
    while True:
        chunk = await read()
        now = time.perf_counter_ns()
        if not chunk:
            break
        if not buffer:
            start_ns = (arrivals.time_of(base) if arrivals else None) or now
        buffer += chunk
        pos = 0
        while (match := _SEPARATOR.search(buffer, pos)) is not None:
            events.append((start_ns, buffer[pos : match.start()]))
            pos = match.end()
            if pos < len(buffer):
                start_ns = (arrivals.time_of(base + pos) if arrivals else None) or now
        if pos:
            buffer = buffer[pos:]
            base += pos
    if buffer.strip():
        events.append((start_ns, buffer))
    return events


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
    for attempt in range(2):
        raw_events: list[tuple[int, bytes]] = []
        got_response = False
        fallback_send = time.perf_counter_ns()
        try:
            async with asyncio.timeout(total_timeout):
                async with http.stream(
                    "POST",
                    "/v1/chat/completions",
                    json=body,
                    timeout=httpx.Timeout(connect=10.0, read=read_timeout, write=30.0, pool=None),
                    extensions={"campaign.fresh_connection": True} if attempt else {},
                ) as response:
                    got_response = True
                    record.send_ns = response.extensions.get("send_ns") or fallback_send
                    record.status = response.status_code
                    if response.status_code >= 400:
                        detail = (await response.aread())[:300].decode("utf-8", errors="replace")
                        record.end_ns = time.perf_counter_ns()
                        record.error = f"HTTP {response.status_code}: {detail.strip()}"
                        return record
                    stream = response.extensions.get("campaign.timed_stream")
                    if isinstance(stream, _TimedStream):
                        read = stream.read_chunk
                        arrivals = stream.arrivals
                    else:  # another transport: stamps at read time
                        chunks = response.aiter_raw()
                        read = lambda: anext(chunks, b"")  # noqa: E731
                        arrivals = None
                    raw_events.extend(await _read_events(read, arrivals))
                    record.end_ns = time.perf_counter_ns()
        except _RETRYABLE as exc:
            if not got_response and attempt == 0:
                record.retries += 1
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
        return record
    return record


async def get_json(http: httpx.AsyncClient, path: str, timeout: float = 10.0) -> Any:
    response = await http.get(path, timeout=timeout)
    response.raise_for_status()
    return response.json()


async def get_text(http: httpx.AsyncClient, path: str, timeout: float = 10.0) -> str:
    response = await http.get(path, timeout=timeout)
    response.raise_for_status()
    return response.text
