"""How each number is computed from what the client saw: the measurement formulas. Its
name, unit and direction are the catalogue's (`campaign.core.metrics`), its formula is here.

Everything here is a pure function of a `RequestRecord` (what the client saw, with a
`perf_counter_ns` stamp taken at the first byte of each SSE event) or of server counters,
so any metric can be recomputed later from the stored raw records.

Definitions (also in the README):
- ttfr_s: send -> first byte of the first event of any kind.
- ttft_s: send -> first event carrying content, reasoning or a tool-call delta; role-only
  and empty chunks do not count.
- decode_tps: (completion_tokens - first_event_tokens) / (t_last_token - t_first_token).
  completion_tokens comes from the server's usage; without it, tokens are estimated from
  the deltas and the source says `client-estimate`. first_event_tokens is always estimated
  from the first token-carrying event's delta (`estimate_tokens`): a speculative or
  coalesced first event carrying several tokens must not count them as decoded inside a
  window that starts when they had already arrived.
- tpot_s: time per output token after the first event, (t_last_token - t_first_token) /
  (completion_tokens - first_event_tokens) = 1 / decode_tps. Per token, not per event.
- itl_s: gaps between consecutive token-carrying *events* (one value per gap). With
  several tokens per event (speculation, coalescing) an ITL is longer than a TPOT; ITL
  shows stalls as the user sees them, TPOT the generation rate.
- e2e_s: send -> end of stream.
- schedule_lag_s: send - the send a load profile scheduled (`scheduled_ns`); per-run
  numbers of a load (goodput, throughput) are defined in `arms/workloads/profiles.py`.
- reuse: cached_tokens / prompt_tokens, both from the server, with the field they came
  from. Never clamped: a value below 0 or above 1 is impossible and is stored as measured,
  its source flagged by `flag_reuse_source` ("timings.cache_n; impossible: >1").
- stamp_source / send_stamp_source on each record say how its times were taken
  ("data_received" or "read-time"; "headers-sent" or "fallback"), see `arms/client.py`.
  A request refused before any byte is sent once more; its times then count from the
  first attempt's send ("first-attempt"), since that is how long its user waited.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
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

# How a record's times were taken (RequestRecord.stamp_source / send_stamp_source).
STAMP_DATA_RECEIVED = "data_received"  # each event: when the loop handed its bytes to the protocol
STAMP_READ_TIME = "read-time"  # each event: when the reading coroutine got it (later under load)
STAMP_MIXED = "mixed"  # some events of the stream one way, some the other
SEND_HEADERS_SENT = "headers-sent"  # send: when the request headers were written to the socket
SEND_FALLBACK = "fallback"  # send: before the request was handed to the client (before any pool wait)
SEND_FIRST_ATTEMPT = (
    "first-attempt"  # a retried request: its first attempt's send (fallback stamp), so TTFT includes the retry
)

# Suffix on a measurement's source when its value is impossible (stored as measured, never clamped).
IMPOSSIBLE = "impossible"


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
    stamp_source: str = ""  # STAMP_*: how event_ns were taken ("" when no body was read)
    send_stamp_source: str = ""  # SEND_*: how send_ns was taken
    scheduled_ns: int | None = None  # a load profile's planned send (arms/workloads/profiles.py); None: unscheduled
    connect_ns: int | None = None  # time spent opening a new connection for this request; None: a pooled one

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """Every field, as plain values (what request rows store as raw_json).

        A shallow copy of each list and dict, not `dataclasses.asdict`'s deep copy: that
        took about a millisecond per request, on the event loop where the other streams'
        stamps are taken. Nested values (usage, timings, tool calls) are shared with the
        record, which nothing changes once its stream has ended.
        """
        out: dict[str, Any] = {}
        for name in _RECORD_FIELDS:
            value = getattr(self, name)
            if isinstance(value, list):
                value = list(value)
            elif isinstance(value, dict):
                value = dict(value)
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RequestRecord:
        """A record back from `to_dict`'s shape (a request row's raw_json, a MemorySink's
        request): the fields it knows, the row's own keys (scenario, mode) left out."""
        return cls(**{name: raw[name] for name in _RECORD_FIELDS if name in raw})


_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))


def estimate_tokens(text: str) -> int:
    """A client-side token estimate for one delta: whitespace-separated pieces, at least 1.

    A speculative chunk that carries several words counts as several tokens; only used
    when the server reports no completion_tokens, and then marked `client-estimate`.
    """
    return max(1, len(text.split()))  # the whitespace-separated runs, without a regex per delta


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


