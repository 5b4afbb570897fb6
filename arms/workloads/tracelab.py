"""TraceLab's coding-agent traces (uw-syfi/TraceLab: Claude Code and Codex sessions,
`syfi_coding_trace.jsonl`) read as recorded sessions, so agent-load replays them beside
its own sessions format (`arms.workloads.sessions`, which tells the two apart by shape).

One JSON object a line, one LLM round each (the repository's README, "Data format", and
`artifacts/utils/DB_SCHEMA.md`): `session_id`, `round_index` (its place in the session),
`input_tokens_total` (the whole prompt), `output_tokens` (of which
`reasoning_output_tokens`, Codex's, may say how many were reasoning), and `timing_events`,
each an `event_type` (`user_message`, `tool_result`, `reasoning`, `text`, `tool_call`,
`usage_report`) and an ISO `timestamp`. Every other field is read past.

The trace holds sizes and times, no text (the public release strips it), so a session is
rebuilt as text of the recorded sizes, words standing for tokens:

- a session's rounds in `round_index` order (equal indexes in file order, as TraceLab's
  own tables order them); each round is a turn asking for `output_tokens`;
- a turn's prompt is the previous turn's, then the previous reply (its output less its
  reasoning, which the next prompt does not carry), then one new user message making it
  `input_tokens_total` long: a growing history whose prefix repeats, as the agent's did.
  The new input is a user message whether it was the developer's or a tool's result: a
  tool message needs the call it answers, which the trace does not hold;
- where the recorded prompt is shorter than that history (a compaction, a dropped
  context), the turn keeps the longest run of whole earlier turns that fits, up to a
  reply, and fills the rest with new text: reuse is never claimed beyond what fits;
- the think time before a turn runs from the previous round's last output event to this
  round's last input event (`user_message` or `tool_result`): the tool's latency or the
  developer's pause; 0 where either is missing;
- a session starts at its first round's input time, from the earliest session's.

Text differs between sessions and between rounds (seeded by the session and the round),
so no prefix is shared across sessions that the trace does not show. The whole public
corpus rebuilt as text is several GB: replay a slice of it.

A leaf of the domain core: plain values, no I/O beyond the file named.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arms.workloads.jsonl import json_lines, read_text
from arms.workloads.sessions import Session, SessionsError, Turn, sessions_of
from arms.workloads.trace_formats import wall_clock_us

FIELDS = ("session_id", "round_index", "input_tokens_total", "output_tokens")
INPUT_EVENTS = ("user_message", "tool_result")

# common words of about one token each, the filler a rebuilt prompt is made of
_VOCAB = (
    "the of and to in is that it for as with was on be at by this had not are but from or have an they which "
    "one you were her all she there would their we him been has when who will more no if out so said what up "
    "its about into than them can only other new some could time these two may then do first any my now such "
    "like our over man me even most made after also did many before must through back years where much your way"
).split()


def is_round(row: Any) -> bool:
    """Whether a parsed line has TraceLab's shape (a round, not a message list)."""
    return isinstance(row, dict) and "messages" not in row and "session_id" in row and "input_tokens_total" in row


@dataclass(frozen=True)
class Round:
    """One line of a TraceLab trace, as much of it as a replay needs; times in
    microseconds since the epoch, None where the round recorded none."""

    session: str
    index: int
    line: int
    input_tokens: int
    output_tokens: int
    carried_tokens: int
    ready_us: int | None
    done_us: int | None


def _fail(path: Path, number: int, message: str) -> SessionsError:
    return SessionsError(f"{path}:{number}: {message}")


def _count(path: Path, number: int, row: dict[str, Any], name: str, least: int) -> int:
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _fail(path, number, f"{name}: expected a whole number >= {least}, found {value!r}")
    return value


