"""The streaming client against loopback servers: how its stamps were taken, and which
finished streams are failures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from aiohttp import web

from arms import client as client_module
from arms.client import make_http_client, stream_chat
from arms.metrics import (
    SEND_FALLBACK,
    SEND_HEADERS_SENT,
    STAMP_DATA_RECEIVED,
    STAMP_READ_TIME,
    decode_tps,
    token_event_times,
    ttft_s,
)
from arms.probes.base import MemorySink

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def sse(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def delta(finish: str | None = None, **d: object) -> dict:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


TOKENS = [
    sse(delta(role="assistant", content="")),
    sse(delta(content="Hello")),
    sse(delta(content=" there")),
    sse(delta(content=" friend")),
    sse(delta(finish="stop")),
    sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}),
    sse(b"[DONE]"),
]


@pytest.fixture
async def loopback() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """A real aiohttp server on 127.0.0.1 that streams a given script, one event every
    `gap` seconds, then waits `hold` seconds before it ends the body."""
    runners: list[web.AppRunner] = []

    async def start(script: list[bytes], gap: float = 0.005, hold: float = 0.0) -> str:
        async def handler(request: web.Request) -> web.StreamResponse:
            await request.read()
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for chunk in script:
                await response.write(chunk)
                await asyncio.sleep(gap)
            await asyncio.sleep(hold)
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_data_received_stamper_is_active_on_the_installed_aiohttp(loopback) -> None:
    """Fails when an aiohttp upgrade silently disables the stamper (its internals moved):
    every stamp would then be taken at read time, late under load."""
    url = await loopback(TOKENS)
    sink = MemorySink()
    async with make_http_client(url, 2) as http:
        first = await stream_chat(http, BODY)
        second = await stream_chat(http, BODY)  # over the pooled connection
    for record in (first, second):
        assert record.ok, record.error
        assert record.stamp_source == STAMP_DATA_RECEIVED
        assert record.send_stamp_source == SEND_HEADERS_SENT
        times = token_event_times(record)
        assert len(times) == 3 and record.send_ns < times[0] < times[-1] <= record.end_ns
        sink.request(record, scenario="s", mode="canonical")
    # the flags travel with the raw record into stored request rows
    assert [r["stamp_source"] for r in sink.requests] == [STAMP_DATA_RECEIVED] * 2
    assert [r["send_stamp_source"] for r in sink.requests] == [SEND_HEADERS_SENT] * 2


async def test_a_missing_stamper_is_recorded_as_read_time(loopback, monkeypatch) -> None:
    def internals_moved(_proto: object) -> None:
        raise AttributeError("no data_received to wrap")

    monkeypatch.setattr(client_module, "_install_stamper", internals_moved)
    url = await loopback(TOKENS)
    async with make_http_client(url, 2) as http:
        record = await stream_chat(http, BODY)
    assert record.ok, record.error
    assert record.stamp_source == STAMP_READ_TIME
    assert ttft_s(record) is not None  # still measured, but the row says how


def mock_client(script: list[bytes]) -> httpx.AsyncClient:
    """Another transport (no aiohttp below): no send stamp, no arrival stamps."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in script:
            yield chunk

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=body())

    return httpx.AsyncClient(base_url="http://mock", transport=httpx.MockTransport(handler))


async def test_another_transport_records_read_time_and_a_fallback_send_stamp() -> None:
    async with mock_client(TOKENS) as http:
        record = await stream_chat(http, BODY)
    assert record.ok, record.error
    assert (record.stamp_source, record.send_stamp_source) == (STAMP_READ_TIME, SEND_FALLBACK)


async def test_a_stream_without_tokens_is_an_error() -> None:
    script = [
        sse(delta(role="assistant", content="")),
        sse(delta(content="")),
        sse(delta(finish="stop")),
        sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}),
        sse(b"[DONE]"),
    ]
    async with mock_client(script) as http:
        record = await stream_chat(http, BODY)
    assert not record.ok
    assert record.error is not None and record.error.startswith("server sent no tokens")
    assert "finish_reason=stop" in record.error and "completion_tokens=0" in record.error


