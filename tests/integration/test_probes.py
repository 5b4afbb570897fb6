"""Each probe against the simulator as a real process; misbehaving servers never crash a probe."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from aiohttp import web

from arms.probes import agent_load, agent_pieces, cache_ceiling, cache_probe, decode, tool_loop
from arms.probes.base import MemorySink, ProbeTarget
from arms.probes.failures import NOT_RUN, READ_TIMEOUT, error_kind
from arms.probes.prompts import VIA_MESSAGES, WORD_ESTIMATE, sizing_tolerance
from arms.runtimes import catalog as registry
from arms.runtimes.dialect import Dialect
from arms.runtimes.mlx_dspark import MlxDsparkAdapter
from arms.simulator.app import make_app
from arms.simulator.profile import SimProfile
from arms.simulator.reply import ReplyContext, ReplyPlan
from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates.engine import canonical_only, evaluate
from reports.data import cell_stats, cell_values
from tests.simproc import simulator

pytestmark = pytest.mark.integration

FAST = {"prefill_tps": 20000.0, "decode_tps": 200.0}


def target(url: str, **kw: object) -> ProbeTarget:
    return ProbeTarget.speaking(
        registry.get("simulator"), base_url=url, model="sim-model", sampling={"temperature": 1.0}, **kw
    )


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
        assert (
            sink.values("ttft_cold_s", scenario="identical", mode=mode)[0]
            > sink.values("ttft_s", scenario="identical", mode=mode)[0]
        )
    sources = {m["source"] for m in sink.measurements if m["metric"] == "cached_tokens"}
    assert sources == {"usage.prompt_tokens_details.cached_tokens"}
    assert {m["source"] for m in sink.measurements if m["metric"] == "expected_reuse" and m["scenario"] != "cold"} == {
        VIA_MESSAGES
    }
    lookups = sink.values("cache_lookups", mode="canonical")
    assert lookups and lookups[0] >= 9  # per-probe deltas, not cumulative totals


def test_decode_median_and_spread(tmp_path: Path) -> None:
    with simulator(tmp_path, slots=1, **FAST) as url:
        sink = MemorySink()
        asyncio.run(decode.run(target(url), sink, decode.DecodeParams(contexts=[1024, 2048], max_tokens=32, repeats=3)))
    for ctx in (1024, 2048):
        rates = sink.values("decode_tps", context=ctx, scenario="decode")
        # the engine's step = 2 ms overhead + 1/200 s: 142.9 tok/s; the client must see that
        # (the median; each trial within 20%: a busy machine delays the simulator's own steps)
        engine = 1 / (0.002 + 1 / 200)
        assert (
            len(rates) == 3 and abs(sorted(rates)[1] - engine) < 10 and all(abs(r / engine - 1) < 0.2 for r in rates)
        ), rates
        assert sink.values("tpot_s", context=ctx, scenario="decode") == pytest.approx([1 / r for r in rates])
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
    params = agent_load.AgentLoadParams(
        conversations=3, turns=5, system_tokens=200, task_tokens=400, turn_tokens=200, max_tokens=16
    )
    results = {}
    for slots in (2, 4):
        with simulator(
            tmp_path,
            slots=slots,
            prefill_tps=3000.0,
            decode_tps=100.0,
            prefix_cache_tokens=50000,
            session_cap_tokens=700,
        ) as url:
            sink = MemorySink()
            asyncio.run(agent_load.run(target(url), sink, params))
            results[slots] = sink
    two, four = results[2], results[4]
    assert two.values("ttft_growth_ratio")[0] > 1.5  # history re-prefilled, growing each turn
    # each turn prefills only its tail: about 1.0 (up to 1.35 seen, as the three
    # conversations' steps happen to line up), against about 3 when history is re-prefilled
    assert four.values("ttft_growth_ratio")[0] < 1.6 < two.values("ttft_growth_ratio")[0]
    assert four.values("ttft_later_median_s")[0] < two.values("ttft_later_median_s")[0] / 2
    assert four.values("cache_hits", scenario="load") == [0]
    assert four.values("cache_lookups", scenario="load")[0] == 15
    assert two.values("queue_depth_max")[0] >= 1
    turns = agent_load.turn_records(two.requests)
    assert {(t["conversation"], t["turn"]) for t in turns if t["phase"] == "load"} == {
        (c, t) for c in range(3) for t in range(5)
    }
    assert all(t["ttft_s"] is not None for t in turns)
    assert two.values("baseline_ttft_later_median_s")  # the single-stream run beside it
    # the sampler runs through the baseline too: its samples say the queue was empty then
    baseline = [s for s in two.samples if s["label"] == "baseline" and s["series"] == "queue_depth"]
    assert baseline and max(s["value"] for s in baseline) == 0
    assert two.values("queue_depth_max", scenario="baseline") == [0]
    assert (
        two.values("queue_sample_gaps", scenario="load") == [0]
        and two.values("queue_samples", scenario="baseline")[0] >= 1
    )


def test_agent_load_fans_out_branches_and_merges_their_replies(tmp_path: Path) -> None:
    """fan_out = 3: before each later turn, three branch requests at once, each the
    history and a tool output of its own; the turn's request then carries their replies.
    A conversation holds three requests in flight during a fan-out (the client's count),
    and a tool's run time separates a reply from the next request."""
    params = agent_load.AgentLoadParams(
        conversations=2,
        turns=3,
        system_tokens=100,
        task_tokens=150,
        turn_tokens=60,
        max_tokens=8,
        fan_out=3,
        tool_delay_s=0.2,
    )
    with simulator(tmp_path, slots=8, **FAST) as url:
        sink = MemorySink()
        asyncio.run(agent_load.run(target(url), sink, params))
    rows = [r for r in sink.requests if (r.get("label") or {}).get("conversation") is not None]
    load = [r for r in rows if not r["scenario"].startswith("baseline")]
    branches = {
        (r["label"]["conversation"], r["label"]["turn"], r["label"]["branch"]): r
        for r in load
        if "branch" in r["label"]
    }
    turns = {(r["label"]["conversation"], r["label"]["turn"]): r for r in load if "branch" not in r["label"]}
    assert set(branches) == {(c, t, b) for c in range(2) for t in (1, 2) for b in range(3)}
    assert set(turns) == {(c, t) for c in range(2) for t in range(3)}
    assert {branches[k]["scenario"] for k in branches} == {f"c{c}-t{t}-b{b}" for c, t, b in branches}
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows if r["error"]]
    for c in range(2):
        for t in (1, 2):
            sent = [branches[(c, t, b)]["usage"]["prompt_tokens"] for b in range(3)]
            # each branch: the history so far and its own tool output, of one size
            history = turns[(c, t - 1)]["usage"]
            assert max(sent) - min(sent) <= sizing_tolerance(params.turn_tokens), sent
            assert min(sent) > history["prompt_tokens"] + history["completion_tokens"]
            # the merge: the turn's request carries the tool output and the branches' replies
            replies = sum(branches[(c, t, b)]["usage"]["completion_tokens"] for b in range(3))
            assert turns[(c, t)]["usage"]["prompt_tokens"] >= max(sent) + replies, (
                turns[(c, t)]["usage"],
                sent,
                replies,
            )
            # the branches went out at once, after the tool ran; the turn after they all came back
            starts = [branches[(c, t, b)]["send_ns"] for b in range(3)]
            assert max(starts) - min(starts) < 0.1e9
            assert min(starts) - turns[(c, t - 1)]["end_ns"] >= 0.2e9
            assert turns[(c, t)]["send_ns"] >= max(branches[(c, t, b)]["end_ns"] for b in range(3))
    # a conversation is one user, but holds fan_out requests in flight: alone exactly three
    assert sink.values("baseline_requests_in_flight_max") == [3]
    assert 3 <= sink.values("requests_in_flight_max")[0] <= 6
    assert sink.values("requests", scenario="summary") == [2 * 3 + 2 * 2 * 3]
    waits, branch_ttft = sink.values("fan_out_wait_median_s"), sink.values("branch_ttft_median_s")
    assert waits and branch_ttft and waits[0] >= branch_ttft[0]
    # the context check counts the merged replies
    linear = params.model_copy(update={"fan_out": 1})
    assert params.request_tokens() == linear.request_tokens() + 2 * 3 * params.max_tokens