def _round(path: Path, number: int, row: Any) -> Round:
    if not is_round(row):
        raise _fail(path, number, f"expected a TraceLab round, an object with {', '.join(FIELDS)}")
    missing = [f for f in FIELDS if f not in row]
    if missing:
        raise _fail(path, number, f"missing {', '.join(missing)} (each round needs {', '.join(FIELDS)})")
    session = row["session_id"]
    if not isinstance(session, str) or not session:
        raise _fail(path, number, f"session_id: expected text, found {session!r}")
    index = _count(path, number, row, "round_index", 0)
    n_in = _count(path, number, row, "input_tokens_total", 1)
    n_out = _count(path, number, row, "output_tokens", 0)
    reasoning = row.get("reasoning_output_tokens")
    if reasoning is None:
        reasoning = 0
    elif isinstance(reasoning, bool) or not isinstance(reasoning, int) or reasoning < 0:
        raise _fail(path, number, f"reasoning_output_tokens: expected a whole number >= 0 or null, found {reasoning!r}")
    events = row.get("timing_events") or []
    if not isinstance(events, list):
        raise _fail(path, number, f"timing_events: expected a list, found {type(events).__name__}")
    ready: int | None = None
    done: int | None = None
    for k, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
            raise _fail(path, number, f"timing_events[{k}]: expected an object with event_type and timestamp")
        stamp = event.get("timestamp")
        if stamp is None:
            continue
        at = wall_clock_us(stamp) if isinstance(stamp, str) else None
        if at is None:
            raise _fail(path, number, f"timing_events[{k}].timestamp: expected an ISO time, found {stamp!r}")
        if event["event_type"] in INPUT_EVENTS:
            ready = at if ready is None else max(ready, at)
        else:
            done = at if done is None else max(done, at)
    carried = max(1, n_out - min(reasoning, n_out))
    return Round(session, index, number, n_in, n_out, carried, ready, done)


def _filler(n: int, seed: str) -> str:
    return " ".join(random.Random(seed).choices(_VOCAB, k=max(1, n)))


def _turns(rounds: Sequence[Round]) -> tuple[Turn, ...]:
    """A session's turns from its rounds, in order (see the module's notes)."""
    turns: list[Turn] = []
    history: list[tuple[dict[str, Any], int]] = []  # the previous turn's messages and their words
    reply: tuple[dict[str, Any], int] | None = None
    for k, now in enumerate(rounds):
        candidate = [*history, reply] if reply is not None else []
        room = now.input_tokens - 1  # at least a word of new input
        kept: list[tuple[dict[str, Any], int]] = []
        used = run = 0
        for j, (message, size) in enumerate(candidate):
            run += size
            if run > room:
                break
            if message["role"] == "assistant":
                kept, used = candidate[: j + 1], run
        new = {"role": "user", "content": _filler(now.input_tokens - used, f"{now.session}/r{k}/in")}
        messages = [*kept, (new, now.input_tokens - used)]
        before = rounds[k - 1].done_us if k else None
        think = 0.0
        if now.ready_us is not None and before is not None:
            think = max(0.0, (now.ready_us - before) / 1e6)
        text = _filler(now.carried_tokens, f"{now.session}/r{k}/out")
        turns.append(Turn(tuple(m for m, _ in messages), text, max(1, now.output_tokens), think))
        history = messages
        reply = ({"role": "assistant", "content": text}, now.carried_tokens)
    return tuple(turns)


def sessions_from_rows(path: str | Path, rows: Sequence[tuple[int, Any]]) -> list[Session]:
    """The sessions of a TraceLab trace's parsed lines ((line number, value), as
    `arms.workloads.jsonl.json_lines` gives them), by start; a bad line is refused naming
    the file, the line and the field."""
    source = Path(path)
    by_session: dict[str, list[Round]] = {}
    for number, row in rows:
        parsed = _round(source, number, row)
        by_session.setdefault(parsed.session, []).append(parsed)
    if not by_session:
        raise SessionsError(f"{source}: no rounds (one JSON object per line: {', '.join(FIELDS)})")
    ordered = {s: sorted(rs, key=lambda r: (r.index, r.line)) for s, rs in by_session.items()}
    starts = {s: rs[0].ready_us if rs[0].ready_us is not None else rs[0].done_us for s, rs in ordered.items()}
    origin = min((at for at in starts.values() if at is not None), default=0)
    sessions = []
    for s, rs in ordered.items():
        at = starts[s]
        sessions.append(Session(s, 0.0 if at is None else (at - origin) / 1e6, _turns(rs)))
    return sorted(sessions, key=lambda s: s.start_s)


def read_session_file(path: str | Path) -> list[Session]:
    """The sessions of a file in our format or TraceLab's, told by its first line's shape."""
    source = Path(path)
    rows = json_lines(source, read_text(source, "sessions", SessionsError), SessionsError)
    if rows and is_round(rows[0][1]):
        return sessions_from_rows(source, rows)
    return sessions_of(source, rows)
