"""A synthetic campaign written straight into a store, for the report's tests and its
speed benchmark.

Why not run the simulator: a report test should take milliseconds and cover rows a short
demo never produces (agent-load turns, queue-depth samples, a blocked item, a rerun, a
greedy-only arm, a simulator arm beside a "real" one). Every kind of row the report reads
is written here, in bulk where there are many.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from campaign.core.loader import parse_campaign
from campaign.core.schema import CampaignSpec
from campaign.core.states import AttemptState, ItemState, ProbeRunState, Verdict
from campaign.store.store import Store
from campaign.store.tables import (
    ArmRow,
    AttemptRow,
    CampaignRow,
    MeasurementRow,
    ProbeRunRow,
    QueueItemRow,
    RequestRow,
    SampleRow,
    VerdictRow,
)

SCENARIOS = ["cold", "identical", "append", "tool_turn", "middle_mutation"]
_REUSE = {"cold": 0.0, "identical": 1.0, "append": 0.95, "tool_turn": 0.9, "middle_mutation": 0.45}


@dataclass
class Options:
    """What to build. `hostile` is put wherever a person or a model could write text."""

    name: str = "synthetic"
    title: str = "Synthetic campaign"
    arms: int = 5
    trials: int = 3
    decode_blocks: int = 3  # server runs of each decode arm, in shuffled order per block
    decode_contexts: tuple[int, ...] = (4096, 32768)
    agent_conversations: int = 3
    agent_turns: int = 6
    answer: str = "The answer is 42."
    served_suffix: str = ""
    hostile: str = ""
    requests_per_probe: int = 2
    seed: int = 0
    counts: dict[str, int] = field(default_factory=dict)


def spec_dict(o: Options) -> dict[str, Any]:
    """The campaign file as a dict: arm 0 is the baseline, arm 1 speculative, the last arm
    blocked, arm 2 greedy-only cache probing; two runtimes, two quants."""
    ids = [f"A{i}" for i in range(o.arms)]
    h = o.hostile
    arms = []
    for i, aid in enumerate(ids):
        recipe: dict[str, Any] = {
            "slots": 2 + 2 * (i % 2),
            "prefill_chunk": 512 * (1 + i % 4),
            "prefix_cache": "8G" if i % 3 else None,
        }
        if i == 1:
            recipe.update(speculative=True, draft="draft-0.5b")
        arms.append(
            {
                "id": aid,
                "model": "m",
                "quant": "q8" if i % 4 == 3 else "q4",
                "runtime": "sim" if i % 2 == 0 else "real",
                "context": max(32768, *o.decode_contexts),
                "class": "agent" if i % 5 else "batch",
                "group": f"group {i % 3}{h}",
                "recipe": recipe,
                "description": f"arm {aid}{h}",
            }
        )
    return {
        "campaign": {"name": o.name, "title": o.title + h, "description": "synthetic" + h},
        "models": [
            {
                "name": "m",
                "quant": "q4",
                "bits_per_weight": 4.5,
                "served_id": "m-q4",
                "description": "small and fast" + h,
            },
            {
                "name": "m",
                "quant": "q8",
                "bits_per_weight": 8.5,
                "served_id": "m-q8",
                "description": "close to fp16" + h,
            },
        ],
        "runtimes": [
            {
                "name": "sim",
                "adapter": "simulator",
                "seeks": "runs anywhere" + h,
                "how": "embedded",
                "cost": "simulated",
            },
            {
                "name": "real",
                "adapter": "llamacpp",
                "seeks": "real numbers" + h,
                "how": "llama-server",
                "cost": "a GPU",
            },
        ],
        "arms": arms,
        "gates": [
            {
                "id": "cache",
                "title": "cache reuses" + h,
                "predicate": "threshold",
                "subjects": [ids[0]],
                "params": {
                    "metric": "reuse",
                    "probe": "cache-probe",
                    "op": ">=",
                    "value": 0.9,
                    "scenarios": ["identical", "append", "tool_turn"],
                },
            },
            {
                "id": "spec",
                "title": "speculation +10%",
                "predicate": "relative_improvement",
                "subjects": [ids[1]],
                "baseline": [ids[0]],
                "params": {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1},
            },
            {
                "id": "Spec",
                "title": "same id but for case",
                "predicate": "relative_improvement",
                "subjects": ids[2:3] or ids[:1],
                "baseline": [ids[0]],
                "params": {"metric": "decode_tps", "probe": "decode", "min_gain": 0.0},
            },
            {
                "id": "blocked",
                "title": "needs hardware",
                "predicate": "threshold",
                "subjects": [ids[-1]],
                "params": {"metric": "decode_tps", "op": ">=", "value": 1.0},
            },
        ],
        "queue": [
            {
                "id": "cache",
                "title": "cache-probe all" + h,
                "arms": ids[:-1],
                "probes": ["cache-probe"],
                "modes": ["canonical", "greedy"],
                "gate": "cache",
            },
            {
                "id": "decode",
                "title": "decode",
                "arms": ids[:-1],
                "probes": ["decode"],
                "contexts": list(o.decode_contexts),
                "gate": "spec",
            },
            {"id": "load", "title": "agent load", "arms": [ids[0]], "probes": ["agent-load"], "contexts": [32768]},
            {
                "id": "hw",
                "title": "needs hardware",
                "arms": [ids[-1]],
                "probes": ["decode"],
                "contexts": [4096],
                "gate": "blocked",
            },
            {
                "id": "later",
                "title": "later: cache-ceiling",
                "arms": ids[:2],
                "probes": ["cache-ceiling"],
                "contexts": [65536 // 2],
            },
        ],
    }


def build(store: Store, o: Options | None = None) -> int:
    """Write the campaign and its rows; return the campaign id. `o.counts` is filled with
    how many rows of each kind were written."""
    o = o or Options()
    rng = random.Random(o.seed)
    spec = parse_campaign(spec_dict(o))
    camp = store.add(CampaignRow(name=o.name, title=spec.campaign.title, spec_json=spec.model_dump_json()))
    cid = camp.id
    ids = [a.id for a in spec.arms]
    sim = {a.id: a.runtime == "sim" for a in spec.arms}
    for a in spec.arms:
        model = spec.model_for(a)
        store.add(
            ArmRow(
                campaign_id=cid,
                arm_id=a.id,
                model=a.model,
                quant=model.quant,
                bits_per_weight=model.bits_per_weight,
                runtime=a.runtime,
                adapter=spec.runtime(a.runtime).adapter,
                context=a.context,
                klass=a.klass,
                group=a.group,
                recipe_json=a.recipe.model_dump_json(),
                simulated=sim[a.id],
            )
        )
    states = {
        "cache": ItemState.DONE,
        "decode": ItemState.DONE,
        "load": ItemState.DONE,
        "hw": ItemState.BLOCKED,
        "later": ItemState.PENDING,
    }
    for pos, item in enumerate(spec.queue):
        reason = "Private compiler is unavailable in this build" + o.hostile if item.key == "hw" else ""
        store.add(
            QueueItemRow(
                campaign_id=cid,
                key=item.key,
                position=pos,
                title=item.title,
                state=states[item.key],
                gate=item.gate,
                reason=reason,
                spec_json=item.model_dump_json(),
            )
        )

    measurements: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    decode_speed = {aid: 40.0 + 7 * i + (60 if i == 1 else 0) for i, aid in enumerate(ids)}

    def attempt(
        item: str,
        arm_id: str,
        state: str = AttemptState.DONE,
        error: str = "",
        repeat: int = 0,
        block: dict[str, Any] | None = None,
    ) -> AttemptRow:
        att = store.new_attempt(cid, item, arm_id, {}, repeat=repeat, block=block)
        served = f"m-{'q8' if spec.arm(arm_id).quant == 'q8' else 'q4'}{o.served_suffix}"
        return store.update(
            AttemptRow,
            att.id,
            state=state,
            error=error,
            served_model=served,
            fingerprint="f1e2d3c4b5a6" if arm_id != ids[2] else "0badf00d0bad",
            identity_json=json.dumps({"served_models": [served], "flags": []}),
            rss_bytes=(2 + ids.index(arm_id)) * 1024**3,
        )

    def probe_run(att: AttemptRow, probe: str, context: int) -> int:
        return store.add(ProbeRunRow(attempt_id=att.id, probe=probe, context=context, state=ProbeRunState.DONE)).id

    def put(
        att: AttemptRow,
        run: int,
        item: str,
        arm_id: str,
        probe: str,
        scenario: str,
        mode: str,
        context: int,
        trial: int,
        metric: str,
        value: float,
        unit: str,
        source: str = "",
    ) -> None:
        measurements.append(
            dict(
                campaign_id=cid,
                attempt_id=att.id,
                probe_run_id=run,
                item_key=item,
                arm_id=arm_id,
                probe=probe,
                scenario=scenario,
                mode=mode,
                context=context,
                trial=trial,
                metric=metric,
                value=value,
                unit=unit,
                source=source,
                simulated=sim[arm_id],
            )
        )

    def answer(run: int, scenario: str, mode: str, trial: int) -> None:
        raw = {"send_ns": 1, "end_ns": 2, "event_ns": [1, 2], "text": o.answer, "usage": {"prompt_tokens": 10}}
        requests.append(
            dict(
                probe_run_id=run,
                scenario=scenario,
                mode=mode,
                trial=trial,
                ok=True,
                error="",
                raw_json=json.dumps(raw, separators=(",", ":")),
            )
        )

    # a failed first attempt of arm 0 on the cache item: kept as history, never read
    attempt("cache", ids[0], AttemptState.FAILED, "server exited before healthy")
    for aid in ids[:-1]:
        att = attempt("cache", aid)
        run = probe_run(att, "cache-probe", 32768)
        modes = ["greedy"] if aid == ids[2] else ["canonical", "greedy"]
        for mode in modes:
            for scen in SCENARIOS:
                for t in range(o.trials):
                    reuse = max(
                        0.0,
                        min(1.0, _REUSE[scen] - (0.15 if aid == ids[3 % len(ids)] else 0) + rng.uniform(-0.02, 0.02)),
                    )
                    put(
                        att,
                        run,
                        "cache",
                        aid,
                        "cache-probe",
                        scen,
                        mode,
                        32768,
                        t,
                        "reuse",
                        reuse,
                        "ratio",
                        "usage.prompt_tokens_details.cached_tokens",
                    )
                    put(
                        att,
                        run,
                        "cache",
                        aid,
                        "cache-probe",
                        scen,
                        mode,
                        32768,
                        t,
                        "expected_reuse",
                        _REUSE[scen],
                        "ratio",
                        "server-tokenizer",
                    )
                    put(
                        att,
                        run,
                        "cache",
                        aid,
                        "cache-probe",
                        scen,
                        mode,
                        32768,
                        t,
                        "ttft_s",
                        0.05 + (1 - reuse) * 0.5,
                        "s",
                    )
                    put(
                        att,
                        run,
                        "cache",
                        aid,
                        "cache-probe",
                        scen,
                        mode,
                        32768,
                        t,
                        "prompt_tokens",
                        4000,
                        "tokens",
                        "usage.prompt_tokens",
                    )
                for t in range(min(o.requests_per_probe, o.trials)):
                    answer(run, scen, mode, t)
            if aid == ids[1]:
                put(
                    att, run, "cache", aid, "cache-probe", "", mode, 32768, 0, "draft_tokens", 400, "tokens", "/metrics"
                )
                put(
                    att,
                    run,
                    "cache",
                    aid,
                    "cache-probe",
                    "",
                    mode,
                    32768,
                    0,
                    "accepted_tokens",
                    320,
                    "tokens",
                    "/metrics",
                )

    def decode_run(att: AttemptRow, aid: str, factor: float) -> None:
        for ctx in o.decode_contexts:
            run = probe_run(att, "decode", ctx)
            for mode in ("canonical", "greedy"):
                base = factor * decode_speed[aid] * (1.15 if mode == "greedy" else 1.0) * (4096 / max(ctx, 4096)) ** 0.2
                for t in range(o.trials):
                    put(
                        att,
                        run,
                        "decode",
                        aid,
                        "decode",
                        "decode",
                        mode,
                        ctx,
                        t,
                        "decode_tps",
                        base * rng.uniform(0.97, 1.03),
                        "tok/s",
                        "server",
                    )
                    put(att, run, "decode", aid, "decode", "decode", mode, ctx, t, "ttft_s", 0.2 * ctx / 4096, "s")
                    put(att, run, "decode", aid, "decode", "decode", mode, ctx, t, "e2e_s", 1.0 + 0.2 * ctx / 4096, "s")
                put(att, run, "decode", aid, "decode", "decode", mode, ctx, -1, "decode_tps_median", base, "tok/s")
                for t in range(min(o.requests_per_probe, o.trials)):
                    answer(run, "decode", mode, t)

    # decode in blocks: each arm one server run per block, in a shuffled order, each run
    # a little faster or slower than the last, as a real server's restarts are
    for block in range(o.decode_blocks):
        order = ids[:-1]
        rng.shuffle(order)
        for place, aid in enumerate(order):
            shared = {
                "block_order": place,
                "block_id": f"decode/b{block}/5e771165",
                "settings_hash": "5e7711655e771165",
                "recipe_hash": f"recipe-{aid}",
            }
            decode_run(attempt("decode", aid, repeat=block, block=shared), aid, rng.lognormvariate(0.0, 0.03))
    att = attempt("load", ids[0])
    run = probe_run(att, "agent-load", 32768)
    for c in range(o.agent_conversations):
        for t in range(o.agent_turns):
            put(
                att,
                run,
                "load",
                ids[0],
                "agent-load",
                f"c{c}-t{t}",
                "canonical",
                32768,
                t,
                "ttft_s",
                1.5 + 0.6 * t * (c + 1) / o.agent_conversations,
                "s",
            )
            answer(run, f"c{c}-t{t}", "canonical", t)
    for t in range(o.agent_turns):
        put(att, run, "load", ids[0], "agent-load", f"baseline-t{t}", "canonical", 32768, t, "ttft_s", 1.4, "s")
    put(att, run, "load", ids[0], "agent-load", "load", "canonical", 32768, -1, "queue_depth_max", 2, "requests")
    for k in range(40):
        samples.append(dict(probe_run_id=run, series="queue_depth", t_s=k * 0.5, value=float(min(k // 6, 2))))
        samples.append(dict(probe_run_id=run, series="slots_busy", t_s=k * 0.5, value=2.0))
    attempt("hw", ids[-1], AttemptState.BLOCKED, "Private compiler is unavailable in this build" + o.hostile)

    bulk_insert(store, measurements, requests, samples)
    _verdicts(store, cid, spec, ids, o)
    o.counts.update(measurements=len(measurements), requests=len(requests), samples=len(samples))
    return cid


def bulk_insert(
    store: Store, measurements: list[dict[str, Any]], requests: list[dict[str, Any]], samples: list[dict[str, Any]]
) -> None:
    """One executemany per table, in one transaction: how a benchmark fills 200,000 rows
    in seconds (the flows commit one row at a time, on purpose, for crash safety)."""
    with store.engine.begin() as conn:
        for table, rows in ((MeasurementRow, measurements), (RequestRow, requests), (SampleRow, samples)):
            if rows:
                conn.execute(table.__table__.insert(), rows)  # type: ignore[attr-defined]


def _verdicts(store: Store, cid: int, spec: CampaignSpec, ids: list[str], o: Options) -> None:
    h = o.hostile
    store.add(VerdictRow(campaign_id=cid, gate_id="cache", verdict=Verdict.PENDING, reason="no canonical reuse yet"))
    store.add(
        VerdictRow(
            campaign_id=cid,
            gate_id="cache",
            verdict=Verdict.PASS,
            reason=f"reuse >= 0.90 holds: {ids[0]} identical 1.00{h}",
            evidence_json=json.dumps(
                {
                    "metric": "reuse",
                    "op": ">=",
                    "threshold": 0.9,
                    "observed": {ids[0]: {"identical": 1.0, "append": 0.95}},
                }
            ),
        )
    )
    # the real predicate on the rows just written, so the page shows evidence as gates write it
    from gates.engine import evaluate

    result = evaluate(spec.gate("spec"), store.measurements_frame(cid))
    store.add(
        VerdictRow(
            campaign_id=cid,
            gate_id="spec",
            verdict=result.verdict,
            reason=result.reason,
            evidence_json=json.dumps(result.evidence, default=str, sort_keys=True),
        )
    )
    store.add(VerdictRow(campaign_id=cid, gate_id="Spec", verdict=Verdict.CONTROL, reason="control: no advantage > 5%"))
    store.add(
        VerdictRow(
            campaign_id=cid,
            gate_id="blocked",
            verdict=Verdict.BLOCKED,
            reason="Blocked: 'Private compiler is unavailable'" + h,
        )
    )
