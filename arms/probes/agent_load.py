"""agent-load: N concurrent agent conversations x T turns, the workload of seed 000.

Turn 1 is a shared system prompt plus a task unique to the conversation; every later turn
appends the model's reply and a block of synthetic tool output, so each conversation's
history grows turn over turn. TTFT is recorded per conversation and turn, queue depth is
sampled every 0.5 s (through the single-stream baseline too, so its samples show the
queue really was empty), and cache counters are taken as deltas over the load -- so the
stored numbers can say *which* mechanism (slot affinity or the prefix cache) kept TTFT
flat. A single-stream run of the same shape is measured beside it.
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from typing import Any

import httpx
from pydantic import BaseModel, Field

from arms.metrics import (
    RequestRecord,
    decode_tps,
    extract_cached_tokens,
    prompt_tokens,
    record_payload,
    tpot_s,
    ttft_s,
)
from arms.probes.base import ProbeTarget, QueueSampler, Sink, chat, read_counters, record_counter_deltas
from arms.probes.failures import record_errors, record_failure
from arms.probes.prompts import words
from campaign.states import Mode


class AgentLoadParams(BaseModel):
    conversations: int = Field(default=3, ge=1, le=1024)
    turns: int = Field(default=10, ge=1, le=200)
    system_tokens: int = Field(default=2000, ge=0, description="shared system prompt (seed 000: ~2K)")
    task_tokens: int = Field(default=4000, ge=1, description="unique task per conversation (seed 000: ~4K)")
    turn_tokens: int = Field(default=1600, ge=0, description="tool output appended each later turn (~1.6K)")
    max_tokens: int = Field(default=200, ge=1, description="output tokens per turn (seed 000: up to 200)")
    baseline: bool = Field(default=True, description="also run one conversation alone, same shape")
    turn_timeout_s: float = Field(default=900.0, gt=0, description="a turn slower than this is a timeout (seed 000: 15 min)")
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    context: int = 0


def turn_scenario(conversation: int, turn: int) -> str:
    return f"c{conversation}-t{turn}"


def baseline_scenario(turn: int) -> str:
    return f"baseline-t{turn}"


async def _conversation(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    params: AgentLoadParams,
    mode: Mode,
    system: str,
    salt: str,
    index: int,
    sink: Sink,
    scenario_of: Any,
) -> list[RequestRecord]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Task: " + words(params.task_tokens, f"{salt}/task{index}")},
    ]
    records = []
    for turn in range(params.turns):
        record = await chat(
            http, target, messages, mode, params.max_tokens,
            read_timeout=target.read_timeout or params.turn_timeout_s, total_timeout=params.turn_timeout_s,
        )
        record.label = {"conversation": index, "turn": turn}
        scenario = scenario_of(index, turn)
        sink.request(record, scenario=scenario, mode=mode, trial=turn)
        _emit_turn(sink, target, record, scenario, mode, params.context, turn)
        records.append(record)
        if not record.ok:
            # The conversation goes on, as an agent harness retries a failed step: the next
            # turn re-sends this history. Ending it here would drop the later turns of the
            # arm that fails most, and flatter its latencies; the failure stays counted.
            continue
        messages.append({"role": "assistant", "content": record.text.strip() or "ok"})
        messages.append(
            {"role": "user", "content": "Tool output: " + words(params.turn_tokens, f"{salt}/tool{index}/{turn}")}
        )
    return records


def _emit_turn(sink: Sink, target: ProbeTarget, record: RequestRecord, scenario: str, mode: Mode, context: int, turn: int) -> None:
    if not record.ok:
        record_failure(sink, record, mode=mode, scenario=scenario, context=context, trial=turn)
        return
    ttft = ttft_s(record)
    if ttft is not None:
        sink.measurement(metric="ttft_s", value=ttft, unit="s", mode=mode, scenario=scenario, context=context, trial=turn)
    payload = record_payload(record)
    cached, field = extract_cached_tokens(payload, prefer=target.adapter.cached_tokens_field)
    prompt = prompt_tokens(payload)
    if prompt is not None:
        sink.measurement(metric="prompt_tokens", value=prompt, unit="tokens", mode=mode, scenario=scenario, context=context, trial=turn, source="usage.prompt_tokens")
    if cached is not None:
        sink.measurement(metric="cached_tokens", value=cached, unit="tokens", mode=mode, scenario=scenario, context=context, trial=turn, source=field)
    rate, source = decode_tps(record)
    if rate is not None:
        sink.measurement(metric="decode_tps", value=rate, unit="tok/s", mode=mode, scenario=scenario, context=context, trial=turn, source=source)
        sink.measurement(metric="tpot_s", value=tpot_s(record)[0], unit="s", mode=mode, scenario=scenario, context=context, trial=turn, source=source)


def _later_turns(records: list[list[RequestRecord]]) -> list[float]:
    return [t for conv in records for r in conv[1:] if (t := ttft_s(r)) is not None]


def _turn_medians(records: list[list[RequestRecord]], turns: int) -> list[float | None]:
    out: list[float | None] = []
    for turn in range(turns):
        values = [t for conv in records if len(conv) > turn and (t := ttft_s(conv[turn])) is not None]
        out.append(statistics.median(values) if values else None)
    return out


def _summaries(sink: Sink, records: list[list[RequestRecord]], params: AgentLoadParams, mode: Mode, prefix: str) -> None:
    """Derived numbers (trial -1 marks them as summaries, not samples)."""
    later = _later_turns(records)
    medians = _turn_medians(records, params.turns)
    ctx = params.context

    def put(metric: str, value: float | None, unit: str) -> None:
        if value is not None:
            sink.measurement(metric=f"{prefix}{metric}", value=value, unit=unit, mode=mode, scenario="summary", context=ctx, trial=-1)

    put("ttft_later_median_s", statistics.median(later) if later else None, "s")
    put("ttft_later_max_s", max(later) if later else None, "s")
    put("ttft_first_turn_s", medians[0] if medians else None, "s")
    second = next((m for m in medians[1:2] if m is not None), None)
    last = next((m for m in reversed(medians[1:]) if m is not None), None)
    put("ttft_second_turn_s", second, "s")
    put("ttft_last_turn_s", last, "s")
    if second and last:
        put("ttft_growth_ratio", last / second, "x")
    # each later turn's TTFT beside its median: the samples a gate's n and interval come
    # from (`gates.compare` reads `<x>_median<unit>` through `<x><unit>`)
    for i, value in enumerate(later):
        sink.measurement(metric=f"{prefix}ttft_later_s", value=value, unit="s", mode=mode, scenario="summary", context=ctx, trial=i)
    # requests, failures by kind (timeouts, HTTP errors, turns not run after stalls), error rate
    record_errors(sink, [r for conv in records for r in conv], mode=mode, scenario="summary", context=ctx, prefix=prefix)


async def run(target: ProbeTarget, sink: Sink, params: AgentLoadParams) -> None:
    run_id = uuid.uuid4().hex[:8]
    async with target.client(params.conversations + 2) as http:
        for mode in params.modes:
            salt = f"agent-{run_id}-{mode}"
            system = words(params.system_tokens, f"{salt}/system")
            before = await read_counters(http, target)
            async with QueueSampler(http, target, sink, phase="load") as sampler:
                records = await asyncio.gather(
                    *(
                        _conversation(http, target, params, mode, system, salt, c, sink, turn_scenario)
                        for c in range(params.conversations)
                    )
                )
            await record_counter_deltas(http, target, sink, before, mode=mode, scenario="load", context=params.context)
            sampler.record(mode=mode, scenario="load", context=params.context)
            _summaries(sink, list(records), params, mode, prefix="")
            if params.baseline:
                base_salt = f"{salt}-single"
                base_system = words(params.system_tokens, f"{base_salt}/system")
                before = await read_counters(http, target)
                async with QueueSampler(http, target, sink, phase="baseline") as base_sampler:
                    single = await _conversation(http, target, params, mode, base_system, base_salt, 0, sink, lambda _c, t: baseline_scenario(t))
                await record_counter_deltas(http, target, sink, before, mode=mode, scenario="baseline", context=params.context)
                base_sampler.record(mode=mode, scenario="baseline", context=params.context)
                _summaries(sink, [single], params, mode, prefix="baseline_")


def turn_records(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat record per conversation turn from a MemorySink's raw requests (for JSON)."""
    from arms.metrics import RequestRecord as R

    out = []
    for raw in requests:
        label = raw.get("label") or {}
        if "turn" not in label:
            continue
        rec = R(**{k: v for k, v in raw.items() if k in R.__dataclass_fields__})
        payload = record_payload(rec)
        cached, field = extract_cached_tokens(payload)
        out.append(
            {
                "phase": "baseline" if str(raw.get("scenario", "")).startswith("baseline") else "load",
                "conversation": label["conversation"],
                "turn": label["turn"],
                "ttft_s": ttft_s(rec),
                "decode_tps": decode_tps(rec)[0],
                "prompt_tokens": prompt_tokens(payload),
                "cached_tokens": cached,
                "cached_tokens_source": field,
                "error": rec.error,
            }
        )
    return out
