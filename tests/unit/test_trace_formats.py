"""Request traces in the Azure and BurstGPT CSV formats (arms.workloads.trace_formats), and
TraceLab's coding-agent traces read as recorded sessions (arms.workloads.tracelab)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arms.probes.agent_load_params import AgentLoadParams
from arms.probes.load_params import LoadParams
from arms.workloads.sessions import SessionsError
from arms.workloads.trace_formats import (
    detect_format,
    read_any,
    read_azure,
    read_burstgpt,
    wall_clock_us,
)
from arms.workloads.trace_formats import read_requests as read_trace
from arms.workloads.tracelab import read_session_file as read_sessions
from arms.workloads.traces import TraceError, TraceRequest, write_trace

DATA = Path(__file__).resolve().parent.parent / "data" / "traces"
AZURE = DATA / "azure_code_sample.csv"
BURSTGPT = DATA / "burstgpt_sample.csv"
TRACELAB = DATA / "tracelab_sample.jsonl"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_the_azure_sample_reads_to_relative_milliseconds_at_the_microsecond() -> None:
    read = read_azure(AZURE)
    assert (read.format, len(read.requests), read.failed, read.floored) == ("azure", 20, 0, 0)
    first, second, third, fourth = read.requests[:4]
    assert first == TraceRequest(0.0, 4808, 10, ())
    # 09:00:00.5581200 less 09:00:00.1234567: the seventh digit (100 ns) is dropped, not rounded
    assert second == TraceRequest(434.664, 3180, 8, ())
    assert third.timestamp_ms == 885.975 and (third.input_length, third.output_length) == (110, 27)
    assert fourth.timestamp_ms == third.timestamp_ms  # .0094310 and .0094318: the same microsecond
    assert read.requests[-1] == TraceRequest(14878.889, 7012, 26, ())
    assert all(r.hash_ids == () for r in read.requests)
    stamps = [r.timestamp_ms for r in read.requests]
    assert stamps == sorted(stamps)


def test_a_wall_clock_is_read_to_the_microsecond() -> None:
    base = wall_clock_us("2023-11-16 18:15:46.6805900")
    assert base is not None and base % 1_000_000 == 680590
    assert wall_clock_us("2023-11-16 18:15:46.6805909") == base  # truncated, never the next microsecond
    assert wall_clock_us("2023-11-16T18:15:46.68059Z") == base
    assert wall_clock_us("2023-11-16 18:15:46") == base - 680590
    assert wall_clock_us("2023-11-16 19:15:46.6805900+01:00") == base
    assert wall_clock_us("2023-02-30 00:00:00") is None and wall_clock_us("yesterday") is None


def test_the_burstgpt_sample_skips_and_counts_its_failed_request() -> None:
    read = read_burstgpt(BURSTGPT)
    assert (read.format, read.failed, read.floored) == ("burstgpt", 1, 0)
    assert len(read.requests) == 17  # 18 rows, one with Response tokens 0
    assert read.requests[0] == TraceRequest(0.0, 472, 118, ())  # 3600 s is the trace's start
    assert read.requests[1] == TraceRequest(2000.0, 1087, 230, ())
    assert all(r.input_length != 2310 for r in read.requests)  # the failed row
    assert [r.timestamp_ms for r in read.requests if r.input_length in (205, 1210)] == [19250.0, 50500.0]
    assert read.requests[-1] == TraceRequest(102000.0, 318, 129, ())


def test_rows_out_of_order_are_put_in_time_order_from_the_earliest(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.csv", [BURSTGPT_HEADER, "20.5,ChatGPT,10,5,15,API log", "10,GPT-4,7,3,10,API log"])
    assert [(r.timestamp_ms, r.input_length) for r in read_burstgpt(path).requests] == [(0.0, 7), (10500.0, 10)]


def test_zero_lengths_are_sent_as_one_token_and_counted(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.csv", [AZURE_HEADER, "2025-01-01 00:00:00.0000000,0,7", "2025-01-01 00:00:01.0,9,0"])
    read = read_azure(path)
    assert read.floored == 2 and [(r.input_length, r.output_length) for r in read.requests] == [(1, 7), (9, 1)]


def test_detect_format_tells_each_format_by_extension_and_header(tmp_path: Path) -> None:
    assert detect_format(AZURE) == "azure"
    assert detect_format(BURSTGPT) == "burstgpt"
    assert detect_format(tmp_path / "absent.jsonl") == "mooncake"  # the extension says so
    mooncake = _write(
        tmp_path / "trace.txt", ['{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1]}']
    )
    assert detect_format(mooncake) == "mooncake"
    # the header decides, whatever the extension; a byte-order mark and extra columns do not matter
    (tmp_path / "azure.txt").write_text("\ufeff" + AZURE_HEADER + ",Extra\n", encoding="utf-8")
    assert detect_format(tmp_path / "azure.txt") == "azure"
    burst3 = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type"
    assert detect_format(_write(tmp_path / "b3.csv", [burst3])) == "burstgpt"
    with pytest.raises(TraceError, match=r"other\.csv:1: not a trace format"):
        detect_format(_write(tmp_path / "other.csv", ["a,b,c", "1,2,3"]))
    with pytest.raises(TraceError, match="cannot read the trace"):
        detect_format(tmp_path / "absent.csv")


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            [AZURE_HEADER, "2025-01-01 00:00:00.1,10,2", "2025-01-01 00:00:01.0,ten,2"],
            "a.csv:3: ContextTokens: expected a whole",
        ),
        (
            [AZURE_HEADER, "2025-01-01 00:00:00.1,10,2", "", "2025-01-01 00:00:01.0,10,-3"],
            "a.csv:4: GeneratedTokens: expected a length >= 0",
        ),
        ([AZURE_HEADER, "16/11/2023 18:15,10,2"], "a.csv:2: TIMESTAMP: expected a time like"),
        ([AZURE_HEADER, "2025-01-01 00:00:00.1,10"], "a.csv:2: missing GeneratedTokens"),
        (["TIMESTAMP,ContextTokens,Generated", "2025-01-01 00:00:00.1,10,2"], "a.csv:1: header: missing column"),
        ([AZURE_HEADER, "2025-01-01 00:00:00.1,12.5,2"], "a.csv:2: ContextTokens: expected a whole number"),
    ],
)
def test_a_bad_azure_row_is_refused_naming_the_line(tmp_path: Path, lines: list[str], expected: str) -> None:
    path = _write(tmp_path / "a.csv", lines)
    with pytest.raises(TraceError) as caught:
        read_azure(path)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("soon,ChatGPT,10,5,15,API log", "b.csv:3: Timestamp: expected seconds >= 0"),
        ("-1,ChatGPT,10,5,15,API log", "b.csv:3: Timestamp: expected seconds >= 0"),
        ("nan,ChatGPT,10,5,15,API log", "b.csv:3: Timestamp: expected seconds >= 0"),
        ("5,ChatGPT,-10,5,15,API log", "b.csv:3: Request tokens: expected a length >= 0"),
        ("5,ChatGPT,10,many,15,API log", "b.csv:3: Response tokens: expected a whole number"),
        ("5,ChatGPT,10", "b.csv:3: missing Response tokens"),
    ],
)
def test_a_bad_burstgpt_row_is_refused_naming_the_line(tmp_path: Path, row: str, expected: str) -> None:
    path = _write(tmp_path / "b.csv", [BURSTGPT_HEADER, "1,ChatGPT,10,5,15,API log", row])
    with pytest.raises(TraceError) as caught:
        read_burstgpt(path)
    assert expected in str(caught.value)


def test_a_file_of_only_failures_or_only_a_header_has_no_requests(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no requests \(1 failed row"):
        read_burstgpt(_write(tmp_path / "b.csv", [BURSTGPT_HEADER, "1,ChatGPT,10,0,10,API log"]))
    with pytest.raises(TraceError, match="no requests"):
        read_azure(_write(tmp_path / "a.csv", [AZURE_HEADER]))


def test_read_any_and_read_trace_take_all_three_formats(tmp_path: Path) -> None:
    mooncake = tmp_path / "m.jsonl"
    write_trace(mooncake, [TraceRequest(5.0, 10, 2, (1,)), TraceRequest(0.0, 6, 3, (2,))])
    assert read_any(mooncake, block_tokens=16).format == "mooncake"
    assert read_trace(mooncake, block_tokens=16) == [TraceRequest(0.0, 6, 3, (2,)), TraceRequest(5.0, 10, 2, (1,))]
    assert read_trace(AZURE) == list(read_any(AZURE).requests)
    assert read_trace(BURSTGPT) == list(read_burstgpt(BURSTGPT).requests)
    assert read_any(BURSTGPT).failed == 1
    with pytest.raises(TraceError, match="block_tokens must be >= 1"):
        read_trace(AZURE, block_tokens=0)


@pytest.mark.parametrize("path", [AZURE, BURSTGPT])
def test_the_load_probe_replays_a_csv_trace(path: Path) -> None:
    params = LoadParams(profile="trace", trace=str(path))
    assert params.workload == "trace"
    requests = params.replayed()
    assert requests == read_trace(path) and all(not r.hash_ids for r in requests)
    assert params.request_tokens() == max(r.input_length + r.output_length for r in requests)
    cut = LoadParams(profile="trace", trace=str(path), requests=3).replayed()
    assert cut == requests[:3]


def test_the_load_probe_refuses_a_bad_csv_before_anything_runs(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.csv", [AZURE_HEADER, "2025-01-01 00:00:00.1,10,-2"])
    with pytest.raises(ValueError, match=r"bad\.csv:2: GeneratedTokens"):
        LoadParams(profile="trace", trace=str(path))


def test_the_tracelab_sample_reads_as_sessions_with_growing_histories() -> None:
    claude, codex = read_sessions(TRACELAB)
    assert (claude.id, claude.start_s, len(claude.turns)) == ("claude:arms-sample-a1", 0.0, 6)
    assert (codex.id, codex.start_s, len(codex.turns)) == ("codex:arms-sample-b1", 60.0, 4)

    def sizes(messages: tuple[dict[str, object], ...]) -> list[tuple[object, int]]:
        return [(m["role"], len(str(m["content"]).split())) for m in messages]

    first, second, *_, pause, compacted = claude.turns
    assert sizes(first.messages) == [("user", 18000)] and first.reply_words == 300 and first.think_s == 0.0
    # the previous prompt, its reply, then the new input: 18000 + 300 + 600 = input_tokens_total 18900
    assert sizes(second.messages) == [("user", 18000), ("assistant", 300), ("user", 600)]
    assert second.messages[:2] == (*first.messages, {"role": "assistant", "content": first.reply})
    assert second.think_s == pytest.approx(1.5)  # the tool call at 00:05.0 to its result at 00:06.5
    assert sum(n for _, n in sizes(pause.messages)) == 22600 and pause.think_s == pytest.approx(109.0)
    assert sizes(compacted.messages) == [("user", 9800)]  # shorter than any earlier turn: nothing kept
    assert [t.think_s for t in claude.turns] == pytest.approx([0.0, 1.5, 2.7, 0.6, 109.0, 1.2])

    # Codex: the reasoning is asked for but not carried into the next prompt
    zero, one, two, three = codex.turns
    assert zero.reply_words == 420 and len(zero.reply.split()) == 240
    assert sizes(one.messages) == [("user", 8200), ("assistant", 240), ("user", 260)]
    assert sizes(two.messages)[-1] == ("user", 90)
    # 8850 is short of the whole history (8900 + 240): the turns that fit are kept, to a reply
    assert sizes(three.messages) == [
        ("user", 8200),
        ("assistant", 240),
        ("user", 260),
        ("assistant", 110),
        ("user", 40),
    ]
    assert three.messages[:4] == two.messages[:4]
    assert [t.think_s for t in codex.turns] == pytest.approx([0.0, 0.7, 0.9, 29.4])
    assert claude.turns[0].messages[0]["content"] != codex.turns[0].messages[0]["content"]


def test_agent_load_takes_a_tracelab_trace_as_its_sessions() -> None:
    params = AgentLoadParams(sessions=str(TRACELAB), max_tokens=64)
    assert params.request_tokens() >= 22600 + 64


def _round(**overrides: object) -> str:
    row: dict[str, object] = {
        "session_id": "s",
        "round_index": 0,
        "input_tokens_total": 10,
        "output_tokens": 2,
        "timing_events": [{"event_type": "user_message", "timestamp": "2026-01-01T00:00:00.000Z"}],
    }
    row.update(overrides)
    return json.dumps({k: v for k, v in row.items() if v != "DROP"})


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (_round(output_tokens="DROP"), "t.jsonl:2: missing output_tokens"),
        (_round(input_tokens_total=0), "t.jsonl:2: input_tokens_total: expected a whole number >= 1"),
        (_round(round_index=-1), "t.jsonl:2: round_index: expected a whole number >= 0"),
        (_round(output_tokens=True), "t.jsonl:2: output_tokens: expected a whole number >= 0"),
        (_round(reasoning_output_tokens=-4), "t.jsonl:2: reasoning_output_tokens"),
        (_round(timing_events={"a": 1}), "t.jsonl:2: timing_events: expected a list"),
        (_round(timing_events=[{"event_type": "text", "timestamp": "noon"}]), "timing_events[0].timestamp"),
        (_round(timing_events=["x"]), "t.jsonl:2: timing_events[0]: expected an object"),
        (json.dumps({"messages": []}), "t.jsonl:2: expected a TraceLab round"),
    ],
)
def test_a_bad_tracelab_round_is_refused_naming_the_line(tmp_path: Path, row: str, expected: str) -> None:
    path = _write(tmp_path / "t.jsonl", [_round(), row])
    with pytest.raises(SessionsError) as caught:
        read_sessions(path)
    assert expected in str(caught.value)


def test_rounds_are_ordered_by_index_and_our_own_sessions_still_read(tmp_path: Path) -> None:
    later = _round(round_index=1, input_tokens_total=20, timing_events=None)
    sessions = read_sessions(_write(tmp_path / "t.jsonl", [later, _round()]))
    assert [len(t.messages) for t in sessions[0].turns] == [1, 3] and sessions[0].turns[1].think_s == 0.0
    own = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    (only,) = read_sessions(_write(tmp_path / "own.jsonl", [json.dumps(own)]))
    assert only.turns[0].reply == "hello"
    with pytest.raises(SessionsError, match="expected an object with messages"):
        read_sessions(_write(tmp_path / "neither.jsonl", [json.dumps({"id": 1})]))
