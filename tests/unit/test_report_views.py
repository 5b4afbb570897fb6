"""The views a performance engineer reads beside the verdicts: per-request latency
percentiles and distribution, decode per context over server runs, one colour per arm,
and counters that look contradictory explained where they occur."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from reports import latency
from reports.arm_page import counter_notes


def _frame(rows: list[dict]) -> pd.DataFrame:
    base = {
        "probe": "decode",
        "scenario": "",
        "mode": "canonical",
        "context": 4096,
        "trial": 0,
        "unit": "s",
        "source": "client",
        "simulated": True,
    }
    return pd.DataFrame([{**base, **r} for r in rows])


def test_latency_percentiles_are_the_requests_and_a_short_p99_is_marked() -> None:
    rng = np.random.default_rng(7)
    ttft = rng.exponential(0.2, size=400)
    rows = [{"arm_id": "A", "metric": "ttft_s", "value": v, "trial": i} for i, v in enumerate(ttft)]
    rows += [{"arm_id": "A", "metric": "ttft_s", "value": 9.0, "kind": "summary"}]  # a summary row: never a request
    rows += [
        {"arm_id": "A", "metric": "e2e_s", "value": v, "context": 8192, "trial": i} for i, v in enumerate(ttft[:20] + 1)
    ]
    rows += [{"arm_id": "B", "metric": "ttft_s", "value": 5.0}]
    view = latency.build(_frame(rows), "A", "arm-a-latency")
    by = {(r.metric, r.context): r for r in view.rows}
    ttft_row = by[("ttft_s", 4096)]
    assert ttft_row.n == 400 and not ttft_row.p99_short
    assert (ttft_row.p50, ttft_row.p90, ttft_row.p99) == tuple(float(np.quantile(ttft, q)) for q in (0.5, 0.9, 0.99))
    e2e = by[("e2e_s", 8192)]
    assert e2e.n == 20 and e2e.p99_short and view.p99_needs == 368  # 0.99^n <= 0.025
    assert view.chart is not None and "TTFT distribution" in str(view.chart)
    assert latency.build(_frame(rows), "C", "x").rows == []


def test_zero_hits_beside_cached_tokens_is_explained_and_hits_with_tokens_are_not() -> None:
    stats = pd.DataFrame(
        [
            {
                "arm_id": "A",
                "probe": "agent-load",
                "scenario": "load",
                "mode": "canonical",
                "context": 4096,
                "metric": "cache_hits",
                "median": 0.0,
            },
            {
                "arm_id": "A",
                "probe": "agent-load",
                "scenario": "load",
                "mode": "canonical",
                "context": 4096,
                "metric": "cached_prompt_tokens",
                "median": 21511.0,
            },
            {
                "arm_id": "B",
                "probe": "agent-load",
                "scenario": "load",
                "mode": "canonical",
                "context": 4096,
                "metric": "cache_hits",
                "median": 12.0,
            },
            {
                "arm_id": "B",
                "probe": "agent-load",
                "scenario": "load",
                "mode": "canonical",
                "context": 4096,
                "metric": "cached_prompt_tokens",
                "median": 21511.0,
            },
        ]
    )
    data = SimpleNamespace(stats=stats)
    (note,) = counter_notes(data, "A")
    assert note.startswith("agent-load load @ 4096: 0 cache hits beside 21,511 cached prompt tokens")
    assert "slot's own KV" in note
    assert counter_notes(data, "B") == []


def test_decode_per_context_is_over_server_runs_with_each_arms_colour() -> None:
    """Three runs (blocks) of 10 requests at each context: the bar is the cell's value as
    a gate reads it, the geometric mean of the run medians, and the whisker its 95% CI
    over the runs; arm B is drawn in its own colour, the one it has on every other chart."""
    from gates.cells import cell_value
    from reports import charts, index_page
    from reports.data import cell_values

    rows = []
    run = 0
    for arm, speed in (("A", 50.0), ("B", 80.0)):
        for ctx in (4096, 32768):
            for r, shift in enumerate((-5.0, 0.0, 7.0)):
                run += 1
                rows += [
                    {
                        "arm_id": arm,
                        "probe_run_id": run,
                        "block_id": f"b{r}",
                        "metric": "decode_tps",
                        "value": speed + shift + 0.1 * i,
                        "context": ctx,
                        "trial": i,
                        "unit": "tok/s",
                    }
                    for i in range(10)
                ]
    frame = _frame(rows)
    arms = [SimpleNamespace(arm_id="A"), SimpleNamespace(arm_id="B")]
    data = SimpleNamespace(
        values=cell_values(frame), arms=arms, is_simulated=lambda a: False, arm_color=lambda a: ["A", "B"].index(a)
    )
    svg = str(index_page.decode_per_context(data))
    assert "4K" in svg and "32K" in svg
    assert "B: 3 runs, 95% CI" in svg
    assert charts.color_of(1) in svg and charts.color_of(0) in svg
    b = data.values[(data.values["arm_id"] == "B") & (data.values["context"] == 4096)].iloc[0]
    assert (b.value, b.low, b.high) == pytest.approx(
        cell_value([75.45, 80.45, 87.45])
    )  # each run's median, as a gate reads them


def test_a_cell_whose_runs_measured_the_client_is_marked_on_the_gate_page() -> None:
    """A load gate's evidence names, per cell, the runs that did not measure the server
    alone; the gate page's table says so beside the cell (and nothing for a clean one)."""
    from reports import gate_page

    cell = {"arm": "A", "probe": "load", "scenario": "rate=2", "context": 0, "n": 3}
    assert gate_page._cell_row(cell)["faults"] == ""
    why = "A rate=2 run b2 (attempt 7): the client fell behind its schedule, lag p99 80 ms > 10 ms"
    assert gate_page._cell_row({**cell, "faults": [why]})["faults"] == why


