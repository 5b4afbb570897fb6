"""decode: sustained decode rate with the context filled to a given size.

The prompt fills the context (leaving room for the output), then `max_tokens` are
generated; `trials` timed requests with the same prompt, so that after the first the
prefill is reused and the wall clock goes to decode. (A campaign file spells `trials` as
`repeats`, its key from before the name was taken by the queue item's interleaved
attempts; `DecodeParams` reads both.) The median and the
spread are stored beside every trial.

Every trial should generate exactly `max_tokens`, or rates at different lengths would be
compared: the probe sends `ignore_eos` and `min_tokens = max_tokens` (llama.cpp honours
the first, vLLM and SGLang both), and a trial whose server-reported completion_tokens
differs is stored as `short_trial` (its token count), never as a decode rate.
`warmup` untimed trials run first (connection, prefill, caches); they are stored under
scenario `decode:warmup`, kind warm-up (trial i), which no median or gate reads.

The run's first answered request (a warm-up, where there is one) is held to floors no
working server falls below (`arms.probes.pace`: a decode rate of 2 tok/s; a first token
within 5 s plus the prompt at 10 tok/s). Under one, the run's output warns that the server
is far slower than it should be (something else holding its cores, say); nothing is
stored for it, so no verdict changes.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from arms.measures import (
    SOURCE_SERVER,
    RequestRecord,
    completion_tokens,
    decode_tps,
    distribution,
    e2e_s,
    record_payload,
    tpot_s,
    ttft_s,
)
from arms.probes import pace
from arms.probes.base import ProbeTarget, Sink, chat
from arms.probes.counters import read_counters, record_counter_deltas
from arms.probes.failures import record_errors, record_failure
from arms.probes.prompts import sized_conversation
from campaign.core import metrics
from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import Mode, SampleKind

WARMUP_SCENARIO = "decode:warmup"


class DecodeParams(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    contexts: list[int] = Field(min_length=1)
    max_tokens: int = Field(
        default=64, ge=2, description="output tokens per timed request, all of them generated (ignore_eos)"
    )
    # file key `repeats` (campaign files keep it); `trials` in code, as it counts timed
    # requests in one probe run, not the item's interleaved attempts (its `repeats`)
    trials: int = Field(default=3, ge=1, alias="repeats", description="timed requests per context and mode")
    fill: float = Field(default=0.8, gt=0, le=1, description="share of the context the prompt fills")
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    warmup: int = Field(
        default=1, ge=0, description="untimed trials before the timed ones, stored but never read by medians or gates"
    )
    ignore_eos: bool = Field(default=True, description="ask the server to generate past end-of-sequence")
    min_tokens: int | None = Field(
        default=None, ge=0, description="no end-of-sequence before this many tokens (default: max_tokens)"
    )

    @model_validator(mode="after")
    def _min_within_max(self) -> DecodeParams:
        if self.min_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens {self.min_tokens} is above max_tokens {self.max_tokens}")
        return self

    def length_fields(self) -> dict[str, Any]:
        """The request fields that make every trial generate exactly max_tokens."""
        floor = self.max_tokens if self.min_tokens is None else self.min_tokens
        return {"ignore_eos": self.ignore_eos, **({"min_tokens": floor} if floor else {})}

    def request_tokens(self) -> int:
        """The most tokens one request holds: `fill` of the largest context, and the reply."""
        return int(max(self.contexts) * self.fill) + self.max_tokens


def item_values(spec: CampaignSpec, item: QueueItem, context: int) -> dict[str, Any]:
    """A run fills the one context of the item it is run at, generating the campaign's
    `default_max_tokens` unless the item overrides it."""
    return {"max_tokens": spec.campaign.default_max_tokens, "contexts": [context]}


async def run(target: ProbeTarget, sink: Sink, params: DecodeParams) -> None:
    run_id = uuid.uuid4().hex[:8]
    judged = False  # the run's first answered request is held to `pace`'s floors, once
    async with target.client(2) as http:
        for context in params.contexts:
            size = max(16, int(context * params.fill) - params.max_tokens - 16)
            for mode in params.modes:
                # `size` is in the server's tokens where it has a tokenizer; the source says how
                sized = await sized_conversation(http, size, f"decode-{run_id}-{context}-{mode}", system_cap=256)
                messages = sized.messages
                sink.measurement(
                    metric=metrics.PROMPT_TOKENS_TARGET,
                    value=size,
                    mode=mode,
                    scenario="decode",
                    context=context,
                    kind=SampleKind.SUMMARY,
                    source=sized.source,
                )
                rates: list[float | None] = []
                per_request: dict[str, float] = {}
                warmed: list[RequestRecord] = []
                for i in range(params.warmup):
                    await _trial(
                        http,
                        target,
                        sink,
                        params,
                        messages,
                        mode,
                        context,
                        WARMUP_SCENARIO,
                        i,
                        None,
                        warmed,
                        kind=SampleKind.WARMUP,
                    )
                judged = judged or pace.judge_first(sink, warmed, size)
                before = await read_counters(http, target)
                timed: list[RequestRecord] = []
                for trial in range(params.trials):
                    rates.append(
                        await _trial(
                            http, target, sink, params, messages, mode, context, "decode", trial, per_request, timed
                        )
                    )
                judged = judged or pace.judge_first(sink, timed, size)  # without a warm-up: the first timed request
                record_errors(sink, timed, mode=mode, scenario="decode", context=context)
                # draft/accepted tokens and the rest, as deltas over this context's trials
                deltas = await record_counter_deltas(
                    http, target, sink, before, mode=mode, scenario="decode", context=context
                )
                for name, value in per_request.items():  # runtimes that report drafting per response only
                    if name not in deltas:
                        sink.measurement(
                            metric=name,
                            value=value,
                            unit=target.telemetry.counter_unit(name),
                            mode=mode,
                            scenario="decode",
                            context=context,
                            source="per-request sum",
                        )
                stats = distribution(rates)
                if stats:
                    sink.measurement(
                        metric=metrics.DECODE_TPS_MEDIAN,
                        value=stats["median"],
                        mode=mode,
                        scenario="decode",
                        context=context,
                        kind=SampleKind.SUMMARY,
                    )
                    sink.measurement(
                        metric=metrics.DECODE_TPS_SPREAD,
                        value=stats["max"] - stats["min"],
                        mode=mode,
                        scenario="decode",
                        context=context,
                        kind=SampleKind.SUMMARY,
                    )


async def _trial(
    http: Any,
    target: ProbeTarget,
    sink: Sink,
    params: DecodeParams,
    messages: list[dict[str, Any]],
    mode: Mode,
    context: int,
    scenario: str,
    trial: int,
    per_request: dict[str, float] | None,
    sent: list[RequestRecord] | None = None,
    kind: SampleKind = SampleKind.SAMPLE,
) -> float | None:
    """One decode request and its rows; its decode rate, or None when it failed or was
    short. `per_request` sums per-response draft counts (None: a warm-up, not counted);
    `sent` collects the request for the caller (the cell's requests, for its error rate;
    the warm-ups apart, for the pace check)."""
    record = await chat(http, target, messages, mode, params.max_tokens, extra=params.length_fields())
    if sent is not None:
        sent.append(record)
    sink.request(record, scenario=scenario, mode=mode, trial=trial)
    if not record.ok:
        record_failure(sink, record, mode=mode, scenario=scenario, context=context, trial=trial, row_kind=kind)
        return None
    if per_request is not None:
        for name, value in target.telemetry.request_counters(record_payload(record)).items():
            per_request[name] = per_request.get(name, 0.0) + value
    first = ttft_s(record)
    if first is not None:  # prefill is measured whatever the reply's length
        sink.measurement(
            metric=metrics.TTFT_S, value=first, mode=mode, scenario=scenario, context=context, trial=trial, kind=kind
        )
    generated, counted_by = completion_tokens(record)
    if counted_by == SOURCE_SERVER and generated != params.max_tokens:
        sink.measurement(
            metric=metrics.SHORT_TRIAL,
            value=generated or 0,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=trial,
            kind=kind,
            source=f"completion_tokens {generated} of max_tokens {params.max_tokens}, finish_reason {record.finish_reason}",
        )
        return None
    rate, source = decode_tps(record)
    tpot = tpot_s(record)[0]  # from the same window as the rate: both or neither
    if rate is not None and tpot is not None:
        sink.measurement(
            metric=metrics.DECODE_TPS,
            value=rate,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=trial,
            kind=kind,
            source=source,
        )
        sink.measurement(
            metric=metrics.TPOT_S,
            value=tpot,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=trial,
            kind=kind,
            source=source,
        )
    total = e2e_s(record)
    if total is not None:
        sink.measurement(
            metric=metrics.E2E_S, value=total, mode=mode, scenario=scenario, context=context, trial=trial, kind=kind
        )
    return rate
