"""Request traces: the Mooncake-style JSONL every leading load generator replays, read,
checked, written and generated here.

One request per line: `timestamp` (ms from the trace's start), `input_length` and
`output_length` (tokens), and `hash_ids`, the ids of the prompt's blocks of `block_tokens`
tokens (512 in Mooncake's traces), its last block possibly partial. An id names a block
*and everything before it* (a prefix hash), so two requests whose prompts start with the
same ids share that prefix: what a prefix cache can serve. The replay (`arms.probes.load`,
profile `trace`) rebuilds each prompt from its ids, equal ids as equal text, so a block
the trace says is shared is a real shared prefix on the server.

`implied_cached_tokens` is the reuse the trace itself implies, with an unbounded cache:
the leading blocks of a request already seen in an earlier request, in tokens, never
the last token (a server always computes it). A replay stores it beside what the server
reports, so a cache that evicts or never matches shows as the difference.

An Azure or BurstGPT CSV reads to the same requests, without hash ids
(`arms.workloads.trace_formats`, which reads every format and is what callers use).

`make_trace` writes a trace of a chosen shape (sessions arriving as a Poisson process,
each a shared system prompt, then turns whose history grows), so the examples and tests
replay a real file the project made.

A leaf of the domain core: plain values, no I/O beyond the file named.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arms.workloads.jsonl import json_lines, read_text

DEFAULT_BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace file that cannot be replayed: the file, the line and what was expected."""


@dataclass(frozen=True)
class TraceRequest:
    """One line of a trace."""

    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "timestamp": self.timestamp_ms,
            "input_length": self.input_length,
            "output_length": self.output_length,
            "hash_ids": list(self.hash_ids),
        }


def _line_error(path: Path, number: int, message: str) -> TraceError:
    return TraceError(f"{path}:{number}: {message}")


def _request(path: Path, number: int, row: Any, block_tokens: int) -> TraceRequest:
    if not isinstance(row, dict):
        raise _line_error(path, number, f"expected an object with {', '.join(FIELDS)}, found {type(row).__name__}")
    missing = [f for f in FIELDS if f not in row]
    if missing:
        raise _line_error(path, number, f"missing {', '.join(missing)} (each line needs {', '.join(FIELDS)})")
    stamp, n_in, n_out, ids = (row[f] for f in FIELDS)
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp) or stamp < 0:
        raise _line_error(path, number, f"timestamp: expected milliseconds >= 0, found {stamp!r}")
    for name, value in (("input_length", n_in), ("output_length", n_out)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _line_error(path, number, f"{name}: expected a whole number of tokens >= 1, found {value!r}")
    if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise _line_error(path, number, f"hash_ids: expected a list of integers, found {ids!r}")
    blocks = math.ceil(n_in / block_tokens)
    if ids and len(ids) != blocks:
        raise _line_error(
            path,
            number,
            f"hash_ids: {len(ids)} ids for input_length {n_in}, which is {blocks} block(s) of {block_tokens} tokens "
            f"(is the trace's block size another? set block_tokens)",
        )
    return TraceRequest(float(stamp), n_in, n_out, tuple(ids))


def read_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> list[TraceRequest]:
    """Every request of a Mooncake-style JSONL trace, checked line by line (blank lines
    skipped), in timestamp order. A bad line is refused naming the file, the line and the
    field. `arms.workloads.trace_formats.read_requests` reads the CSV formats too."""
    source = Path(path)
    if block_tokens < 1:
        raise TraceError(f"{source}: block_tokens must be >= 1, found {block_tokens}")
    text = read_text(source, "trace", TraceError)
    requests = [_request(source, n, row, block_tokens) for n, row in json_lines(source, text, TraceError)]
    if not requests:
        raise TraceError(f"{source}: no requests (one JSON object per line: {', '.join(FIELDS)})")
    stamps = [r.timestamp_ms for r in requests]
    if stamps != sorted(stamps):
        requests = sorted(requests, key=lambda r: r.timestamp_ms)  # stable: equal times keep their order
    return requests


def write_trace(path: str | Path, requests: Iterable[TraceRequest]) -> int:
    """Write requests as a trace file; returns how many."""
    lines = [json.dumps(r.as_json(), separators=(",", ":")) for r in requests]
    Path(path).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return len(lines)


def cut(
    requests: Sequence[TraceRequest],
    *,
    count: int | None = None,
    duration_s: float | None = None,
    time_scale: float = 1.0,
) -> tuple[list[float], list[TraceRequest]]:
    """The send times (seconds from the first request, the recorded gaps multiplied by
    `time_scale`: 0.5 replays twice as fast) and the requests within the first `count`
    and before `duration_s` of replay time, whichever ends first."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, found {time_scale}")
    if not requests:
        return [], []
    start = requests[0].timestamp_ms
    times: list[float] = []
    kept: list[TraceRequest] = []
    for request in requests:
        at = (request.timestamp_ms - start) / 1000.0 * time_scale
        if (count is not None and len(kept) >= count) or (duration_s is not None and at >= duration_s):
            break
        times.append(at)
        kept.append(request)
    return times, kept


def implied_cached_tokens(requests: Sequence[TraceRequest], block_tokens: int = DEFAULT_BLOCK_TOKENS) -> list[int]:
    """Per request, the tokens an unbounded prefix cache would serve: its leading blocks
    that an earlier request had, as far as the earlier one's block reached (a partial last
    block shares only its own length), never the prompt's last token."""
    seen: dict[int, int] = {}  # block id -> the most of its tokens any earlier prompt held
    out = []
    for request in requests:
        shared = 0
        for j, block in enumerate(request.hash_ids):
            here = min(block_tokens, request.input_length - j * block_tokens)
            had = seen.get(block, 0)
            shared += min(had, here)
            if had < here:
                break
        out.append(min(shared, request.input_length - 1))
        for j, block in enumerate(request.hash_ids):
            seen[block] = max(seen.get(block, 0), min(block_tokens, request.input_length - j * block_tokens))
    return out


