"""cache-probe: does the server reuse what it has already seen, in five shapes of reuse?

Each scenario primes the server with a prompt, then probes it with a related one:
  cold             a never-seen prompt (baseline TTFT; reuse ~0)
  identical        the primed prompt again (~1.0)
  append           primed conversation + its reply + a new user turn
  tool_turn        primed conversation + an assistant tool call + its result + follow-up
  middle_mutation  one word changed mid-prompt (reuse ~ the share before the change)
Reuse is what the server reports (cached / prompt tokens, with the field it came from);
expected reuse is what the prompts were built to allow. Reuse is never inferred from TTFT.

`trials` (the file key `repeats`) runs every scenario that many times with fresh prompts, so a
gate reading a scenario has n > 1 and an interval; each scenario's requests (primes
included) give its error rate (`record_errors`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from arms.measures import flag_reuse_source, reuse, ttft_s
from arms.probes.base import ProbeTarget, Sink, chat, record_response
from arms.probes.counters import read_counters, record_counter_deltas
from arms.probes.failures import record_errors, record_failure
from arms.probes.prompts import expected_reuse, mutate_middle, sized_conversation, words
from campaign.core import metrics
from campaign.core.metrics import CACHE_SCENARIOS
from campaign.core.schema import CampaignSpec, QueueItem
from campaign.core.states import Mode

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up a record by key.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    },
}


class CacheProbeParams(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    prompt_tokens: int = Field(
        default=1024,
        ge=16,
        description="size of each primed prompt, in the server's tokens (template included) where it has a tokenizer",
    )
    max_tokens: int = Field(default=8, ge=1, description="output tokens per request (the prompt is what is measured)")
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL, Mode.GREEDY])
    scenarios: list[str] = Field(
        default_factory=lambda: list(CACHE_SCENARIOS), description="which shapes of reuse to send"
    )
    # file key `repeats`, `trials` in code: not the queue item's interleaved attempts
    trials: int = Field(
        default=1, ge=1, alias="repeats", description="each scenario this many times, fresh prompts each"
    )
    context: int = 0

    def request_tokens(self) -> int:
        """The most tokens one request holds: the primed prompt, its reply, the largest
        scenario's addition (tool_turn: a call, 96 words of tool output, 32 of follow-up)
        and the new reply."""
        return self.prompt_tokens + 2 * self.max_tokens + 200


def _probe_messages(scenario: str, primed: list[dict[str, Any]], reply: str, salt: str) -> list[dict[str, Any]]:
    if scenario == "identical":
        return primed
    if scenario == "append":
        return [
            *primed,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": words(64, f"{salt}/next")},
        ]
    if scenario == "tool_turn":
        call_id = "call_" + salt[-8:]
        return [
            *primed,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"key": salt[-6:]})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": words(96, f"{salt}/tool")},
            {"role": "user", "content": words(32, f"{salt}/follow")},
        ]
    if scenario == "middle_mutation":
        return mutate_middle(primed)[0]
    raise ValueError(f"unknown cache-probe scenario {scenario!r}")


def item_values(spec: CampaignSpec, item: QueueItem, context: int) -> dict[str, Any]:
    """An item that names its contexts primes prompts of 80% of each (room for the reply)."""
    return {"prompt_tokens": max(16, int(context * 0.8))} if item.contexts else {}


async def run(target: ProbeTarget, sink: Sink, params: CacheProbeParams) -> None:
    run_id = uuid.uuid4().hex[:8]
    async with target.client(2) as http:
        for mode in params.modes:
            before = await read_counters(http, target)
            sent: dict[str, list[Any]] = {scenario: [] for scenario in params.scenarios}
            for trial in range(params.trials):
                for scenario in params.scenarios:
                    salt = f"cache-{run_id}-{mode}-{scenario}" + (f"-r{trial}" if trial else "")
                    tools = [LOOKUP_TOOL] if scenario == "tool_turn" else None
                    # sized in the server's tokens (template and tools included) where it has a tokenizer
                    primed = (await sized_conversation(http, params.prompt_tokens, salt, tools=tools)).messages
                    if scenario == "cold":
                        record = await chat(http, target, primed, mode, params.max_tokens, tools=tools)
                        sent[scenario].append(record)
                        sink.request(record, scenario=scenario, mode=mode, trial=trial)
                        _emit(
                            sink,
                            target,
                            record,
                            scenario,
                            mode,
                            params.context,
                            trial,
                            expected=0.0,
                            expected_source="constructed",
                        )
                        continue
                    prime = await chat(http, target, primed, mode, params.max_tokens, tools=tools)
                    sent[scenario].append(prime)
                    sink.request(prime, scenario=f"{scenario}:prime", mode=mode, trial=trial)
                    if not prime.ok:
                        record_failure(
                            sink, prime, mode=mode, scenario=f"{scenario}:prime", context=params.context, trial=trial
                        )
                        continue
                    probe_msgs = _probe_messages(scenario, primed, prime.text.strip() or "ok", salt)
                    expected, source = await expected_reuse(http, primed, probe_msgs, tools)
                    record = await chat(http, target, probe_msgs, mode, params.max_tokens, tools=tools)
                    sent[scenario].append(record)
                    sink.request(record, scenario=scenario, mode=mode, trial=trial)
                    cold = ttft_s(prime)
                    if cold is not None:
                        sink.measurement(
                            metric=metrics.TTFT_COLD_S,
                            value=cold,
                            mode=mode,
                            scenario=scenario,
                            context=params.context,
                            trial=trial,
                        )
                    _emit(
                        sink,
                        target,
                        record,
                        scenario,
                        mode,
                        params.context,
                        trial,
                        expected=expected,
                        expected_source=source,
                    )
                    warm = ttft_s(record)
                    if cold and warm:
                        sink.measurement(
                            metric=metrics.WARM_SPEEDUP,
                            value=cold / warm,
                            mode=mode,
                            scenario=scenario,
                            context=params.context,
                            trial=trial,
                        )
            for scenario, records in sent.items():
                record_errors(sink, records, mode=mode, scenario=scenario, context=params.context)
            await record_counter_deltas(http, target, sink, before, mode=mode, context=params.context)


def _emit(
    sink: Sink,
    target: ProbeTarget,
    record: Any,
    scenario: str,
    mode: Mode,
    context: int,
    trial: int,
    *,
    expected: float,
    expected_source: str,
) -> None:
    sink.measurement(
        metric=metrics.EXPECTED_REUSE,
        value=expected,
        mode=mode,
        scenario=scenario,
        context=context,
        trial=trial,
        source=expected_source,
    )
    response = record_response(sink, target, record, mode=mode, scenario=scenario, context=context, trial=trial)
    if response is None:
        return
    cached, prompt, field = response
    if cached is not None:
        value = reuse(cached, prompt)
        if value is not None:
            sink.measurement(
                metric=metrics.REUSE,
                value=value,
                mode=mode,
                scenario=scenario,
                context=context,
                trial=trial,
                source=flag_reuse_source(field, value),
            )
