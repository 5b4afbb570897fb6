"""SSE framing: a response body's bytes split into events, each stamped with the arrival
of its first byte, and an event's `data` field taken out of its lines.

Only bytes are handled here; parsing (`arms/events.py`) waits until the stream ends so
that it never delays the stamps of concurrent streams. Where the stamps come from is the
transport's business (`arms/transport.py`): a `time_of(body offset)` answering from the
data_received stamper, or None; without an answer, the event is stamped at read time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable

_SEPARATOR = re.compile(rb"\r?\n\r?\n")  # an event's end, once a body has carriage returns


class EventSplitter:
    """Splits one body into stamped raw events, appended to `events` as they complete (so a
    stream cut short keeps what arrived), and counts how their stamps were taken.

    `late` is the number of events stamped at read time, `exact` the number stamped from
    `time_of`; both are right also when reading stops with an exception.
    """

    __slots__ = ("events", "late", "_first", "_time_of")

    def __init__(self, events: list[tuple[int, bytes]], time_of: Callable[[int], int | None] | None):
        self.events = events
        self.late = 0
        self._first = len(events)
        self._time_of = time_of

    @property
    def exact(self) -> int:
        return len(self.events) - self._first - self.late

    async def read_all(self, read: Callable[[], Awaitable[bytes]]) -> None:
        """Read the body to its end (`read` returns b"" there), splitting it into events.

        One pass over each chunk, all state in locals: this loop runs once per read of
        every concurrent stream.
        """
        events = self.events
        time_of = self._time_of
        buffer = b""
        base = 0  # body offset of buffer[0]
        start_ns = 0  # arrival of the first byte of the pending event
        start_late = False  # ... taken at read time, not from time_of
        late = 0  # events stamped at read time (the rest: from time_of)
        crlf = False  # events end with "\n\n" (bytes.find, far cheaper per event than a regex) until a "\r" shows up
        try:
            while True:
                chunk = await read()
                now = time.perf_counter_ns()
                if not chunk:
                    break
                if not buffer:
                    stamp = time_of(base) if time_of is not None else None
                    start_late = stamp is None
                    start_ns = now if stamp is None else stamp
                buffer += chunk
                crlf = crlf or b"\r" in chunk
                pos = 0
                while True:
                    if crlf:
                        match = _SEPARATOR.search(buffer, pos)
                        if match is None:
                            break
                        sep, after = match.span()
                    else:
                        sep = buffer.find(b"\n\n", pos)
                        if sep < 0:
                            break
                        after = sep + 2
                    events.append((start_ns, buffer[pos:sep]))
                    late += start_late
                    pos = after
                    if pos < len(buffer):
                        stamp = time_of(base + pos) if time_of is not None else None
                        start_late = stamp is None
                        start_ns = now if stamp is None else stamp
                if pos:
                    buffer = buffer[pos:]
                    base += pos
            if buffer.strip():
                events.append((start_ns, buffer))
                late += start_late
        finally:
            self.late = late


def event_data(raw: bytes) -> bytes | None:
    """The `data` of one raw event (its data lines joined by "\\n"), or None when it has
    none: comments and keep-alives are not events of the protocol."""
    if raw.startswith(b"data: ") and b"\n" not in raw:  # the common one-line event
        return raw[6:].rstrip(b"\r")
    if b"\r" in raw:
        raw = raw.replace(b"\r", b"")
    lines = [line[5:].lstrip() if line.startswith(b"data:") else None for line in raw.split(b"\n")]
    data = [line for line in lines if line is not None]
    if not data:
        return None
    return b"\n".join(data)