def test_agent_load_sizes_its_prompts_in_the_servers_tokens(tmp_path: Path) -> None:
    """The sizes asked for are the server's own count (its usage.prompt_tokens, template
    included), say how they were counted, and cost about one count per piece, all taken
    before the first timed request."""
    params = agent_load.AgentLoadParams(
        conversations=2, turns=3, system_tokens=150, task_tokens=300, turn_tokens=120, max_tokens=8
    )
    first, tol = params.system_tokens + params.task_tokens, sizing_tolerance
    with simulator(tmp_path, slots=2, **FAST) as url:
        sink = MemorySink()
        asyncio.run(agent_load.run(target(url), sink, params))

        async def plan_and_counts() -> tuple[Any, int, int]:
            posts = []

            async def hook(request: Any) -> None:
                posts.append(request.url.path)

            async with httpx.AsyncClient(base_url=url, event_hooks={"request": [hook]}) as http:
                plan = await agent_pieces.size_pieces(http, params, "sized", params.conversations)

                async def count(messages: list[dict[str, Any]]) -> int:
                    return len((await http.post("/tokenize", json={"messages": messages})).json()["tokens"])

                anchor = list(agent_pieces.ANCHOR)
                system = [{"role": "system", "content": plan.system}, *anchor]
                return plan, len(posts), await count(system) - await count(anchor)

        plan, posts, system_tokens = asyncio.run(plan_and_counts())
    served = {
        (r["scenario"].split("-t")[0], r["label"]["turn"]): r["usage"]
        for r in sink.requests
        if "turn" in (r.get("label") or {})
    }
    assert len(served) == 3 * 3
    for scenario in ("c0", "c1", "baseline"):
        # turn 1: system + task, as the server counts its prompt
        assert first - tol(first) <= served[(scenario, 0)]["prompt_tokens"] <= first, served
        for turn in (1, 2):
            # a later turn grows by the model's reply and turn_tokens
            now, before = served[(scenario, turn)], served[(scenario, turn - 1)]
            grown = now["prompt_tokens"] - before["prompt_tokens"] - before["completion_tokens"]
            assert params.turn_tokens - tol(params.turn_tokens) <= grown <= params.turn_tokens, served
    assert params.system_tokens - tol(params.system_tokens) <= system_tokens <= params.system_tokens
    targets = {
        (m["metric"], m["scenario"]): (m["value"], m["source"])
        for m in sink.measurements
        if m["metric"].endswith("_tokens_target")
    }
    assert targets == {
        (f"{kind}_tokens_target", phase): (value, VIA_MESSAGES)
        for kind, value in (("system", 150), ("task", 300), ("turn", 120))
        for phase in ("load", "baseline")
    }
    # one count per piece (1 system, 2 tasks, 2 x 2 tool outputs), a few more to find each
    # kind's word count, one for the anchor; never one per request
    pieces = 1 + params.conversations * params.turns
    assert pieces <= posts <= pieces + 6, posts


