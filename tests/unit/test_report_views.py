"""The views a performance engineer reads beside the verdicts: per-request latency
percentiles and distribution, decode per context over server runs, one colour per arm,
and counters that look contradictory explained where they occur."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from reports import latency
from reports.arm_page import counter_notes


def _frame(rows: list[dict]) -> pd.DataFrame:
    base = {"probe": "decode", "scenario": "", "mode": "canonical", "context": 4096, "trial": 0, "unit": "s", "source": "client", "simulated": True}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_latency_percentiles_are_the_requests_and_a_short_p99_is_marked() -> None:
    rng = np.random.default_rng(7)
    ttft = rng.exponential(0.2, size=400)
    rows = [{"arm_id": "A", "metric": "ttft_s", "value": v, "trial": i} for i, v in enumerate(ttft)]
    rows += [{"arm_id": "A", "metric": "ttft_s", "value": 9.0, "trial": -1}]  # a summary row: never a request
    rows += [{"arm_id": "A", "metric": "e2e_s", "value": v, "context": 8192, "trial": i} for i, v in enumerate(ttft[:20] + 1)]
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
    stats = pd.DataFrame([
        {"arm_id": "A", "probe": "agent-load", "scenario": "load", "mode": "canonical", "context": 4096, "metric": "cache_hits", "median": 0.0},
        {"arm_id": "A", "probe": "agent-load", "scenario": "load", "mode": "canonical", "context": 4096, "metric": "cached_prompt_tokens", "median": 21511.0},
        {"arm_id": "B", "probe": "agent-load", "scenario": "load", "mode": "canonical", "context": 4096, "metric": "cache_hits", "median": 12.0},
        {"arm_id": "B", "probe": "agent-load", "scenario": "load", "mode": "canonical", "context": 4096, "metric": "cached_prompt_tokens", "median": 21511.0},
    ])
    data = SimpleNamespace(stats=stats)
    (note,) = counter_notes(data, "A")
    assert note.startswith("agent-load load @ 4096: 0 cache hits beside 21,511 cached prompt tokens")
    assert "slot's own KV" in note
    assert counter_notes(data, "B") == []


def test_decode_per_context_is_over_server_runs_with_each_arms_colour() -> None:
    """Three runs of 10 requests at each context: the bar is the median of the run
    medians and the whisker spans the runs (75% coverage at 3); arm B is drawn in its
    own colour, the one it has on every other chart."""
    from reports import charts, index_page

    rows = []
    run = 0
    for arm, speed in (("A", 50.0), ("B", 80.0)):
        for ctx in (4096, 32768):
            for r, shift in enumerate((-5.0, 0.0, 7.0)):
                run += 1
                rows += [{"arm_id": arm, "probe_run_id": run, "metric": "decode_tps", "value": speed + shift + 0.1 * i, "context": ctx, "trial": i, "unit": "tok/s"}
                         for i in range(10)]
    frame = _frame(rows)
    arms = [SimpleNamespace(arm_id="A"), SimpleNamespace(arm_id="B")]
    data = SimpleNamespace(frame=frame, arms=arms, is_simulated=lambda a: False, arm_color=lambda a: ["A", "B"].index(a))
    svg = str(index_page.decode_per_context(data))
    assert "4K" in svg and "32K" in svg
    assert "B: 3 runs, 75% CI" in svg
    assert charts.color_of(1) in svg and charts.color_of(0) in svg


def test_a_cell_whose_runs_measured_the_client_is_marked_on_the_gate_page() -> None:
    """A load gate's evidence names, per cell, the runs that did not measure the server
    alone; the gate page's table says so beside the cell (and nothing for a clean one)."""
    from reports import gate_page

    cell = {"arm": "A", "probe": "load", "scenario": "rate=2", "context": 0, "n": 3}
    assert gate_page._cell_row(cell)["faults"] == ""
    why = "A rate=2 run b2 (attempt 7): the client fell behind its schedule, lag p99 80 ms > 10 ms"
    assert gate_page._cell_row({**cell, "faults": [why]})["faults"] == why
