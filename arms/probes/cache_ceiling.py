"""cache-ceiling: the prompt length at which prefix reuse dies.

Identical-prompt pairs (prime, then the same prompt again) at growing lengths: doubling
from `start_tokens` until reuse falls below `min_reuse` or the context is reached, then a
bisection between the last length that reused and the first that did not, down to
`resolution_tokens`. "Our prefix cache died at token 1,067" is this probe's output.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel, Field

from arms.metrics import extract_cached_tokens, prompt_tokens, record_payload, reuse
from arms.probes.base import ProbeTarget, Sink, chat
from arms.probes.prompts import conversation
from campaign.states import Mode


class CacheCeilingParams(BaseModel):
    start_tokens: int = Field(default=256, ge=16)
    max_tokens_prompt: int | None = Field(default=None, description="upper bound; default = the arm's context")
    min_reuse: float = Field(default=0.5, gt=0, le=1)
    resolution_tokens: int = Field(default=64, ge=1)
    max_tokens: int = Field(default=4, ge=1)
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    context: int = 0


async def _reuse_at(http, target: ProbeTarget, sink: Sink, length: int, mode: Mode, salt: str, params: CacheCeilingParams) -> float | None:
    system = min(64, length // 4)
    messages = conversation(system, length - system, f"{salt}-{length}")
    prime = await chat(http, target, messages, mode, params.max_tokens)
    sink.request(prime, scenario=f"len{length}:prime", mode=mode)
    record = await chat(http, target, messages, mode, params.max_tokens)
    sink.request(record, scenario=f"len{length}", mode=mode)
    if not (prime.ok and record.ok):
        sink.measurement(metric="errors", value=1, unit="count", mode=mode, scenario=f"len{length}", context=params.context, source=(record.error or prime.error or ""))
        return None
    payload = record_payload(record)
    cached, field = extract_cached_tokens(payload, prefer=target.adapter.cached_tokens_field)
    prompt = prompt_tokens(payload)
    value = reuse(cached, prompt)
    if value is not None:
        sink.measurement(metric="reuse", value=value, unit="ratio", mode=mode, scenario=f"len{length}", context=params.context, source=field)
        sink.measurement(metric="prompt_tokens", value=prompt or 0, unit="tokens", mode=mode, scenario=f"len{length}", context=params.context, source="usage.prompt_tokens")
    return value


async def run(target: ProbeTarget, sink: Sink, params: CacheCeilingParams) -> None:
    limit = params.max_tokens_prompt or (int(params.context * 0.9) if params.context else 32768)
    async with target.client(2) as http:
        for mode in params.modes:
            salt = f"ceiling-{uuid.uuid4().hex[:8]}-{mode}"
            good, bad = 0, None
            length = min(params.start_tokens, limit)
            while True:
                value = await _reuse_at(http, target, sink, length, mode, salt, params)
                if value is None:
                    bad = length
                    break
                if value < params.min_reuse:
                    bad = length
                    break
                good = length
                if length >= limit:
                    break
                length = min(length * 2, limit)
            while bad is not None and bad - good > params.resolution_tokens:
                mid = (good + bad) // 2
                value = await _reuse_at(http, target, sink, mid, mode, salt, params)
                if value is not None and value >= params.min_reuse:
                    good = mid
                else:
                    bad = mid
            sink.measurement(metric="reuse_ceiling_tokens", value=good, unit="tokens", mode=mode, scenario="summary", context=params.context, trial=-1, source="largest prompt that reused")
            if bad is not None:
                sink.measurement(metric="reuse_dies_at_tokens", value=bad, unit="tokens", mode=mode, scenario="summary", context=params.context, trial=-1, source="smallest prompt that did not")
            sink.measurement(metric="reuse_holds_to_limit", value=float(bad is None), unit="bool", mode=mode, scenario="summary", context=params.context, trial=-1, source=f"limit {limit}")
