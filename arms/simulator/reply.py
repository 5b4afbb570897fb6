"""What the simulated model answers: the reply-policy seam.

The engine decides *when* tokens come out (prefill, decode, speculation); a reply policy
decides *which* tokens. The default answers with deterministic filler words; a scripted
tool policy can be plugged in later (`Engine(..., reply_policy=...)`,
`make_app(..., reply_policy=...)`) by returning tool-call tokens and their `ToolCallPlan`s.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arms.simulator.tokens import call_token


@dataclass(frozen=True)
class ReplyContext:
    """Everything a policy may look at to choose a reply."""

    request_id: int
    model: str
    prompt: Sequence[str]
    max_tokens: int
    temperature: float | None
    rng: random.Random
    messages: Sequence[Mapping[str, Any]] | None = None
    tools: Sequence[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class ToolCallPlan:
    """One tool call a reply makes; it is emitted as the token `call_token(name, arguments)`."""

    name: str
    arguments: Mapping[str, Any]
    id: str

    @property
    def token(self) -> str:
        """The single token standing for this call in the slot and in re-rendered prompts."""
        return call_token(self.name, dict(self.arguments))


@dataclass
class ReplyPlan:
    """The tokens to generate and how the reply ends if max_tokens does not cut it first.

    Tool calls appear in `tokens` as their call tokens (after any content words), in the
    order of `tool_calls`, so the slot holds exactly what the client's echo will render.
    """

    tokens: list[str]
    finish_reason: str = "stop"
    tool_calls: list[ToolCallPlan] = field(default_factory=list)


ReplyPolicy = Callable[[ReplyContext], ReplyPlan]


def text_rng(
    *, model: str, prompt: Sequence[str], temperature: float | None, seed: int, request_counter: int
) -> random.Random:
    """The generator for a reply's words.

    Greedy requests (temperature exactly 0) depend only on model id and prompt, so the same
    prompt always yields the same text and a different model yields a different text (the
    identity fingerprint). Sampled requests depend on the seed and the request counter.
    """
    h = hashlib.sha256()
    if temperature is not None and temperature == 0:
        h.update(b"greedy\0" + model.encode() + b"\0")
        h.update("\x1f".join(prompt).encode())
    else:
        h.update(f"sampled\0{seed}\0{request_counter}".encode())
    return random.Random(int.from_bytes(h.digest()[:8], "big"))


def at_least(plan: ReplyPlan, floor: int, max_tokens: int, rng: random.Random) -> ReplyPlan:
    """The plan lengthened with filler words to `floor` tokens, as a server does that was
    told to ignore end-of-sequence (floor = max_tokens: it ends by length) or not to end
    before `min_tokens`. Replies ending in tool calls are left as they are: their call
    tokens must stay last."""
    missing = floor - len(plan.tokens)
    if missing <= 0 or plan.tool_calls:
        return plan
    tokens = plan.tokens + [f"tok{rng.randrange(10000)}" for _ in range(missing)]
    return ReplyPlan(tokens=tokens, finish_reason="length" if floor >= max_tokens else plan.finish_reason)


def words_policy(ctx: ReplyContext) -> ReplyPlan:
    """The default reply: `max_tokens` filler words such as `tok4821`, ending by length."""
    words = [f"tok{ctx.rng.randrange(10000)}" for _ in range(ctx.max_tokens)]
    return ReplyPlan(tokens=words, finish_reason="length")