@dataclass(frozen=True)
class TraceShape:
    """What `make_trace` writes: `sessions` agent sessions arriving as a Poisson process at
    `session_rate` a second; each starts with the shared system prompt (`system_blocks`
    blocks, the same for every session), then its own task (`task_blocks`); each of its
    `turns` turns adds `turn_blocks` of history (the reply and a tool's output) and is
    sent `think_s` after the previous one; output lengths are uniform in
    [output_min, output_max]. Times in the file are milliseconds."""

    sessions: int = 8
    turns: int = 4
    system_blocks: int = 2
    task_blocks: int = 1
    turn_blocks: int = 1
    session_rate: float = 1.0
    think_s: float = 2.0
    output_min: int = 16
    output_max: int = 64
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("sessions", "turns", "task_blocks", "block_tokens", "output_min"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, found {getattr(self, name)}")
        for name in ("system_blocks", "turn_blocks"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, found {getattr(self, name)}")
        if self.output_max < self.output_min:
            raise ValueError(f"output_max ({self.output_max}) is below output_min ({self.output_min})")
        if not self.session_rate > 0 or self.think_s < 0:
            raise ValueError("session_rate must be > 0 and think_s >= 0")


def make_trace(shape: TraceShape) -> list[TraceRequest]:
    """A trace of `shape`, in timestamp order; the same shape (and seed) gives the same file."""
    rng = random.Random(shape.seed)
    system = list(range(shape.system_blocks))  # ids 0..: the prefix every session shares
    next_id = shape.system_blocks
    requests = []
    start = 0.0
    for _ in range(shape.sessions):
        start += rng.expovariate(shape.session_rate)
        history = list(system)
        for _ in range(shape.task_blocks):
            history.append(next_id)
            next_id += 1
        for turn in range(shape.turns):
            if turn:
                for _ in range(shape.turn_blocks):
                    history.append(next_id)
                    next_id += 1
            # the last block is partial: a prompt rarely ends on a block boundary
            tail = rng.randint(1, shape.block_tokens)
            length = (len(history) - 1) * shape.block_tokens + tail
            stamp = round((start + turn * shape.think_s) * 1000.0, 3)
            requests.append(
                TraceRequest(stamp, length, rng.randint(shape.output_min, shape.output_max), tuple(history))
            )
    return sorted(requests, key=lambda r: r.timestamp_ms)
