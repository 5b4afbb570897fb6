"""Trace files (arms.workloads.traces): read and checked line by line, cut for a replay, the
reuse they imply, and the generator's shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arms.workloads.traces import (
    TraceError,
    TraceRequest,
    TraceShape,
    cut,
    implied_cached_tokens,
    make_trace,
    read_trace,
    write_trace,
)


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _row(t: float, n_in: int, ids: list[int], n_out: int = 8) -> dict[str, object]:
    return {"timestamp": t, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def test_a_trace_is_read_in_time_order_with_blank_lines_skipped(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [_row(500, 600, [1, 2]), "", _row(0, 100, [1])])
    requests = read_trace(path)
    assert [r.timestamp_ms for r in requests] == [0.0, 500.0]
    assert requests[1] == TraceRequest(500.0, 600, 8, (1, 2))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "t.jsonl:2: not JSON"),
        ("[1, 2]", "t.jsonl:2: expected an object"),
        (json.dumps({"timestamp": 1, "input_length": 5}), "t.jsonl:2: missing output_length, hash_ids"),
        (json.dumps(_row(-1, 5, [1])), "t.jsonl:2: timestamp: expected milliseconds >= 0, found -1"),
        (json.dumps(_row(1, 0, [])), "t.jsonl:2: input_length: expected a whole number of tokens >= 1, found 0"),
        (json.dumps(_row(1, 5, ["a"])), "t.jsonl:2: hash_ids: expected a list of integers"),
        (
            json.dumps(_row(1, 1025, [1, 2])),
            "t.jsonl:2: hash_ids: 2 ids for input_length 1025, which is 3 block(s) of 512",
        ),
    ],
)
def test_a_bad_line_is_refused_naming_the_line_and_the_field(tmp_path: Path, line: str, expected: str) -> None:
    path = _write(tmp_path / "t.jsonl", [_row(0, 10, [1]), line])
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert expected in str(caught.value)


def test_an_empty_or_missing_trace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no requests"):
        read_trace(_write(tmp_path / "e.jsonl", [""]))
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace(tmp_path / "absent.jsonl")


def test_the_block_size_is_the_traces_own(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [_row(0, 100, [7, 8, 9, 10])])
    with pytest.raises(TraceError, match="set block_tokens"):
        read_trace(path)
    assert read_trace(path, block_tokens=32)[0].hash_ids == (7, 8, 9, 10)


def test_a_cut_scales_the_recorded_gaps_and_stops_at_a_count_or_a_duration() -> None:
    requests = [TraceRequest(1000.0 + 500.0 * i, 10, 4, (i,)) for i in range(6)]
    times, kept = cut(requests)
    assert times == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5] and kept == requests
    times, kept = cut(requests, time_scale=0.5, duration_s=1.0)
    assert times == [0.0, 0.25, 0.5, 0.75] and len(kept) == 4
    assert cut(requests, count=2)[0] == [0.0, 0.5]
    with pytest.raises(ValueError, match="time_scale"):
        cut(requests, time_scale=0)


def test_implied_reuse_counts_leading_blocks_seen_before_as_far_as_they_reached() -> None:
    b = 4
    requests = [
        TraceRequest(0, 6, 1, (1, 2)),  # new: nothing cached
        TraceRequest(1, 10, 1, (1, 2, 3)),  # block 1 whole (4), block 2 only as far as before (2 of 4): stop
        TraceRequest(2, 9, 1, (1, 5, 6)),  # block 1 only (4); 5 is new
        TraceRequest(3, 12, 1, (1, 2, 3)),  # 4 + 4 + 2 (block 3 held 2 tokens before)
        TraceRequest(4, 4, 1, (1,)),  # all of it but the last token
        TraceRequest(5, 8, 1, (9, 1)),  # a seen block after a new one is no prefix
    ]
    assert implied_cached_tokens(requests, b) == [0, 6, 4, 10, 3, 0]


def test_make_trace_writes_the_shape_asked_for_and_the_same_file_for_the_same_seed(tmp_path: Path) -> None:
    shape = TraceShape(
        sessions=5,
        turns=3,
        system_blocks=2,
        task_blocks=1,
        turn_blocks=1,
        session_rate=2.0,
        think_s=1.0,
        output_min=4,
        output_max=9,
        block_tokens=64,
        seed=3,
    )
    requests = make_trace(shape)
    assert len(requests) == 15
    assert [r.timestamp_ms for r in requests] == sorted(r.timestamp_ms for r in requests)
    assert all(r.hash_ids[:2] == (0, 1) for r in requests)  # every session starts with the shared system blocks
    assert all(4 <= r.output_length <= 9 for r in requests)
    assert {len(r.hash_ids) for r in requests} == {3, 4, 5}  # system + task, then one block more a turn
    path = tmp_path / "t.jsonl"
    assert write_trace(path, requests) == 15
    assert read_trace(path, block_tokens=64) == requests
    assert make_trace(shape) == requests and make_trace(TraceShape(**{**shape.__dict__, "seed": 4})) != requests
    # the reuse it implies: the shared system prompt from the second session on, the whole
    # history from a session's second turn on
    implied = implied_cached_tokens(requests, 64)
    first_turns = [i for i, r in enumerate(requests) if len(r.hash_ids) == 3]
    assert implied[first_turns[0]] == 0 and all(implied[i] == 128 for i in first_turns[1:])
    later = [i for i, r in enumerate(requests) if len(r.hash_ids) > 3]
    assert all(implied[i] > 128 for i in later)  # and the task, as far as the previous turn reached


def test_a_shape_that_cannot_be_made_is_refused() -> None:
    with pytest.raises(ValueError, match="sessions must be >= 1"):
        TraceShape(sessions=0)
    with pytest.raises(ValueError, match="output_max"):
        TraceShape(output_min=10, output_max=5)
