"""The campaign as people read it: one summary object that the terminal status, the HTML
report and Prefect artifacts all render, so they can never disagree."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from campaign.core.schema import CampaignSpec
from campaign.core.search import is_trial_item
from campaign.core.states import SETTLED, AttemptState, ItemState, Verdict
from campaign.store.store import Store
from campaign.store.tables import AttemptRow, aware


@dataclass
class ItemView:
    key: str
    title: str
    state: str
    reason: str
    gate: str | None
    arms: list[str]
    probes: list[str]
    attempts: int
    isolation: str = ""
    overrides: str = ""  # the settings the newest attempt ran with, when a rerun changed them


@dataclass
class GateView:
    id: str
    title: str
    verdict: str
    reason: str
    subjects: list[str]
    baseline: list[str]
    predicate: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def read(self, key: str = "cells") -> list[dict[str, Any]]:
        """What the verdict read, from its evidence: every `cells` entry (arm, cell, n,
        median, interval, error rate) or, with key="comparisons", every gain with its
        interval -- nested checks (all_of, an ablation, a guard) included, each tagged
        with the path of the check it belongs to. Status and report show these, so
        what they show is what the gate read."""
        out: list[dict[str, Any]] = []
        seen: dict[str, dict[str, Any]] = {}

        def join(old: str, new: str) -> str:
            parts = [x for x in old.split(", ") if x]
            return ", ".join(parts + ([new] if new and new not in parts else []))

        def walk(node: Any, path: str) -> None:
            if not isinstance(node, dict):
                return
            for k, v in node.items():
                if k == key and isinstance(v, list):
                    for entry in v:
                        if not (isinstance(entry, dict) and ("arm" in entry or "subject" in entry)):
                            continue
                        # one row per cell read, however many checks read it
                        ident = json.dumps(
                            {x: y for x, y in entry.items() if x not in ("role", "verdict")},
                            sort_keys=True,
                            default=str,
                        )
                        if ident in seen:
                            seen[ident]["check"] = join(seen[ident]["check"], path or "main")
                            seen[ident]["role"] = join(seen[ident].get("role", ""), entry.get("role", ""))
                            continue
                        seen[ident] = {**entry, "check": path or "main"}
                        out.append(seen[ident])
                elif isinstance(v, dict):
                    walk(v, f"{path}.{k}" if path else k)

        walk(self.evidence, "")
        return out


@dataclass
class IdentityFlag:
    arm_id: str
    message: str


@dataclass
class Summary:
    name: str
    title: str
    campaign_id: int
    spec: CampaignSpec
    items: list[ItemView]
    gates: list[GateView]
    flags: list[IdentityFlag]
    simulated_arms: set[str]


def _overrides_note(overrides_json: str, item_spec_json: str) -> str:
    """ "rerun with max_tokens=96": what the newest attempt changed against the item's own
    settings in the campaign file, shown beside the item so a verdict is never read without
    the settings it was measured under."""
    try:
        values = json.loads(overrides_json or "{}")
        own = (json.loads(item_spec_json) if item_spec_json else {}).get("overrides") or {}
    except (ValueError, AttributeError):
        return ""
    if not isinstance(values, dict):
        return ""
    changed = {k: v for k, v in values.items() if own.get(k) != v}
    if not changed:
        return ""
    return "rerun with " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items()))


def summarize(store: Store, name: str | None = None) -> Summary:
    row = store.campaign(name)
    if row is None or row.id is None:
        raise LookupError(f"no campaign {name!r} in the database")
    spec = CampaignSpec.model_validate_json(row.spec_json)
    attempts = store.attempts(row.id)
    per_item: dict[str, int] = {}
    newest_overrides: dict[str, str] = {}
    for att in sorted(attempts, key=lambda a: a.id or 0):
        per_item[att.item_key] = per_item.get(att.item_key, 0) + 1
        newest_overrides[att.item_key] = att.overrides_json
    items = [
        ItemView(
            key=r.key,
            title=r.title,
            state=r.state,
            reason=r.reason,
            gate=r.gate,
            arms=json.loads(r.spec_json).get("arms", []) if r.spec_json else [],
            probes=json.loads(r.spec_json).get("probes", []) if r.spec_json else [],
            attempts=per_item.get(r.key, 0),
            overrides=_overrides_note(newest_overrides.get(r.key, "{}"), r.spec_json),
        )
        for r in store.items(row.id)
    ]
    latest = store.latest_verdicts(row.id)
    gates = []
    for gate in spec.gates:
        v = latest.get(gate.id)
        gates.append(
            GateView(
                id=gate.id,
                title=gate.title or gate.id,
                verdict=v.verdict if v else Verdict.PENDING,
                reason=v.reason if v else "not evaluated yet",
                subjects=gate.subjects,
                baseline=gate.baseline,
                predicate=gate.predicate,
                evidence=json.loads(v.evidence_json) if v else {},
            )
        )
    _add_isolation(store, row.id, spec, items)
    flags = _identity_flags(store, row.id, spec)
    simulated = {a.arm_id for a in store.arms(row.id) if a.simulated}
    return Summary(row.name, row.title, row.id, spec, items, gates, flags, simulated)


def _add_isolation(store: Store, campaign_id: int, spec: CampaignSpec, items: list[ItemView]) -> None:
    from campaign.store.isolation import changed_variable, what_moved

    confirmatory = {q.key: q for q in spec.queue if q.confirms}
    if not confirmatory:
        return
    frame = store.measurements_frame(campaign_id)
    for view in items:
        item = confirmatory.get(view.key)
        if item is None:
            continue
        text = changed_variable(spec, item)
        moved = what_moved(frame, item)
        view.isolation = text + (
            f"; moved: {', '.join(moved)}"
            if moved
            else "; nothing moved by 10% or more"
            if view.state == "done"
            else ""
        )


def _identity_flags(store: Store, campaign_id: int, spec: CampaignSpec) -> list[IdentityFlag]:
    """Mismatches with the campaign entry, and arms claiming one model with different
    fingerprints (two machines serving different weights under the same name)."""
    flags: list[IdentityFlag] = []
    latest: dict[str, Any] = {}
    for att in store.attempts(campaign_id):
        if att.fingerprint or att.identity_json != "{}":
            latest[att.arm_id] = att
    for arm_id, att in latest.items():
        for message in json.loads(att.identity_json or "{}").get("flags", []):
            flags.append(IdentityFlag(arm_id, message))
    by_model: dict[str, dict[str, list[str]]] = {}
    for arm_id, att in latest.items():
        if not att.fingerprint or att.state != AttemptState.DONE:
            continue
        arm = next((a for a in spec.arms if a.id == arm_id), None)
        if arm is None:
            continue
        model = spec.model_for(arm)
        by_model.setdefault(model.key, {}).setdefault(att.fingerprint, []).append(arm_id)
    for model_key, prints in by_model.items():
        if len(prints) > 1:
            groups = "; ".join(f"{'/'.join(sorted(arms))} -> {fp[:8]}" for fp, arms in prints.items())
            for arms in prints.values():
                for arm_id in arms:
                    flags.append(
                        IdentityFlag(
                            arm_id, f"{model_key}: arms claim the same model but fingerprints differ ({groups})"
                        )
                    )
    return flags


# -- where each attempt ran, and its flow run in the Prefect UI ---------------------------------

# The event a campaign or rerun flow writes when it starts: its message is the API URL of
# the Prefect server its flow runs go to, empty for a temporary server (gone with the run).
PREFECT_API_EVENT = "prefect-api"


@dataclass(frozen=True)
class AttemptLink:
    """One attempt: where it ran, its flow run, and that run's page in the Prefect UI
    (`url` None when the page cannot open: no flow run, or a temporary server)."""

    item_key: str
    arm_id: str
    repeat: int
    attempt_id: int
    number: int
    state: str
    host: str
    flow_run_id: str
    url: str | None


@dataclass(frozen=True)
class BlockHistory:
    """What earlier runs of one (item, arm) left in the store, for `campaign check`'s
    time estimate: the blocks done, and the wall time each done attempt took (server
    start to stop, probes and all)."""

    done_blocks: frozenset[int]
    seconds: tuple[float, ...]
    settled: bool = False  # its item added blocks until its gate was settled, and it was: nothing is left


def block_history(store: Store, campaign_name: str) -> dict[tuple[str, str], BlockHistory]:
    row = store.campaign(campaign_name)
    if row is None or row.id is None:
        return {}
    settled = {
        item.key for item in store.items(row.id) if item.state == ItemState.DONE and item.reason.startswith(SETTLED)
    }
    done: dict[tuple[str, str], set[int]] = {}
    seconds: dict[tuple[str, str], list[float]] = {}
    for attempt in store.attempts(row.id):
        if attempt.state != AttemptState.DONE or attempt.ended_at is None:
            continue
        key = (attempt.item_key, attempt.arm_id)
        done.setdefault(key, set()).add(attempt.repeat)
        seconds.setdefault(key, []).append((aware(attempt.ended_at) - aware(attempt.started_at)).total_seconds())
    return {key: BlockHistory(frozenset(done[key]), tuple(seconds[key]), key[0] in settled) for key in done}


@dataclass(frozen=True)
class RunCost:
    """What one `campaign run` spent: the server starts it made, the blocks each item now
    has, the seconds its probes ran, the seconds from its first server start to its last
    stop, and when that first start was (what came before it is the command's start-up:
    imports, the campaign file's checks, the temporary Prefect server); and how many of
    its attempts measured a server they did not start (`kept`: one kept from an earlier
    attempt, or one at a URL that runs on its own)."""

    server_starts: int
    blocks: dict[str, int]
    probing_s: float
    attempts_s: float = 0.0  # server start to stop, probes included, summed over attempts
    first_started: datetime | None = None
    kept: int = 0

    def line(self, wall_s: float, before_s: float = 0.0) -> str:
        """'cost: 8 server starts; blocks per item: k 4, r 3; 1 min 23 s: probing 71% of
        the wall time (the wall time is 1.41x the probing time), servers starting and
        stopping 12%, start-up 6%, orchestration (Prefect flow runs, verdicts) 11%'; a run
        whose attempts all measured servers they did not start says "0 server starts (all
        kept)". `wall_s` is the whole command's, `before_s` its part before the first
        server start."""
        trials = {k: n for k, n in self.blocks.items() if is_trial_item(k)}
        shown = [f"{key} {n}" for key, n in self.blocks.items() if key not in trials]
        if trials:  # a search's trial items, folded: tens of items of one block each
            shown.insert(0, f"{len(trials)} search trials {sum(trials.values())}")
        blocks = ", ".join(shown) or "none"
        wall = f"{int(wall_s // 60)} min {int(wall_s % 60)} s" if wall_s >= 90 else f"{wall_s:.0f} s"
        starts = f"{self.server_starts} server start{'s' if self.server_starts != 1 else ''}"
        if not self.server_starts and self.kept:
            starts += " (all kept)"
        share = ""
        if wall_s > 0 and self.probing_s > 0:
            probe = self.probing_s / wall_s
            servers = max(0.0, self.attempts_s - self.probing_s) / wall_s
            before = min(max(0.0, before_s) / wall_s, max(0.0, 1 - probe - servers))
            share = (
                f": probing {probe:.0%} of the wall time (the wall time is {wall_s / self.probing_s:.2f}x the probing time), "
                f"servers starting and stopping {servers:.0%}, "
                f"start-up (imports, checks, the Prefect server) {before:.0%}, "
                f"orchestration (Prefect flow runs, verdicts) {max(0.0, 1 - probe - servers - before):.0%}"
            )
        return f"cost: {starts}; blocks per item: {blocks}; {wall}{share}"


def server_starters(attempts: list[AttemptRow]) -> dict[int, AttemptRow]:
    """Each attempt's id -> the attempt that started the server it ran on: itself, or (a
    kept server, docs/gates-and-queue.md) the earliest attempt with the same `server_log`, which
    the attempts chained onto a server copy from the one that started it. `attempts`
    oldest first."""
    first: dict[str, AttemptRow] = {}
    return {a.id or 0: first.setdefault(a.server_log, a) if a.server_log else a for a in attempts}


def run_cost(store: Store, campaign_name: str, since: Any) -> RunCost:
    """`RunCost` of the attempts started at or after `since` (a UTC datetime). A start is
    an attempt that started a server process (it recorded its `server_log`) and is that
    server's first attempt: one chained onto a server kept from an earlier attempt (the
    same `server_log`) or measuring a server at a URL (no process, no log) started none,
    and counts as kept where it measured; one whose launch failed started none either."""
    row = store.campaign(campaign_name)
    if row is None or row.id is None:
        return RunCost(0, {}, 0.0)
    since = aware(since)
    started = kept = 0
    probing = spent = 0.0
    first: datetime | None = None
    blocks: dict[str, set[int]] = {}
    attempts = store.attempts(row.id)
    starter = server_starters(attempts)
    for attempt in attempts:
        if attempt.state == AttemptState.DONE:
            blocks.setdefault(attempt.item_key, set()).add(attempt.repeat)
        if aware(attempt.started_at) < since or attempt.id is None:
            continue
        runs = store.probe_runs(attempt.id)
        if attempt.server_log and starter[attempt.id] is attempt:
            started += 1
        elif runs:
            kept += 1
        first = min(first, aware(attempt.started_at)) if first else aware(attempt.started_at)
        if attempt.ended_at is not None:
            spent += (aware(attempt.ended_at) - aware(attempt.started_at)).total_seconds()
        for run in runs:
            if run.ended_at is not None and aware(run.started_at) >= since:
                probing += (aware(run.ended_at) - aware(run.started_at)).total_seconds()
    return RunCost(started, {key: len(b) for key, b in blocks.items()}, probing, spent, first, kept)


def ui_base(api_url: str) -> str:
    """The UI's address for an API address: Prefect serves both, the API under /api."""
    return api_url.rstrip("/").removesuffix("/api")


