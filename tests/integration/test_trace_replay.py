"""A trace replayed on simulator processes (the load probe's trace profile): requests go
out at the recorded times, with the recorded lengths, and the blocks the trace shares are
real shared prefixes: with a prefix cache the server reports about the reuse the trace
implies, with no reuse at all none."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arms.probes import load as load_probe
from arms.probes.base import MemorySink
from arms.workloads.traces import TraceShape, implied_cached_tokens, make_trace, read_trace, write_trace
from tests.simproc import simulator
from tests.unit.test_load import sim_target

pytestmark = pytest.mark.integration

SHAPE = TraceShape(
    sessions=5,
    turns=3,
    system_blocks=2,
    task_blocks=1,
    turn_blocks=1,
    session_rate=4.0,
    think_s=0.4,
    output_min=4,
    output_max=8,
    block_tokens=64,
    seed=7,
)


def test_a_replay_keeps_the_traces_times_lengths_and_shared_prefixes(tmp_path: Path) -> None:
    path = tmp_path / "agents.jsonl"
    write_trace(path, make_trace(SHAPE))
    recorded = read_trace(path, block_tokens=64)
    params = load_probe.LoadParams(profile="trace", trace=str(path), block_tokens=64, time_scale=0.5)
    sinks = {}
    for cache in (True, False):  # a cache that holds it all; one that never reuses
        extra = {"prefix_cache_tokens": 200000} if cache else {"disable_reuse": True}
        with simulator(tmp_path / str(cache), slots=4, prefill_tps=20000.0, decode_tps=400.0, **extra) as url:
            sinks[cache] = MemorySink()
            asyncio.run(load_probe.run(sim_target(url), sinks[cache], params))
    on, off = sinks[True], sinks[False]
    scenario = "trace=agents"

    # every request sent, at the recorded gaps halved, with its recorded output length
    requests = [r for r in on.requests if r["scenario"] == scenario]
    assert len(requests) == len(recorded) == 15
    assert on.values("offered_rps", scenario=scenario)[0] == pytest.approx(
        load_probe.LoadParams(profile="trace", trace=str(path), block_tokens=64, time_scale=0.5).profile_of().rate
    )
    assert max(on.values("schedule_lag_s", scenario=scenario)) < 0.25
    served = sorted((r["label"]["index"], r["usage"]["completion_tokens"]) for r in requests)
    assert [n for _, n in served] == [r.output_length for r in recorded]
    # prompts sized as recorded (words, about a token each; the chat template adds a few)
    prompts = sorted((r["label"]["index"], r["usage"]["prompt_tokens"]) for r in requests)
    assert all(
        abs(n - r.input_length) <= 0.1 * r.input_length + 16 for (_, n), r in zip(prompts, recorded, strict=True)
    ), prompts

    # the reuse the trace implies, and what the server reported: close with a cache, none without
    implied = implied_cached_tokens(recorded, 64)
    assert sorted(on.values("implied_cached_tokens", scenario=scenario)) == sorted(implied)
    expected = on.values("trace_implied_reuse", scenario=scenario)[0]
    assert expected > 0.3
    assert on.values("trace_reuse", scenario=scenario)[0] == pytest.approx(expected, abs=0.1)
    assert off.values("trace_reuse", scenario=scenario)[0] == 0.0
