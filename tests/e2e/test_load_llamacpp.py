"""The load sweep against a real llama-server (Gemma 3 270M, 2 slots): it completes, and
its curve bends where the server's own queue (`llamacpp:requests_deferred`) starts to
grow. A separate module so that a machine without llama.cpp skips only this, through the
fixtures of `tests/e2e/test_llamacpp.py`."""

from __future__ import annotations

import asyncio

import pytest

from arms.probes import load as load_probe  # noqa: E402
from arms.probes.base import MemorySink  # noqa: E402
from tests.e2e.test_llamacpp import LlamaServers, gguf_model, llama_servers, llama_spec  # noqa: F401 - fixtures

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]


def test_sweep_bends_where_the_queue_grows(llama_servers: LlamaServers) -> None:  # noqa: F811
    """The claims are about shape: no queue at the bottom, and where the queue grows in the
    samples, TTFT grows with it. The server runs one compute thread: two threads meet at a
    spinning barrier every operation, and on two cores shared with other processes one
    of them is often descheduled, which slowed decode up to tenfold in runs here. The
    targets are set from a synchronous run first (5x its TTFT and TPOT), so that one
    request at a time meets them however fast this machine is today."""
    shape = {"prompt_tokens": 64, "max_tokens": 16}
    with llama_servers.start(llama_spec(slots=2, extra_args=["--threads", "1"])) as server:
        calibration = MemorySink()
        asyncio.run(
            load_probe.run(
                server.target(), calibration, load_probe.LoadParams(profile="synchronous", requests=4, **shape)
            )
        )
        targets = {"ttft_s": 5 * calibration.values("ttft_p50_s")[0], "tpot_s": 5 * calibration.values("tpot_p50_s")[0]}
        sink = MemorySink()
        params = load_probe.LoadParams(
            profile="sweep",
            duration_s=6.0,
            rates=3,
            max_concurrency=8,
            targets=targets,
            stop_at_saturation=False,
            **shape,
        )  # the whole curve: where it bends
        asyncio.run(load_probe.run(server.target(), sink, params))
    print("targets", targets)
    curve = load_probe.curve_rows(sink.measurements)
    for r in curve:  # shown with -s: the numbers behind the README's
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})
    best = load_probe.sweep_result(sink.measurements)[("canonical", 0)]
    print(best)
    scenarios = [r["scenario"] for r in curve]
    assert (
        "synchronous" in scenarios
        and "concurrency=8" in scenarios
        and sum(s.startswith("poisson=") for s in scenarios) >= 2
    )
    assert not sink.values("errors"), [r["error"] for r in sink.requests if r["error"]][:3]
    by = {r["scenario"]: r for r in curve}
    sync = by["synchronous"]
    assert sync["queue_depth_max"] == 0  # one request at a time never queues
    assert by["concurrency=8"]["queue_depth_max"] >= 2  # eight clients on two slots do
    # the bend: the run where the server's queue grew most is where TTFT grew
    bend = max(curve, key=lambda r: r["queue_depth_mean"])
    depth = [s["value"] for s in sink.samples if s["series"] == "queue_depth" and s["label"] == bend["scenario"]]
    assert depth and max(depth) >= 2, (bend["scenario"], depth)  # the rise is in the samples
    assert bend["ttft_p50_s"] >= 3 * sync["ttft_p50_s"], (bend, sync)
    # the sweep's answer is stored; where a rate held, it held with less queue than the bend
    assert "max_goodput_rps" in best and best["sweep_runs"] == len(curve)
    if best["max_goodput_rps"] > 0:
        assert by[best["max_goodput_rps_source"]]["queue_depth_mean"] < bend["queue_depth_mean"]


def test_a_trace_replay_shows_what_the_server_really_reuses(llama_servers: LlamaServers, tmp_path) -> None:  # noqa: F811
    """A small generated trace (3 sessions of 3 turns sharing a 2-block system prompt,
    blocks of 32 tokens) replayed on llama-server with one slot. Every request is served
    with its recorded output length. Gemma 3 attends through a sliding window, and by
    default llama.cpp keeps only checkpoints of that cache: it reuses 1 token of a prefix
    the trace says is shared (`timings.cache_n`, "restored context checkpoint ...
    n_tokens = 1" in its log), so the replay's reported reuse stays near 0 against the
    ~57% the trace implies. With `--swa-full` the shared prefixes are served from the
    cache and the two agree."""
    from arms.workloads.traces import TraceShape, make_trace, write_trace

    shape = TraceShape(
        sessions=3,
        turns=3,
        system_blocks=2,
        task_blocks=1,
        turn_blocks=1,
        session_rate=2.0,
        think_s=0.8,
        output_min=4,
        output_max=8,
        block_tokens=32,
        seed=2,
    )
    path = tmp_path / "small.jsonl"
    recorded = make_trace(shape)
    write_trace(path, recorded)
    params = load_probe.LoadParams(profile="trace", trace=str(path), block_tokens=32)
    sinks = {}
    for full in (False, True):
        with llama_servers.start(
            llama_spec(slots=1, extra_args=["--threads", "1", *(["--swa-full"] if full else [])])
        ) as server:
            sinks[full] = MemorySink()
            asyncio.run(load_probe.run(server.target(), sinks[full], params))
    for sink in sinks.values():
        requests = [r for r in sink.requests if r["scenario"] == "trace=small"]
        assert len(requests) == 9 and not sink.values("errors"), [r["error"] for r in requests if r["error"]]
        served = sorted((r["label"]["index"], r["usage"]["completion_tokens"]) for r in requests)
        assert [n for _, n in served] == [r.output_length for r in recorded]
    implied = sinks[True].values("trace_implied_reuse")[0]
    assert implied > 0.4
    assert sinks[False].values("trace_reuse")[0] < 0.05, sinks[False].values("cached_tokens")  # checkpoints only
    assert sinks[True].values("trace_reuse")[0] == pytest.approx(implied, abs=0.15), sinks[True].values("cached_tokens")
