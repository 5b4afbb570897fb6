"""Probe names (campaign.states.ProbeName) -> the function and parameter model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from arms.probes import agent_load, cache_ceiling, cache_probe, decode, load, tool_loop
from campaign.states import ProbeName


@dataclass(frozen=True)
class ProbeSpec:
    name: ProbeName
    run: Any
    params: type[BaseModel]
    per_context: bool


PROBES: dict[ProbeName, ProbeSpec] = {
    ProbeName.CACHE_PROBE: ProbeSpec(ProbeName.CACHE_PROBE, cache_probe.run, cache_probe.CacheProbeParams, True),
    ProbeName.DECODE: ProbeSpec(ProbeName.DECODE, decode.run, decode.DecodeParams, True),
    ProbeName.TOOL_LOOP: ProbeSpec(ProbeName.TOOL_LOOP, tool_loop.run, tool_loop.ToolLoopParams, False),
    ProbeName.AGENT_LOAD: ProbeSpec(ProbeName.AGENT_LOAD, agent_load.run, agent_load.AgentLoadParams, False),
    ProbeName.CACHE_CEILING: ProbeSpec(ProbeName.CACHE_CEILING, cache_ceiling.run, cache_ceiling.CacheCeilingParams, False),
    ProbeName.LOAD: ProbeSpec(ProbeName.LOAD, load.run, load.LoadParams, False),
}


def get(name: ProbeName | str) -> ProbeSpec:
    try:
        return PROBES[ProbeName(name)]
    except (KeyError, ValueError):
        raise KeyError(f"probe {name!r} is not available yet; available: {', '.join(sorted(PROBES))}") from None
