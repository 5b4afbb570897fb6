"""The pieces of agent-load's synthetic conversations (system prompt, tasks, tool outputs),
sized in the server's tokens before the timed requests, each once (`size_pieces`), and the
rows that say how they were counted (`record_plan`). What the sizes mean, and the
conversations that send the pieces, are `arms.probes.agent_load`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from arms.probes.agent_load_params import AgentLoadParams
from arms.probes.base import Sink
from arms.probes.prompts import WORD_ESTIMATE, SizedWords, sized_words, tokenizer_for, words
from campaign.core import metrics
from campaign.core.states import Mode, SampleKind

TASK_LEAD = "Task: "
TOOL_LEAD = "Tool output: "
# The short conversation a piece is counted against: a piece's count is what it adds to a
# prompt, and a short stand-in keeps counting cheap (a chat template's messages are
# delimited by its own tokens, so what a message adds does not depend on what precedes it).
ANCHOR: tuple[dict[str, Any], ...] = ({"role": "user", "content": TASK_LEAD.strip()},)
PIECES = ("system", "task", "turn")
# the row that says how large each piece was asked to be, and how it was counted
PIECE_TARGETS = {
    "system": metrics.SYSTEM_TOKENS_TARGET,
    "task": metrics.TASK_TOKENS_TARGET,
    "turn": metrics.TURN_TOKENS_TARGET,
}


def system_text(salt: str, n: int) -> str:
    return words(n, f"{salt}/system")


def task_text(salt: str, index: int, n: int) -> str:
    return TASK_LEAD + words(n, f"{salt}/task{index}")


def tool_text(salt: str, index: int, turn: int, n: int, branch: int | None = None) -> str:
    """A tool's output; a branch's is its own text of the same word count."""
    return TOOL_LEAD + words(n, f"{salt}/tool{index}/{turn}" + ("" if branch is None else f"/b{branch}"))


@dataclass(frozen=True)
class Plan:
    """The word counts of one phase's pieces, sized before its timed requests.

    Why word counts: the text is rebuilt from its salt when sent (`words` is seeded), so
    the plan of a long run stays small, and no count is taken while requests are timed.
    The shared system prompt is kept as text, built once for every conversation.
    `tools[c][t]` is the tool output appended after turn t of conversation c; `sources`
    says how each kind of piece was counted."""

    salt: str
    system: str
    tasks: tuple[int, ...]
    tools: tuple[tuple[int, ...], ...]
    sources: Mapping[str, str]


def word_plan(params: AgentLoadParams, salt: str, conversations: int) -> Plan:
    """The word counts of old (one word taken for one token): a server without a tokenizer."""
    later = max(0, params.turns - 1)
    return Plan(
        salt,
        system_text(salt, params.system_tokens),
        (params.task_tokens,) * conversations,
        ((params.turn_tokens,) * later,) * conversations,
        dict.fromkeys(PIECES, WORD_ESTIMATE),
    )


async def size_pieces(http: httpx.AsyncClient, params: AgentLoadParams, salt: str, conversations: int) -> Plan:
    """Every piece of a phase sized in the server's tokens (`sized_words`), each once.

    The system message is sized by what it adds to the anchor; each task so that the
    turn-1 prompt counts system_tokens + task_tokens (the task takes the template's
    constant share, as a sized prompt does); each tool output by what it adds to the
    anchor after an empty reply, so a turn grows by the reply plus turn_tokens. All counts
    go one way (the anchor's), as a difference of counts taken two ways means nothing.
    Conversation 0 is sized first and its word counts start the others' searches, which
    then mostly take one request a piece."""
    anchor = list(ANCHOR)
    reference = await tokenizer_for(http).tokens(anchor, keep=False)
    if reference is None:
        return word_plan(params, salt, conversations)
    base, way = len(reference[0]), reference[1]
    found: dict[str, list[SizedWords]] = {kind: [] for kind in PIECES}
    fallback = {"system": params.system_tokens, "task": params.task_tokens, "turn": params.turn_tokens}

    async def size(
        kind: str, target: int, build: Callable[[int], list[dict[str, Any]]], above: int, start: int | None
    ) -> int:
        if target <= 0:  # an empty piece, as before: nothing to size
            return 0
        sized = await sized_words(http, target, build, base=above, start=start, way=way, keep=False)
        found[kind].append(sized)
        return fallback[kind] if sized.source == WORD_ESTIMATE else sized.words

    system = await size(
        "system",
        params.system_tokens,
        lambda n: [{"role": "system", "content": system_text(salt, n)}, *anchor],
        base,
        None,
    )
    system_message = {"role": "system", "content": system_text(salt, system)}  # one text, shared
    turn_one = params.system_tokens + params.task_tokens

    async def one(c: int, hints: tuple[int | None, int | None]) -> tuple[int, tuple[int, ...]]:
        task = await size(
            "task",
            turn_one,
            lambda n: [system_message, {"role": "user", "content": task_text(salt, c, n)}],
            0,
            hints[0],
        )
        tools: list[int] = []
        for t in range(params.turns - 1):

            def after_reply(n: int, t: int = t) -> list[dict[str, Any]]:
                return [
                    *anchor,
                    {"role": "assistant", "content": ""},
                    {"role": "user", "content": tool_text(salt, c, t, n)},
                ]

            tools.append(await size("turn", params.turn_tokens, after_reply, base, tools[-1] if tools else hints[1]))
        return task, tuple(tools)

    first = await one(0, (params.task_tokens, None))
    hints = (first[0], first[1][-1] if first[1] else None)
    rest = await asyncio.gather(*(one(c, hints) for c in range(1, conversations)))
    sized = [first, *rest]
    sources = {kind: " + ".join(sorted({f.source for f in found[kind]})) or WORD_ESTIMATE for kind in PIECES}
    return Plan(
        salt, system_message["content"], tuple(t for t, _ in sized), tuple(tools for _, tools in sized), sources
    )


def record_plan(sink: Sink, params: AgentLoadParams, plan: Plan, mode: Mode, phase: str) -> None:
    """The sizes asked for and how they were counted, as decode's `prompt_tokens_target`."""
    asked = {"system": params.system_tokens, "task": params.task_tokens, "turn": params.turn_tokens}
    for kind in PIECES:
        if kind == "turn" and params.turns < 2:
            continue  # no later turn: no tool output is ever sent
        sink.measurement(
            metric=PIECE_TARGETS[kind],
            value=asked[kind],
            mode=mode,
            scenario=phase,
            context=params.context,
            kind=SampleKind.SUMMARY,
            source=plan.sources[kind],
        )