def test_agent_load_without_a_server_tokenizer_keeps_its_word_counts() -> None:
    """No way to count: the word counts of old, labelled an estimate, not passed off as tokens."""
    params = agent_load.AgentLoadParams(conversations=2, turns=3, system_tokens=150, task_tokens=300, turn_tokens=120)

    async def plan() -> Any:
        transport = httpx.MockTransport(lambda request: httpx.Response(404))
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
            return await agent_pieces.size_pieces(http, params, "s", params.conversations)

    got = asyncio.run(plan())
    assert (len(got.system.split()), got.tasks, got.tools) == (150, (300, 300), ((120, 120), (120, 120)))
    assert set(got.sources.values()) == {WORD_ESTIMATE}


def test_cache_ceiling_finds_where_reuse_dies(tmp_path: Path) -> None:
    """Sizes are the server's prompt_tokens; a 503 now and then is retried, never a death."""
    with simulator(
        tmp_path, slots=1, reuse_ceiling_tokens=1067, ctx_size=8192, faults={"error_5xx_every": 5}, **FAST
    ) as url:
        sink = MemorySink()
        params = cache_ceiling.CacheCeilingParams(start_tokens=128, max_tokens_prompt=4096, resolution_tokens=32)
        asyncio.run(cache_ceiling.run(target(url), sink, params))
    good = [m for m in sink.measurements if m["metric"] == "reuse_ceiling_tokens"][0]
    bad = [m for m in sink.measurements if m["metric"] == "reuse_dies_at_tokens"][0]
    # the simulator reuses nothing for prompts of more than 1,067 of its tokens
    assert 1000 <= good["value"] <= 1067 < bad["value"] <= good["value"] + 32 + 8
    assert good["source"].endswith("usage.prompt_tokens") and bad["source"].endswith("usage.prompt_tokens")
    errors = [m for m in sink.measurements if m["metric"] == "errors"]
    assert errors and {m["source"] for m in errors} == {"HTTP 503"}
    assert not sink.values("ceiling_search_error_at")


