"""The simulator's scripted tool policy: a model that uses the tool-loop environment
correctly and gets the final answer right with a set probability.

It plays the task step by step from the conversation so far (which tool results exist),
so the probe's whole loop -- streamed tool-call deltas, tool results sent back, a final
answer checked -- runs for real; only the model's competence is scripted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from arms.simulator.reply import ReplyContext, ReplyPlan, ReplyPolicy, ToolCallPlan
from arms.simulator.tokens import content_text
from arms.workloads import tool_env

_ids = itertools.count(1)


def _tool_results(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        if m.get("role") == "tool":
            try:
                out.append(json.loads(content_text(m.get("content"))))
            except ValueError:
                out.append({})
    return out


def _next_step(task: tool_env.Task, results: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    user_id = next((r["user_id"] for r in results if r.get("user_id")), None)
    if user_id is None:
        return "lookup_user", {"name": task.user}
    orders = next((r["orders"] for r in results if "orders" in r), None)
    if orders is None:
        return "list_orders", {"user_id": user_id}
    totals = sum(1 for r in results if "total" in r)
    if totals < len(orders):
        return "order_total", {"order_id": orders[totals]}
    return None


def scripted_tool_policy(success_rate: float, fallback: ReplyPolicy) -> ReplyPolicy:
    def policy(ctx: ReplyContext) -> ReplyPlan:
        tools = {(t.get("function") or {}).get("name") for t in (ctx.tools or [])}
        messages = list(ctx.messages or [])
        user_text = next((content_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        task = tool_env.task_from_text(user_text)
        if not tools or not tool_env.TOOL_NAMES <= tools or task is None:
            return fallback(ctx)
        step = _next_step(task, _tool_results(messages))
        if step is not None:
            name, args = step
            plan = ToolCallPlan(name=name, arguments=args, id=f"call_{next(_ids)}")
            return ReplyPlan(tokens=[plan.token], finish_reason="tool_calls", tool_calls=[plan])
        right = ctx.rng.random() < success_rate
        value = task.answer if right else round(task.answer + 1 + ctx.rng.random() * 10, 2)
        return ReplyPlan(tokens=["ANSWER:", f"{value:g}"], finish_reason="stop")

    return policy
