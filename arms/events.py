"""Event parsing: stamped raw SSE events of a chat completion turned into a record's
event kinds, token counts, text, reasoning, tool calls, usage and timings.

Each chat-completion chunk becomes one `ChunkEvent` (`parse_chunk`, a pure function of
the decoded JSON); `EventParser` applies them to a `RequestRecord` in order. The common
chunk -- one plain content delta and nothing else -- skips the `ChunkEvent` on a short
path in `EventParser.feed` with the same result, since it is most of every stream (and a
plain reasoning delta, most of a thinking model's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from arms.measures import (
    CONTENT,
    DONE,
    EMPTY,
    MALFORMED,
    REASONING,
    ROLE,
    TOOL,
    USAGE,
    RequestRecord,
    estimate_tokens,
)
from arms.sse import event_data

_EXTRA_KEYS = ("timings", "x_mlx_dspark", "x_metrics", "x_sim")
_RECORDED_KEYS = frozenset({"error", "usage", *_EXTRA_KEYS})  # top-level keys `parse_chunk` keeps

_loads: Callable[[bytes], Any]
try:  # a faster JSON decoder when present (prefect depends on it); same results
    import orjson

    _loads = orjson.loads  # its JSONDecodeError is a ValueError

except ImportError:  # pragma: no cover
    _loads = json.loads


class ChunkEvent(NamedTuple):
    """What one chat-completion chunk says, as the record keeps it.

    A NamedTuple rather than a frozen dataclass: one is built per event on reasoning and
    tool-call streams, and a frozen dataclass costs about four times as much to build.
    The decoded JSON objects it carries (usage, timings, extras, tool-call fragments) are
    the parser's own, shared and never copied; nothing changes them afterwards.
    """

    kind: str  # ROLE, CONTENT, REASONING, TOOL, USAGE or EMPTY
    tokens: int = 0  # estimated tokens in the delta
    content: str = ""  # text to append (also with a tool-call delta)
    reasoning: str = ""  # reasoning text to append
    tool_calls: Sequence[Any] = ()  # tool-call fragments, merged by index
    finish_reason: Any = None  # set only when the chunk has a truthy one
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    extra: tuple[tuple[str, dict[str, Any]], ...] = ()  # other recorded top-level objects, in order
    error: str | None = None  # a server error event


# A ChunkEvent from a tuple of ALL its fields in order (no defaults), without the generated
# __new__'s Python-level call: a third of the cost, on the path of every reasoning or
# tool-call event. The tests compare its results with ChunkEvent(...) built normally.
_build = tuple.__new__


def parse_chunk(chunk: dict[str, Any]) -> ChunkEvent:
    """One decoded chat-completion chunk as a `ChunkEvent`."""
    choices = chunk.get("choices") or []
    if "error" in chunk and not choices:
        err = chunk["error"]
        return ChunkEvent(
            EMPTY, error=f"server error event: {err.get('message', err) if isinstance(err, dict) else err}"
        )
    usage = chunk["usage"] if "usage" in chunk and isinstance(chunk["usage"], dict) else None
    timings = None
    extra: tuple[tuple[str, dict[str, Any]], ...] = ()
    for key in _EXTRA_KEYS:
        if key in chunk and isinstance(chunk[key], dict):
            if key == "timings":
                timings = chunk[key]
            else:
                extra += ((key, chunk[key]),)
    if not choices:
        return ChunkEvent(USAGE if "usage" in chunk else EMPTY, usage=usage, timings=timings, extra=extra)
    choice = choices[0] if isinstance(choices[0], dict) else {}
    finish = choice.get("finish_reason") or None
    delta = choice.get("delta") or choice.get("message") or {}
    content = delta.get("content") or ""
    thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
    calls = delta.get("tool_calls") or []
    if calls:
        return _build(ChunkEvent, (TOOL, _tool_tokens(calls), content, "", calls, finish, usage, timings, extra, None))
    if content:
        return _build(
            ChunkEvent, (CONTENT, estimate_tokens(content), content, "", (), finish, usage, timings, extra, None)
        )
    if thought:
        return _build(
            ChunkEvent, (REASONING, estimate_tokens(thought), "", thought, (), finish, usage, timings, extra, None)
        )
    kind = ROLE if delta.get("role") else EMPTY
    return _build(ChunkEvent, (kind, 0, "", "", (), finish, usage, timings, extra, None))


class EventParser:
    """Fills a record from stamped raw events: kinds, token counts, text, tool calls, usage.

    Incremental, so `stream_chat` can hand the event loop back between batches: when
    hundreds of streams end at once, their parsing must not delay other streams' stamps.
    """

    def __init__(self, record: RequestRecord):
        self.record = record
        self.tools: dict[int, dict[str, Any]] = {}
        self.text: list[str] = []
        self.reasoning: list[str] = []

    def feed(self, raw_events: list[tuple[int, bytes]]) -> None:
        record = self.record
        add_text, add_reasoning, add_ns = self.text.append, self.reasoning.append, record.event_ns.append
        add_kind, add_tokens = record.event_kind.append, record.event_tokens.append
        for t_ns, raw in raw_events:
            if raw[:6] == b"data: " and b"\n" not in raw and b"\r" not in raw:
                data = raw[6:]  # the common one-line event
            else:
                found = event_data(raw)
                if found is None:
                    continue  # comments and keep-alives are not events of the protocol
                data = found
            if data == b"[DONE]":
                _add(record, t_ns, DONE, 0)
                continue
            try:
                chunk = _loads(data)
            except ValueError:
                chunk = None
            if not isinstance(chunk, dict):
                record.malformed_events += 1
                _add(record, t_ns, MALFORMED, 0)
                continue
            # the short path for most of a stream: one plain content (or reasoning) delta,
            # nothing else to keep; the same result as `apply(parse_chunk(chunk))`
            try:
                (choice,) = chunk["choices"]
                delta = choice["delta"]
            except (KeyError, TypeError, ValueError):
                delta = None
            if (
                type(delta) is dict
                and len(delta) == 1
                and not choice.get("finish_reason")
                and _RECORDED_KEYS.isdisjoint(chunk)
            ):
                text, add, kind = delta.get("content"), add_text, CONTENT
                if type(text) is not str or not text:
                    text, add, kind = delta.get("reasoning_content") or delta.get("reasoning"), add_reasoning, REASONING
                if type(text) is str and text:
                    add(text)
                    add_ns(t_ns)
                    add_kind(kind)
                    add_tokens(estimate_tokens(text))
                    continue
            self.apply(t_ns, parse_chunk(chunk))

    def apply(self, t_ns: int, event: ChunkEvent) -> None:
        """Add one chunk's event, stamped `t_ns`, to the record."""
        record = self.record
        kind, tokens, content, reasoning, tool_calls, finish_reason, usage, timings, extra, error = event  # one step
        if error is not None:
            record.error = error
        if usage is not None:
            record.usage = usage
        if timings is not None:
            record.timings = timings
        for key, value in extra:
            record.extra[key] = value
        if finish_reason:
            record.finish_reason = finish_reason
        for call in tool_calls:
            _merge_tool_delta(self.tools, call)
        if content:
            self.text.append(content)
        if reasoning:
            self.reasoning.append(reasoning)
        record.event_ns.append(t_ns)
        record.event_kind.append(kind)
        record.event_tokens.append(tokens)

    def finish(self) -> RequestRecord:
        record = self.record
        record.text = "".join(self.text)
        record.reasoning = "".join(self.reasoning)
        record.tool_calls = [self.tools[i] for i in sorted(self.tools)]
        if record.malformed_events and record.error is None:
            record.error = f"malformed SSE: {record.malformed_events} event(s) were not JSON"
        return record


