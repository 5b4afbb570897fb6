"""Measurement definitions: the one module that says what each number means.

Everything here is a pure function of a `RequestRecord` (what the client saw, with a
`perf_counter_ns` stamp taken at the first byte of each SSE event) or of server counters,
so any metric can be recomputed later from the stored raw records.

Definitions (also in the README):
- ttfr_s: send -> first byte of the first event of any kind.
- ttft_s: send -> first event carrying content, reasoning or a tool-call delta; role-only
  and empty chunks do not count.
- decode_tps: (completion_tokens - 1) / (t_last_token - t_first_token), completion_tokens
  from the server's usage; without it, tokens are estimated from the deltas and the source
  says `client-estimate`.
- itl_s: gaps between consecutive token-carrying events.
- e2e_s: send -> end of stream.
- reuse: cached_tokens / prompt_tokens, both from the server, with the field they came from.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

NS = 1_000_000_000

# Event kinds, as the client classifies each SSE event.
ROLE = "role"
CONTENT = "content"
REASONING = "reasoning"
TOOL = "tool"
EMPTY = "empty"
USAGE = "usage"
MALFORMED = "malformed"
DONE = "done"
TOKEN_KINDS = frozenset({CONTENT, REASONING, TOOL})

SOURCE_SERVER = "server"
SOURCE_CLIENT_ESTIMATE = "client-estimate"

_WORD = re.compile(r"\S+")


@dataclass(slots=True)
class RequestRecord:
    """What one streamed request looked like from the client, kept raw."""

    send_ns: int = 0
    end_ns: int = 0
    status: int | None = None
    event_ns: list[int] = field(default_factory=list)
    event_kind: list[str] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)
    text: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    retries: int = 0
    malformed_events: int = 0
    label: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_tokens(text: str) -> int:
    """A client-side token estimate for one delta: whitespace-separated pieces, at least 1.

    A speculative chunk that carries several words counts as several tokens; only used
    when the server reports no completion_tokens, and then marked `client-estimate`.
    """
    return max(1, len(_WORD.findall(text)))


def _first(record: RequestRecord, kinds: frozenset[str] | None = None) -> int | None:
    for t, kind in zip(record.event_ns, record.event_kind):
        if kinds is None or kind in kinds:
            return t
    return None


def ttfr_s(record: RequestRecord) -> float | None:
    if not record.ok or not record.event_ns:
        return None
    return (record.event_ns[0] - record.send_ns) / NS


def ttft_s(record: RequestRecord) -> float | None:
    if not record.ok:
        return None
    t = _first(record, TOKEN_KINDS)
    return None if t is None else (t - record.send_ns) / NS


def e2e_s(record: RequestRecord) -> float | None:
    if not record.ok or not record.end_ns:
        return None
    return (record.end_ns - record.send_ns) / NS


def token_event_times(record: RequestRecord) -> list[int]:
    return [t for t, k in zip(record.event_ns, record.event_kind) if k in TOKEN_KINDS]


def itl_s(record: RequestRecord) -> list[float]:
    times = token_event_times(record)
    return [(b - a) / NS for a, b in zip(times, times[1:])]


def completion_tokens(record: RequestRecord) -> tuple[int | None, str]:
    """Completion tokens and where they came from (server usage, or a client estimate)."""
    usage = record.usage or {}
    value = usage.get("completion_tokens")
    if isinstance(value, int) and value >= 0:
        return value, SOURCE_SERVER
    timings = record.timings or {}
    if isinstance(timings.get("predicted_n"), int):
        return timings["predicted_n"], SOURCE_SERVER
    counted = sum(n for n, k in zip(record.event_tokens, record.event_kind) if k in TOKEN_KINDS)
    return (counted if counted else None), SOURCE_CLIENT_ESTIMATE


def decode_tps(record: RequestRecord) -> tuple[float | None, str]:
    """Decode rate after the first token; None when fewer than two token events arrived."""
    if not record.ok:
        return None, ""
    times = token_event_times(record)
    tokens, source = completion_tokens(record)
    if tokens is None or tokens < 2 or len(times) < 2 or times[-1] <= times[0]:
        return None, source
    return (tokens - 1) / ((times[-1] - times[0]) / NS), source


# -- cached tokens: every field shape a runtime may use -----------------------------------

CACHED_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("timings.cache_n", ("timings", "cache_n")),
    ("usage.prompt_tokens_details.cached_tokens", ("usage", "prompt_tokens_details", "cached_tokens")),
    ("usage.cached_tokens", ("usage", "cached_tokens")),
    ("x_mlx_dspark.cached_tokens", ("x_mlx_dspark", "cached_tokens")),
)


def _dig(obj: Any, path: Sequence[str]) -> Any:
    for part in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def extract_cached_tokens(payload: Mapping[str, Any], prefer: str | None = None) -> tuple[int | None, str]:
    """Find the server-reported cached prompt tokens in a final chunk or response body.

    `payload` holds the top-level keys of the final event(s): usage, timings, x_mlx_dspark.
    `prefer` names the field the runtime adapter says is authoritative; otherwise the
    first present field in CACHED_FIELDS wins. Returns (value, source field).
    """
    order = list(CACHED_FIELDS)
    if prefer:
        order.sort(key=lambda f: f[0] != prefer)
    for name, path in order:
        value = _dig(payload, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value), name
    return None, ""


def prompt_tokens(payload: Mapping[str, Any]) -> int | None:
    value = _dig(payload, ("usage", "prompt_tokens"))
    if isinstance(value, int):
        return value
    timings_n = _dig(payload, ("timings", "prompt_n"))
    cache_n = _dig(payload, ("timings", "cache_n"))
    if isinstance(timings_n, int) and isinstance(cache_n, int):
        return timings_n + cache_n
    return None


def record_payload(record: RequestRecord) -> dict[str, Any]:
    payload: dict[str, Any] = dict(record.extra)
    if record.usage is not None:
        payload["usage"] = record.usage
    if record.timings is not None:
        payload["timings"] = record.timings
    return payload


def reuse(cached: int | None, prompt: int | None) -> float | None:
    if cached is None or not prompt:
        return None
    return max(0.0, min(1.0, cached / prompt))


# -- statistics over many records; failed requests never enter them -----------------------


def ok_records(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100]."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summarize(values: Sequence[float | None]) -> dict[str, float]:
    """Median and spread of a sample (None values, i.e. failed requests, are dropped)."""
    data = [v for v in values if v is not None]
    if not data:
        return {}
    out = {
        "median": statistics.median(data),
        "min": min(data),
        "max": max(data),
        "n": float(len(data)),
    }
    out["p90"] = percentile(data, 90) or out["max"]
    out["stdev"] = statistics.stdev(data) if len(data) > 1 else 0.0
    return out


def counter_deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Per-probe deltas of cumulative server counters (after - before), never raw totals.

    A counter that went backwards means the server restarted in between; the delta is then
    the `after` value (what accumulated since the restart), not a negative number.
    """
    out: dict[str, float] = {}
    for key, value in after.items():
        if key in before:
            delta = value - before[key]
            out[key] = value if delta < 0 else delta
    return out
