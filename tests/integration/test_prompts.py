"""Prompts sized in the server's own tokens, against a simulator process."""

from __future__ import annotations

import asyncio
from pathlib import Path

from arms.probes import cache_ceiling, decode
from arms.probes.base import MemorySink, ProbeTarget
from arms.probes.prompts import (
    VIA_MESSAGES,
    sizing_tolerance,
)
from arms.runtimes import catalog as registry
from tests.simproc import simulator


def test_decode_and_cache_ceiling_prompts_are_sized_in_the_servers_tokens(tmp_path: Path) -> None:
    """The word count used to be the size: the template's role tokens came on top."""
    sink = MemorySink()
    with simulator(tmp_path, slots=1, prefill_tps=20000.0, decode_tps=500.0, ctx_size=8192) as url:
        target = ProbeTarget.speaking(
            registry.get("simulator"), base_url=url, model="sim-model", sampling={"temperature": 1.0}
        )
        asyncio.run(decode.run(target, sink, decode.DecodeParams(contexts=[1024], max_tokens=8, repeats=1)))
        params = cache_ceiling.CacheCeilingParams(start_tokens=300, max_tokens_prompt=600, resolution_tokens=300)
        asyncio.run(cache_ceiling.run(target, sink, params))
    targets = {m["scenario"]: m for m in sink.measurements if m["metric"] == "prompt_tokens_target"}
    assert {m["source"] for m in targets.values()} == {VIA_MESSAGES}
    size = targets["decode"]["value"]
    assert size == int(1024 * 0.8) - 8 - 16
    for request in sink.requests:
        scenario = request["scenario"].split(":")[0]
        target_tokens = targets[scenario]["value"]
        assert 0 <= target_tokens - request["usage"]["prompt_tokens"] <= sizing_tolerance(target_tokens), request
    assert {"len300", "len600"} <= set(targets)
