"""Prompt tokens as the server counts them: the ways a server offers, the fallbacks, sizing.

The servers here are in-process stand-ins (httpx.MockTransport) that answer the way
llama.cpp, the simulator and a server without a tokenizer do; tests/e2e/test_llamacpp.py
checks the same paths against the real llama-server.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections import Counter
from typing import Any

import httpx
import pytest

from arms.probes.prompts import (
    CLIENT_WORDS,
    VIA_MESSAGES,
    VIA_TEMPLATE,
    WORD_ESTIMATE,
    conversation,
    expected_reuse,
    sized_conversation,
    sizing_tolerance,
    tokenizer_for,
)


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """A toy chat template: role markers, each call as its JSON, a generation prompt."""
    parts = [f"<tools> {json.dumps(tools)} </tools>"] if tools else []
    for m in messages:
        parts.append(f"<{m['role']}> {m.get('content') or ''}")
        parts.extend(json.dumps(c["function"]) for c in m.get("tool_calls") or [])
    return " ".join(parts) + " <assistant>"


def toy_tokens(text: str) -> list[int]:
    """A toy tokenizer unlike one token a word: words over 4 letters are two tokens."""
    out: list[int] = []
    for word in text.split():
        out.extend([zlib.crc32(word.encode())] * (2 if len(word) > 4 else 1))
    return out


class FakeServer:
    """Answers /apply-template and /tokenize like a given runtime; counts every request."""

    def __init__(
        self,
        *,
        template: bool,
        messages_tokenize: bool,
        template_rejects_calls: bool = False,
        broken_connections: int = 0,
    ):
        self.template, self.messages_tokenize, self.rejects_calls = template, messages_tokenize, template_rejects_calls
        self.broken_connections = broken_connections  # this many requests fail before any answer
        self.calls: Counter[str] = Counter()
        self.add_special: list[Any] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.calls[request.url.path] += 1
        if self.broken_connections:
            self.broken_connections -= 1
            raise httpx.ConnectError(
                "Can not write request body", request=request
            )  # a pooled connection the server closed
        body = json.loads(request.content)
        if request.url.path == "/apply-template":
            if not self.template:
                return httpx.Response(404, text="not found")
            if self.rejects_calls and any(m.get("tool_calls") for m in body["messages"]):
                return httpx.Response(500, json={"error": {"message": "template cannot render tool calls"}})
            return httpx.Response(200, json={"prompt": render(body["messages"], body.get("tools"))})
        if request.url.path == "/tokenize":
            if "content" in body:
                self.add_special.append(body.get("add_special"))
                return httpx.Response(200, json={"tokens": toy_tokens(body["content"])})
            # llama.cpp reads only `content`: a messages body gets 200 and no tokens
            tokens = toy_tokens(render(body["messages"], body.get("tools"))) if self.messages_tokenize else []
            return httpx.Response(200, json={"tokens": tokens})
        return httpx.Response(404)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url="http://server", transport=httpx.MockTransport(self.handle))


def shared(primed: list[dict[str, Any]], probe: list[dict[str, Any]]) -> float:
    """The share of the probe's toy tokens that the primed prompt's tokens start with."""
    a, b = toy_tokens(render(primed)), toy_tokens(render(probe))
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))) / len(b)


LLAMACPP = {"template": True, "messages_tokenize": False}
SIMULATOR = {"template": False, "messages_tokenize": True}
NO_TOKENIZER = {"template": False, "messages_tokenize": False}


def reuse_of(
    server: FakeServer, primed: list[dict[str, Any]], probe: list[dict[str, Any]], tools: Any = None
) -> tuple[float, str]:
    async def go() -> tuple[float, str]:
        async with server.client() as http:
            return await expected_reuse(http, primed, probe, tools)

    return asyncio.run(go())


PRIMED = conversation(30, 90, "primed")
APPENDED = [
    *PRIMED,
    {"role": "assistant", "content": "sure thing"},
    {"role": "user", "content": "and then what happened"},
]
TOOL_TURN = [
    *PRIMED,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "k"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "found it"},
]


def test_llamacpp_renders_the_template_then_tokenizes_its_text() -> None:
    server = FakeServer(**LLAMACPP)
    identical, source = reuse_of(server, PRIMED, PRIMED)
    assert (identical, source) == (1.0, VIA_TEMPLATE)  # was 0.0: `/tokenize {messages}` answers no tokens
    assert server.add_special and set(server.add_special) == {True}  # the chat path's BOS, so counts match usage
    appended, _ = reuse_of(FakeServer(**LLAMACPP), PRIMED, APPENDED)
    assert appended == shared(PRIMED, APPENDED)


def test_simulator_tokenizes_messages_and_the_missing_endpoint_is_asked_once() -> None:
    server = FakeServer(**SIMULATOR)

    async def go() -> list[tuple[float, str]]:
        async with server.client() as http:
            return [await expected_reuse(http, PRIMED, p) for p in (PRIMED, APPENDED, TOOL_TURN)]

    results = asyncio.run(go())
    assert {source for _, source in results} == {VIA_MESSAGES}
    assert results[0][0] == 1.0 and 0.5 < results[1][0] < 1.0
    assert server.calls["/apply-template"] == 1  # 404 once: not asked again on this client
    assert server.calls["/tokenize"] == 3  # each distinct prompt once: the rest come from the cache


def test_no_tokenizer_means_client_words_never_zero() -> None:
    server = FakeServer(**NO_TOKENIZER)
    value, source = reuse_of(server, PRIMED, PRIMED)
    assert (value, source) == (1.0, CLIENT_WORDS)


def test_a_template_that_rejects_tool_calls_falls_back_for_both_prompts() -> None:
    """Both prompts are counted the same way: a prefix shared across two ways means nothing."""
    rejecting = FakeServer(**LLAMACPP, template_rejects_calls=True)
    assert reuse_of(rejecting, PRIMED, TOOL_TURN)[1] == CLIENT_WORDS
    both = FakeServer(template=True, messages_tokenize=True, template_rejects_calls=True)
    value, source = reuse_of(both, PRIMED, TOOL_TURN)
    assert source == VIA_MESSAGES
    assert value == shared(PRIMED, TOOL_TURN)
    # the way still works for prompts it can render
    assert reuse_of(both, PRIMED, APPENDED)[1] == VIA_TEMPLATE


def test_a_broken_connection_is_not_a_missing_tokenizer() -> None:
    """Seen on llama-server: one POST on a stale pooled connection failed, the probe fell
    through to `/tokenize {messages}` (no tokens) and sized by words from then on."""
    server = FakeServer(**LLAMACPP, broken_connections=1)
    assert reuse_of(server, PRIMED, PRIMED) == (1.0, VIA_TEMPLATE)
    assert server.calls["/apply-template"] == 2


def test_tools_are_part_of_the_counted_prompt() -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    with_tools, _ = reuse_of(FakeServer(**LLAMACPP), PRIMED, APPENDED, tools)
    without, _ = reuse_of(FakeServer(**LLAMACPP), PRIMED, APPENDED)
    assert with_tools > without  # the tool list is a shared prefix the server really holds


@pytest.mark.parametrize("kind", ["llamacpp", "simulator"])
@pytest.mark.parametrize("target", [40, 369, 1000, 32688])
def test_sized_prompts_land_just_under_the_target_in_server_tokens(kind: str, target: int) -> None:
    server = FakeServer(**(LLAMACPP if kind == "llamacpp" else SIMULATOR))

    async def go() -> Any:
        async with server.client() as http:
            sized = await sized_conversation(http, target, f"size-{target}", system_cap=256)
            again = await sized_conversation(http, target, f"size-{target}", system_cap=256)
            return sized, again

    sized, again = asyncio.run(go())
    counted = len(toy_tokens(render(sized.messages)))
    assert sized.tokens == counted  # the count is the server's, not the word count
    assert 0 <= target - counted <= sizing_tolerance(target), (target, counted)
    assert sized.source == (VIA_TEMPLATE if kind == "llamacpp" else VIA_MESSAGES)
    words = sum(len(m["content"].split()) for m in sized.messages)
    assert words < target  # the toy tokenizer makes more tokens than words: old sizing overshot
    assert again == sized
    assert server.calls["/tokenize"] <= 6  # a few corrections, and the second sizing is cached


def test_sizing_without_a_tokenizer_is_a_stated_word_estimate() -> None:
    async def go() -> Any:
        async with FakeServer(**NO_TOKENIZER).client() as http:
            return await sized_conversation(http, 500, "estimate", system_cap=64)

    sized = asyncio.run(go())
    assert sized.source == WORD_ESTIMATE and sized.tokens == 500
    assert [len(m["content"].split()) for m in sized.messages] == [64, 436]


def test_one_tokenizer_per_client() -> None:
    async def go() -> bool:
        async with FakeServer(**SIMULATOR).client() as a, FakeServer(**SIMULATOR).client() as b:
            return tokenizer_for(a) is tokenizer_for(a) and tokenizer_for(a) is not tokenizer_for(b)

    assert asyncio.run(go())


# -- the probes that size prompts, against the simulator as a real process -------------------------
