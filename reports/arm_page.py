"""One page per arm: what it is, what the server said it serves, what it cost in memory,
and everything every probe measured on it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from campaign.core import metrics
from campaign.core.units import SIZE_FIELDS, size
from campaign.store.store import Store
from campaign.store.summary import attempt_links, server_starters
from campaign.store.tables import ArmRow
from reports import agent_load, energy, latency, load_curve, trace_replay
from reports.data import ReportData, canonical_first
from reports.raw import Answer, RawFiles


@dataclass
class ArmPage:
    arm: ArmRow
    simulated: bool
    recipe: dict[str, Any]
    entry: dict[str, str]
    attempts: list[dict[str, Any]]
    identity: dict[str, Any] | None
    flags: list[str]
    probes: list[tuple[str, list[dict[str, Any]]]]
    agent_load: list[agent_load.AgentLoadRun]
    raw_file: str | None
    raw_count: int
    answers: list[Answer]
    gates: list[dict[str, str]]
    load_curves: list[load_curve.LoadCurve] = field(default_factory=list)
    replays: list[trace_replay.ReplayRun] = field(default_factory=list)
    latency: latency.ArmLatency | None = None
    counter_notes: list[str] = field(default_factory=list)
    telemetry: list[energy.TelemetryRun] = field(default_factory=list)


def build(store: Store, data: ReportData, arm: ArmRow, raw: RawFiles) -> ArmPage:
    aid = arm.arm_id
    titles = data.item_titles()
    attempts = []
    identity = None
    # where each attempt ran and its flow run's page (none for a temporary server's runs)
    links = {
        link.attempt_id: link for link in attempt_links(store, arm.campaign_id, ui_url=os.environ.get("PREFECT_UI_URL"))
    }
    mine = data.attempts_of([aid])
    started_by = server_starters(mine)
    for a in mine:
        ident = json.loads(a.identity_json or "{}")
        link = links.get(a.id or 0)
        starter = started_by[a.id or 0]
        attempts.append(
            {
                "kept_from": None
                if starter is a
                else f"{titles.get(starter.item_key, starter.item_key)}, block {starter.repeat}",
                "host": a.host,
                "flow_run_url": link.url if link else None,
                "flow_run_id": a.flow_run_id,
                "number": a.number,
                "repeat": getattr(a, "repeat", 0),
                "item": titles.get(a.item_key, a.item_key),
                "state": a.state,
                "started": a.started_at,
                "ended": a.ended_at,
                "error": a.error,
                "served_model": a.served_model,
                "fingerprint": a.fingerprint,
                "rss": size(a.rss_bytes),
                "rss_bytes": a.rss_bytes,
                "cmdline": a.server_cmdline,
                "overrides": a.overrides_json,
            }
        )
        if a.served_model or a.fingerprint:
            identity = {
                "served_model": a.served_model,
                "fingerprint": a.fingerprint,
                "attempt": a.number,
                "item": titles.get(a.item_key, a.item_key),
                "details": json.dumps(ident, indent=2, sort_keys=True),
            }
    spec = data.summary.spec
    entry: dict[str, str] = {}
    try:
        arm_entry = spec.arm(aid)
        model = spec.model_for(arm_entry)
        entry = {
            "description": arm_entry.description,
            "model_description": model.description,
            "served_id": model.served_id or "",
            "sampling": json.dumps(model.sampling.model_dump(exclude_none=True)),
        }
    except StopIteration:
        pass
    return ArmPage(
        arm=arm,
        simulated=data.is_simulated(aid),
        recipe=_recipe(json.loads(arm.recipe_json or "{}")),
        entry=entry,
        attempts=attempts,
        identity=identity,
        flags=[f.message for f in data.summary.flags if f.arm_id == aid],
        probes=_probe_tables(data, aid),
        agent_load=agent_load.runs(store, data.agent_ttft, aid, f"arm-{data.arm_pages[aid]}"),
        raw_file=raw.files.get(aid),
        raw_count=raw.counts.get(aid, 0),
        answers=raw.answers.get(aid, []),
        gates=[
            {"id": g.id, "title": g.title, "verdict": g.verdict, "page": data.gate_pages[g.id]}
            for g in data.summary.gates
            if aid in g.subjects or aid in g.baseline
        ],
        load_curves=load_curve.runs(load_curve.load_rows(data.frame), aid, f"arm-{data.arm_pages[aid]}"),
        telemetry=energy.arm_runs(store, data, aid),
        replays=trace_replay.runs(store.requests, data.frame, aid, f"arm-{data.arm_pages[aid]}"),
        latency=latency.build(data.frame, aid, f"arm-{data.arm_pages[aid]}-latency"),
        counter_notes=counter_notes(data, aid),
    )


def counter_notes(data: ReportData, arm_id: str) -> list[str]:
    """Server counters that look contradictory side by side, explained where they occur:
    no cache hits beside many cached prompt tokens means the tokens came from the slot's
    own KV (the same slot served the conversation's previous turn), which runtimes do not
    count as a cache hit: the prefix cache itself served nothing in that run, and a
    speed-up there is the slots' doing, not the cache's."""
    stats = data.stats
    if stats.empty:
        return []
    names = (metrics.CACHE_HITS.name, metrics.CACHED_PROMPT_TOKENS.name)
    rows = stats[(stats["arm_id"] == arm_id) & (stats["mode"] == "canonical") & stats["metric"].isin(names)]
    notes = []
    for key, part in rows.groupby(["probe", "scenario", "context"], sort=True):
        value = {str(r.metric): float(r.median) for r in part.itertuples(index=False)}
        hits, cached = (value.get(name) for name in names)
        if hits == 0 and cached and cached > 0:
            probe, scenario, context = key
            where = f"{probe}{' ' + str(scenario) if scenario else ''} @ {context}"
            notes.append(
                f"{where}: 0 cache hits beside {cached:,.0f} cached prompt tokens (medians per run). Not a contradiction: "
                "those tokens were reused from the slot's own KV, which the server does not count as a prefix-cache hit. "
                "The prefix cache served nothing here: any reuse, and the speed it buys, is the slots' doing, not the cache's."
            )
    return notes


def _recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """Byte sizes as people wrote them (8.0 GiB), in the one unit every page uses; the
    exact count is in the exports, not beside it in ten digits."""
    out = dict(recipe)
    for key in SIZE_FIELDS:
        if isinstance(out.get(key), int):
            out[key] = size(out[key])
    return out


def _probe_tables(data: ReportData, arm_id: str) -> list[tuple[str, list[dict[str, Any]]]]:
    stats = data.stats
    if stats.empty:
        return []
    rows = stats[stats["arm_id"] == arm_id]
    out = []
    for probe, part in rows.groupby("probe", sort=True):
        modes = canonical_first(sorted(set(part["mode"])))
        part = part.assign(_m=part["mode"].map(modes.index)).sort_values(
            ["_m", "context", "scenario", "metric", "source"]
        )
        out.append((str(probe), part.drop(columns="_m").to_dict("records")))
    return out
