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
import json
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


class _TimedStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse):
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise httpx.ReadError(f"stream broken: {exc!r}") from exc
        except (aiohttp.SocketTimeoutError, asyncio.TimeoutError) as exc:
            raise httpx.ReadTimeout("stream stalled: no bytes within the read timeout") from exc

    async def aclose(self) -> None:
        self._response.release()


class TimedAiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport on aiohttp that records when each request was written.

    The stamp (`perf_counter_ns`) is taken by aiohttp's `on_request_headers_sent` trace
    hook and handed back in `response.extensions["send_ns"]`.
    """

    def __init__(self, max_connections: int = 256, keepalive_expiry: float = 15.0):
        self.max_connections = max(1, max_connections)
        self.keepalive_expiry = keepalive_expiry
        self._session: aiohttp.ClientSession | None = None

    def _make_session(self) -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()

        async def on_headers_sent(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
            holder = ctx.trace_request_ctx
            if holder is not None:
                holder.send_ns = time.perf_counter_ns()

        trace.on_request_headers_sent.append(on_headers_sent)
        connector = aiohttp.TCPConnector(
            limit=self.max_connections,
            limit_per_host=self.max_connections,
            keepalive_timeout=self.keepalive_expiry,
            ttl_dns_cache=300,
        )
        return aiohttp.ClientSession(
            connector=connector, trace_configs=[trace], auto_decompress=True, timeout=aiohttp.ClientTimeout(total=None)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._session is None or self._session.closed:
            self._session = self._make_session()
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
            response = await self._session.request(
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
        return httpx.Response(
            status_code=response.status,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers],
            stream=_TimedStream(response),
            request=request,
            extensions={"send_ns": holder.send_ns, "http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def make_http_client(base_url: str, concurrency: int = 16) -> httpx.AsyncClient:
    """One shared pool sized for the probe's concurrency (never a silent cap at 100)."""
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        transport=TimedAiohttpTransport(max_connections=max(concurrency, 1) + 4),
        timeout=httpx.Timeout(connect=10.0, read=60.0, write=30.0, pool=None),
    )


# -- SSE -------------------------------------------------------------------------------


def _split_events(buffer: bytearray) -> list[bytes]:
    events: list[bytes] = []
    while True:
        idx = buffer.find(b"\n\n")
        if idx < 0:
            return events
        events.append(bytes(buffer[:idx]))
        del buffer[: idx + 2]


def _event_data(raw: bytes) -> str | None:
    lines = [line[5:].lstrip() if line.startswith(b"data:") else None for line in raw.split(b"\n")]
    data = [line for line in lines if line is not None]
    if not data:
        return None
    return b"\n".join(data).decode("utf-8", errors="replace")


def parse_events(record: RequestRecord, raw_events: list[tuple[int, bytes]]) -> None:
    """Fill a record from stamped raw events: kinds, token counts, text, tool calls, usage.

    Done after the stream ends so that parsing never delays the timestamps.
    """
    tools: dict[int, dict[str, Any]] = {}
    text: list[str] = []
    reasoning: list[str] = []
    for t_ns, raw in raw_events:
        data = _event_data(raw)
        if data is None:
            continue  # comments and keep-alives are not events of the protocol
        if data == "[DONE]":
            _add(record, t_ns, DONE, 0)
            continue
        try:
            chunk = json.loads(data)
            if not isinstance(chunk, dict):
                raise ValueError("not an object")
        except ValueError:
            record.malformed_events += 1
            _add(record, t_ns, MALFORMED, 0)
            continue
        if "error" in chunk and not chunk.get("choices"):
            err = chunk["error"]
            record.error = f"server error event: {err.get('message', err) if isinstance(err, dict) else err}"
            _add(record, t_ns, EMPTY, 0)
            continue
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
            continue
        choice = choices[0] if isinstance(choices[0], dict) else {}
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or choice.get("message") or {}
        content = delta.get("content") or ""
        thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
        calls = delta.get("tool_calls") or []
        if calls:
            for call in calls:
                _merge_tool_delta(tools, call)
            _add(record, t_ns, TOOL, len(calls))
            if content:
                text.append(content)
        elif content:
            text.append(content)
            _add(record, t_ns, CONTENT, estimate_tokens(content))
        elif thought:
            reasoning.append(thought)
            _add(record, t_ns, REASONING, estimate_tokens(thought))
        elif delta.get("role"):
            _add(record, t_ns, ROLE, 0)
        else:
            _add(record, t_ns, EMPTY, 0)
    record.text = "".join(text)
    record.reasoning = "".join(reasoning)
    record.tool_calls = [tools[i] for i in sorted(tools)]
    if record.malformed_events and record.error is None:
        record.error = f"malformed SSE: {record.malformed_events} event(s) were not JSON"


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
                ) as response:
                    got_response = True
                    record.send_ns = response.extensions.get("send_ns") or fallback_send
                    record.status = response.status_code
                    if response.status_code >= 400:
                        detail = (await response.aread())[:300].decode("utf-8", errors="replace")
                        record.end_ns = time.perf_counter_ns()
                        record.error = f"HTTP {response.status_code}: {detail.strip()}"
                        return record
                    buffer = bytearray()
                    start_ns = 0
                    async for chunk in response.aiter_raw():
                        now = time.perf_counter_ns()
                        if not buffer:
                            start_ns = now
                        buffer += chunk.replace(b"\r", b"") if b"\r" in chunk else chunk
                        if b"\n\n" in buffer:
                            events = _split_events(buffer)
                            raw_events.append((start_ns, events[0]))
                            raw_events.extend((now, ev) for ev in events[1:])
                            start_ns = now
                    record.end_ns = time.perf_counter_ns()
                    if buffer.strip():
                        raw_events.append((start_ns, bytes(buffer)))
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
        parse_events(record, raw_events)
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
