"""tool-loop: can the served model drive a multi-step tool loop to a right answer?

Each trial gives one task of the deterministic environment (`tool_env`), streams the
model's tool-call deltas, runs the calls, sends the results back, and repeats until the
model answers or runs out of steps. A trial passes only on the right final number; the
probe's verdict line is the majority, written passes/total ("2/3").
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import BaseModel, Field

from arms.measures import ttft_s
from arms.probes.base import ProbeTarget, Sink, chat
from arms.probes.failures import NOT_RUN, record_errors, record_failure
from arms.workloads import tool_env
from campaign.core import metrics
from campaign.core.states import Mode, SampleKind


class ToolLoopParams(BaseModel):
    trials: int = Field(default=3, ge=1, le=100, description="tool loops run, each from a fresh task")
    max_steps: int = Field(default=8, ge=1, le=50, description="tool calls allowed before a loop counts as failed")
    max_tokens: int = Field(default=160, ge=8, description="output tokens per step")
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    context: int = 0


SYSTEM = "You are an agent. Call the tools you are given, one step at a time, then answer."


async def run_trial(
    http: Any,
    target: ProbeTarget,
    sink: Sink,
    params: ToolLoopParams,
    mode: Mode,
    trial: int,
    task: tool_env.Task,
    sent: list[Any] | None = None,
) -> dict[str, Any]:
    """One task to its end; `sent` collects the requests (for the error rate)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt}]
    calls = 0
    for step in range(params.max_steps):
        record = await chat(http, target, messages, mode, params.max_tokens, tools=tool_env.TOOLS)
        if sent is not None:
            sent.append(record)
        sink.request(record, scenario=f"trial{trial}-step{step}", mode=mode, trial=trial)
        if not record.ok:
            kind = record_failure(sink, record, mode=mode, scenario=f"step{step}", context=params.context, trial=trial)
            return {
                "passed": False,
                "steps": step + 1,
                "calls": calls,
                "answer": "",
                "error": record.error,
                "not_run": kind == NOT_RUN,
            }
        t = ttft_s(record)
        if t is not None:
            sink.measurement(
                metric=metrics.TTFT_S, value=t, mode=mode, scenario=f"step{step}", context=params.context, trial=trial
            )
        if not record.tool_calls:
            return {
                "passed": tool_env.check(task, record.text),
                "steps": step + 1,
                "calls": calls,
                "answer": record.text.strip()[:200],
                "error": None,
            }
        assistant_calls = []
        results = []
        for i, call in enumerate(record.tool_calls):
            call_id = call.get("id") or f"call-{uuid.uuid4().hex[:8]}-{i}"
            assistant_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"] or "{}"},
                }
            )
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": tool_env.call(call["name"], call["arguments"] or "{}"),
                }
            )
            calls += 1
        messages.append({"role": "assistant", "content": record.text or "", "tool_calls": assistant_calls})
        messages.extend(results)
    return {"passed": False, "steps": params.max_steps, "calls": calls, "answer": "", "error": "ran out of steps"}


async def run(target: ProbeTarget, sink: Sink, params: ToolLoopParams) -> None:
    async with target.client(2) as http:
        for mode in params.modes:
            passes = ran = 0
            sent: list[Any] = []
            for trial in range(params.trials):
                task = tool_env.TASKS[trial % len(tool_env.TASKS)]
                outcome = await run_trial(http, target, sink, params, mode, trial, task, sent)
                if outcome.get("not_run"):
                    continue  # never sent (the server stalled before): no verdict, not a failure
                ran += 1
                passes += int(outcome["passed"])
                sink.measurement(
                    metric=metrics.TOOL_LOOP_PASS,
                    value=float(outcome["passed"]),
                    mode=mode,
                    scenario=f"user:{task.user}",
                    context=params.context,
                    trial=trial,
                    source=json.dumps({k: outcome[k] for k in ("steps", "calls", "answer", "error")}),
                )
                sink.measurement(
                    metric=metrics.TOOL_CALLS,
                    value=outcome["calls"],
                    mode=mode,
                    scenario=f"user:{task.user}",
                    context=params.context,
                    trial=trial,
                )
            sink.measurement(
                metric=metrics.TOOL_LOOP_PASSES,
                value=passes,
                mode=mode,
                scenario="summary",
                context=params.context,
                kind=SampleKind.SUMMARY,
                source=f"{passes}/{ran}",
            )
            sink.measurement(
                metric=metrics.TOOL_LOOP_TRIALS,
                value=ran,
                mode=mode,
                scenario="summary",
                context=params.context,
                kind=SampleKind.SUMMARY,
            )
            record_errors(sink, sent, mode=mode, scenario="summary", context=params.context)
