"""The external adapter against a real simulator process."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from arms.probes import cache_probe
from arms.probes.base import MemorySink, ProbeTarget, read_counters
from arms.runtimes import catalog as registry
from arms.runtimes.external import ExternalAdapter
from arms.server import ServerProcess, free_port
from campaign.states import Mode
from tests.unit.test_adapters import gauges_have_queue


@pytest.fixture
def simulator_url(tmp_path: Path) -> Any:
    """The embedded simulator as a real process, standing in for somebody else's server."""
    port = free_port()
    argv = [sys.executable, "-m", "arms.simulator", "--port", str(port), "--slots", "2",
            "--prefill-tps", "40000", "--decode-tps", "400", "--prefix-cache-tokens", "8192", "--model", "sim-8b"]
    with ServerProcess(argv=argv, base_url=f"http://127.0.0.1:{port}", log_path=tmp_path / "sim.log",
                       startup_timeout_s=30) as server:
        yield server.base_url

@pytest.mark.integration
def test_external_against_the_simulator_process(simulator_url: str) -> None:
    adapter = registry.get("external")
    target = ProbeTarget(base_url=simulator_url, model="sim-8b", adapter=adapter, sampling={"temperature": 1.0})
    sink = MemorySink()
    params = cache_probe.CacheProbeParams(prompt_tokens=128, max_tokens=4, modes=[Mode.CANONICAL],
                                          scenarios=["cold", "identical"])
    asyncio.run(cache_probe.run(target, sink, params))

    reuse_rows = {m["scenario"]: m for m in sink.measurements if m["metric"] == "reuse"}
    assert reuse_rows["identical"]["value"] >= 0.9 and reuse_rows["cold"]["value"] <= 0.1
    assert reuse_rows["identical"]["source"] == "usage.prompt_tokens_details.cached_tokens"
    # its /metrics page was recognised as the simulator's (the target holds what was learned), and counters moved
    assert adapter.family is None
    assert isinstance(target.adapter, ExternalAdapter) and target.adapter.family is not None
    assert target.adapter.family.name == "simulator"
    counters = {m["metric"]: m for m in sink.measurements if m["scenario"] == ""}
    assert counters["prompt_tokens"]["value"] > 0
    assert counters["prompt_tokens"]["source"] == "/metrics:sim_prompt_tokens_total"

    async def gauges() -> dict[str, float]:
        async with target.client(1) as http:
            return await read_counters(http, target)

    assert gauges_have_queue(asyncio.run(gauges()))
    identity = adapter.identity_extras(simulator_url)
    assert identity["served_models"] == ["sim-8b"]
