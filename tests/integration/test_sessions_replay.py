"""Recorded agent sessions replayed by agent-load on a simulator process: every turn in
order after its recorded think time, sessions at their recorded starts or a set
concurrency, and the history carrying the recorded replies or the server's own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from arms.measures import NS
from arms.probes import agent_load
from arms.probes.base import MemorySink
from tests.simproc import simulator
from tests.unit.test_load import sim_target

pytestmark = pytest.mark.integration


def _session(name: str, start: float) -> dict[str, object]:
    reply = " ".join(["recorded"] * 30)
    return {
        "id": name,
        "start_s": start,
        "messages": [
            {"role": "system", "content": "You are an agent. " * 20, "t": 0},
            {"role": "user", "content": f"Task {name}: " + "word " * 40, "t": 0},
            {"role": "assistant", "content": reply, "t": 0.1},
            {"role": "tool", "content": "output " * 30, "t": 0.7},
            {"role": "assistant", "content": reply, "t": 0.8},
        ],
    }


def test_sessions_replay_in_order_with_think_times_and_the_history_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    path.write_text("".join(json.dumps(_session(n, s)) + "\n" for n, s in (("a", 0.0), ("b", 0.3))))
    sinks = {}
    with simulator(tmp_path, slots=2, prefill_tps=20000.0, decode_tps=400.0, prefix_cache_tokens=100000) as url:
        for history in ("recorded", "server"):
            sinks[history] = MemorySink()
            params = agent_load.AgentLoadParams(sessions=str(path), history=history, max_tokens=4)
            asyncio.run(agent_load.run(sim_target(url), sinks[history], params))
        sinks["one at a time"] = MemorySink()
        asyncio.run(
            agent_load.run(
                sim_target(url),
                sinks["one at a time"],
                agent_load.AgentLoadParams(sessions=str(path), max_tokens=4, session_concurrency=1),
            )
        )
    recorded = sinks["recorded"]
    turns = {(r["label"]["session"], r["label"]["turn"]): r for r in recorded.requests}
    assert sorted(turns) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)] and not recorded.values("errors")
    for name in "ab":  # the second turn waits its recorded think time (0.6 s) after the first ended
        assert turns[(name, 1)]["send_ns"] - turns[(name, 0)]["end_ns"] >= 0.55 * NS
    assert turns[("b", 0)]["send_ns"] - turns[("a", 0)]["send_ns"] >= 0.25 * NS  # b starts 0.3 s after a
    assert all(r["usage"]["completion_tokens"] == 4 for r in recorded.requests)  # replies capped by max_tokens
    # the history: the recorded 30-word reply, or the server's 4-token one, in turn 2's prompt
    grown = {
        h: sinks[h].values("prompt_tokens", scenario="c0-t1")[0] - sinks[h].values("prompt_tokens", scenario="c0-t0")[0]
        for h in ("recorded", "server")
    }
    assert grown["recorded"] - grown["server"] >= 20, grown
    source = next(m["source"] for m in sinks["server"].measurements if m["metric"] == "sessions_replayed")
    assert "history server" in source and "each at its recorded start" in source
    # one at a time: b's first turn goes out only after a's last one came back
    serial = {(r["label"]["session"], r["label"]["turn"]): r for r in sinks["one at a time"].requests}
    assert serial[("b", 0)]["send_ns"] >= serial[("a", 1)]["end_ns"]
    assert sinks["recorded"].values("ttft_later_median_s")