def test_a_trace_replay_is_drawn_over_time_from_its_request_rows() -> None:
    """A burst then a trickle: the arrivals chart counts each bin's sends per second, the
    in-flight line holds the burst's queue, and the TTFT line climbs in the burst and falls
    after it; two server runs are two lines, and other cells' requests are not read."""
    import json

    from arms.measures import CONTENT, NS, RequestRecord
    from campaign.store.tables import RequestRow
    from reports import trace_replay

    def row(run: int, at: float, ttft: float, scenario: str = "trace=agents") -> RequestRow:
        send = int((100 + at) * NS)
        record = RequestRecord(
            send_ns=send, event_ns=[send + int(ttft * NS)], event_kind=[CONTENT], end_ns=send + int((ttft + 0.5) * NS)
        )
        return RequestRow(probe_run_id=run, scenario=scenario, mode="canonical", raw_json=json.dumps(record.to_dict()))

    def requests_of(run: int, slow: float) -> list[RequestRow]:
        burst = [row(run, 0.02 * i, slow + 0.1 * i) for i in range(20)]  # 20 in 0.4 s, a queue builds
        trickle = [row(run, 4.0 + 1.0 * i, 0.05) for i in range(6)]  # one a second, served at once
        return burst + trickle + [row(run, 1.0, 99.0, scenario="rate=2")]

    rows = {7: requests_of(7, 0.1), 9: requests_of(9, 0.2)}
    frame = pd.DataFrame(
        [
            {
                "arm_id": "A",
                "probe": "load",
                "scenario": "trace=agents",
                "mode": "canonical",
                "context": 0,
                "item_key": "replay",
                "probe_run_id": run,
                "metric": "ttft_s",
                "value": 0.1,
                "trial": 0,
            }
            for run in rows
        ]
    )
    asked: list[list[int]] = []

    def read(ids):  # type: ignore[no-untyped-def]
        asked.append(list(ids))
        return [r for i in ids for r in rows[i]]

    (view,) = trace_replay.runs(read, frame, "A", "arm-a")
    assert asked == [[7, 9]]
    assert view.title == "trace replay · replay · agents · canonical"
    # the last request ends at 9 + 0.05 + 0.5 s; the TTFTs of both runs pooled
    import statistics

    pooled = [slow + 0.1 * i for slow in (0.1, 0.2) for i in range(20)] + [0.05] * 12
    assert statistics.median(pooled) == 0.8
    assert view.summary.startswith("26 requests over 9.55 s, 2 server runs; TTFT median 0.80 s, slowest 2.10 s"), (
        view.summary
    )
    assert view.summary.endswith("0 of 52 failed; bins of 0.25 s"), view.summary
    for chart in (view.arrivals_chart, view.ttft_chart):
        assert "<svg" in chart and "server run 2" in chart

    sent = trace_replay._sent(rows[7][:-1])
    width = trace_replay.bin_width(9.55)
    line = trace_replay.timeline(sent, width, 9.55)
    # 0.25 s bins: 13 of the burst in the first (0 to 0.24 s), 7 in the second; then one a second
    assert width == 0.25 and line.sent_rps[:3] == [13 / 0.25, 7 / 0.25, 0.0] and line.sent_rps[16] == 1 / 0.25
    assert sum(line.sent_rps) * width == 26
    assert line.in_flight[2] == 20  # at 0.5 s no burst request has ended (each takes 0.6 s or more)
    assert line.ttft[0] is not None and line.ttft[1] is not None and line.ttft[1] > line.ttft[0] > 0.05 == line.ttft[16]
    assert line.ttft[2] is None  # nothing sent there: a gap, not a zero
    assert trace_replay.runs(read, frame, "B", "arm-b") == []


def test_the_gate_history_shows_each_look_with_its_blocks_test_and_question() -> None:
    import json as _json
    from types import SimpleNamespace

    from reports.gate_page import history_rows

    def row(verdict: str, look: dict | None) -> SimpleNamespace:
        return SimpleNamespace(
            computed_at=None, verdict=verdict, reason="r", evidence_json=_json.dumps({"look": look} if look else {})
        )

    rows = history_rows(
        [
            row("pending", None),
            row("inconclusive", {"question": "q1", "blocks": 3, "complete": True, "sequential": False}),
            row("pass", {"question": "q1", "blocks": 6, "complete": True, "sequential": True}),
            row("inconclusive", {"question": "q2", "blocks": 3, "complete": True, "sequential": False}),
            row("pass", {"question": "q3", "blocks": 4, "complete": True, "sequential": False, "planned_looks": 6}),
        ]
    )
    assert [(r["question"], r["blocks"], r["test"]) for r in rows] == [
        ("", "", ""),
        (1, 3, "CI"),
        (1, 6, "CS"),
        (2, 3, "CI"),
        (3, 4, "CI, 1 of 6 planned looks"),
    ]
