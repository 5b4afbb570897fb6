"""Request traces in the public formats besides Mooncake's JSONL, read into the same
`TraceRequest` values so the load probe's `trace` profile replays any of them.

- Azure LLM inference traces (Azure/AzurePublicDataset, `AzureLLMInferenceTrace_code.csv`
  and `_conv.csv`): CSV with `TIMESTAMP,ContextTokens,GeneratedTokens`, the time a wall
  clock such as `2023-11-16 18:15:46.6805900` (seven fractional digits: the seventh, 100 ns,
  is below the microsecond the replay schedules by, and is dropped).
- BurstGPT (HPMLL/BurstGPT, `BurstGPT_1.csv` ...): CSV with `Timestamp,Model,Request
  tokens,Response tokens,Total tokens,Log Type`, the time in seconds. A row whose `Response
  tokens` is 0 is a request that failed in that service: it is skipped and counted, since
  replaying it would send a request the trace never saw answered.

Neither carries prefix ids, so `hash_ids` is empty and every prompt is unique: a replay of
them implies no shared-prefix reuse. Times become milliseconds from the first request and
the requests are put in time order. A length of 0 (other than BurstGPT's failures) cannot
be sent, a request needing at least one token in and out: it is raised to 1 and counted.

A leaf of the domain core: plain values, no I/O beyond the file named.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path

from arms.workloads.traces import DEFAULT_BLOCK_TOKENS, TraceError, TraceRequest, read_trace

FORMATS = ("mooncake", "azure", "burstgpt")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")

# `2023-11-16 18:15:46.6805900`, a `T` for the space, any number of fractional digits and
# an optional UTC offset (`Z`, `+00:00`) taken too
_WALL_CLOCK = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class TraceRead:
    """A trace file's requests, with what the reader left out or changed: `failed`, rows
    the dataset marks as failed requests (BurstGPT's `Response tokens` 0), skipped;
    `floored`, rows with a length of 0, sent as 1 token."""

    format: str
    requests: tuple[TraceRequest, ...]
    failed: int = 0
    floored: int = 0


def _fail(path: Path, number: int, message: str) -> TraceError:
    return TraceError(f"{path}:{number}: {message}")


def _first_line(path: Path) -> str:
    """The file's first non-blank line (a byte-order mark dropped), or '' for an empty file."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            for line in handle:
                if line.strip():
                    return line.strip()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a text file ({exc.reason})") from exc
    return ""


def _columns(header: str) -> list[str]:
    return [name.strip() for name in next(csv.reader([header]), [])]


def detect_format(path: str | Path) -> str:
    """The file's format, one of FORMATS: a `.jsonl` (or `.json`, `.ndjson`) file is
    Mooncake's; any other is told by its first line, a JSON object or one of the two CSV
    headers. Anything else is refused, naming the headers looked for."""
    source = Path(path)
    if source.suffix.lower() in JSON_SUFFIXES:
        return "mooncake"
    first = _first_line(source)
    if first.startswith("{"):
        return "mooncake"
    columns = set(_columns(first))
    if set(AZURE_COLUMNS) <= columns:
        return "azure"
    if set(BURSTGPT_COLUMNS) <= columns:
        return "burstgpt"
    raise TraceError(
        f"{source}:1: not a trace format this reads: expected Mooncake JSONL (one object a line), "
        f"an Azure CSV header ({','.join(AZURE_COLUMNS)}) or a BurstGPT one ({BURSTGPT_HEADER}); found {first[:120]!r}"
    )


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column name) for every non-blank data row; a header without a
    required column, or a row short of one, is refused naming the line."""
    try:
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc})") from exc
    with handle:
        reader = csv.reader(handle)
        try:
            header: list[str] | None = None
            where: dict[str, int] = {}
            for fields in reader:
                if not any(f.strip() for f in fields):
                    continue
                if header is None:
                    header = [f.strip() for f in fields]
                    missing = [c for c in required if c not in header]
                    if missing:
                        raise _fail(
                            path,
                            reader.line_num,
                            f"header: missing column {', '.join(missing)} (expected {', '.join(required)})",
                        )
                    where = {c: header.index(c) for c in required}
                    continue
                try:
                    yield reader.line_num, {c: fields[i].strip() for c, i in where.items()}
                except IndexError:
                    short = [c for c, i in where.items() if i >= len(fields)]
                    raise _fail(
                        path,
                        reader.line_num,
                        f"missing {', '.join(short)}: {len(fields)} field(s) for {len(header)} columns",
                    ) from None
        except csv.Error as exc:
            raise _fail(path, reader.line_num, f"not CSV ({exc})") from exc
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}: not a text file ({exc.reason})") from exc


def _tokens(path: Path, number: int, column: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _fail(path, number, f"{column}: expected a whole number of tokens, found {text!r}") from None
    if value < 0:
        raise _fail(path, number, f"{column}: expected a length >= 0, found {value}")
    return value


def wall_clock_us(text: str) -> int | None:
    """Microseconds since the epoch of a wall-clock time such as `2023-11-16 18:15:46.6805900`
    (UTC unless it names an offset), or None when it is not one. Digits past the sixth are
    dropped, not rounded, so a time never moves into the next second."""
    match = _WALL_CLOCK.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    zone: tzinfo = UTC
    if offset and offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        zone = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=zone)
    except ValueError:
        return None
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    return (moment - _EPOCH) // _MICROSECOND + micro


def _in_order(
    kind: str, stamped: list[tuple[float, int, int]], path: Path, failed: int = 0, floored: int = 0
) -> TraceRead:
    """Requests from (time in ms, input, output) rows: times from the first request (the
    earliest, whatever the row order), in time order, equal times in file order."""
    if not stamped:
        hint = f" ({failed} failed row(s) skipped)" if failed else ""
        raise TraceError(f"{path}: no requests{hint}")
    start = min(at for at, _, _ in stamped)
    requests = [TraceRequest(round(at - start, 3), n_in, n_out, ()) for at, n_in, n_out in stamped]
    return TraceRead(kind, tuple(sorted(requests, key=lambda r: r.timestamp_ms)), failed, floored)


def read_azure(path: str | Path) -> TraceRead:
    """An Azure LLM inference trace: TIMESTAMP (a wall clock, to the microsecond),
    ContextTokens in, GeneratedTokens out."""
    source = Path(path)
    stamped: list[tuple[float, int, int]] = []
    floored = 0
    for number, row in _rows(source, AZURE_COLUMNS):
        at = wall_clock_us(row["TIMESTAMP"])
        if at is None:
            raise _fail(
                source,
                number,
                f"TIMESTAMP: expected a time like 2023-11-16 18:15:46.6805900, found {row['TIMESTAMP']!r}",
            )
        n_in = _tokens(source, number, "ContextTokens", row["ContextTokens"])
        n_out = _tokens(source, number, "GeneratedTokens", row["GeneratedTokens"])
        floored += n_in == 0 or n_out == 0
        stamped.append((at / 1000.0, max(1, n_in), max(1, n_out)))
    return _in_order("azure", stamped, source, floored=floored)


def read_burstgpt(path: str | Path) -> TraceRead:
    """A BurstGPT trace: Timestamp (seconds), Request tokens in, Response tokens out; rows
    with Response tokens 0 (the dataset's failed requests) skipped and counted."""
    source = Path(path)
    stamped: list[tuple[float, int, int]] = []
    failed = floored = 0
    for number, row in _rows(source, BURSTGPT_COLUMNS):
        try:
            seconds = float(row["Timestamp"])
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or seconds < 0:
            raise _fail(source, number, f"Timestamp: expected seconds >= 0, found {row['Timestamp']!r}")
        n_in = _tokens(source, number, "Request tokens", row["Request tokens"])
        n_out = _tokens(source, number, "Response tokens", row["Response tokens"])
        if n_out == 0:
            failed += 1
            continue
        floored += n_in == 0
        stamped.append((seconds * 1000.0, max(1, n_in), n_out))
    return _in_order("burstgpt", stamped, source, failed=failed, floored=floored)


def read_any(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> TraceRead:
    """A trace in any of the formats, told by `detect_format`; `block_tokens` is the size
    of a Mooncake trace's hash id blocks (the CSV formats have none)."""
    source = Path(path)
    if block_tokens < 1:
        raise TraceError(f"{source}: block_tokens must be >= 1, found {block_tokens}")
    kind = detect_format(source)
    if kind == "azure":
        return read_azure(source)
    if kind == "burstgpt":
        return read_burstgpt(source)
    return TraceRead("mooncake", tuple(read_trace(source, block_tokens)))


def read_requests(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> list[TraceRequest]:
    """The requests of a trace in any format, in time order: what a replay reads."""
    return list(read_any(path, block_tokens).requests)
