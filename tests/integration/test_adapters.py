"""The external adapter against a real simulator process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from arms.probes import cache_probe
from arms.probes.base import MemorySink, ProbeTarget
from arms.probes.counters import read_counters
from arms.runtimes import catalog as registry
from arms.runtimes.external import ExternalAdapter
from arms.server import ServerProcess, free_port
from campaign.core.states import Mode
from tests.unit.test_adapters import gauges_have_queue


@pytest.fixture
def simulator_url(tmp_path: Path) -> Any:
    """The embedded simulator as a real process, standing in for somebody else's server."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "arms.simulator",
        "--port",
        str(port),
        "--slots",
        "2",
        "--prefill-tps",
        "40000",
        "--decode-tps",
        "400",
        "--prefix-cache-tokens",
        "8192",
        "--model",
        "sim-8b",
    ]
    with ServerProcess(
        argv=argv, base_url=f"http://127.0.0.1:{port}", log_path=tmp_path / "sim.log", startup_timeout_s=30
    ) as server:
        yield server.base_url


@pytest.mark.integration
def test_external_against_the_simulator_process(simulator_url: str) -> None:
    adapter = registry.get("external")
    speaks = adapter.recognise(simulator_url)  # its /metrics page names the simulator's counters
    assert speaks.name == "simulator" and isinstance(adapter, ExternalAdapter)
    target = ProbeTarget.speaking(speaks, base_url=simulator_url, model="sim-8b", sampling={"temperature": 1.0})
    sink = MemorySink()
    params = cache_probe.CacheProbeParams(
        prompt_tokens=128, max_tokens=4, modes=[Mode.CANONICAL], scenarios=["cold", "identical"]
    )
    asyncio.run(cache_probe.run(target, sink, params))

    reuse_rows = {m["scenario"]: m for m in sink.measurements if m["metric"] == "reuse"}
    assert reuse_rows["identical"]["value"] >= 0.9 and reuse_rows["cold"]["value"] <= 0.1
    assert reuse_rows["identical"]["source"] == "usage.prompt_tokens_details.cached_tokens"
    # read as the family it was recognised as, the counters moved
    counters = {m["metric"]: m for m in sink.measurements if m["scenario"] == ""}
    assert counters["prompt_tokens"]["value"] > 0
    assert counters["prompt_tokens"]["source"] == "/metrics:sim_prompt_tokens_total"

    async def gauges() -> dict[str, float]:
        async with target.client(1) as http:
            return await read_counters(http, target)

    assert gauges_have_queue(asyncio.run(gauges()))
    identity = adapter.identity_extras(simulator_url)
    assert identity["served_models"] == ["sim-8b"]


@pytest.mark.integration
def test_a_campaign_measures_a_server_at_a_url_as_the_family_it_shows(simulator_url: str, tmp_path: Path) -> None:
    """The arm flow attaches to a server it did not start, learns from its /metrics page
    which runtime it is (once, before any probe), records that on the attempt, and reads the
    counters under that runtime's names; its rows are not marked simulated, since the
    campaign did not simulate them."""
    from tests.campaigns import arm, campaign_file, item, model
    from tests.runs import run_campaign

    text = campaign_file(
        "ext",
        models=[model("sim-8b")],
        runtimes=[{"name": "ext", "adapter": "external", "url": simulator_url}],
        arms=[arm("A", model="sim-8b", runtime="ext", context=4096)],
        queue=[
            item(
                "cache",
                ["A"],
                ["cache-probe"],
                overrides={
                    "prompt_tokens": 128,
                    "max_tokens": 4,
                    "modes": ["canonical"],
                    "scenarios": ["cold", "identical"],
                },
            )
        ],
    )
    run = run_campaign(tmp_path, text, "ext")
    attempt = run.attempts()["A"]
    assert attempt.state == "done", attempt.error
    assert json.loads(attempt.identity_json)["recognised_as"] == "simulator"
    frame = run.frame()
    counted = frame[(frame["metric"] == "prompt_tokens") & (frame["scenario"] == "")]
    assert len(counted) and (counted["value"] > 0).all()
    assert set(counted["source"]) == {"/metrics:sim_prompt_tokens_total"}
    assert not frame["simulated"].any()
