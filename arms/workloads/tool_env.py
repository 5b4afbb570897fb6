"""A deterministic tool environment for the tool-loop probe.

Three functions over a small fixed world (users -> orders -> totals); each task needs
several calls in sequence (find the user, list their orders, total each order) and has a
single checkable answer. The same module is the ground truth for the simulator's scripted
tool policy, so both sides agree on what a right answer is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

USERS = {"alice": "u17", "bob": "u42", "carol": "u08", "dmitri": "u63"}
ORDERS = {"u17": ["o101", "o104"], "u42": ["o102", "o103", "o107"], "u08": ["o105"], "u63": ["o106", "o108"]}
TOTALS = {
    "o101": 12.5,
    "o102": 7.25,
    "o103": 30.0,
    "o104": 4.75,
    "o105": 99.99,
    "o106": 15.0,
    "o107": 2.5,
    "o108": 61.1,
}

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_user",
            "description": "Find a user's id by their first name.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_orders",
            "description": "List the order ids of a user id.",
            "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "order_total",
            "description": "The total of one order, in euros.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    },
]
TOOL_NAMES = frozenset(t["function"]["name"] for t in TOOLS)


@dataclass(frozen=True)
class Task:
    user: str

    @property
    def prompt(self) -> str:
        return (
            f"What is the sum of all order totals of the user named {self.user}? "
            "Use the tools: lookup_user, then list_orders, then order_total for each order. "
            "When you know it, reply with exactly: ANSWER: <number>"
        )

    @property
    def answer(self) -> float:
        return round(sum(TOTALS[o] for o in ORDERS[USERS[self.user]]), 2)


TASKS = [Task(name) for name in USERS]
_TASK_RE = re.compile(r"user named (\w+)\?")
_ANSWER_RE = re.compile(r"ANSWER:\s*(-?\d+(?:\.\d+)?)")


def task_from_text(text: str) -> Task | None:
    match = _TASK_RE.search(text or "")
    return Task(match.group(1)) if match and match.group(1) in USERS else None


def call(name: str, arguments: str | dict[str, Any]) -> str:
    """Run one tool call; bad calls answer with an error the model can read, never raise."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    except (ValueError, TypeError):
        return json.dumps({"error": "arguments are not valid JSON"})
    if name == "lookup_user":
        uid = USERS.get(str(args.get("name", "")).lower())
        return json.dumps({"user_id": uid} if uid else {"error": "no such user"})
    if name == "list_orders":
        orders = ORDERS.get(str(args.get("user_id", "")))
        return json.dumps({"orders": orders} if orders is not None else {"error": "no such user id"})
    if name == "order_total":
        total = TOTALS.get(str(args.get("order_id", "")))
        return json.dumps({"total": total} if total is not None else {"error": "no such order"})
    return json.dumps({"error": f"unknown tool {name}"})


def check(task: Task, text: str) -> bool:
    """A trial passes only on the right final number."""
    match = _ANSWER_RE.search(text or "")
    return match is not None and abs(float(match.group(1)) - task.answer) < 0.01
