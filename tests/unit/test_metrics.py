"""Metric math on scripted streams with known timings."""

from __future__ import annotations

import json

import pytest

from arms.events import parse_events
from arms.measures import (
    NS,
    RequestRecord,
    counter_deltas,
    decode_tps,
    distribution,
    e2e_s,
    extract_cached_tokens,
    flag_reuse_source,
    itl_s,
    ok_records,
    percentile,
    prompt_tokens,
    reuse,
    tpot_s,
    ttfr_s,
    ttft_s,
)


def ev(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode())


def delta(**d: object) -> dict:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def scripted(events: list[tuple[float, object]], send: float = 0.0, end: float | None = None) -> RequestRecord:
    rec = RequestRecord(send_ns=int(send * NS))
    parse_events(rec, [(int(t * NS), ev(o)) for t, o in events])
    rec.end_ns = int((end if end is not None else events[-1][0]) * NS)
    return rec


def test_ttfr_and_ttft_are_kept_apart() -> None:
    rec = scripted(
        [
            (0.10, delta(role="assistant", content="")),  # role-only: a first response, not a token
            (0.15, delta(content="")),  # empty chunk
            (0.50, delta(content="Hello")),
            (0.60, delta(content=" world")),
            (0.70, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            (0.71, {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}}),
            (0.72, b"[DONE]"),
        ]
    )
    assert rec.ok
    assert ttfr_s(rec) == pytest.approx(0.10)
    assert ttft_s(rec) == pytest.approx(0.50)
    assert e2e_s(rec) == pytest.approx(0.72)
    assert itl_s(rec) == pytest.approx([0.10])
    assert rec.text == "Hello world"


def test_decode_uses_server_completion_tokens_and_counts_speculative_chunks() -> None:
    # 3 events, but the second carries 4 tokens (a speculative chunk): server says 9 tokens
    rec = scripted(
        [
            (1.0, delta(content="a")),
            (1.5, delta(content=" b c d e")),
            (2.0, delta(content=" f g h i")),
            (2.01, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}}),
            (2.02, b"[DONE]"),
        ]
    )
    rate, source = decode_tps(rec)
    assert source == "server"
    assert rate == pytest.approx(8 / 1.0)
    # without usage the client estimate counts the words of each delta, marked as such
    rec.usage = None
    rate, source = decode_tps(rec)
    assert source == "client-estimate"
    assert rate == pytest.approx(8 / 1.0)


def test_decode_leaves_out_the_tokens_of_a_multi_token_first_event() -> None:
    # a coalesced/speculative first event carries 3 tokens; they had arrived when the
    # decode window opened, so only the 3 tokens after it are decoded in 1.0 s
    rec = scripted(
        [
            (1.0, delta(content="a b c")),
            (1.5, delta(content=" d")),
            (2.0, delta(content=" e f")),
            (2.01, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}),
            (2.02, b"[DONE]"),
        ]
    )
    assert decode_tps(rec) == (pytest.approx(3 / 1.0), "server")
    # TPOT is per token after the first event; ITL is per event gap
    assert tpot_s(rec) == (pytest.approx(1.0 / 3), "server")
    assert itl_s(rec) == pytest.approx([0.5, 0.5])
    rec.usage = None  # the same from the client's own counts: 3 + 1 + 2 tokens
    assert decode_tps(rec) == (pytest.approx(3 / 1.0), "client-estimate")
    assert tpot_s(rec) == (pytest.approx(1.0 / 3), "client-estimate")


def test_decode_is_none_when_no_token_follows_the_first_event() -> None:
    rec = scripted(
        [
            (1.0, delta(content="a b")),
            (1.5, delta(content="")),  # an empty chunk is no token event
            (1.6, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
            (1.7, b"[DONE]"),
        ]
    )
    assert decode_tps(rec)[0] is None and tpot_s(rec)[0] is None


def test_to_dict_holds_every_field_like_asdict_without_sharing_the_record_lists() -> None:
    from dataclasses import asdict

    rec = scripted(
        [
            (0.3, delta(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "add", "arguments": "{}"}}])),
            (0.4, delta(content="x")),
            (
                0.5,
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 5,
                        "completion_tokens": 2,
                        "prompt_tokens_details": {"cached_tokens": 1},
                    },
                },
            ),
            (0.6, b"[DONE]"),
        ]
    )
    rec.label = {"turn": 1}
    out = rec.to_dict()
    assert out == asdict(rec)
    assert json.loads(json.dumps(out)) == out  # JSON-ready as stored
    out["event_ns"].append(9)
    out["label"]["turn"] = 2
    assert rec.event_ns[-1] != 9 and rec.label == {"turn": 1}


