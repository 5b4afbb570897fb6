"""Each probe against the simulator as a real process; misbehaving servers never crash a probe."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arms.probes import agent_load, cache_ceiling, cache_probe, decode, tool_loop
from arms.probes.base import MemorySink, ProbeTarget
from arms.runtimes import registry
from tests.simproc import simulator

pytestmark = pytest.mark.integration

FAST = {"prefill_tps": 20000.0, "decode_tps": 200.0}


def target(url: str, **kw: object) -> ProbeTarget:
    return ProbeTarget(base_url=url, model="sim-model", adapter=registry.get("simulator"), sampling={"temperature": 1.0}, **kw)


def test_cache_probe_scenarios_and_modes(tmp_path: Path) -> None:
    with simulator(tmp_path, slots=2, prefix_cache_tokens=100000, **FAST) as url:
        sink = MemorySink()
        asyncio.run(cache_probe.run(target(url), sink, cache_probe.CacheProbeParams(prompt_tokens=400)))
    for mode in ("canonical", "greedy"):
        assert sink.values("reuse", scenario="identical", mode=mode)[0] > 0.99
        assert sink.values("reuse", scenario="cold", mode=mode)[0] < 0.05
        append = sink.values("reuse", scenario="append", mode=mode)[0]
        assert 0.7 < append < 1.0
        mutated = sink.values("reuse", scenario="middle_mutation", mode=mode)[0]
        expected = sink.values("expected_reuse", scenario="middle_mutation", mode=mode)[0]
        assert abs(mutated - expected) < 0.05 and 0.3 < mutated < 0.7
        assert sink.values("ttft_cold_s", scenario="identical", mode=mode)[0] > sink.values("ttft_s", scenario="identical", mode=mode)[0]
    sources = {m["source"] for m in sink.measurements if m["metric"] == "cached_tokens"}
    assert sources == {"usage.prompt_tokens_details.cached_tokens"}
    assert {m["source"] for m in sink.measurements if m["metric"] == "expected_reuse" and m["scenario"] != "cold"} == {"server-tokenizer"}
    lookups = sink.values("cache_lookups", mode="canonical")
    assert lookups and lookups[0] >= 9  # per-probe deltas, not cumulative totals


def test_decode_median_and_spread(tmp_path: Path) -> None:
    with simulator(tmp_path, slots=1, **FAST) as url:
        sink = MemorySink()
        asyncio.run(decode.run(target(url), sink, decode.DecodeParams(contexts=[1024, 2048], max_tokens=32, repeats=3)))
    for ctx in (1024, 2048):
        rates = sink.values("decode_tps", context=ctx)
        # the engine's step = 2 ms overhead + 1/200 s: 142.9 tok/s; the client must see that
        assert len(rates) == 3 and all(abs(r - 1 / (0.002 + 1 / 200)) < 10 for r in rates)
        assert sink.values("decode_tps_median", context=ctx)
        assert sink.values("decode_tps_spread", context=ctx)[0] >= 0


@pytest.mark.parametrize(("rate", "expected"), [(1.0, 3), (0.0, 0)])
def test_tool_loop_majority(tmp_path: Path, rate: float, expected: int) -> None:
    with simulator(tmp_path, tool_success_rate=rate, **FAST) as url:
        sink = MemorySink()
        asyncio.run(tool_loop.run(target(url), sink, tool_loop.ToolLoopParams(trials=3)))
    assert sink.values("tool_loop_passes") == [expected]
    passes = [m for m in sink.measurements if m["metric"] == "tool_loop_passes"][0]
    assert passes["source"] == f"{expected}/3"
    assert all(v >= 3 for v in sink.values("tool_calls"))  # several calls in sequence each trial


def test_agent_load_slots_vs_cache(tmp_path: Path) -> None:
    params = agent_load.AgentLoadParams(conversations=3, turns=5, system_tokens=200, task_tokens=400, turn_tokens=200, max_tokens=16)
    results = {}
    for slots in (2, 4):
        with simulator(tmp_path, slots=slots, prefill_tps=3000.0, decode_tps=100.0, prefix_cache_tokens=50000, session_cap_tokens=700) as url:
            sink = MemorySink()
            asyncio.run(agent_load.run(target(url), sink, params))
            results[slots] = sink
    two, four = results[2], results[4]
    assert two.values("ttft_growth_ratio")[0] > 1.5  # history re-prefilled, growing each turn
    assert four.values("ttft_growth_ratio")[0] < 1.3  # each turn prefills only its tail
    assert four.values("ttft_later_median_s")[0] < two.values("ttft_later_median_s")[0] / 2
    assert four.values("cache_hits", scenario="load") == [0]
    assert four.values("cache_lookups", scenario="load")[0] == 15
    assert two.values("queue_depth_max")[0] >= 1
    turns = agent_load.turn_records(two.requests)
    assert {(t["conversation"], t["turn"]) for t in turns if t["phase"] == "load"} == {(c, t) for c in range(3) for t in range(5)}
    assert all(t["ttft_s"] is not None for t in turns)
    assert two.values("baseline_ttft_later_median_s")  # the single-stream run beside it


def test_cache_ceiling_finds_where_reuse_dies(tmp_path: Path) -> None:
    with simulator(tmp_path, slots=1, reuse_ceiling_tokens=1067, ctx_size=8192, **FAST) as url:
        sink = MemorySink()
        params = cache_ceiling.CacheCeilingParams(start_tokens=128, max_tokens_prompt=4096, resolution_tokens=32)
        asyncio.run(cache_ceiling.run(target(url), sink, params))
    good = sink.values("reuse_ceiling_tokens")[0]
    bad = sink.values("reuse_dies_at_tokens")[0]
    # prompt sizes are in words; the rendered prompt adds a few role tokens
    assert bad - good <= 32
    assert 1000 <= good <= 1067 <= bad + 8


def test_misbehaving_server_is_recorded_not_fatal(tmp_path: Path) -> None:
    faults = {"error_5xx_every": 3, "malformed_every": 4}
    with simulator(tmp_path, slots=2, faults=faults, **FAST) as url:
        sink = MemorySink()
        asyncio.run(decode.run(target(url), sink, decode.DecodeParams(contexts=[512], max_tokens=8, repeats=8)))
    errors = [r["error"] for r in sink.requests if r["error"]]
    assert any(e.startswith("HTTP 503") for e in errors)
    assert any("malformed" in e for e in errors)
    assert len(sink.values("decode_tps")) == 8 - len(errors)
    assert len(sink.values("errors")) == len(errors)


def test_stall_ends_at_a_timeout_and_crash_is_an_error(tmp_path: Path) -> None:
    from arms.client import make_http_client, stream_chat

    async def go(url: str, n: int) -> list:
        async with make_http_client(url, 2) as http:
            out = []
            for _ in range(n):
                out.append(await stream_chat(http, {"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 20}, read_timeout=1.0))
            return out

    with simulator(tmp_path, faults={"stall_every": 1, "stall_after_tokens": 2}, **FAST) as url:
        (stalled,) = asyncio.run(go(url, 1))
    assert stalled.error and stalled.error.startswith("timeout")
    with simulator(tmp_path, faults={"crash_after_requests": 1}, **FAST) as url:
        first, second = asyncio.run(go(url, 2))
    assert first.ok
    assert second.error is not None and second.retries == 1  # refused before any byte: retried once


def test_decode_takes_draft_counts_per_response_when_the_runtime_has_no_counters(tmp_path: Path) -> None:
    """mlx-dspark reports drafting in each response; the simulator speaks that shape."""
    with simulator(tmp_path, slots=1, draft_k=4, acceptance=0.8, cached_tokens_style="dspark", **FAST) as url:
        t = ProbeTarget(base_url=url, model="sim-model", adapter=registry.get("mlx-dspark"), sampling={"temperature": 1.0})
        sink = MemorySink()
        asyncio.run(decode.run(t, sink, decode.DecodeParams(contexts=[512], max_tokens=40, repeats=2)))
    drafted = [m for m in sink.measurements if m["metric"] == "draft_tokens"]
    accepted = sink.values("accepted_tokens")
    assert drafted and drafted[0]["source"] == "per-request sum"
    assert 0.5 < accepted[0] / drafted[0]["value"] < 1.0
