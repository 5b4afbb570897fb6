"""Tests of the embedded serving simulator.

Most tests start the simulator as a real process on loopback (the way the orchestrator
uses it) and talk to it with httpx; a few drive the engine in-process on a virtual clock,
where model-time results are exact. Sizes are small and rates fast so the file runs in
seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from arms.simulator.cache import PrefixCache, common_prefix_len
from arms.simulator.clock import VirtualClock
from arms.simulator.engine import Engine
from arms.simulator.profile import SimProfile
from arms.simulator.reply import ReplyContext, ReplyPlan, ToolCallPlan
from arms.simulator.request import ContextLimitError
from arms.simulator.responses import DeltaRenderer
from arms.simulator.slots import Slot, choose_slot
from arms.simulator.tokens import call_token, count_tokens, render_prompt

# --------------------------------------------------------------------------- helpers


@dataclass
class StreamResult:
    ttft: float | None
    events: list[dict[str, Any]]
    raw: list[str]
    text: str
    first_at: float | None = None  # time.perf_counter() when the first content arrived

    def usage(self) -> dict[str, Any] | None:
        for ev in self.events:
            if ev.get("usage"):
                return ev["usage"]
        return None

    def final(self) -> dict[str, Any]:
        return next(ev for ev in self.events if ev.get("choices") and ev["choices"][0]["finish_reason"])

    def content_events(self) -> list[str]:
        return [
            ev["choices"][0]["delta"]["content"]
            for ev in self.events
            if ev.get("choices") and ev["choices"][0]["delta"].get("content")
        ]


def stream_chat(url: str, messages: list[dict[str, Any]], *, strict: bool = True, **extra: Any) -> StreamResult:
    """Stream one chat completion; time to the first content-carrying event."""
    body = {"messages": messages, "stream": True, "stream_options": {"include_usage": True}, **extra}
    events: list[dict[str, Any]] = []
    raw: list[str] = []
    ttft = first_at = None
    with httpx.Client(timeout=20.0) as client:
        t0 = time.perf_counter()
        with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200, resp.read()
            for line in resp.iter_lines():
                if not line:
                    continue
                raw.append(line)
                payload = line[len("data: ") :]
                if payload == "[DONE]":
                    break
                try:
                    ev = json.loads(payload)
                except json.JSONDecodeError:
                    if strict:
                        raise
                    continue
                if ttft is None and ev.get("choices") and ev["choices"][0]["delta"].get("content"):
                    first_at = time.perf_counter()
                    ttft = first_at - t0
                events.append(ev)
    text = "".join(ev["choices"][0]["delta"].get("content") or "" for ev in events if ev.get("choices"))
    return StreamResult(ttft, events, raw, text, first_at)


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def conversation(name: str, n_words: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": f"system-of-{name} " + words(name + "s", 20)},
        {"role": "user", "content": words(name + "u", n_words)},
    ]


# ------------------------------------------------------------------ tokenizer / template


def test_render_prompt_round_trip_keeps_slot_tokens_as_prefix() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello   there"}]},
    ]
    prompt1 = render_prompt(messages)
    assert prompt1 == ["<|system|>", "be", "brief", "<|end|>", "<|user|>", "hello", "there", "<|end|>", "<|assistant|>"]
    reply = ["tok1", "tok2"]
    follow = messages + [{"role": "assistant", "content": " tok1 tok2"}, {"role": "user", "content": "more"}]
    prompt2 = render_prompt(follow)
    assert prompt2[: len(prompt1) + len(reply)] == prompt1 + reply
    assert count_tokens("a  b\nc") == 3


def test_render_prompt_tools_and_tool_calls() -> None:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    messages = [
        {"role": "user", "content": "add 1 and 2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"b": 2, "a": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    prompt = render_prompt(messages, tools)
    assert prompt[0] == "<|tool:add|>"
    assert '<|call:add:{"a":1,"b":2}|>' in prompt
    assert call_token("add", {"a": 1, "b": 2}) == '<|call:add:{"a":1,"b":2}|>'
    assert prompt[-5:] == ["<|end|>", "<|tool|>", "3", "<|end|>", "<|assistant|>"]


# ------------------------------------------------------------------ cache / slot choice


def test_common_prefix_len() -> None:
    assert common_prefix_len([], ["a"]) == 0
    assert common_prefix_len(list("abcdef"), list("abcxef")) == 3
    assert common_prefix_len(list("abc"), list("abcdef")) == 3
    long_a = [str(i) for i in range(5000)]
    long_b = long_a[:4321] + ["x"] + long_a[4322:]
    assert common_prefix_len(long_a, long_b) == 4321


def test_choose_slot_affinity_then_empty_then_lru() -> None:
    prompt = [f"w{i}" for i in range(40)]
    a = Slot(0, tokens=[f"x{i}" for i in range(30)], last_used=5)
    b = Slot(1, tokens=prompt[:30], last_used=9)
    c = Slot(2, tokens=[], last_used=0)
    assert choose_slot([a, b, c], prompt, min_match=16) is b  # affinity
    b.tokens = prompt[:10]  # below min_match: an empty slot wins
    assert choose_slot([a, b, c], prompt, min_match=16) is c
    c.tokens = ["y"]  # no empty slot: least recently used
    c.last_used = 7
    assert choose_slot([a, b, c], prompt, min_match=16) is a
    a.request = b.request = c.request = object()  # type: ignore[assignment]
    assert choose_slot([a, b, c], prompt, min_match=16) is None


def test_prefix_cache_lru_and_session_cap() -> None:
    cache = PrefixCache(capacity_tokens=100, session_cap=60)
    e1 = [f"a{i}" for i in range(40)]
    e2 = [f"b{i}" for i in range(40)]
    e3 = [f"c{i}" for i in range(40)]
    assert cache.store(e1) and cache.store(e2)
    n, key = cache.best_match(e1 + ["more"])
    assert n == 40 and key is not None
    cache.touch(key)  # e1 is now most recent, so e2 is evicted next
    assert cache.store(e3)
    assert cache.used_tokens == 80
    assert [k[0] for k in cache.entries()] == ["a0", "c0"]
    assert not cache.store([f"d{i}" for i in range(61)])  # over the per-session cap
    assert cache.store(e1 + ["x"])  # an extension replaces its prefix entry
    assert len(cache) == 2 and cache.used_tokens == 81
    assert not PrefixCache(0).store(e1)


# ----------------------------------------------------------------- engine, in process


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# exact model times need the deterministic engine: no rate factor per start, no drift
STILL = {"run_sd": 0.0, "drift_sd_per_min": 0.0}


def test_engine_exact_model_time_ttft_and_affinity() -> None:
    profile = SimProfile(
        slots=2,
        prefill_tps=1000,
        prefill_chunk=100,
        step_overhead_s=0.001,
        decode_tps=100,
        batch_penalty=0.0,
        cache_min_match=4,
        **STILL,
    )

    async def scenario() -> tuple[float, float, int]:
        engine = Engine(profile, clock=VirtualClock())
        prompt = [f"p{i}" for i in range(250)]
        first = engine.submit(prompt, max_tokens=5)
        await first.collect()
        cold_ttft = first.first_token_at - first.submitted_at  # type: ignore[operator]
        second_prompt = prompt + first.generated + ["<|end|>", "next"]
        second = engine.submit(second_prompt, max_tokens=5)
        await second.collect()
        warm_ttft = second.first_token_at - second.submitted_at  # type: ignore[operator]
        await engine.stop()
        return cold_ttft, warm_ttft, second.cached_tokens

    cold, warm, cached = _run(scenario())
    assert cold == pytest.approx(3 * 0.001 + 0.250)  # three chunks of 100/100/50
    assert cached == 255  # the prompt plus the five generated words
    assert warm == pytest.approx(0.001 + 0.002)


def test_engine_decode_starves_while_other_slot_prefills() -> None:
    profile = SimProfile(
        slots=2,
        prefill_tps=1000,
        prefill_chunk=200,
        interleave_chunk=200,
        step_overhead_s=0.0,
        decode_tps=100,
        batch_penalty=0.0,
        **STILL,
    )

    async def scenario() -> list[float]:
        engine = Engine(profile, clock=VirtualClock())
        a = engine.submit(["a"] * 10, max_tokens=30)
        times: list[float] = []
        async for em in a.events():
            times.append(em.model_time)
            if len(times) == 5:
                engine.submit(["b"] * 1000, max_tokens=2)  # 5 chunks of 200 tokens
        await engine.stop()
        return times

    times = _run(scenario())
    gaps = [round(b - a, 6) for a, b in zip(times, times[1:])]
    assert gaps[0] == pytest.approx(0.01)  # alone: one decode step
    assert max(gaps) == pytest.approx(0.21)  # with a 200-token chunk in the same step
    assert sum(1 for g in gaps if g > 0.2) == 5


def test_engine_greedy_text_is_a_model_fingerprint() -> None:
    async def text(model: str, temperature: float | None) -> list[str]:
        engine = Engine(SimProfile(model=model), clock=VirtualClock())
        req = engine.submit(["<|user|>", "hi", "<|end|>", "<|assistant|>"], max_tokens=6, temperature=temperature)
        await req.collect()
        await engine.stop()
        return req.generated

    assert _run(text("m1", 0.0)) == _run(text("m1", 0.0))
    assert _run(text("m1", 0.0)) != _run(text("m2", 0.0))
    assert all(w.startswith("tok") for w in _run(text("m1", None)))


def test_engine_context_limit_and_reply_policy_seam() -> None:
    def tool_policy(ctx: ReplyContext) -> ReplyPlan:
        call = ToolCallPlan(name="add", arguments={"a": 1, "b": 2}, id="call_1")
        return ReplyPlan(tokens=["let", "me", "add", call.token], finish_reason="tool_calls", tool_calls=[call])

    async def scenario() -> tuple[Any, list[Any]]:
        engine = Engine(SimProfile(ctx_size=50), reply_policy=tool_policy, clock=VirtualClock())
        with pytest.raises(ContextLimitError):
            engine.submit(["w"] * 45, max_tokens=10)
        req = engine.submit(["w"] * 10, max_tokens=10)
        emissions = await req.collect()
        await engine.stop()
        return req, emissions

    req, emissions = _run(scenario())
    assert req.finish_reason == "tool_calls"
    assert req.generated[-1] == '<|call:add:{"a":1,"b":2}|>'
    renderer = DeltaRenderer(req.plan)
    message = renderer.message(req.generated)
    assert message["content"] == " let me add"
    assert message["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}


def test_engine_honours_ignore_eos_and_min_tokens() -> None:
    """A reply that would stop early runs to max_tokens with ignore_eos, to min_tokens with
    min_tokens, as on llama.cpp and vLLM: the decode probe relies on it."""

    def short(ctx: ReplyContext) -> ReplyPlan:
        return ReplyPlan(tokens=["a", "b", "c"], finish_reason="stop")

    async def reply(**length: Any) -> tuple[int, str | None]:
        engine = Engine(SimProfile(), reply_policy=short, clock=VirtualClock())
        req = engine.submit(["w"] * 10, max_tokens=12, **length)
        await req.collect()
        await engine.stop()
        return len(req.generated), req.finish_reason

    assert _run(reply()) == (3, "stop")
    assert _run(reply(ignore_eos=True)) == (12, "length")
    assert _run(reply(min_tokens=8)) == (8, "stop")
    assert _run(reply(min_tokens=50)) == (12, "length")


# ------------------------------------------------------------------ real processes


FAST = ("--prefill-tps", "4000", "--prefill-chunk", "64", "--decode-tps", "2000", "--step-overhead-s", "0.0005")
