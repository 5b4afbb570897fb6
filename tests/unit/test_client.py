"""The streaming client against loopback servers: how its stamps were taken, and which
finished streams are failures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from aiohttp import web

from arms import transport
from arms.client import make_http_client, stream_chat
from arms.events import ChunkEvent, EventParser, parse_chunk, parse_events
from arms.measures import (
    CONTENT,
    DONE,
    EMPTY,
    MALFORMED,
    REASONING,
    ROLE,
    SEND_FALLBACK,
    SEND_HEADERS_SENT,
    STAMP_DATA_RECEIVED,
    STAMP_MIXED,
    STAMP_READ_TIME,
    TOOL,
    USAGE,
    RequestRecord,
    decode_tps,
    estimate_tokens,
    token_event_times,
    ttft_s,
)
from arms.probes.base import MemorySink
from arms.sse import EventSplitter, event_data
from arms.transport import ArrivalIndex, stamp_source

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
    `gap` seconds, then waits `hold` seconds before it ends the body; each request's
    headers (lower-cased names) and body are appended to `seen` when one is given."""
    runners: list[web.AppRunner] = []

    async def start(
        script: list[bytes],
        gap: float = 0.005,
        hold: float = 0.0,
        seen: list[tuple[dict[str, str], bytes]] | None = None,
    ) -> str:
        async def handler(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            if seen is not None:
                seen.append(({k.lower(): v for k, v in request.headers.items()}, body))
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

    monkeypatch.setattr(transport, "_install_stamper", internals_moved)
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


async def test_the_direct_post_sends_what_httpx_would_send(loopback) -> None:
    """`stream_chat` posts past httpx on our client; the server must not see a difference."""
    seen: list[tuple[dict[str, str], bytes]] = []
    url = await loopback(TOKENS, gap=0.0, seen=seen)

    async def no_op(_request: httpx.Request) -> None:
        return None

    body = {**BODY, "messages": [{"role": "user", "content": "grüße ✓"}]}
    records = []
    async with make_http_client(url, 2) as http:
        assert http.direct_transport() is not None
        records.append(await stream_chat(http, body))
        http.event_hooks = {"request": [no_op], "response": []}  # httpx must run its hooks now
        assert http.direct_transport() is None
        records.append(await stream_chat(http, body))
    (direct_headers, direct_body), (httpx_headers, httpx_body) = seen
    assert (
        json.loads(direct_body)
        == json.loads(httpx_body)
        == {**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    for headers in (direct_headers, httpx_headers):
        headers.pop("content-length")  # httpx's JSON spacing differs between its versions
    assert direct_headers == httpx_headers
    assert [r.text for r in records] == ["Hello there friend"] * 2
    assert [r.send_stamp_source for r in records] == [SEND_HEADERS_SENT] * 2


# -- the parts on their own: SSE framing and event parsing, no sockets -----------------


def reader(chunks: list[bytes], fail: BaseException | None = None) -> Callable[[], Awaitable[bytes]]:
    """A body read as the transport reads it: the chunks, then b"" (or `fail`)."""
    pending = list(chunks)

    async def read() -> bytes:
        if pending:
            return pending.pop(0)
        if fail is not None:
            raise fail
        return b""

    return read


def arrivals_for(chunks: list[bytes], first_ns: int = 1000, step_ns: int = 10) -> ArrivalIndex:
    """Stamps as the data_received stamper takes them: one per chunk, with the body size after it."""
    stamps, total = [], 0
    for i, chunk in enumerate(chunks):
        total += len(chunk)
        stamps.append((first_ns + i * step_ns, total))
    return ArrivalIndex(stamps)


async def test_events_are_stamped_at_the_arrival_of_their_first_byte() -> None:
    chunks = [b"data: a\n\nda", b"ta: b\n", b"\ndata: c\n\ndata: d"]  # d: cut off, no separator
    events: list[tuple[int, bytes]] = []
    splitter = EventSplitter(events, arrivals_for(chunks).time_of)
    await splitter.read_all(reader(chunks))
    assert events == [(1000, b"data: a"), (1000, b"data: b"), (1020, b"data: c"), (1020, b"data: d")]
    assert (splitter.exact, splitter.late) == (4, 0)
    assert stamp_source(True, splitter.exact, splitter.late) == STAMP_DATA_RECEIVED


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
async def test_framing_handles_both_line_ends_and_drops_trailing_whitespace(newline: bytes) -> None:
    body = b"data: a" + newline * 2 + b": keep-alive" + newline * 2 + b"data: b" + newline * 2 + newline
    events: list[tuple[int, bytes]] = []
    splitter = EventSplitter(events, None)
    await splitter.read_all(reader([body[i : i + 3] for i in range(0, len(body), 3)]))
    assert [raw for _, raw in events] == [b"data: a", b": keep-alive", b"data: b"]
    assert (splitter.exact, splitter.late) == (0, 3)
    assert stamp_source(False, splitter.exact, splitter.late) == STAMP_READ_TIME


async def test_stamps_fall_back_to_read_time_where_arrivals_run_out_and_survive_a_break() -> None:
    chunks = [b"data: a\n\n", b"data: b\n\n"]
    events: list[tuple[int, bytes]] = []
    splitter = EventSplitter(events, arrivals_for(chunks[:1]).time_of)  # no stamp for the second feed
    with pytest.raises(httpx.ReadError):
        await splitter.read_all(reader(chunks, fail=httpx.ReadError("broken")))
    assert [raw for _, raw in events] == [b"data: a", b"data: b"]  # what arrived is kept
    assert events[0][0] == 1000 and events[1][0] > 1000  # the second: a perf_counter_ns read time
    assert (splitter.exact, splitter.late) == (1, 1)
    assert stamp_source(True, splitter.exact, splitter.late) == STAMP_MIXED
    assert stamp_source(True, 0, 0) == STAMP_DATA_RECEIVED and stamp_source(False, 0, 0) == STAMP_READ_TIME


@pytest.mark.parametrize(
    ("raw", "data"),
    [
        (b"data: {}", b"{}"),
        (b"data: {}\r", b"{}"),
        (b"data:{}", b"{}"),
        (b"event: x\ndata: a\ndata: b", b"a\nb"),
        (b"event: x\r\ndata: a", b"a"),
        (b": a comment", None),
        (b"id: 3", None),
    ],
)
def test_event_data_joins_data_lines_and_skips_the_rest(raw: bytes, data: bytes | None) -> None:
    assert event_data(raw) == data


def test_parse_chunk_says_what_each_kind_of_chunk_carries() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    assert parse_chunk(delta(role="assistant", content="")) == ChunkEvent(ROLE)
    assert parse_chunk(delta(content="Hello")) == ChunkEvent(CONTENT, estimate_tokens("Hello"), content="Hello")
    assert parse_chunk(delta(reasoning_content="hmm")) == ChunkEvent(REASONING, estimate_tokens("hmm"), reasoning="hmm")
    assert parse_chunk(delta(reasoning="hmm")).reasoning == "hmm"
    assert parse_chunk(delta(finish="stop")) == ChunkEvent(EMPTY, finish_reason="stop")
    calls = [{"index": 0, "id": "c1", "function": {"name": "add", "arguments": "{"}}]
    event = parse_chunk(delta(content="x", tool_calls=calls))
    assert (event.kind, event.content, event.tool_calls) == (TOOL, "x", calls)
    assert event.tokens == estimate_tokens("add {")
    extras = {"choices": [], "usage": usage, "timings": {"cache_n": 1}, "x_metrics": {"a": 1}, "x_mlx_dspark": {"b": 2}}
    event = parse_chunk(extras)
    assert (event.kind, event.usage, event.timings) == (USAGE, usage, {"cache_n": 1})
    assert event.extra == (("x_mlx_dspark", {"b": 2}), ("x_metrics", {"a": 1}))
    assert parse_chunk({"choices": [], "usage": None}).kind == USAGE  # a usage key, even an empty one
    assert parse_chunk({"choices": []}) == ChunkEvent(EMPTY)
    error = parse_chunk({"error": {"message": "out of memory"}, "usage": usage})
    assert error == ChunkEvent(EMPTY, error="server error event: out of memory")  # and nothing else kept
    assert parse_chunk({"error": "boom"}).error == "server error event: boom"


def test_the_short_path_records_what_the_full_parse_records() -> None:
    """A plain content delta skips `parse_chunk`; the record must not tell the difference."""
    chunk = delta(content="Hello")
    short, full = RequestRecord(), RequestRecord()
    parse_events(short, [(5, sse(chunk)[:-2])])
    parser = EventParser(full)
    parser.apply(5, parse_chunk(chunk))
    parser.finish()
    assert short.to_dict() == full.to_dict()


def test_parsing_a_whole_stream_fills_the_record() -> None:
    stream = [
        sse(delta(role="assistant")),
        b": keep-alive\n\n",
        sse(delta(reasoning_content="think")),
        sse(delta(content="Hi")),
        sse(delta(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "add", "arguments": '{"a"'}}])),
        sse(delta(tool_calls=[{"index": 0, "function": {"name": "add", "arguments": ": 1}"}}])),
        sse(b"not json"),
        sse(delta(finish="tool_calls")),
        sse({"choices": [], "usage": {"completion_tokens": 4}, "timings": {"cache_n": 0}}),
        sse(b"[DONE]"),
    ]
    record = RequestRecord()
    parse_events(record, [(i, raw[:-2]) for i, raw in enumerate(stream)])
    assert record.event_kind == [ROLE, REASONING, CONTENT, TOOL, TOOL, MALFORMED, EMPTY, USAGE, DONE]
    assert record.event_ns == [0, 2, 3, 4, 5, 6, 7, 8, 9]  # the keep-alive is not an event
    assert (record.text, record.reasoning, record.finish_reason) == ("Hi", "think", "tool_calls")
    assert record.tool_calls == [{"id": "c1", "name": "add", "arguments": '{"a": 1}'}]
    assert record.usage == {"completion_tokens": 4} and record.timings == {"cache_n": 0}
    assert record.malformed_events == 1 and record.error == "malformed SSE: 1 event(s) were not JSON"


async def test_a_new_connections_time_is_kept_apart_and_a_warmed_pool_pays_none(loopback) -> None:
    """The first request on a new connection records how long opening it took
    (`connect_ns`), a pooled one records none; after `warm_connections(n)`, n requests sent
    at once all find a connection open; and the schedule lag leaves the connect out."""
    from arms.client import warm_connections
    from arms.measures import schedule_lag_s

    url = await loopback(TOKENS)
    async with make_http_client(url, 8) as http:
        first = await stream_chat(http, BODY)
        second = await stream_chat(http, BODY)
    assert first.ok and second.ok
    assert first.connect_ns is not None and first.connect_ns > 0 and second.connect_ns is None
    async with make_http_client(url, 8) as http:
        assert await warm_connections(http, 6) == 6
        burst = await asyncio.gather(*(stream_chat(http, BODY) for _ in range(6)))
    assert all(r.ok and r.connect_ns is None for r in burst), [r.connect_ns for r in burst]
    first.scheduled_ns = first.send_ns - first.connect_ns - 2_000_000  # 2 ms late, connect apart
    assert abs((schedule_lag_s(first) or 0) - 0.002) < 1e-9