async def test_a_tool_call_only_stream_and_a_one_token_stream_are_fine() -> None:
    calls = [
        sse(delta(role="assistant")),
        sse(delta(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "add", "arguments": ""}}])),
        sse(delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a": 2, "b": 3}'}}])),
        sse(delta(finish="tool_calls")),
        sse(b"[DONE]"),
    ]
    one = [sse(delta(content="Hi")), sse(delta(finish="length")), sse(b"[DONE]")]
    async with mock_client(calls) as http:
        record = await stream_chat(http, BODY)
    assert record.ok, record.error
    assert record.tool_calls == [{"id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'}]
    async with mock_client(one) as http:
        record = await stream_chat(http, {**BODY, "max_tokens": 1})
    assert record.ok, record.error
    assert decode_tps(record)[0] is None  # one token: no decode window, and no guess


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
@pytest.mark.parametrize("piece", [1, 7, 4096])
async def test_events_split_the_same_whatever_the_line_ends_and_chunking(newline: bytes, piece: int) -> None:
    body = b"".join(TOKENS).replace(b"\n", newline)
    chunks = [body[i : i + piece] for i in range(0, len(body), piece)]
    async with mock_client(chunks) as http:
        record = await stream_chat(http, BODY)
    assert record.ok, record.error
    assert record.text == "Hello there friend" and record.usage == {"prompt_tokens": 3, "completion_tokens": 3}
    assert record.event_kind == ["role", "content", "content", "content", "empty", "usage", "done"]


async def test_a_stalled_body_times_out_but_a_slow_steady_one_does_not(loopback) -> None:
    """The body's read timeout is one timer per stream that re-arms itself: an event every
    0.15 s for over a second must pass a 0.4 s read timeout; silence after the first token
    must fail as a stall within about that time (not when the server finally ends)."""
    steady = await loopback([TOKENS[0]] + [sse(delta(content=f" t{i}")) for i in range(8)] + TOKENS[-3:], gap=0.15)
    silent = await loopback(TOKENS[:2], gap=0.0, hold=2.0)
    loop = asyncio.get_running_loop()
    async with make_http_client(steady, 2) as http:
        record = await stream_chat(http, BODY, read_timeout=0.4)
    assert record.ok, record.error
    async with make_http_client(silent, 2) as http:
        t0 = loop.time()
        stalled = await stream_chat(http, BODY, read_timeout=0.4)
        waited = loop.time() - t0
    assert not stalled.ok and "stalled" in (stalled.error or "")
    assert 0.35 < waited < 1.5
    assert len(token_event_times(stalled)) == 1  # what arrived before the stall is kept


async def test_the_direct_post_sends_what_httpx_would_send() -> None:
    """`stream_chat` posts past httpx on our client; the server must not see a difference."""
    seen: list[tuple[dict[str, str], bytes]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(({k.lower(): v for k, v in request.headers.items()}, await request.read()))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in TOKENS:
            await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]

    async def no_op(_request: httpx.Request) -> None:
        return None

    body = {**BODY, "messages": [{"role": "user", "content": "grüße ✓"}]}
    records = []
    try:
        async with make_http_client(f"http://{host}:{port}", 2) as http:
            assert http.direct_transport() is not None
            records.append(await stream_chat(http, body))
            http.event_hooks = {"request": [no_op], "response": []}  # httpx must run its hooks now
            assert http.direct_transport() is None
            records.append(await stream_chat(http, body))
    finally:
        await runner.cleanup()
    (direct_headers, direct_body), (httpx_headers, httpx_body) = seen
    assert json.loads(direct_body) == json.loads(httpx_body) == {**body, "stream": True, "stream_options": {"include_usage": True}}
    for headers in (direct_headers, httpx_headers):
        headers.pop("content-length")  # httpx's JSON spacing differs between its versions
    assert direct_headers == httpx_headers
    assert [r.text for r in records] == ["Hello there friend"] * 2
    assert [r.send_stamp_source for r in records] == [SEND_HEADERS_SENT] * 2
