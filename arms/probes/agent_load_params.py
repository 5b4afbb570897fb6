"""agent-load's parameters (`AgentLoadParams`), and the size of an agent conversation's
last request, which the load probe's agent workload shares (`conversation_tokens`).

The probe that runs them is `arms.probes.agent_load`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from arms.probes.base import read_unchanged
from arms.workloads.sessions import Session
from arms.workloads.tracelab import read_session_file
from campaign.core.states import Mode


class AgentLoadParams(BaseModel):
    conversations: int = Field(default=3, ge=1, le=1024, description="agent conversations sent at once")
    turns: int = Field(default=10, ge=1, le=200, description="turns per conversation, each one request")
    system_tokens: int = Field(
        default=2000,
        ge=0,
        description="shared system prompt, in the server's tokens, template included (seed 000: ~2K)",
    )
    task_tokens: int = Field(
        default=4000, ge=1, description="unique task per conversation, in the server's tokens (seed 000: ~4K)"
    )
    turn_tokens: int = Field(
        default=1600, ge=0, description="tool output appended each later turn, in the server's tokens (~1.6K)"
    )
    max_tokens: int = Field(default=200, ge=1, description="output tokens per turn (seed 000: up to 200)")
    baseline: bool = Field(default=True, description="also run one conversation alone, same shape")
    turn_timeout_s: float = Field(
        default=900.0, gt=0, description="a turn slower than this is a timeout (seed 000: 15 min)"
    )
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    context: int = 0
    sessions: str | None = Field(
        default=None,
        description="recorded sessions: a JSONL of OpenAI-style message lists (your agent's logs), replayed turn by turn instead of the synthetic conversations",
    )
    history: Literal["recorded", "server"] = Field(
        default="recorded",
        description="sessions: later turns carry the recorded assistant replies, or the server's own",
    )
    session_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="sessions: at most this many at once, each starting when one ends; unset: each at its recorded start_s",
    )
    fan_out: int = Field(
        default=1,
        ge=1,
        le=64,
        description="branch requests sent at once before each later turn (sub-agents, parallel tools), each the history and a tool output of its own; their replies merge into the turn's request; 1: no branches",
    )
    tool_delay_s: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description="a tool's run time: the wait between a reply and the conversation's next request",
    )

    @model_validator(mode="after")
    def _sessions_shape(self) -> AgentLoadParams:
        if self.sessions is None:
            if self.session_concurrency is not None or self.history != "recorded":
                raise ValueError(
                    "history and session_concurrency apply to recorded sessions (sessions = 'agent-logs.jsonl')"
                )
            return self
        defaults = type(self).model_fields
        shaped = [
            f
            for f in (
                "conversations",
                "turns",
                "system_tokens",
                "task_tokens",
                "turn_tokens",
                "fan_out",
                "tool_delay_s",
            )
            if getattr(self, f) != defaults[f].default
        ]
        if shaped:
            raise ValueError(f"{', '.join(shaped)}: not for recorded sessions, which bring their own shape")
        recorded_sessions(self.sessions)  # refused here, naming the line, before anything runs
        return self

    def request_tokens(self) -> int:
        """The most tokens one request holds by the stated sizes: the last turn's prompt
        (system, task, every earlier turn's tool output and reply) and its reply, with a
        few tokens of chat template per message. `campaign check` holds it to the arm's
        context. Recorded sessions: their longest turn, in words and template tokens."""
        if self.sessions is not None:
            return max(
                sum(len(m["content"].split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in turn.messages)
                + min(turn.reply_words, self.max_tokens)
                for session in recorded_sessions(self.sessions)
                for turn in session.turns
            )
        return conversation_tokens(
            self.system_tokens,
            self.task_tokens,
            self.turns,
            self.turn_tokens,
            self.max_tokens,
            merged=self.fan_out if self.fan_out > 1 else 0,
        )


def recorded_sessions(path: str) -> tuple[Session, ...]:
    """A sessions file (`read_unchanged`); a bad file raises a SessionsError (a ValueError
    naming the line)."""
    return tuple(read_unchanged(read_session_file, path))


# chat-template tokens counted per message when a conversation's size is estimated
TEMPLATE_TOKENS_PER_MESSAGE = 8


def conversation_tokens(system: int, task: int, turns: int, turn: int, reply: int, merged: int = 0) -> int:
    """The tokens of an agent conversation's last request by its stated sizes: system
    prompt, task, every earlier turn's tool output and reply, the last reply, and the
    chat template's few tokens per message (agent-load's and the load probe's agent
    workload share this shape). `merged`: branch replies (at most `reply` each) merged
    into every later turn by a fan-out."""
    later = max(0, turns - 1)
    return (
        system + task + later * (turn + reply + merged * reply) + reply + TEMPLATE_TOKENS_PER_MESSAGE * (2 + 2 * later)
    )