def flow_run_url(ui: str, flow_run_id: str) -> str:
    return f"{ui.rstrip('/')}/runs/flow-run/{flow_run_id}"


def attempt_links(
    store: Store, campaign_id: int, ui_url: str | None = None, newest_only: bool = False
) -> list[AttemptLink]:
    """Per attempt (oldest first), its host and flow-run URL, for `campaign status` and
    the report.

    Which server an attempt's flow run lives on is what the run that ended it recorded
    (`PREFECT_API_EVENT`, newest one at or before the attempt's last sign of life): a
    temporary server gives no URL, since its page is gone. Attempts from before that
    event existed get one only when their arm is placed on a host, which needs a lasting
    server. `ui_url` (e.g. $PREFECT_UI_URL) replaces the UI address derived from the
    recorded API URL; it is also the address used for those older attempts. With
    `newest_only`, only the newest attempt of each (item, arm)."""
    row = next((c for c in store.campaigns() if c.id == campaign_id), None)
    spec = CampaignSpec.model_validate_json(row.spec_json) if row is not None and row.spec_json else None
    placed = set()
    if spec is not None:
        for arm in spec.arms:
            try:
                if spec.host_of(arm.id):
                    placed.add(arm.id)
            except (StopIteration, LookupError):  # a stored spec naming a runtime since removed
                pass
    servers = sorted(
        ((aware(e.at), e.message) for e in store.events(campaign_id) if e.kind == PREFECT_API_EVENT), key=lambda x: x[0]
    )
    attempts = sorted(store.attempts(campaign_id), key=lambda a: a.id or 0)
    if newest_only:
        newest: dict[tuple[str, str], AttemptRow] = {}
        for att in attempts:
            newest[(att.item_key, att.arm_id)] = att
        attempts = list(newest.values())
    out = []
    for att in attempts:
        url = None
        if att.flow_run_id:
            last = aware(att.ended_at or att.heartbeat_at or att.started_at)
            recorded = [api for at, api in servers if at <= last]
            if recorded:
                api = recorded[-1]
                url = flow_run_url(ui_url or ui_base(api), att.flow_run_id) if api else None
            elif att.arm_id in placed and ui_url:
                url = flow_run_url(ui_url, att.flow_run_id)
        out.append(
            AttemptLink(
                att.item_key,
                att.arm_id,
                att.repeat,
                att.id or 0,
                att.number,
                str(att.state),
                att.host,
                att.flow_run_id,
                url,
            )
        )
    return out
