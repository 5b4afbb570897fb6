"""The streaming OpenAI-compatible client: httpx's API over a timed aiohttp transport.

Why a transport of our own: httpx's default async transport falls behind with many
concurrent streams on small machines (seconds of reported TTFT error at 256 streams),
while aiohttp keeps up. Measuring also needs two stamps httpx cannot give: the moment
the request was actually written (after waiting for a pooled connection, not before),
and the arrival of the first byte of each SSE event. The hot loop only stamps and buffers
bytes; JSON parsing happens after the stream ends, so parsing cost never delays the
stamps of other streams. Each record says how its stamps were taken (`stamp_source`,
`send_stamp_source`): where aiohttp's internals or another transport rule out the exact
stamps, the times fall back to read time and the row says so.

CPU per event matters as much as the stamps: a client that spends more than the server
streams makes its own lateness. So the chat POST skips httpx's per-request machinery on
our own client (`TimedClient`), the body's read timeout is one self-re-arming timer per
stream instead of aiohttp's timer per chunk, and the common one-token chunk is parsed on
a short path. `benchmarks/client_accuracy.py` measures the result against plain aiohttp.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
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
    SEND_FALLBACK,
    SEND_FIRST_ATTEMPT,
    SEND_HEADERS_SENT,
    STAMP_DATA_RECEIVED,
    STAMP_MIXED,
    STAMP_READ_TIME,
    TOKEN_KINDS,
    TOOL,
    USAGE,
    RequestRecord,
    estimate_tokens,
)

_EXTRA_KEYS = ("timings", "x_mlx_dspark", "x_metrics")
_RECORDED_KEYS = frozenset({"error", "usage", *_EXTRA_KEYS})  # top-level keys `_chunk` keeps
PARSE_BATCH = 16  # events parsed between yields to the event loop

try:  # a faster JSON decoder when present (prefect depends on it); same results
    import orjson

    _loads = orjson.loads  # its JSONDecodeError is a ValueError

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
        if not data:  # aiohttp resuming its parser after a read (every read): nothing arrived
            original(data)
            return
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
    """A response body read through aiohttp, with its arrival stamps and a cheap stall timer.

    aiohttp enforces the read timeout by cancelling and re-arming a loop timer on every
    received chunk; with hundreds of streams that timer churn costs a measurable share of
    the client's CPU. For the body, one timer per stream does the same job: it fires at
    `last read + read_timeout`, and re-arms itself for the remainder when bytes came in the
    meantime. (The response headers are still under aiohttp's own read timeout.)
    """

    def __init__(self, response: aiohttp.ClientResponse, read_timeout: float | None = None):
        self._response = response
        self.arrivals: ArrivalIndex | None = None
        self.stalled = False
        self._read_timeout = read_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0
        connection = response.connection
        proto = connection.protocol if connection is not None else None
        if proto is not None and getattr(proto, "_campaign_payload", None) is response.content:
            self.arrivals = ArrivalIndex(proto._campaign_stamps)
        if read_timeout and proto is not None and hasattr(proto, "read_timeout"):
            proto.read_timeout = None  # aiohttp's per-chunk timer stops at the next chunk
            self._loop = asyncio.get_running_loop()
            self._last = self._loop.time()
            self._timer = self._loop.call_at(self._last + read_timeout, self._check_stall)

    def _check_stall(self) -> None:
        assert self._read_timeout is not None
        deadline = self._last + self._read_timeout
        if self._loop.time() < deadline:  # bytes came since the timer was set
            self._timer = self._loop.call_at(deadline, self._check_stall)
            return
        self._timer = None
        self.stalled = True
        self._response.content.set_exception(aiohttp.SocketTimeoutError("no bytes within the read timeout"))

    async def read_chunk(self) -> bytes:
        """The next body bytes (b"" at the end): the fast path used by `stream_chat`."""
        try:
            chunk = await self._response.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise httpx.ReadError(f"stream broken: {exc!r}") from exc
        except (aiohttp.SocketTimeoutError, asyncio.TimeoutError) as exc:
            raise httpx.ReadTimeout("stream stalled: no bytes within the read timeout") from exc
        if self._timer is not None:
            self._last = self._loop.time()
        return chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while chunk := await self.read_chunk():
            yield chunk

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.stalled:  # never hand a connection with half a response back to the pool
            self._response.close()
        else:
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

    async def open(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes,
        timeout: Mapping[str, float | None],
        *,
        fresh: bool = False,
        request: httpx.Request | None = None,
    ) -> tuple[aiohttp.ClientResponse, int | None, _TimedStream]:
        """Send one request; (response, send stamp or None, its timed body stream).

        aiohttp's errors come out as the httpx exceptions they correspond to. `timeout` is
        httpx's timeout dict (connect, read, write, pool); `fresh` sends over a new connection.
        """
        if fresh:
            if self._fresh is None or self._fresh.closed:
                self._fresh = self._make_session(fresh=True)
            session = self._fresh
        else:
            if self._session is None or self._session.closed:
                self._session = self._make_session()
            session = self._session
        client_timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeout.get("pool"),
            sock_connect=timeout.get("connect"),
            sock_read=timeout.get("read"),
        )
        holder = SimpleNamespace(send_ns=None)
        try:
            response = await session.request(
                method,
                url,
                headers=[(k, v) for k, v in headers if k.lower() != "content-length"],
                data=body or None,
                allow_redirects=False,
                timeout=client_timeout,
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
        return response, holder.send_ns, _TimedStream(response, timeout.get("read"))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response, send_ns, stream = await self.open(
            request.method,
            str(request.url),
            [(k.decode(), v.decode()) for k, v in request.headers.raw],
            request.content if request.stream is not None else b"",
            request.extensions.get("timeout") or {},
            fresh=bool(request.extensions.get("campaign.fresh_connection")),
            request=request,
        )
        return httpx.Response(
            status_code=response.status,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers],
            stream=stream,
            request=request,
            extensions={"send_ns": send_ns, "http_version": b"HTTP/1.1", "campaign.timed_stream": stream},
        )

    async def aclose(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None


class TimedClient(httpx.AsyncClient):
    """httpx's client on the timed transport, which `stream_chat` can post to directly.

    Every other use (GET /metrics, /tokenize, ...) goes through httpx as usual. For the
    streamed chat requests, httpx's per-request machinery (building a Request and a
    Response, auth and redirect flows, cookie extraction) cost about as much CPU as
    reading a hundred events; `stream_chat` skips it when nothing it provides is in use
    (no auth, cookies, params or event hooks) and sends the same request: the client's
    headers, the JSON body encoded as httpx 0.28 encodes it (compact, UTF-8).
    """

    def __init__(self, *, base_url: str, transport: TimedAiohttpTransport, timeout: httpx.Timeout):
        super().__init__(base_url=base_url, transport=transport, timeout=timeout)
        self.timed_transport = transport

    def direct_transport(self) -> TimedAiohttpTransport | None:
        """The transport to post to directly, or None when httpx must handle the request."""
        if self.auth is not None or self.params or self.cookies or any(self.event_hooks.values()):
            return None
        return self.timed_transport


def make_http_client(base_url: str, concurrency: int = 16) -> httpx.AsyncClient:
    """One shared pool sized for the probe's concurrency (never a silent cap at 100)."""
    return TimedClient(
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
        add_text, add_ns = self.text.append, record.event_ns.append
        add_kind, add_tokens = record.event_kind.append, record.event_tokens.append
        for t_ns, raw in raw_events:
            if raw[:6] == b"data: " and b"\n" not in raw and b"\r" not in raw:
                data: bytes | None = raw[6:]  # the common one-line event
            else:
                data = _event_data(raw)
                if data is None:
                    continue  # comments and keep-alives are not events of the protocol
            if data == b"[DONE]":
                _add(record, t_ns, DONE, 0)
                continue
            try:
                chunk = _loads(data)
            except ValueError:
                chunk = None
            if not isinstance(chunk, dict):
                record.malformed_events += 1
                _add(record, t_ns, MALFORMED, 0)
                continue
            # the short path for most of a stream: one plain content delta, nothing else to keep
            try:
                (choice,) = chunk["choices"]
                delta = choice["delta"]
                content = delta["content"]
            except (KeyError, TypeError, ValueError):
                content = None
            if (
                type(content) is str
                and content
                and len(delta) == 1
                and not choice.get("finish_reason")
                and _RECORDED_KEYS.isdisjoint(chunk)
            ):
                add_text(content)
                add_ns(t_ns)
                add_kind(CONTENT)
                add_tokens(estimate_tokens(content))
            else:
                self._chunk(t_ns, chunk)

    def _chunk(self, t_ns: int, chunk: dict[str, Any]) -> None:
        record = self.record
        choices = chunk.get("choices") or []
        if "error" in chunk and not choices:
            err = chunk["error"]
            record.error = f"server error event: {err.get('message', err) if isinstance(err, dict) else err}"
            _add(record, t_ns, EMPTY, 0)
            return
        if "usage" in chunk and isinstance(chunk["usage"], dict):
            record.usage = chunk["usage"]
        for key in _EXTRA_KEYS:
            if key in chunk and isinstance(chunk[key], dict):
                if key == "timings":
                    record.timings = chunk[key]
                else:
                    record.extra[key] = chunk[key]
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
            _add(record, t_ns, TOOL, _tool_tokens(calls))
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


def _tool_tokens(calls: list[Any]) -> int:
    """Token estimate of one tool-call delta: its name and argument fragments, at least one per call."""
    total = 0
    for call in calls:
        fn = (call.get("function") if isinstance(call, dict) else None) or {}
        total += estimate_tokens(f"{fn.get('name') or ''} {fn.get('arguments') or ''}")
    return total


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

_SEPARATOR = re.compile(rb"\r?\n\r?\n")  # an event's end, once a body has carriage returns


async def _read_events(
    read: Any, arrivals: ArrivalIndex | None, events: list[tuple[int, bytes]], record: RequestRecord
) -> None:
    """Split the body into SSE events, each with the arrival time of its first byte,
    appended to `events` as they complete (so a stream cut short keeps what arrived).

    Only bytes are handled here; parsing waits until the stream ends so that it never
    delays the stamps of concurrent streams. Sets `record.stamp_source` (STAMP_*), also
    when the stream breaks: stamps come from `arrivals` (the data_received stamper), or
    are taken at read time when there is none or it has no stamp for an offset.
    """
    buffer = b""
    base = 0  # body offset of buffer[0]
    start_ns = 0  # arrival of the first byte of the pending event
    start_late = False  # ... taken at read time, not from arrivals
    first = len(events)
    late = 0  # events stamped at read time (the rest: from arrivals)
    time_of = arrivals.time_of if arrivals is not None else None
    crlf = False  # events end with "\n\n" (bytes.find, far cheaper per event than a regex) until a "\r" shows up
    try:
        while True:
            chunk = await read()
            now = time.perf_counter_ns()
            if not chunk:
                break
            if not buffer:
                stamp = time_of(base) if time_of is not None else None
                start_late = stamp is None
                start_ns = now if stamp is None else stamp
            buffer += chunk
            crlf = crlf or b"\r" in chunk
            pos = 0
            while True:
                if crlf:
                    match = _SEPARATOR.search(buffer, pos)
                    if match is None:
                        break
                    sep, after = match.span()
                else:
                    sep = buffer.find(b"\n\n", pos)
                    if sep < 0:
                        break
                    after = sep + 2
                events.append((start_ns, buffer[pos:sep]))
                late += start_late
                pos = after
                if pos < len(buffer):
                    stamp = time_of(base + pos) if time_of is not None else None
                    start_late = stamp is None
                    start_ns = now if stamp is None else stamp
            if pos:
                buffer = buffer[pos:]
                base += pos
        if buffer.strip():
            events.append((start_ns, buffer))
            late += start_late
    finally:
        exact = len(events) - first - late
        if late and exact:
            record.stamp_source = STAMP_MIXED
        elif late or arrivals is None:
            record.stamp_source = STAMP_READ_TIME
        else:
            record.stamp_source = STAMP_DATA_RECEIVED


CHAT_PATH = "/v1/chat/completions"


class _DirectResponse:
    """What `_stream_chat` reads of a response, for a request posted past httpx."""

    __slots__ = ("status_code", "extensions", "_stream")

    def __init__(self, response: aiohttp.ClientResponse, send_ns: int | None, stream: _TimedStream):
        self.status_code = response.status
        self.extensions = {"send_ns": send_ns, "campaign.timed_stream": stream}
        self._stream = stream

    async def aread(self) -> bytes:
        chunks = []
        while chunk := await self._stream.read_chunk():
            chunks.append(chunk)
        return b"".join(chunks)


@asynccontextmanager
async def _post_chat(http: httpx.AsyncClient, body: dict[str, Any], read_timeout: float, *, fresh: bool) -> AsyncIterator[Any]:
    """POST a chat body and yield the response: directly on a TimedClient's transport when
    it allows (see `TimedClient`), through httpx otherwise (any client, any transport)."""
    timeout = httpx.Timeout(connect=10.0, read=read_timeout, write=30.0, pool=None)
    transport = http.direct_transport() if isinstance(http, TimedClient) else None
    if transport is None:
        extensions = {"campaign.fresh_connection": True} if fresh else {}
        async with http.stream("POST", CHAT_PATH, json=body, timeout=timeout, extensions=extensions) as response:
            yield response
        return
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    headers = [*http.headers.multi_items(), ("Content-Type", "application/json")]
    url = str(http.base_url).rstrip("/") + CHAT_PATH  # httpx's merge: base path + the path
    response, send_ns, stream = await transport.open("POST", url, headers, data, timeout.as_dict(), fresh=fresh)
    try:
        yield _DirectResponse(response, send_ns, stream)
    finally:
        await stream.aclose()


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
        fallback_send = time.perf_counter_ns()  # before any wait for a pooled connection
        try:
            async with asyncio.timeout(total_timeout):
                async with _post_chat(http, body, read_timeout, fresh=attempt > 0) as response:
                    got_response = True
                    sent = response.extensions.get("send_ns")
                    record.send_ns = fallback_send if sent is None else sent
                    record.send_stamp_source = SEND_FALLBACK if sent is None else SEND_HEADERS_SENT
                    if record.retries:  # the user waited from the first send: so do the times
                        record.send_ns, record.send_stamp_source = first_send, SEND_FIRST_ATTEMPT
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
                    else:  # another transport: stamps at read time (decoded bytes, like aiohttp's)
                        chunks = response.aiter_bytes()
                        read = lambda: anext(chunks, b"")  # noqa: E731
                        arrivals = None
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


async def get_json(http: httpx.AsyncClient, path: str, timeout: float = 10.0) -> Any:
    response = await http.get(path, timeout=timeout)
    response.raise_for_status()
    return response.json()


async def get_text(http: httpx.AsyncClient, path: str, timeout: float = 10.0) -> str:
    response = await http.get(path, timeout=timeout)
    response.raise_for_status()
    return response.text
