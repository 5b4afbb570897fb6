"""decode: sustained decode rate with the context filled to a given size.

The prompt fills the context (leaving room for the output), then `max_tokens` are
generated; repeated `repeats` times with the same prompt, so that after the first
repeat the prefill is reused and the wall clock goes to decode. The median and the
spread are stored beside every trial.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel, Field

from arms.metrics import decode_tps, e2e_s, record_payload, summarize, ttft_s
from arms.probes.base import ProbeTarget, Sink, chat, read_counters, record_counter_deltas
from arms.probes.prompts import conversation
from campaign.states import Mode


class DecodeParams(BaseModel):
    contexts: list[int] = Field(min_length=1)
    max_tokens: int = Field(default=64, ge=2)
    repeats: int = Field(default=3, ge=1)
    fill: float = Field(default=0.8, gt=0, le=1, description="share of the context the prompt fills")
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])


async def run(target: ProbeTarget, sink: Sink, params: DecodeParams) -> None:
    run_id = uuid.uuid4().hex[:8]
    async with target.client(2) as http:
        for context in params.contexts:
            size = max(16, int(context * params.fill) - params.max_tokens - 16)
            for mode in params.modes:
                messages = conversation(min(256, size // 4), size - min(256, size // 4), f"decode-{run_id}-{context}-{mode}")
                rates: list[float | None] = []
                per_request: dict[str, float] = {}
                before = await read_counters(http, target)
                for trial in range(params.repeats):
                    record = await chat(http, target, messages, mode, params.max_tokens)
                    sink.request(record, scenario="decode", mode=mode, trial=trial)
                    if not record.ok:
                        sink.measurement(metric="errors", value=1, unit="count", mode=mode, scenario="decode", context=context, trial=trial, source=record.error or "")
                        continue
                    for name, value in target.adapter.request_counters(record_payload(record)).items():
                        per_request[name] = per_request.get(name, 0.0) + value
                    rate, source = decode_tps(record)
                    rates.append(rate)
                    if rate is not None:
                        sink.measurement(metric="decode_tps", value=rate, unit="tok/s", mode=mode, scenario="decode", context=context, trial=trial, source=source)
                    for metric, value in (("ttft_s", ttft_s(record)), ("e2e_s", e2e_s(record))):
                        if value is not None:
                            sink.measurement(metric=metric, value=value, unit="s", mode=mode, scenario="decode", context=context, trial=trial)
                # draft/accepted tokens and the rest, as deltas over this context's repeats
                deltas = await record_counter_deltas(http, target, sink, before, mode=mode, scenario="decode", context=context)
                for name, value in per_request.items():  # runtimes that report drafting per response only
                    if name not in deltas:
                        sink.measurement(metric=name, value=value, unit="tokens", mode=mode, scenario="decode", context=context, source="per-request sum")
                stats = summarize(rates)
                if stats:
                    sink.measurement(metric="decode_tps_median", value=stats["median"], unit="tok/s", mode=mode, scenario="decode", context=context, trial=-1)
                    sink.measurement(metric="decode_tps_spread", value=stats["max"] - stats["min"], unit="tok/s", mode=mode, scenario="decode", context=context, trial=-1)