def test_cache_ceiling_stops_on_a_failed_request_without_claiming_reuse_died(tmp_path: Path) -> None:
    """Prompts past the context fail with HTTP 400: that is where the search stops, not a ceiling."""
    with simulator(tmp_path, slots=1, ctx_size=1000, **FAST) as url:
        sink = MemorySink()
        params = cache_ceiling.CacheCeilingParams(start_tokens=128, max_tokens_prompt=4096, resolution_tokens=32)
        asyncio.run(cache_ceiling.run(target(url), sink, params))
    assert not sink.values("reuse_dies_at_tokens") and not sink.values("reuse_holds_to_limit")
    assert sink.values("reuse_ceiling_tokens") == sink.values("prompt_tokens", scenario="len512")
    stop = [m for m in sink.measurements if m["metric"] == "ceiling_search_error_at"]
    assert [m["value"] for m in stop] == [1024] and stop[0]["source"].startswith("HTTP 400")
    failed = [m for m in sink.measurements if m["metric"] == "errors"]
    assert [(m["scenario"], m["trial"], m["source"]) for m in failed] == [
        ("len1024", 0, "HTTP 400"),
        ("len1024", 1, "HTTP 400"),
    ]


def test_misbehaving_server_is_recorded_not_fatal(tmp_path: Path) -> None:
    faults = {"error_5xx_every": 3, "malformed_every": 4}
    with simulator(tmp_path, slots=2, faults=faults, **FAST) as url:
        sink = MemorySink()
        asyncio.run(decode.run(target(url), sink, decode.DecodeParams(contexts=[512], max_tokens=8, repeats=8)))
    errors = [r["error"] for r in sink.requests if r["error"] and r["scenario"] == "decode"]
    assert any(e.startswith("HTTP 503") for e in errors)
    assert any("malformed" in e for e in errors)
    assert len(sink.values("decode_tps", scenario="decode")) == 8 - len(errors)
    assert sorted(
        m["source"] for m in sink.measurements if m["metric"] == "errors" and m["scenario"] == "decode"
    ) == sorted(map(error_kind, errors))


