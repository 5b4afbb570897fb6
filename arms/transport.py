"""The client's transport: sending requests over aiohttp and stamping bytes as they arrive.

Why a transport of our own: httpx's default async transport falls behind with many
concurrent streams on small machines (seconds of reported TTFT error at 256 streams),
while aiohttp keeps up. Measuring also needs two stamps httpx cannot give: the moment
the request was actually written (after waiting for a pooled connection, not before;
`send_ns`), and the arrival of each feed of body bytes (`ArrivalIndex`, stamped in the
protocol's data_received). Where aiohttp's internals or another transport rule those
out, the times fall back to read time and `stamp_source` says so.

CPU per event matters as much as the stamps: the chat POST skips httpx's per-request
machinery on our own client (`TimedClient`, `post_chat`), and the body's read timeout is
one self-re-arming timer per stream instead of aiohttp's timer per chunk (`TimedStream`).
Nothing here looks inside the bytes: framing is `arms/sse.py`, parsing `arms/events.py`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx

from arms.measures import STAMP_DATA_RECEIVED, STAMP_MIXED, STAMP_READ_TIME

CHAT_PATH = "/v1/chat/completions"


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


def stamp_source(has_arrivals: bool, exact: int, late: int) -> str:
    """How a stream's event times were taken (STAMP_*), from how many events got an
    arrival stamp (`exact`) and how many fell back to read time (`late`)."""
    if late and exact:
        return STAMP_MIXED
    if late or not has_arrivals:
        return STAMP_READ_TIME
    return STAMP_DATA_RECEIVED


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


class TimedStream(httpx.AsyncByteStream):
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
        self.connect_ns: int | None = None  # the time this request spent opening its connection
        self.stalled = False
        self._read_timeout = read_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0
        connection = response.connection
        # the handler carries what `_install_stamper` added to it, when it could
        proto: Any = connection.protocol if connection is not None else None
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
        except (TimeoutError, aiohttp.SocketTimeoutError) as exc:
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

        async def on_connect_start(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
            if ctx.trace_request_ctx is not None:
                ctx.trace_request_ctx.connect_start = time.perf_counter_ns()

        async def on_connect_end(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
            holder = ctx.trace_request_ctx
            if holder is not None and getattr(holder, "connect_start", None) is not None:
                holder.connect_ns = time.perf_counter_ns() - holder.connect_start

        trace.on_request_headers_sent.append(on_headers_sent)
        trace.on_connection_create_start.append(on_connect_start)
        trace.on_connection_create_end.append(on_connect_end)
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
    ) -> tuple[aiohttp.ClientResponse, int | None, TimedStream]:
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
        holder = SimpleNamespace(send_ns=None, connect_start=None, connect_ns=None)
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
        except (TimeoutError, aiohttp.SocketTimeoutError) as exc:
            raise httpx.ReadTimeout("no response within the read timeout", request=request) from exc
        except aiohttp.ClientOSError as exc:
            raise httpx.ConnectError(f"connection failed: {exc}", request=request) from exc
        except aiohttp.ClientResponseError as exc:
            raise httpx.RemoteProtocolError(f"malformed response: {exc.message}", request=request) from exc
        stream = TimedStream(response, timeout.get("read"))
        stream.connect_ns = holder.connect_ns
        return response, holder.send_ns, stream

    async def warm(self, url: str, connections: int, timeout: float = 10.0) -> int:
        """Open up to `connections` pooled connections before a run's schedule starts, by
        as many concurrent GETs of `url` (each holds its connection until all are open):
        the first request on a connection then does not pay for opening it, so a run of
        256 streams does not start with a ramp of 256 connects. Returns how many opened."""
        if self._session is None or self._session.closed:
            self._session = self._make_session()
        session = self._session
        limit = aiohttp.ClientTimeout(total=timeout)

        async def one() -> bool:
            try:
                async with session.get(url, timeout=limit, skip_auto_headers=("User-Agent",)) as response:
                    await response.read()
                    return response.status < 500
            except (aiohttp.ClientError, OSError, TimeoutError):
                return False

        done = await asyncio.gather(*(one() for _ in range(max(0, min(connections, self.max_connections)))))
        return sum(done)

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
    """httpx's client on the timed transport, which `post_chat` can post to directly.

    Every other use (GET /metrics, /tokenize, ...) goes through httpx as usual. For the
    streamed chat requests, httpx's per-request machinery (building a Request and a
    Response, auth and redirect flows, cookie extraction) cost about as much CPU as
    reading a hundred events; `post_chat` skips it when nothing it provides is in use
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


class _DirectResponse:
    """What `stream_chat` reads of a response, for a request posted past httpx."""

    __slots__ = ("status_code", "extensions", "_stream")

    def __init__(self, response: aiohttp.ClientResponse, send_ns: int | None, stream: TimedStream):
        self.status_code = response.status
        self.extensions = {"send_ns": send_ns, "campaign.timed_stream": stream}
        self._stream = stream

    async def aread(self) -> bytes:
        chunks = []
        while chunk := await self._stream.read_chunk():
            chunks.append(chunk)
        return b"".join(chunks)


@asynccontextmanager
async def post_chat(
    http: httpx.AsyncClient, body: dict[str, Any], read_timeout: float, *, fresh: bool
) -> AsyncIterator[Any]:
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
    direct, send_ns, stream = await transport.open("POST", url, headers, data, timeout.as_dict(), fresh=fresh)
    try:
        yield _DirectResponse(direct, send_ns, stream)
    finally:
        await stream.aclose()


def body_reader(response: Any) -> tuple[Callable[[], Awaitable[bytes]], ArrivalIndex | None]:
    """How to read a response's body: (read the next bytes, b"" at the end; arrival stamps).

    On the timed transport, its stream's fast `read_chunk` and data_received stamps; on
    another transport, httpx's decoded bytes (as aiohttp's are) and no arrival stamps, so
    the events get read-time stamps.
    """
    stream = response.extensions.get("campaign.timed_stream")
    if isinstance(stream, TimedStream):
        return stream.read_chunk, stream.arrivals
    chunks = response.aiter_bytes()
    return (lambda: anext(chunks, b"")), None
