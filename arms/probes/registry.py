"""Probe names (campaign.states.ProbeName) -> the function and parameter model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from arms.probes import cache_probe, decode
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
}


def get(name: ProbeName | str) -> ProbeSpec:
    try:
        return PROBES[ProbeName(name)]
    except (KeyError, ValueError):
        raise KeyError(f"probe {name!r} is not available yet; available: {', '.join(sorted(PROBES))}") from None