def parse_events(record: RequestRecord, raw_events: list[tuple[int, bytes]]) -> None:
    """Parse all stamped events of one request at once (see `EventParser`)."""
    parser = EventParser(record)
    parser.feed(raw_events)
    parser.finish()


def _add(record: RequestRecord, t_ns: int, kind: str, tokens: int) -> None:
    record.event_ns.append(t_ns)
    record.event_kind.append(kind)
    record.event_tokens.append(tokens)


def _tool_tokens(calls: list[Any]) -> int:
    """Token estimate of one tool-call delta: its name and argument fragments, at least one per call."""
    total = 0
    for call in calls:
        fn = (call.get("function") if isinstance(call, dict) else None) or {}
        total += estimate_tokens(f"{fn.get('name') or ''} {fn.get('arguments') or ''}")
    return total


def _merge_tool_delta(tools: dict[int, dict[str, Any]], call: dict[str, Any]) -> None:
    """Tool calls stream as fragments keyed by index: name once, arguments in pieces."""
    index = call.get("index", len(tools))
    slot = tools.setdefault(index, {"id": None, "name": "", "arguments": ""})
    if call.get("id"):
        slot["id"] = call["id"]
    fn = call.get("function") or {}
    if fn.get("name"):
        slot["name"] += fn["name"] if not slot["name"] else ""
    if fn.get("arguments"):
        slot["arguments"] += fn["arguments"]
