"""Tests of the embedded serving simulator.

Most tests start the simulator as a real process on loopback (the way the orchestrator
uses it) and talk to it with httpx; a few drive the engine in-process on a virtual clock,
where model-time results are exact. Sizes are small and rates fast so the file runs in
seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from arms.simulator.cache import PrefixCache, common_prefix_len
from arms.simulator.clock import VirtualClock
from arms.simulator.engine import ContextLimitError, Engine, Slot, choose_slot
from arms.simulator.profile import SimProfile
from arms.simulator.reply import ReplyContext, ReplyPlan, ToolCallPlan
from arms.simulator.responses import DeltaRenderer
from arms.simulator.tokens import call_token, count_tokens, render_prompt

REPO_ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


@dataclass
class Sim:
    """A running simulator process."""

    proc: subprocess.Popen[bytes]
    url: str
    stdout_path: Path
    stderr_path: Path
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=10.0)

    def metrics(self) -> dict[str, float]:
        text = self.client.get("/metrics").text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def tokenize(self, messages: list[dict[str, Any]]) -> int:
        return self.client.post("/tokenize", json={"messages": messages}).json()["count"]

    def chat(self, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
        return self.client.post("/v1/chat/completions", json={"messages": messages, **extra})

    def stderr(self) -> str:
        return self.stderr_path.read_text()


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """Factory: start a simulator process with CLI flags; every process group is killed after."""
    sims: list[Sim] = []

    def start(*flags: str, wait_healthy: bool = True) -> Sim:
        port = _free_port()
        n = len(sims)
        out, err = tmp_path / f"sim{n}.out", tmp_path / f"sim{n}.err"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(
                [sys.executable, "-m", "arms.simulator", "--port", str(port), *flags],
                stdout=fo, stderr=fe, cwd=REPO_ROOT, env=_env(), start_new_session=True)
        sim = Sim(proc, f"http://127.0.0.1:{port}", out, err)
        sims.append(sim)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return sim
            if wait_healthy:
                try:
                    if sim.client.get("/health", timeout=0.5).status_code == 200:
                        return sim
                except httpx.TransportError:
                    pass
            elif "listening" in out.read_text():
                return sim
            time.sleep(0.03)
        raise AssertionError(f"simulator did not come up: {err.read_text()}")

    yield start
    for sim in sims:
        sim.client.close()
        _kill_group(sim.proc)


@dataclass
class StreamResult:
    ttft: float | None
    events: list[dict[str, Any]]
    raw: list[str]
    text: str

    def usage(self) -> dict[str, Any] | None:
        for ev in self.events:
            if ev.get("usage"):
                return ev["usage"]
        return None

    def final(self) -> dict[str, Any]:
        return next(ev for ev in self.events if ev.get("choices") and ev["choices"][0]["finish_reason"])

    def content_events(self) -> list[str]:
        return [ev["choices"][0]["delta"]["content"] for ev in self.events
                if ev.get("choices") and ev["choices"][0]["delta"].get("content")]


def stream_chat(url: str, messages: list[dict[str, Any]], *, strict: bool = True,
                **extra: Any) -> StreamResult:
    """Stream one chat completion; time to the first content-carrying event."""
    body = {"messages": messages, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    events: list[dict[str, Any]] = []
    raw: list[str] = []
    ttft = None
    with httpx.Client(timeout=20.0) as client:
        t0 = time.perf_counter()
        with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200, resp.read()
            for line in resp.iter_lines():
                if not line:
                    continue
                raw.append(line)
                payload = line[len("data: "):]
                if payload == "[DONE]":
                    break
                try:
                    ev = json.loads(payload)
                except json.JSONDecodeError:
                    if strict:
                        raise
                    continue
                if ttft is None and ev.get("choices") and ev["choices"][0]["delta"].get("content"):
                    ttft = time.perf_counter() - t0
                events.append(ev)
    text = "".join(ev["choices"][0]["delta"].get("content") or "" for ev in events if ev.get("choices"))
    return StreamResult(ttft, events, raw, text)


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def conversation(name: str, n_words: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"system-of-{name} " + words(name + "s", 20)},
            {"role": "user", "content": words(name + "u", n_words)}]


# ------------------------------------------------------------------ tokenizer / template


def test_render_prompt_round_trip_keeps_slot_tokens_as_prefix() -> None:
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello   there"}]}]
    prompt1 = render_prompt(messages)
    assert prompt1 == ["<|system|>", "be", "brief", "<|end|>", "<|user|>", "hello", "there",
                       "<|end|>", "<|assistant|>"]
    reply = ["tok1", "tok2"]
    follow = messages + [{"role": "assistant", "content": " tok1 tok2"},
                         {"role": "user", "content": "more"}]
    prompt2 = render_prompt(follow)
    assert prompt2[:len(prompt1) + len(reply)] == prompt1 + reply
    assert count_tokens("a  b\nc") == 3


def test_render_prompt_tools_and_tool_calls() -> None:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    messages = [{"role": "user", "content": "add 1 and 2"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "add", "arguments": '{"b": 2, "a": 1}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "3"}]
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
    profile = SimProfile(slots=2, prefill_tps=1000, prefill_chunk=100, step_overhead_s=0.001,
                         decode_tps=100, batch_penalty=0.0, cache_min_match=4, **STILL)

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
    profile = SimProfile(slots=2, prefill_tps=1000, prefill_chunk=200, interleave_chunk=200,
                         step_overhead_s=0.0, decode_tps=100, batch_penalty=0.0, **STILL)

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
        req = engine.submit(["<|user|>", "hi", "<|end|>", "<|assistant|>"], max_tokens=6,
                            temperature=temperature)
        await req.collect()
        await engine.stop()
        return req.generated

    assert _run(text("m1", 0.0)) == _run(text("m1", 0.0))
    assert _run(text("m1", 0.0)) != _run(text("m2", 0.0))
    assert all(w.startswith("tok") for w in _run(text("m1", None)))


def test_engine_context_limit_and_reply_policy_seam() -> None:
    def tool_policy(ctx: ReplyContext) -> ReplyPlan:
        call = ToolCallPlan(name="add", arguments={"a": 1, "b": 2}, id="call_1")
        return ReplyPlan(tokens=["let", "me", "add", call.token], finish_reason="tool_calls",
                         tool_calls=[call])

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


FAST = ("--prefill-tps", "4000", "--prefill-chunk", "64", "--decode-tps", "2000",
        "--step-overhead-s", "0.0005")


def test_returning_conversation_resumes_in_its_slot(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "2", *FAST)
    conv = conversation("a", 500)
    first = stream_chat(sim.url, conv, max_tokens=8, temperature=0)
    assert first.usage()["prompt_tokens_details"]["cached_tokens"] == 0
    n_first = sim.tokenize(conv)
    assert first.usage()["prompt_tokens"] == n_first

    conv2 = conv + [{"role": "assistant", "content": first.text},
                    {"role": "user", "content": words("tail", 20)}]
    second = stream_chat(sim.url, conv2, max_tokens=8, temperature=0)
    usage = second.usage()
    assert usage["prompt_tokens"] == sim.tokenize(conv2)
    assert usage["prompt_tokens_details"]["cached_tokens"] == n_first + 8

    # A cold prompt of the same length lands in the other (empty) slot and pays it all.
    cold_conv = conversation("z", usage["prompt_tokens"] - 26)
    assert sim.tokenize(cold_conv) == usage["prompt_tokens"]
    cold = stream_chat(sim.url, cold_conv, max_tokens=8)
    assert cold.usage()["prompt_tokens_details"]["cached_tokens"] == 0
    assert second.ttft is not None and cold.ttft is not None
    assert second.ttft < cold.ttft / 3, (second.ttft, cold.ttft)
    states = sim.client.get("/slots").json()
    assert [s["state"] for s in states] == ["idle", "idle"]
    assert sorted(s["n_tokens"] for s in states) == sorted(
        [usage["prompt_tokens"] + 8, cold.usage()["prompt_tokens"] + 8])


def test_prefix_cache_hits_when_conversations_outnumber_slots(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "1", "--prefix-cache-tokens", "100000", *FAST)
    a, b = conversation("a", 100), conversation("b", 100)
    a1 = sim.chat(a, max_tokens=6).json()
    sim.chat(b, max_tokens=6)  # b takes the only slot; a's state goes to the cache
    a2_messages = a + [a1["choices"][0]["message"], {"role": "user", "content": "go on"}]
    a2 = sim.chat(a2_messages, max_tokens=6).json()
    assert a2["usage"]["prompt_tokens_details"]["cached_tokens"] == sim.tokenize(a) + 6
    m = sim.metrics()
    assert m["sim_cache_lookups_total"] == 3
    assert m["sim_cache_hits_total"] == 1
    assert m["sim_prefix_cache_tokens_used"] > 0


def test_prefix_cache_idle_when_every_conversation_has_a_slot(start_sim: Callable[..., Sim]) -> None:
    """Seed 000: three conversations on four slots -> lookups, zero hits, full reuse."""
    sim = start_sim("--slots", "4", "--prefix-cache-tokens", "100000", *FAST)
    convs = [conversation(name, 80) for name in ("a", "b", "c")]
    replies = [sim.chat(c, max_tokens=5).json() for c in convs]
    for conv, reply in zip(convs, replies):
        follow = conv + [reply["choices"][0]["message"], {"role": "user", "content": "next step"}]
        usage = sim.chat(follow, max_tokens=5).json()["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == sim.tokenize(conv) + 5
    m = sim.metrics()
    assert m["sim_cache_lookups_total"] == 6
    assert m["sim_cache_hits_total"] == 0


def test_requests_queue_when_all_slots_are_busy(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "1", "--decode-tps", "100", "--prefill-tps", "10000",
                    "--step-overhead-s", "0.0")
    results: list[StreamResult] = []
    go = threading.Barrier(3)

    def run(i: int) -> None:
        go.wait()
        time.sleep(0.05 * i)
        results.append(stream_chat(sim.url, conversation(f"q{i}", 30), max_tokens=25))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    max_deferred = 0.0
    while any(t.is_alive() for t in threads):
        max_deferred = max(max_deferred, sim.metrics()["sim_requests_deferred"])
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert max_deferred >= 1
    # Order by arrival at the server (the engine numbers requests as they come).
    results.sort(key=lambda r: int(r.events[0]["id"].rsplit("-", 1)[1]))
    ttfts = [r.ttft for r in results]
    assert all(t is not None for t in ttfts)
    # Each request holds the only slot ~0.25 s; the third waits for both before it.
    assert ttfts[2] > ttfts[0] + 0.3, ttfts
    assert sim.metrics()["sim_requests_deferred"] == 0


def test_speculative_decoding_emits_multi_token_events(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--draft-k", "4", "--acceptance", "0.8", *FAST)
    result = stream_chat(sim.url, conversation("s", 20), max_tokens=40)
    chunks = result.content_events()
    assert max(len(c.split()) for c in chunks) > 1
    assert len(result.text.split()) == 40
    assert len(chunks) < 40
    m = sim.metrics()
    assert m["sim_draft_tokens_total"] > 0
    assert 0 < m["sim_draft_accepted_tokens_total"] <= m["sim_draft_tokens_total"]
    assert m["sim_generation_tokens_total"] == 40


@pytest.mark.parametrize("style", ["openai", "llamacpp", "omlx", "dspark"])
def test_cached_tokens_style(start_sim: Callable[..., Sim], style: str) -> None:
    sim = start_sim("--cached-tokens-style", style, *FAST)
    conv = conversation("c", 40)
    n_prompt = sim.tokenize(conv)
    sim.chat(conv, max_tokens=4)
    body = sim.chat(conv, max_tokens=4).json()  # identical prompt: all but the last token reused
    streamed = stream_chat(sim.url, conv, max_tokens=4)
    expected = n_prompt - 1
    final, usage = streamed.final(), streamed.usage()
    if style == "openai":
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == expected
        assert usage["prompt_tokens_details"]["cached_tokens"] == expected
    elif style == "llamacpp":
        for timings in (body["timings"], final["timings"]):
            assert timings["cache_n"] == expected
            assert timings["prompt_n"] == 1
            assert timings["predicted_n"] == 4
            assert timings["prompt_ms"] >= 0 and timings["predicted_ms"] > 0
        assert usage["prompt_tokens_details"]["cached_tokens"] == expected
    elif style == "omlx":
        assert body["usage"]["cached_tokens"] == expected
        assert usage["cached_tokens"] == expected
        assert "prompt_tokens_details" not in usage
    else:
        assert body["x_mlx_dspark"]["cached_tokens"] == expected
        assert final["x_mlx_dspark"] == {"cached_tokens": expected, "drafted": 0,
                                         "accepted": 0}
        assert "prompt_tokens_details" not in usage


def test_endpoints_startup_delay_and_profile_json(start_sim: Callable[..., Sim]) -> None:
    profile = json.dumps({"slots": 3, "model": "json-model", "startup_delay_s": 1.0})
    sim = start_sim("--profile-json", profile, "--slots", "2", wait_healthy=False)
    assert sim.proc.poll() is None, sim.stderr()
    assert "simulator listening on http://127.0.0.1:" in sim.stdout_path.read_text()
    resp = sim.client.get("/health")
    assert resp.status_code == 503 and resp.json() == {"status": "loading"}
    deadline = time.monotonic() + 5
    while sim.client.get("/health").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sim.client.get("/health").json() == {"status": "ok"}
    model = sim.client.get("/v1/models").json()["data"][0]
    assert model["id"] == "json-model" and model["owned_by"] == "simulator"
    assert model["meta"] == {"simulated": True, "slots": 2, "ctx_size": 32768, "time_scale": 1.0}
    slots = sim.client.get("/slots").json()
    assert slots == [{"id": i, "state": "idle", "n_ctx": 32768, "n_tokens": 0} for i in range(2)]
    tok = sim.client.post("/tokenize", json={"content": "one two  three"}).json()
    assert tok == {"tokens": ["one", "two", "three"], "count": 3}
    text = sim.client.get("/metrics").text
    for name in ("requests_total", "prompt_tokens_total", "prompt_tokens_cached_total",
                 "generation_tokens_total", "cache_lookups_total", "cache_hits_total",
                 "draft_tokens_total", "draft_accepted_tokens_total", "errors_total"):
        assert f"# TYPE sim_{name} counter" in text
    for name in ("requests_deferred", "slots_busy", "memory_bytes", "prefix_cache_tokens_used"):
        assert f"# TYPE sim_{name} gauge" in text
    assert sim.metrics()["sim_memory_bytes"] == 2_000_000_000 + 2 * 940_000_000
    # Greedy answers repeat exactly.
    conv = conversation("g", 5)
    texts = {sim.chat(conv, temperature=0, max_tokens=5).json()["choices"][0]["message"]["content"]
             for _ in range(2)}
    assert len(texts) == 1
    # Clean shutdown on SIGTERM.
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=10) == 0


def test_bad_requests_and_context_limit(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--ctx-size", "100", "--default-max-tokens", "8", *FAST)
    resp = sim.chat([{"role": "user", "content": words("w", 90)}], max_tokens=10)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "context_length_exceeded" and "100" in err["message"]
    assert sim.chat([{"role": "user", "content": words("w", 50)}], max_tokens=10).status_code == 200
    bad = sim.client.post("/v1/chat/completions", content=b"{not json",
                          headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "error" in bad.json()
    assert sim.client.post("/v1/chat/completions", json={"model": "x"}).status_code == 400
    assert sim.metrics()["sim_errors_total"] == 3


def test_invalid_profile_exits_2(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "0", wait_healthy=False)
    assert sim.proc.wait(timeout=10) == 2
    assert "slots" in sim.stderr()
    sim2 = start_sim("--profile-json", '{"bogus": 1}', wait_healthy=False)
    assert sim2.proc.wait(timeout=10) == 2


def test_fault_refuse_start(start_sim: Callable[..., Sim]) -> None:
    message = "Private ANE procedure-bank compiler is unavailable"
    sim = start_sim("--profile-json", json.dumps({"faults": {"refuse_start": message}}),
                    wait_healthy=False)
    assert sim.proc.wait(timeout=10) == 3
    assert message in sim.stderr()
    assert "listening" not in sim.stdout_path.read_text()


def test_fault_error_5xx_every(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-error-5xx-every", "2", *FAST)
    conv = conversation("e", 5)
    codes = [sim.chat(conv, max_tokens=2).status_code for _ in range(4)]
    assert codes == [200, 503, 200, 503]
    resp = sim.chat(conv, max_tokens=2)
    assert resp.status_code == 200
    assert sim.metrics()["sim_errors_total"] == 2


def test_fault_malformed_every(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-malformed-every", "2", *FAST)
    conv = conversation("m", 5)
    clean = stream_chat(sim.url, conv, max_tokens=5)
    assert not any("{not json" in line for line in clean.raw)
    broken = stream_chat(sim.url, conv, max_tokens=5, strict=False)
    index = broken.raw.index("data: {not json")
    assert 1 < index < len(broken.raw) - 1  # after content, before the end of the stream
    assert len(broken.text.split()) == 5


def test_fault_stall_keeps_connection_open(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-stall-every", "1", "--fault-stall-after-tokens", "2", *FAST)
    body = {"messages": conversation("st", 5), "stream": True, "max_tokens": 20}
    received: list[str] = []
    with httpx.Client(timeout=httpx.Timeout(10.0, read=0.7)) as client:
        with pytest.raises(httpx.ReadTimeout):
            with client.stream("POST", sim.url + "/v1/chat/completions", json=body) as resp:
                for line in resp.iter_lines():
                    if line:
                        received.append(line)
    contents = [json.loads(line[6:])["choices"][0]["delta"].get("content") for line in received]
    assert " ".join(c for c in contents if c).split() == contents[1].split() + contents[2].split()
    assert len(" ".join(c for c in contents if c).split()) == 2
    assert "data: [DONE]" not in received
    assert sim.client.get("/health").status_code == 200


def test_client_disconnect_frees_the_slot(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "1", "--decode-tps", "50", "--prefill-tps", "10000")
    body = {"messages": conversation("d", 5), "stream": True, "max_tokens": 500}  # ~10 s
    with httpx.Client(timeout=10.0) as client:
        with client.stream("POST", sim.url + "/v1/chat/completions", json=body) as resp:
            seen = 0
            for line in resp.iter_lines():
                if line and "content" in line:
                    seen += 1
                if seen >= 3:
                    break
    deadline = time.monotonic() + 3
    while sim.client.get("/slots").json()[0]["state"] != "idle":
        assert time.monotonic() < deadline, "slot still busy after the client left"
        time.sleep(0.05)
    start = time.monotonic()
    assert sim.chat(conversation("d2", 5), max_tokens=3).status_code == 200
    assert time.monotonic() - start < 2


def test_fault_crash_after_requests(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-crash-after-requests", "2", *FAST)
    conv = conversation("k", 5)
    assert sim.chat(conv, max_tokens=2).status_code == 200
    result = stream_chat(sim.url, conv, max_tokens=2)  # the second completes, then the crash
    assert len(result.text.split()) == 2
    assert sim.proc.wait(timeout=10) == 1
    with pytest.raises(httpx.TransportError):
        sim.client.get("/health")
