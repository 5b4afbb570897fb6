"""The load sweep against a real llama-server (Gemma 3 270M, 2 slots): it completes, and
its curve bends where the server's own queue (`llamacpp:requests_deferred`) starts to
grow. A separate module so that a machine without llama.cpp skips only this, through the
fixtures of `tests/test_llamacpp.py`."""

from __future__ import annotations

import asyncio

import pytest

from tests.test_llamacpp import LlamaServers, gguf_model, llama_servers  # noqa: F401 - fixtures

from arms.probes import load as load_probe  # noqa: E402
from arms.probes.base import MemorySink  # noqa: E402

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]


def test_sweep_bends_where_the_queue_grows(llama_servers: LlamaServers) -> None:  # noqa: F811
    server = llama_servers.get(2)
    sink = MemorySink()
    params = load_probe.LoadParams(
        profile="sweep", duration_s=8.0, rates=3, max_concurrency=8, prompt_tokens=64, max_tokens=16,
        targets={"ttft_s": 1.0, "tpot_s": 0.25},
    )
    asyncio.run(load_probe.run(server.target(), sink, params))
    curve = load_probe.curve_rows(sink.measurements)
    for r in curve:
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})
    print(load_probe.sweep_result(sink.measurements))
    scenarios = [r["scenario"] for r in curve]
    assert "synchronous" in scenarios and "concurrency=8" in scenarios and sum(s.startswith("poisson=") for s in scenarios) >= 2
    assert not sink.values("errors"), [r["error"] for r in sink.requests if r["error"]][:3]
    by = {r["scenario"]: r for r in curve}
    sync, top = by["synchronous"], by["concurrency=8"]
    # one request at a time never queues; eight clients on two slots keep six waiting
    assert sync["queue_depth_max"] == 0
    assert top["queue_depth_max"] >= 4
    depth = [s["value"] for s in sink.samples if s["series"] == "queue_depth" and s["label"] == "concurrency=8"]
    assert depth and max(depth) >= 4  # the rise is in the samples, not only in the summary
    # the bend: where the queue grows, TTFT grows with it, throughput does not
    assert top["ttft_p50_s"] >= 3 * sync["ttft_p50_s"]
    assert top["request_throughput_rps"] < 4 * sync["request_throughput_rps"]
    rates = [r for r in curve if r["open_loop"]]
    assert rates[-1]["queue_depth_mean"] >= rates[0]["queue_depth_mean"]
    best = load_probe.sweep_result(sink.measurements)[("canonical", 0)]
    assert 0 < best["max_goodput_rps"] <= top["request_throughput_rps"] * 1.5
