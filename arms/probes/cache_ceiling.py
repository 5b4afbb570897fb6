"""cache-ceiling: the prompt length at which prefix reuse dies.

Identical-prompt pairs (prime, then the same prompt again) at growing lengths: doubling
from `start_tokens` until reuse falls below `min_reuse` or the context is reached, then a
bisection between the last length that reused and the first that did not, down to
`resolution_tokens`. "Our prefix cache died at token 1,067" is this probe's output.

A request that fails is not a cache that died: a failed pair is tried once more, and if it
fails again the search stops there and says so (`ceiling_search_error_at`, with the error
kind), never recording a death. Sizes reported in tokens are the server's prompt_tokens of
those requests; only when the server reports none do they fall back to the prompt's sizing
count, and the source says which.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from arms.measures import extract_cached_tokens, flag_reuse_source, prompt_tokens, record_payload, reuse
from arms.probes.base import ProbeTarget, Sink, chat
from arms.probes.failures import NOT_RUN, record_errors, record_failure
from arms.probes.prompts import sized_conversation
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind


class CacheCeilingParams(BaseModel):
    start_tokens: int = Field(default=256, ge=16, description="the first prompt length tried, doubled until reuse dies")
    max_tokens_prompt: int | None = Field(default=None, description="upper bound; default = the arm's context")
    min_reuse: float = Field(default=0.5, gt=0, le=1, description="reuse at or above this counts as reused")
    resolution_tokens: int = Field(default=64, ge=1, description="the bisection stops when the bounds are this close")
    max_tokens: int = Field(default=4, ge=1, description="output tokens per request (the prompt is what is measured)")
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    context: int = 0


@dataclass
class _Point:
    """One length tried: its reuse, the prompt's size in tokens (and where that count came
    from), or the kind of error that kept it from being measured."""

    length: int
    reuse: float | None = None
    tokens: int | None = None
    tokens_source: str = ""
    error: str = ""


async def _reuse_at(
    http,
    target: ProbeTarget,
    sink: Sink,
    length: int,
    mode: Mode,
    salt: str,
    params: CacheCeilingParams,
    sent: list[Any],
) -> _Point:
    sized = await sized_conversation(http, length, f"{salt}-{length}", system_cap=64)  # `length` in tokens
    messages = sized.messages
    sink.measurement(
        metric=metrics.PROMPT_TOKENS_TARGET,
        value=length,
        mode=mode,
        scenario=f"len{length}",
        context=params.context,
        source=sized.source,
    )
    scenario = f"len{length}"
    for attempt in range(2):  # one failed pair is tried again: a single 503 is no ceiling
        record = await chat(http, target, messages, mode, params.max_tokens)
        sent.append(record)
        sink.request(record, scenario=f"{scenario}:prime", mode=mode, trial=attempt)
        if record.ok:
            record = await chat(http, target, messages, mode, params.max_tokens)
            sent.append(record)
            sink.request(record, scenario=scenario, mode=mode, trial=attempt)
        if record.ok:
            break
        kind = record_failure(sink, record, mode=mode, scenario=scenario, context=params.context, trial=attempt)
        if kind == NOT_RUN:
            break
    if not record.ok:
        return _Point(length, error=kind)
    payload = record_payload(record)
    cached, field = extract_cached_tokens(payload, prefer=target.cached_field)
    prompt = prompt_tokens(payload)
    point = _Point(length, reuse(cached, prompt), prompt, _prompt_source(payload), "")
    if prompt is None:  # the server counts nothing: the sizing count stands in, labelled
        point.tokens, point.tokens_source = sized.tokens, f"{sized.source} (the server reported no prompt_tokens)"
    if point.reuse is None:
        point.error = "no cached-token count from the server"
        return point
    sink.measurement(
        metric=metrics.REUSE,
        value=point.reuse,
        mode=mode,
        scenario=scenario,
        context=params.context,
        source=flag_reuse_source(field, point.reuse),
    )
    if point.tokens is not None:  # no count at all: nothing stored, never a 0 that reads as one
        sink.measurement(
            metric=metrics.PROMPT_TOKENS,
            value=point.tokens,
            mode=mode,
            scenario=scenario,
            context=params.context,
            source=point.tokens_source,
        )
    return point


def _prompt_source(payload: dict) -> str:
    """Which server field `prompt_tokens(payload)` read."""
    if isinstance((payload.get("usage") or {}).get("prompt_tokens"), int):
        return "usage.prompt_tokens"
    return "timings.prompt_n + timings.cache_n"


async def run(target: ProbeTarget, sink: Sink, params: CacheCeilingParams) -> None:
    limit = params.max_tokens_prompt or (int(params.context * 0.9) if params.context else 32768)
    async with target.client(2) as http:
        for mode in params.modes:
            salt = f"ceiling-{uuid.uuid4().hex[:8]}-{mode}"
            good: _Point | None = None  # the largest length that reused
            bad: _Point | None = None  # the smallest length whose reuse died
            stopped: _Point | None = None  # the length whose requests failed: search over
            length = min(params.start_tokens, limit)
            sent: list[Any] = []  # every request of the search, for its error rate
            while True:
                point = await _reuse_at(http, target, sink, length, mode, salt, params, sent)
                if point.error or point.reuse is None:  # no reuse without an error (`_reuse_at`)
                    stopped = point
                    break
                if point.reuse < params.min_reuse:
                    bad = point
                    break
                good = point
                if length >= limit:
                    break
                length = min(length * 2, limit)
            while (
                bad is not None
                and stopped is None
                and bad.length - (good.length if good else 0) > params.resolution_tokens
            ):
                point = await _reuse_at(
                    http, target, sink, ((good.length if good else 0) + bad.length) // 2, mode, salt, params, sent
                )
                if point.error or point.reuse is None:
                    stopped = point
                elif point.reuse >= params.min_reuse:
                    good = point
                else:
                    bad = point
            _summary(sink, params, mode, limit, good, bad, stopped)
            record_errors(sink, sent, mode=mode, scenario="summary", context=params.context)


def _size_of(point: _Point, metric: Metric, what: str) -> tuple[Metric, float, str]:
    """A point's prompt size as measured, or, when nothing counted it, the size the search
    asked for, labelled as such (never 0)."""
    if point.tokens is not None:
        return metric, point.tokens, f"{what}: {point.tokens_source}"
    return metric, point.length, f"{what}: the size asked for (no count of its tokens)"


def _summary(
    sink: Sink,
    params: CacheCeilingParams,
    mode: Mode,
    limit: int,
    good: _Point | None,
    bad: _Point | None,
    stopped: _Point | None,
) -> None:
    """What the search found, in the server's tokens; nothing is claimed that was not seen:
    no ceiling before any length was measured, no death where requests failed."""

    def put(metric: Metric, value: float, source: str) -> None:
        sink.measurement(
            metric=metric,
            value=value,
            mode=mode,
            scenario="summary",
            context=params.context,
            kind=SampleKind.SUMMARY,
            source=source,
        )

    if good is not None:
        put(*_size_of(good, metrics.REUSE_CEILING_TOKENS, "largest prompt that reused"))
    elif bad is not None:
        put(metrics.REUSE_CEILING_TOKENS, 0, f"no prompt reused, from {params.start_tokens} tokens on")
    if bad is not None:
        put(*_size_of(bad, metrics.REUSE_DIES_AT_TOKENS, "smallest prompt that did not reuse"))
    if stopped is not None:
        # the failed request has no server count: the size asked for, in sizing tokens
        put(
            metrics.CEILING_SEARCH_ERROR_AT,
            stopped.length,
            f"{stopped.error}; the search stopped on this error, not on reuse",
        )
    if bad is not None or stopped is None:
        put(metrics.REUSE_HOLDS_TO_LIMIT, float(bad is None), f"limit {limit}")
