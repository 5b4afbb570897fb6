"""Recorded agent sessions: a user's own agent logs as OpenAI-style message lists, for
agent-load to replay turn by turn.

One session a line of JSONL: `{"id": "s1", "start_s": 0.0, "messages": [...]}` (`id` and
`start_s` optional), the messages as an OpenAI chat request holds them (`role` and
`content`; `t`, seconds from the session's start, optional on any message). Every
assistant message closes a turn: turn k's request is every message before the k-th
assistant message, and that message's length (in words, about a token each) is the
output asked for. Between turns the replay waits the recorded think time: from the
previous assistant message's `t` to that of the last message before the next one (the
user's or the tool's), 0 without stamps.

A TraceLab coding-agent trace (one LLM round a line, sizes and times without text) is
rebuilt as sessions by `arms.workloads.tracelab`, which tells the two formats apart.

A leaf of the domain core: plain values, no I/O beyond the file named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arms.workloads.jsonl import json_lines, read_text

ROLES = ("system", "user", "assistant", "tool")


class SessionsError(ValueError):
    """A sessions file that cannot be replayed: the file, the line and what was expected."""


@dataclass(frozen=True)
class Turn:
    """One request of a session: the recorded messages before it (its history, with the
    recorded replies), the recorded reply's length, and the think time before it."""

    messages: tuple[dict[str, Any], ...]
    reply: str
    reply_words: int
    think_s: float


@dataclass(frozen=True)
class Session:
    id: str
    start_s: float
    turns: tuple[Turn, ...]


def _fail(path: Path, number: int, message: str) -> SessionsError:
    return SessionsError(f"{path}:{number}: {message}")


def _session(path: Path, number: int, row: Any) -> Session:
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        raise _fail(path, number, "expected an object with messages, a list of {role, content} (id, start_s optional)")
    start = row.get("start_s", 0.0)
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start) or start < 0:
        raise _fail(path, number, f"start_s: expected seconds >= 0, found {start!r}")
    messages, stamps = [], []
    for k, message in enumerate(row["messages"]):
        if (
            not isinstance(message, dict)
            or message.get("role") not in ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise _fail(path, number, f"messages[{k}]: expected role ({', '.join(ROLES)}) and content as text")
        stamp = message.get("t")
        if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or stamp < 0):
            raise _fail(path, number, f"messages[{k}].t: expected seconds >= 0, found {stamp!r}")
        messages.append({"role": message["role"], "content": message["content"]})
        stamps.append(float(stamp) if stamp is not None else None)
    turns = []
    previous: int | None = None
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        if k == 0 or messages[k - 1]["role"] == "assistant":
            raise _fail(
                path, number, f"messages[{k}]: an assistant message must follow the user's, the system's or a tool's"
            )
        think = 0.0
        if previous is not None and stamps[previous] is not None and stamps[k - 1] is not None:
            think = max(0.0, stamps[k - 1] - stamps[previous])  # type: ignore[operator]
        turns.append(Turn(tuple(messages[:k]), message["content"], len(message["content"].split()), think))
        previous = k
    if not turns:
        raise _fail(path, number, "no assistant message: a session needs at least one recorded turn")
    return Session(str(row.get("id", f"line{number}")), float(start), tuple(turns))


def read_sessions(path: str | Path) -> list[Session]:
    """Every session of a file in this format, checked line by line (blank lines
    skipped), by start time (`arms.workloads.tracelab.read_session_file` reads TraceLab's
    too, and is what a replay reads)."""
    source = Path(path)
    text = read_text(source, "sessions", SessionsError)
    return sessions_of(source, json_lines(source, text, SessionsError))


def sessions_of(source: Path, rows: list[tuple[int, Any]]) -> list[Session]:
    """The sessions of a file's parsed lines, by start time."""
    sessions = [_session(source, n, row) for n, row in rows]
    if not sessions:
        raise SessionsError(f"{source}: no sessions (one JSON object per line, with messages)")
    return sorted(sessions, key=lambda s: s.start_s)
