"""Probe names -> the function and parameter model.

The set is open: the built-in probes (named by `campaign.core.states.ProbeName`) register
here on import, and a campaign's plugin module registers its own the same way,
`register(ProbeSpec(...))` (the one call every kind registers with,
`campaign.core.registry`), after which a queue item can name it (`flows.resolve.known_names` checks files against what
is registered)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from arms.probes import agent_load, cache_ceiling, cache_probe, decode, load, tool_loop
from campaign.core import metrics
from campaign.core.registry import Registry
from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import ProbeName

# what a queue item gives a probe beside its overrides: (campaign, item, the context one
# run fills) -> parameter values, before the item's overrides (which win)
ItemValues = Callable[[CampaignSpec, QueueItem, int], dict[str, Any]]


@dataclass(frozen=True)
class Headline:
    """The one number the coverage page shows in a probe's cell: the largest cell value of
    `metric` the arm has (as the gates read it), followed by `label`, which says which."""

    metric: str
    label: str


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    run: Any
    params: type[BaseModel]
    per_context: bool
    # fields that size a run's sample (how many requests it times), not what it measures:
    # runs that differ only in them measure the same cell, so they are left out of a
    # probe run's settings (`flows.overrides.probe_settings_hash`) and of the load-time
    # check that items feeding one gate give a probe the same settings
    sample_fields: frozenset[str] = frozenset()
    # fields that pick a random draw (a seed): runs that differ only in them sample the
    # same distribution, so they are left out of the settings like `sample_fields`; the
    # arm flow sets them per block (`flows.overrides.probe_params`), so blocks draw afresh
    # and the arms of one block share a draw
    draw_fields: frozenset[str] = frozenset()
    # what it measures depends on what the server's prefix cache holds (reuse, cold and
    # warm TTFT, eviction): on a server kept from an earlier item it runs only after the
    # cache was emptied through the runtime's own endpoint (`RuntimeAdapter.cache_flush`)
    cold_cache: bool = False
    # it sends tools, so the arm's server starts with tool calling on (llama.cpp's --jinja
    # and a template) and an item with it never shares a server with one without
    needs_tools: bool = False
    item_values: ItemValues | None = None
    # `campaign probe` values where the command line gives none (the file always gives them)
    cli_defaults: Mapping[str, Any] = field(default_factory=dict)
    headline: Headline | None = None
    # more of a run for `campaign probe --json` (agent-load's turns, load's curve), from
    # its measurement and request rows
    extras: Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, Any]] | None = None

    @property
    def unsettled(self) -> frozenset[str]:
        """Fields that are not part of what a run measures: `sample_fields | draw_fields`."""
        return self.sample_fields | self.draw_fields

    @property
    def keys(self) -> dict[str, str]:
        """Campaign-file keys of the params -> field names. A key differs from its field
        where a field was renamed in code and the file kept its key (decode's `repeats`
        are its `trials`), so files stay valid and overrides keep their meaning."""
        return {(info.alias or name): name for name, info in self.params.model_fields.items()}


# Probe fields set from the queue item itself (its `contexts`), never through overrides.
ITEM_FIELDS = {"context": "contexts", "contexts": "contexts"}

PROBES: Registry[ProbeSpec] = Registry(
    "probe", lambda spec: spec.name, missing="probe {name!r} is not available yet; available: {known}"
)


def register(spec: ProbeSpec) -> ProbeSpec:
    """Register a probe (built-in or a campaign's own) under its name (the campaign file's spelling)."""
    return PROBES.register(spec)


for _spec in (
    ProbeSpec(
        ProbeName.CACHE_PROBE,
        cache_probe.run,
        cache_probe.CacheProbeParams,
        True,
        frozenset({"trials"}),
        cold_cache=True,
        item_values=cache_probe.item_values,
    ),
    ProbeSpec(
        ProbeName.DECODE,
        decode.run,
        decode.DecodeParams,
        True,
        frozenset({"trials"}),
        item_values=decode.item_values,
        cli_defaults={"contexts": [2048]},
        headline=Headline(metrics.DECODE_TPS.name, "tok/s"),
    ),
    ProbeSpec(
        ProbeName.TOOL_LOOP, tool_loop.run, tool_loop.ToolLoopParams, False, frozenset({"trials"}), needs_tools=True
    ),
    ProbeSpec(
        ProbeName.AGENT_LOAD,
        agent_load.run,
        agent_load.AgentLoadParams,
        False,
        cold_cache=True,
        headline=Headline(metrics.TTFT_S.name, "s TTFT of the slowest turn"),
        extras=agent_load.extras,
    ),
    ProbeSpec(
        ProbeName.CACHE_CEILING,
        cache_ceiling.run,
        cache_ceiling.CacheCeilingParams,
        False,
        cold_cache=True,
        headline=Headline(metrics.REUSE.name, "reuse"),
    ),
    ProbeSpec(
        ProbeName.LOAD,
        load.run,
        load.LoadParams,
        False,
        draw_fields=frozenset({"seed"}),
        cold_cache=True,
        extras=load.extras,
    ),
):
    register(_spec)


def names() -> list[str]:
    return PROBES.names()


def get(name: ProbeName | str) -> ProbeSpec:
    return PROBES.get(name)


def needs_tools(names: Iterable[str]) -> bool:
    """Whether any of these probes sends tools (its server needs tool calling on)."""
    return any(get(name).needs_tools for name in names)