def test_tool_call_deltas_are_assembled() -> None:
    rec = scripted(
        [
            (0.2, delta(role="assistant")),
            (
                0.3,
                delta(
                    tool_calls=[
                        {"index": 0, "id": "c1", "type": "function", "function": {"name": "add", "arguments": ""}}
                    ]
                ),
            ),
            (0.4, delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a": 2,'}}])),
            (0.5, delta(tool_calls=[{"index": 0, "function": {"arguments": ' "b": 3}'}}])),
            (0.6, delta(tool_calls=[{"index": 1, "id": "c2", "function": {"name": "mul", "arguments": "{}"}}])),
            (0.7, b"[DONE]"),
        ]
    )
    assert ttft_s(rec) == pytest.approx(0.3)  # a tool-call delta is a first token
    assert rec.tool_calls == [
        {"id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'},
        {"id": "c2", "name": "mul", "arguments": "{}"},
    ]


def test_malformed_event_makes_an_error_row_kept_out_of_statistics() -> None:
    bad = scripted([(0.1, delta(content="x")), (0.2, b"{not json"), (0.3, b"[DONE]")])
    good = scripted([(0.1, delta(content="x")), (0.3, b"[DONE]")])
    assert not bad.ok and "malformed" in (bad.error or "")
    assert ttft_s(bad) is None
    assert ok_records([bad, good]) == [good]
    assert distribution([ttft_s(r) for r in [bad, good]])["n"] == 1


@pytest.mark.parametrize(
    ("payload", "value", "field"),
    [
        (
            {"usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 90}}},
            90,
            "usage.prompt_tokens_details.cached_tokens",
        ),
        ({"timings": {"prompt_n": 10, "cache_n": 90}}, 90, "timings.cache_n"),
        ({"usage": {"prompt_tokens": 100, "cached_tokens": 64}}, 64, "usage.cached_tokens"),
        ({"usage": {"prompt_tokens": 100}, "x_mlx_dspark": {"cached_tokens": 77}}, 77, "x_mlx_dspark.cached_tokens"),
        ({"usage": {"prompt_tokens": 100}}, None, ""),
    ],
)
def test_cached_token_shapes(payload: dict, value: int | None, field: str) -> None:
    assert extract_cached_tokens(payload) == (value, field)


def test_prefer_field_and_llamacpp_prompt_total() -> None:
    payload = {"timings": {"prompt_n": 10, "cache_n": 90}, "usage": {"prompt_tokens_details": {"cached_tokens": 1}}}
    assert extract_cached_tokens(payload, prefer="usage.prompt_tokens_details.cached_tokens") == (
        1,
        "usage.prompt_tokens_details.cached_tokens",
    )
    assert prompt_tokens({"timings": {"prompt_n": 10, "cache_n": 90}}) == 100
    assert reuse(90, 100) == pytest.approx(0.9)
    assert reuse(None, 100) is None


@pytest.mark.parametrize(
    ("cached", "prompt", "value", "source"),
    [
        (90, 100, 0.9, "timings.cache_n"),
        (100, 100, 1.0, "timings.cache_n"),
        (0, 100, 0.0, "timings.cache_n"),
        (120, 100, 1.2, "timings.cache_n; impossible: >1"),
        (-5, 100, -0.05, "timings.cache_n; impossible: <0"),
    ],
)
def test_reuse_is_stored_as_measured_and_impossible_values_are_flagged(
    cached: int, prompt: int, value: float, source: str
) -> None:
    got = reuse(cached, prompt)
    assert got == pytest.approx(value)  # never clamped into [0, 1]
    assert flag_reuse_source("timings.cache_n", got) == source


def test_counters_are_deltas_and_survive_a_restart() -> None:
    before = {"cache_hits": 10, "cache_lookups": 20}
    after = {"cache_hits": 14, "cache_lookups": 26, "new": 3}
    assert counter_deltas(before, after) == {"cache_hits": 4, "cache_lookups": 6}
    assert counter_deltas({"cache_hits": 50}, {"cache_hits": 5}) == {"cache_hits": 5}


def test_percentile_and_summary() -> None:
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile([], 50) is None
    s = distribution([1.0, None, 3.0])
    assert s["median"] == 2.0 and s["n"] == 2


def test_a_p90_of_zero_stays_zero() -> None:
    # ten zeros and one 1.0: the 90th percentile is 0, not the max
    s = distribution([0.0] * 10 + [1.0])
    assert s["p90"] == 0.0 and s["max"] == 1.0
