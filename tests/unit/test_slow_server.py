"""A server far slower than a working one is warned of in the run's output: the decode
probe holds its first answered request to `arms.probes.pace`'s floors (a decode rate, and
a TTFT against the prompt's size), and the warning reaches the campaign's events and the
run's output. Nothing it stores changes, so no verdict can."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from arms.probes import decode
from arms.probes.base import MemorySink, ProbeTarget
from arms.probes.pace import MIN_DECODE_TPS, slowness
from arms.simulator.profile import SimProfile


async def _decode(profile: SimProfile, warmup: int = 1) -> MemorySink:
    """One short decode run against the simulator, in this process."""
    from aiohttp import web

    from arms.runtimes import catalog as runtimes
    from arms.simulator.app import make_app

    runner = web.AppRunner(make_app(profile))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target = ProbeTarget.speaking(
        runtimes.get("simulator"), base_url=f"http://127.0.0.1:{port}", model="sim-model", simulated=True
    )
    sink = MemorySink()
    try:
        await decode.run(target, sink, decode.DecodeParams(contexts=[256], max_tokens=2, repeats=1, warmup=warmup))
    finally:
        await runner.cleanup()
    return sink


def _metrics(sink: MemorySink) -> set[tuple[Any, ...]]:
    """What a run stored, by metric and kind (which trial a counter delta lands on depends
    on the timing, which a slow server changes)."""
    return {(m["metric"], m["kind"]) for m in sink.measurements}


def test_a_server_decoding_under_the_floor_is_warned_of_and_measured_as_it_is() -> None:
    """1.5 tok/s on the simulator (a llama-server with more threads than free cores decodes
    at 0.67): one warning, from the warm-up, and the same rows a fast server gets."""
    still = {"run_sd": 0.0, "drift_sd_per_min": 0.0}
    slow = asyncio.run(_decode(SimProfile(decode_tps=1.5, **still)))
    fast = asyncio.run(_decode(SimProfile(decode_tps=400.0, **still)))
    (warning,) = slow.warnings
    assert warning.startswith("the server is far slower than a working one: its first request decoded 1.")
    assert f"tok/s, under the floor of {MIN_DECODE_TPS:g} tok/s" in warning and "--threads" in warning
    assert fast.warnings == []
    assert _metrics(slow) == _metrics(fast)  # nothing stored for it: verdicts read the same metrics
    without_warmup = asyncio.run(_decode(SimProfile(decode_tps=1.5, **still), warmup=0))
    assert len(without_warmup.warnings) == 1  # the first timed request is judged instead


def test_a_first_token_far_later_than_the_prompt_explains_is_warned_of() -> None:
    """18 s for 40 prompt tokens is not prefill; 18 s for 2000 tokens may be a large model
    on a CPU, and the floor is meant never to cry wolf."""
    (late,) = slowness(decode=20.0, ttft=18.0, prompt=40)
    assert (
        late
        == "took 18.0 s to its first token for 40 prompt tokens, over the 9.00 s that 5 s and a prefill of 10 tok/s would take"
    )
    assert slowness(decode=20.0, ttft=18.0, prompt=2000) == []
    assert slowness(decode=None, ttft=None, prompt=40) == []


def test_a_warning_reaches_the_events_and_the_runs_output(db_url: str, tmp_path: Path) -> None:
    from campaign.store.store import Store
    from campaign.store.tables import CampaignRow
    from flows.progress import describe, subscribe
    from flows.sink import PROBE_WARNING, StoreSink

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    heard: list[tuple[str, dict[str, Any]]] = []
    stop = subscribe(lambda kind, data: heard.append((kind, data)))
    try:
        sink = StoreSink(
            store, camp.id or 0, attempt_id=0, probe_run_id=0, item_key="k", arm_id="A", probe="decode", simulated=True
        )
        sink.warn("slow")
        sink.close()
    finally:
        stop()
    (event,) = [e for e in store.events(camp.id or 0) if e.kind == PROBE_WARNING]
    assert (event.item_key, event.arm_id, event.message) == ("k", "A", "decode: slow")
    assert heard == [(PROBE_WARNING, {"arm": "A", "probe": "decode", "message": "slow"})]
    assert describe(*heard[0]) == "arm A: decode: warning: slow"
