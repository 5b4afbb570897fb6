"""One chat request inside the simulated engine (`arms.simulator.engine`): its prompt, its
progress, its reply plan, and the stream of emissions the engine hands it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from arms.simulator.reply import ReplyPlan

RequestState = Literal["queued", "prefill", "decode", "done", "cancelled"]


class ContextLimitError(ValueError):
    """A request whose prompt plus max_tokens does not fit the per-request context."""

    def __init__(self, prompt_tokens: int, max_tokens: int, ctx_size: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.ctx_size = ctx_size
        super().__init__(
            f"the request needs {prompt_tokens + max_tokens} tokens "
            f"({prompt_tokens} prompt + {max_tokens} max_tokens) but the context size is {ctx_size}"
        )


@dataclass(frozen=True)
class Emission:
    """Tokens one request got from one engine step (several when speculation accepted drafts).

    `finish_reason` is set on the last emission of a request ("length", "stop",
    "tool_calls", or "cancelled"). `model_time` is the engine clock at the end of the step.
    """

    tokens: list[str]
    finish_reason: str | None
    model_time: float
    draft_tokens: int = 0
    accepted_tokens: int = 0


class SimRequest:
    """One chat request inside the engine: its prompt, progress, reply and event stream."""

    def __init__(
        self,
        request_id: int,
        prompt: list[str],
        max_tokens: int,
        plan: ReplyPlan,
        submitted_at: float,
        draft_rng: random.Random,
    ) -> None:
        self.id = request_id
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.plan = plan
        self.target = min(len(plan.tokens), max_tokens)
        self.state: RequestState = "queued"
        self.slot_id: int | None = None
        self.admit_seq = 0
        self.cached_tokens = 0
        self.prefilled = 0
        self.generated: list[str] = []
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.submitted_at = submitted_at
        self.admitted_at: float | None = None
        self.first_token_at: float | None = None
        self.finished_at: float | None = None
        self.finish_reason: str | None = None
        self.draft_rng = draft_rng  # the engine's draws of accepted drafts
        self._events: asyncio.Queue[Emission] = asyncio.Queue()

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)

    @property
    def completion_tokens(self) -> int:
        return len(self.generated)

    @property
    def to_prefill(self) -> int:
        """Prompt tokens still to be processed before the first token."""
        return len(self.prompt) - self.cached_tokens - self.prefilled

    @property
    def done(self) -> bool:
        return self.state in ("done", "cancelled")

    def deliver(self, emission: Emission) -> None:
        """Hand the stream one emission (the engine's side of `events`)."""
        self._events.put_nowait(emission)

    async def events(self) -> AsyncIterator[Emission]:
        """Emissions as the engine produces them; ends after the one with a finish_reason."""
        while True:
            emission = await self._events.get()
            yield emission
            if emission.finish_reason is not None:
                return

    async def collect(self) -> list[Emission]:
        """Wait for the whole reply (the non-streaming path)."""
        return [e async for e in self.events()]