def test_stall_ends_at_a_timeout_and_crash_is_an_error(tmp_path: Path) -> None:
    from arms.client import make_http_client, stream_chat

    async def go(url: str, n: int) -> list:
        async with make_http_client(url, 2) as http:
            out = []
            for _ in range(n):
                out.append(
                    await stream_chat(
                        http,
                        {"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 20},
                        read_timeout=1.0,
                    )
                )
            return out

    with simulator(tmp_path, faults={"stall_every": 1, "stall_after_tokens": 2}, **FAST) as url:
        (stalled,) = asyncio.run(go(url, 1))
    assert stalled.error and stalled.error.startswith("timeout")
    with simulator(tmp_path, faults={"crash_after_requests": 1}, **FAST) as url:
        first, second = asyncio.run(go(url, 2))
    assert first.ok
    assert second.error is not None and second.retries == 1  # refused before any byte: retried once


def test_decode_sums_per_response_counts_when_the_runtime_has_no_counters(tmp_path: Path) -> None:
    """A runtime that reports speculation only in each response: the probe sums the
    per-response counts. The simulator's dspark style sends mlx-dspark 0.20.3's block
    (`target_forwards`, no drafted/accepted counts), read by the mlx-dspark adapter with
    its /metrics page taken away: with drafts accepted (acceptance 0.8, 4 a round), the
    target ran fewer forwards than it generated tokens, and more than a fifth of them."""

    per_response = dataclasses.replace(MlxDsparkAdapter.telemetry, metrics_path=None)

    with simulator(tmp_path, slots=1, draft_k=4, acceptance=0.8, cached_tokens_style="dspark", **FAST) as url:
        t = ProbeTarget(
            telemetry=per_response,
            dialect=MlxDsparkAdapter.dialect,
            base_url=url,
            model="sim-model",
            sampling={"temperature": 1.0},
        )
        sink = MemorySink()
        asyncio.run(decode.run(t, sink, decode.DecodeParams(contexts=[512], max_tokens=40, repeats=2)))
    (forwards,) = [m for m in sink.measurements if m["metric"] == "target_forwards"]
    assert forwards["source"] == "per-request sum" and forwards["unit"] == "count"
    assert 2 * 40 / 5 <= forwards["value"] < 2 * 40
    assert not sink.values("draft_tokens") and not sink.values("accepted_tokens")  # never invented


def test_decode_warmup_is_stored_but_never_read_by_medians_or_gates(tmp_path: Path) -> None:
    # three runs of the probe, as three blocks of an item would make (a gate decides over
    # runs, and needs three by default), each with its own warm-up
    sinks = []
    with simulator(tmp_path, slots=1, **FAST) as url:
        for _ in range(3):
            sinks.append(MemorySink())
            asyncio.run(
                decode.run(
                    target(url), sinks[-1], decode.DecodeParams(contexts=[512], max_tokens=16, repeats=1, warmup=2)
                )
            )
    sink = sinks[0]
    assert [(r["scenario"], r["trial"]) for r in sink.requests] == [
        (decode.WARMUP_SCENARIO, 0),
        (decode.WARMUP_SCENARIO, 1),
        ("decode", 0),
    ]
    for one in sinks:
        warm = [m for m in one.measurements if m["metric"] == "decode_tps" and m["scenario"] == decode.WARMUP_SCENARIO]
        assert len(warm) == 2
        assert one.values("decode_tps_median") == one.values("decode_tps", scenario="decode")
        # make the warm-up rows absurd: nothing that reads samples may move (two of each
        # run's three decode_tps rows: a run's median would be absurd if it read them)
        for m in warm:
            m["value"] = 1e6
    frame = pd.DataFrame(
        [
            {**m, "arm_id": "A", "probe": "decode", "item_key": "i", "repeat": block, "simulated": True}
            for block, one in enumerate(sinks)
            for m in one.measurements
        ]
    )
    assert len(warm) == 2 and (canonical_only(frame)["kind"] != "warmup").all()
    assert {m["kind"] for m in warm} == {"warmup"}
    gate = GateEntry(
        id="g", predicate="threshold", params={"metric": "decode_tps", "op": "<", "value": 1e5}, subjects=["A"]
    )
    result = evaluate(gate, frame)
    assert result.verdict == Verdict.PASS, result.reason
    assert "3 runs" in result.reason, result.reason
    # one run alone is too few to decide, and the reason says so (never read as a pass)
    single = evaluate(gate, frame[frame["repeat"] == 0])
    assert single.verdict == Verdict.INCONCLUSIVE, single.reason
    assert "A has 1 run; needs 3" in single.reason, single.reason
    for table, column in ((cell_stats(frame), "max"), (cell_values(frame), "value")):
        rates = table[table["metric"] == "decode_tps"]
        assert len(rates) == 1 and rates[column].max() < 1e5 and decode.WARMUP_SCENARIO not in set(table["scenario"])


def _stops_early(ctx: ReplyContext) -> ReplyPlan:
    """A model that ends its reply after 5 tokens, as a real one meets end-of-sequence."""
    return ReplyPlan(tokens=[f"w{i}" for i in range(5)], finish_reason="stop")


async def _decode_in_process(params: decode.DecodeParams) -> MemorySink:
    """The decode probe against an in-process simulator whose model stops early."""
    runner = web.AppRunner(make_app(SimProfile(**FAST), reply_policy=_stops_early))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        sink = MemorySink()
        await decode.run(target(f"http://127.0.0.1:{port}"), sink, params)
        return sink
    finally:
        await runner.cleanup()


def test_decode_sends_ignore_eos_and_flags_short_trials() -> None:
    # the server ignores nothing it was not asked to: replies end at 5 tokens, and are flagged
    short = asyncio.run(
        _decode_in_process(
            decode.DecodeParams(contexts=[512], max_tokens=16, repeats=3, warmup=0, ignore_eos=False, min_tokens=0)
        )
    )
    assert sink_metrics(short, "short_trial") == [5.0, 5.0, 5.0]
    assert not short.values("decode_tps") and not short.values("decode_tps_median") and not short.values("e2e_s")
    assert len(short.values("ttft_s")) == 3  # prefill was still measured
    # by default decode asks for all of max_tokens, and the simulator, like llama.cpp, obliges
    full = asyncio.run(_decode_in_process(decode.DecodeParams(contexts=[512], max_tokens=16, repeats=3, warmup=0)))
    assert not full.values("short_trial")
    assert len(full.values("decode_tps")) == 3 and full.values("decode_tps_median")
    assert all(r["usage"]["completion_tokens"] == 16 for r in full.requests)


def sink_metrics(sink: MemorySink, metric: str) -> list[float]:
    return [m["value"] for m in sink.measurements if m["metric"] == metric]


def test_error_kinds_group_what_the_client_writes() -> None:
    cases = {
        'HTTP 503: {"error": {"message": "simulated server error"}}': "HTTP 503",
        "timeout: stream stalled: no bytes within the read timeout": READ_TIMEOUT,
        "timeout: no response within the read timeout": READ_TIMEOUT,
        "timeout: no bytes within the limit": "timeout",
        "ReadError: stream broken: ClientPayloadError('Response payload is not completed')": "stream broken",
        "server sent no tokens (finish_reason=stop, completion_tokens=0)": "server sent no tokens",
        "malformed SSE: 1 event(s) were not JSON": "malformed SSE",
        "ConnectError: cannot connect: [Errno 111] Connection refused": "cannot connect",
        "RemoteProtocolError: server closed the connection before responding": "connection closed",
        "stream ended without [DONE] or a finish_reason": "stream ended early",
        "not run: stopped after 2 consecutive stalls (no byte for 1 s)": NOT_RUN,
    }
    assert {e: error_kind(e) for e in cases} == cases
    assert error_kind(None) == ""


STALL_PROBES: list[tuple[Any, Any]] = [
    (decode.run, decode.DecodeParams(contexts=[512], max_tokens=8, repeats=3)),
    (cache_probe.run, cache_probe.CacheProbeParams(prompt_tokens=200)),
    (cache_ceiling.run, cache_ceiling.CacheCeilingParams(start_tokens=64, max_tokens_prompt=1024)),
    (tool_loop.run, tool_loop.ToolLoopParams(trials=3)),
    (
        agent_load.run,
        agent_load.AgentLoadParams(
            conversations=2, turns=3, system_tokens=50, task_tokens=50, turn_tokens=20, max_tokens=8
        ),
    ),
]


def test_every_probe_stops_sending_after_two_stalls(tmp_path: Path) -> None:
    """A server that stops mid-stream costs each probe two read timeouts, not one per request."""
    with simulator(tmp_path, faults={"stall_every": 1, "stall_after_tokens": 1}, **FAST) as url:
        for run, params in STALL_PROBES:
            sink = MemorySink()
            t0 = time.perf_counter()
            asyncio.run(run(target(url, read_timeout=0.5), sink, params))
            elapsed = time.perf_counter() - t0
            kinds = [error_kind(r["error"]) for r in sink.requests]
            name = run.__module__
            assert "" not in kinds, name  # every request stalled or was not sent
            # agent-load's conversations run at once and go on after a failed turn, so one
            # more turn may already be in flight when the second stall trips the guard
            assert kinds.count(READ_TIMEOUT) == 2 or (run is agent_load.run and kinds.count(READ_TIMEOUT) == 3), (
                name,
                kinds,
            )
            assert elapsed < 4, (name, elapsed)
            if run is cache_ceiling.run:  # its search ends at the failed length: nothing left to skip
                stop = [m for m in sink.measurements if m["metric"] == "ceiling_search_error_at"]
                assert [m["value"] for m in stop] == [64] and stop[0]["source"].startswith(READ_TIMEOUT)
                continue
            assert kinds[-1] == NOT_RUN, (name, kinds)
            not_run = [m for m in sink.measurements if m["metric"] == "not_run"]
            assert len(not_run) == kinds.count(NOT_RUN) and {m["source"] for m in not_run} == {NOT_RUN}, name
            if run is tool_loop.run:  # a trial never sent is no failed trial: 0 of the 2 run, not 0/3
                assert [m["source"] for m in sink.measurements if m["metric"] == "tool_loop_passes"] == ["0/2"]
                assert len(sink.values("tool_loop_pass")) == 2


# -- the queue sampler and the log tail: fixed schedule, gaps, never blocking the loop -------------


def _metrics_client(delays: list[float], fail_every: int = 0) -> tuple[Any, list[float]]:
    """An httpx client whose /metrics answers after `delays[n]` seconds (the last repeats),
    with HTTP 500 on every `fail_every`-th read; returns the client and the read times."""
    import httpx

    started: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        started.append(time.perf_counter())
        n = len(started)
        await asyncio.sleep(delays[min(n - 1, len(delays) - 1)])
        if fail_every and n % fail_every == 0:
            return httpx.Response(500, text="busy")
        return httpx.Response(200, text=f"sim_requests_deferred {n}\nsim_requests_running 1\n")

    return httpx.AsyncClient(base_url="http://sim", transport=httpx.MockTransport(handler)), started


def _sample(
    duration: float, delays: list[float], interval: float = 0.2, fail_every: int = 0
) -> tuple[Any, MemorySink, list[float]]:
    from arms.probes.queue_sampler import QueueSampler

    sink = MemorySink()

    async def go() -> Any:
        http, started = _metrics_client(delays, fail_every)
        async with http:
            async with QueueSampler(http, target("http://sim"), sink, interval_s=interval, phase="load") as sampler:
                await asyncio.sleep(duration)
            sampler.record(mode="canonical", scenario="load")
        return sampler, started

    sampler, started = asyncio.run(go())
    return sampler, sink, started


def test_queue_sampler_keeps_a_fixed_schedule() -> None:
    """Reads start at k x 0.2 s although each takes 0.08 s (not 0.2 s after each returns)."""
    sampler, sink, started = _sample(1.13, [0.08])
    times = [s["t_s"] for s in sink.samples if s["series"] == "queue_depth"]
    assert len(times) == 6 and len(started) == 6, times
    assert all(abs(t - k * 0.2) < 0.04 for k, t in enumerate(times)), times
    assert {s["label"] for s in sink.samples} == {"load"} and sampler.skipped == 0 and sampler.gaps == 0


def test_queue_sampler_skips_ticks_a_slow_read_covered() -> None:
    """A 0.5 s read covers two 0.2 s ticks: they are skipped and counted, never bunched up."""
    sampler, sink, started = _sample(1.3, [0.5, 0.05])
    times = [s["t_s"] for s in sink.samples if s["series"] == "queue_depth"]
    assert [round(t / 0.2) for t in times] == [0, 3, 4, 5, 6], times  # ticks 1 and 2 passed during the first read
    assert all(abs(t - round(t / 0.2) * 0.2) < 0.04 for t in times), times
    assert sampler.skipped == 2
    assert sink.values("queue_ticks_skipped") == [2]


def test_queue_sampler_records_failed_reads_as_gaps() -> None:
    sampler, sink, _ = _sample(1.05, [0.01], fail_every=3)
    gaps = [s for s in sink.samples if s["series"] == "sample_gap"]
    depth = [s for s in sink.samples if s["series"] == "queue_depth"]
    assert len(gaps) == 2 and len(depth) == 4  # reads 3 and 6 failed: no value was made up for them
    assert sampler.gaps == 2 and sink.values("queue_sample_gaps") == [2] and sink.values("queue_samples") == [6]
    source = [m["source"] for m in sink.measurements if m["metric"] == "queue_sample_gaps"][0]
    assert "500" in source
    assert sink.values("queue_depth_max") == [5.0]  # the highest depth read, never a gap


def test_log_tail_reads_only_what_was_added(tmp_path: Path) -> None:
    """Each read scans only the new complete lines, in a worker thread; truncation and
    rotation start over from the file's beginning while the totals keep counting."""
    import os
    import threading

    from arms.probes.counters import read_counters
    from arms.runtimes.llamacpp_telemetry import TELEMETRY, LlamaCppTelemetry

    log = tmp_path / "server.log"
    lookup, hit = (
        "srv load:  - looking for better prompt, base f_keep = 0.1\n",
        "srv load:  - found better prompt with f_keep = 1\n",
    )
    log.write_text("start\n" + lookup)
    scanned: list[tuple[int, str]] = []

    class Counting(LlamaCppTelemetry):  # telemetry is frozen: a subclass records the scans
        def log_counters(self, text: str) -> dict[str, float]:
            scanned.append((len(text), threading.current_thread().name))
            return super().log_counters(text)

    counting = Counting(**{f.name: getattr(TELEMETRY, f.name) for f in dataclasses.fields(TELEMETRY)})
    tgt = ProbeTarget(
        telemetry=counting, dialect=Dialect(), base_url="http://127.0.0.1:9", model="m", log_path=str(log)
    )

    async def read() -> dict[str, float]:
        import httpx

        async with httpx.AsyncClient(
            base_url="http://x", transport=httpx.MockTransport(lambda r: httpx.Response(404))
        ) as http:
            out = await read_counters(http, tgt)
        return {k: out[k] for k in ("cache_lookups", "cache_hits")}

    assert asyncio.run(read()) == {"cache_lookups": 1, "cache_hits": 0}
    with log.open("a") as fh:
        fh.write(lookup + hit[:20])  # a line half written
    assert asyncio.run(read()) == {"cache_lookups": 2, "cache_hits": 0}
    with log.open("a") as fh:
        fh.write(hit[20:])
    assert asyncio.run(read()) == {"cache_lookups": 2, "cache_hits": 1}
    real = [(n, name) for n, name in scanned if n]
    assert [n for n, _ in real] == [len("start\n" + lookup), len(lookup), len(hit)]  # never the whole log again
    assert all(name != threading.main_thread().name for _, name in real)
    log.write_text(hit)  # truncated and written anew
    assert asyncio.run(read()) == {"cache_lookups": 2, "cache_hits": 2}
    rotated = tmp_path / "server.log.new"
    rotated.write_text(lookup + lookup + lookup)  # longer than what was read: only the inode tells
    os.replace(rotated, log)
    assert asyncio.run(read()) == {"cache_lookups": 5, "cache_hits": 2}
    assert tgt.log_tail() is not None and tgt.log_tail().resets == 2  # type: ignore[union-attr]