def ttft_parts(record: RequestRecord) -> dict[str, float] | None:
    """A request's TTFT split at a server's own stamps, where the server gave them (the
    simulator's `x_sim`, with `write_stamps`: when its handler got the request and when it
    wrote the first token chunk, on the client's clock): the send side (headers written to
    handler start), the server's own TTFT, the receive side (its write to the client's
    stamp) and the client's TTFT minus the server's. None without stamps. Why: the
    client's accuracy is then a measured number, not a claim (`benchmarks/ttft_truth.py`)."""
    client = ttft_s(record)
    stamps = (record.extra or {}).get("x_sim") or {}
    received, written = stamps.get("received_ns"), stamps.get("first_write_ns")
    if client is None or not received or not written:
        return None
    server = (written - received) / NS
    return {
        "send side": (received - record.send_ns) / NS,
        "server TTFT": server,
        "receive side": (record.send_ns + client * NS - written) / NS,
        "client - server": client - server,
    }


def e2e_s(record: RequestRecord) -> float | None:
    if not record.ok or not record.end_ns:
        return None
    return (record.end_ns - record.send_ns) / NS


def schedule_lag_s(record: RequestRecord) -> float | None:
    """Actual send - scheduled send, for a request a load profile scheduled: how far the
    client fell behind its own schedule (the wait for an in-flight cap included), from the
    schedule to the moment the request could be written: a new connection's time
    (`connect_ns`, the server's and the network's, not the client's) is apart. None for an
    unscheduled request."""
    if record.scheduled_ns is None or not record.send_ns:
        return None
    return (record.send_ns - record.scheduled_ns - (record.connect_ns or 0)) / NS


def connect_s(record: RequestRecord) -> float | None:
    """The time this request spent opening a new connection; None on a pooled one."""
    return None if record.connect_ns is None else record.connect_ns / NS


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


def first_event_tokens(record: RequestRecord) -> int | None:
    """Tokens carried by the first token-carrying event, estimated from its delta.

    The server reports only a total, so this is always the client's estimate
    (`estimate_tokens`: whitespace pieces, at least one; for a tool-call delta, of its name
    and argument fragments). It is exact for the common one-token first event.
    """
    for n, kind in zip(record.event_tokens, record.event_kind):
        if kind in TOKEN_KINDS:
            return n
    return None


def _decode_window(record: RequestRecord) -> tuple[int, int, str] | None:
    """(tokens after the first event, ns from first to last token event, token source).

    The window opens when the first token-carrying event arrives, so the tokens that event
    carried were not decoded inside it and are left out of the numerator.
    """
    if not record.ok:
        return None
    times = token_event_times(record)
    tokens, source = completion_tokens(record)
    first = first_event_tokens(record)
    if tokens is None or first is None or len(times) < 2 or times[-1] <= times[0]:
        return None
    after = tokens - first
    if after < 1:
        return None
    return after, times[-1] - times[0], source


def decode_tps(record: RequestRecord) -> tuple[float | None, str]:
    """Decode rate after the first token-carrying event, with the token source; None when
    fewer than two token events arrived or no token followed the first event."""
    window = _decode_window(record)
    if window is None:
        return None, (completion_tokens(record)[1] if record.ok else "")
    after, span_ns, source = window
    return after / (span_ns / NS), source


def tpot_s(record: RequestRecord) -> tuple[float | None, str]:
    """Time per output token after the first event (per token, where `itl_s` is per event);
    1 / decode_tps, with the same token source."""
    window = _decode_window(record)
    if window is None:
        return None, (completion_tokens(record)[1] if record.ok else "")
    after, span_ns, source = window
    return span_ns / NS / after, source


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
    """cached / prompt as the server reported them, never clamped (see `flag_reuse_source`).

    None when either is unknown or the prompt is 0 tokens (nothing to reuse).
    """
    if cached is None or not prompt:
        return None
    return cached / prompt


def flag_reuse_source(source: str, value: float | None) -> str:
    """The source to store with a reuse value: `source` itself when the value is possible,
    `"<source>; impossible: >1"` or `"<source>; impossible: <0"` when it is not.

    An impossible value (more cached than prompt tokens, or negative counts) means the
    server's counters disagree with each other; it is stored as measured, so the disagreement
    stays visible, and the suffix lets every reader tell it from a real measurement.
    """
    if value is None or 0.0 <= value <= 1.0:
        return source
    return f"{source}; {IMPOSSIBLE}: {'>1' if value > 1.0 else '<0'}"


# -- statistics over many records; failed requests never enter them -----------------------


def ok_records(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100]."""
    data = sorted(v for v in values if v is not None)
    return _interpolate(data, q) if data else None


def _interpolate(data: Sequence[float], q: float) -> float:
    """Percentile q of sorted, non-empty data."""
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def distribution(values: Sequence[float | None]) -> dict[str, float]:
    """Median, min, max, n, p90 and stdev of a sample (None values, i.e. failed requests,
    are dropped). Named for what it returns, apart from `campaign.store.summary.summarize`."""
    data = [v for v in values if v is not None]
    if not data:
        return {}
    out = {
        "median": statistics.median(data),
        "min": min(data),
        "max": max(data),
        "n": float(len(data)),
    }
    out["p90"] = _interpolate(sorted(data), 90)  # a p90 of 0 is 0, never replaced by the max
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
