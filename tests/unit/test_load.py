"""Load profiles (`arms.workloads.profiles`, sent by `arms.workloads.dispatch`), the `load` probe, its gates and its report curves.

The open-loop cases use a fake server (a coroutine that takes as long as it is told), so
"the schedule was kept while requests piled up" is checked without any real server's
noise; the simulator cases check the probe end to end: 4 slots carry clearly more goodput
than 2 for the same agent workload."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pandas as pd
import pytest
from pydantic import ValidationError
from scipy import stats

from arms.measures import NS, RequestRecord
from arms.probes import load as load_probe
from arms.probes.base import MemorySink, ProbeTarget
from arms.probes.load_workload import Workload
from arms.runtimes import catalog as registry
from arms.workloads import dispatch, load_stats, sweep
from arms.workloads import profiles as load
from arms.workloads.sweep import Point
from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from campaign.core.units import pct
from gates.engine import evaluate
from gates.intervals import needed_for_upper, quantile_interval

# -- fakes -----------------------------------------------------------------------------------------


def record(
    send_s: float, *, ttft: float = 0.1, tokens: int = 5, gap: float = 0.02, error: str | None = None
) -> RequestRecord:
    """A finished request sent at `send_s` (seconds on an arbitrary clock)."""
    send = int(send_s * NS)
    r = RequestRecord(send_ns=send, error=error, usage={"completion_tokens": tokens})
    if error is None:
        r.event_ns = [send + int((ttft + k * gap) * NS) for k in range(tokens)]
        r.event_kind = ["content"] * tokens
        r.event_tokens = [1] * tokens
    r.end_ns = (r.event_ns[-1] if r.event_ns else send) + int(0.001 * NS)
    return r


def fake_server(seconds: float):
    """send(i, item): a request that takes `seconds` and is stamped as sent when it starts."""

    async def send(i: int, item: Any) -> RequestRecord:
        start = time.perf_counter_ns()
        await asyncio.sleep(seconds)
        r = record(0)
        r.send_ns = start
        shift = start - r.event_ns[0] + int(0.01 * NS)
        r.event_ns = [t + shift for t in r.event_ns]
        r.end_ns = time.perf_counter_ns()
        return r

    return send


# -- profiles and the schedule ------------------------------------------------------------------------


def test_schedules_and_scenario_names() -> None:
    offsets, window = load.constant(4).offsets(1.0, None)
    assert offsets == [0.0, 0.25, 0.5, 0.75] and window == 1.0
    offsets, window = load.constant(4).offsets(None, 3)
    assert len(offsets) == 3 and window == 0.75  # the window ends where the 4th send would be
    offsets, window = load.constant(3).offsets(1.0, None)
    assert len(offsets) == 3 and window == 1.0  # 0, 1/3, 2/3: three sends own the whole second
    a, _ = load.poisson(50, seed=7).offsets(20.0, None)
    b, _ = load.poisson(50, seed=7).offsets(20.0, None)
    c, _ = load.poisson(50, seed=8).offsets(20.0, None)
    assert a == b and a != c  # seeded: a run can be repeated with the same arrivals
    assert len(a) == 1000  # rate x duration, given the count
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert sum(g < 0.02 for g in gaps) > 0.5 * len(gaps)  # exponential: most gaps shorter than the mean
    assert [p.scenario for p in (load.synchronous(), load.concurrent(8), load.constant(2), load.poisson(1.25))] == [
        "synchronous",
        "concurrency=8",
        "rate=2",
        "poisson=1.25",
    ]
    with pytest.raises(ValueError):
        load.constant(-1)
    with pytest.raises(ValueError):
        load.synchronous().offsets(1.0, None)


def test_every_poisson_step_offers_its_label_and_its_gaps_are_still_exponential() -> None:
    """Offered = labelled: for any rate, duration and seed, n / window is the rate the step
    is labelled with (the old draw, unconditioned, offered 2.4 req/s in a step labelled
    2.94). And the arrivals are still Poisson's: given their count, the gaps of one long
    run pass a KS test against the exponential of mean 1/rate, and constant gaps fail it."""
    from scipy import stats

    for rate in (0.7, 1.0, 2.56, 2.94, 13.0):
        for duration in (3.0, 5.0, 20.0):
            for seed in range(5):
                offsets, window = load.poisson(rate, seed).offsets(duration, None)
                assert len(offsets) / window == pytest.approx(rate, rel=1e-9)
                assert offsets == sorted(offsets) and 0 <= offsets[0] and offsets[-1] <= window
                assert abs(window - duration) <= 0.5 / rate + 1e-9  # rounding the count, no more
    offsets, window = load.poisson(4.0, 3).offsets(500.0, None)
    gaps = [y - x for x, y in zip(offsets, offsets[1:])]
    assert stats.kstest(gaps, "expon", args=(0, 1 / 4.0)).pvalue > 0.001
    steady, _ = load.constant(4.0).offsets(500.0, None)
    even = [y - x for x, y in zip(steady, steady[1:])]
    assert stats.kstest(even, "expon", args=(0, 1 / 4.0)).pvalue < 1e-6


def test_each_step_of_a_sweep_draws_its_own_arrivals() -> None:
    """Steps drawn from one seed shared their bursts (their shortfalls were correlated):
    each step's seed is derived from the base seed and the step, repeatably."""
    seeds = {load.step_seed(0, load.constant(r).scenario) for r in (1.2, 2.56, 2.94, 3.3)}
    assert len(seeds) == 4
    assert load.step_seed(0, "rate=2.94") == load.step_seed(0, "rate=2.94") != load.step_seed(1, "rate=2.94")


def test_the_arrival_process_is_the_profiles_own_and_named_in_its_params() -> None:
    """The constant profile's JSON said `arrivals: "poisson"`: now it says what ran."""
    from arms.probes.load_params import LoadParams

    assert LoadParams(profile="constant", rate=2).arrivals == "constant"
    assert LoadParams(profile="poisson", rate=2).arrivals == "poisson"
    assert LoadParams(profile="synchronous").arrivals is None
    assert LoadParams(profile="sweep", targets={"ttft_s": 1.0}).arrivals == "poisson"
    assert LoadParams(profile="sweep", targets={"ttft_s": 1.0}, arrivals="constant").arrivals == "constant"
    with pytest.raises(ValueError, match="arrivals applies to the sweep profile"):
        LoadParams(profile="constant", rate=2, arrivals="poisson")


def test_open_loop_keeps_its_schedule_while_requests_pile_up() -> None:
    """Each request takes 0.5 s; at 20 req/s for 0.5 s an open loop still sends all 10 on
    time (10 in flight at once), where a closed loop would send one."""
    result = asyncio.run(dispatch.run(load.constant(20), fake_server(0.5), duration_s=0.5))
    assert len(result.records) == 10
    assert result.peak_in_flight == 10 and result.cap_waits == 0
    lags = [r.send_ns - r.scheduled_ns for r in result.records]
    assert max(lags) < 0.03 * NS, lags  # sent on schedule, not after the previous one ended
    closed = asyncio.run(dispatch.run(load.synchronous(), fake_server(0.5), duration_s=0.5))
    assert len(closed.records) == 1  # the closed loop waited for the server: what the open loop must not do


def test_a_full_in_flight_cap_is_counted_and_shows_in_the_lag() -> None:
    result = asyncio.run(dispatch.run(load.constant(20), fake_server(0.3), duration_s=0.3, max_in_flight=2))
    assert len(result.records) == 6
    assert result.cap_waits == 4 and result.peak_in_flight == 2
    stats = {s.metric.name: s for s in load_stats.run_stats(result, {})}
    assert stats["in_flight_cap_waits"].value == 4 and "cap of 2" in stats["in_flight_cap_waits"].source
    assert stats["schedule_lag_max_s"].value > 0.2  # the waits are in the lag, never hidden


def test_stop_sends_the_rest_of_the_schedule_at_once() -> None:
    """A stalled probe stops waiting: the rest of its schedule goes to `send` at once (the
    probe's `chat` returns those as not run), so a dead server does not cost the duration."""
    calls: list[int] = []
    sent_ns: dict[int, int] = {}

    async def send(i: int, item: Any) -> RequestRecord:
        calls.append(i)
        sent_ns[i] = time.perf_counter_ns()  # the clock the schedule is on
        return record(0, error="not run: stopped")

    result = asyncio.run(dispatch.run(load.constant(10), send, duration_s=5.0, stop=lambda: len(calls) >= 2))
    assert len(result.records) == 50 and all(r.scheduled_ns is not None for r in result.records)
    # the schedule spans 5 s; after the stop nothing waits for its time: the last request
    # went out seconds before it was due (a clock comparison, not a wall-time limit, so a
    # busy machine cannot fail it unless it is seconds late on 48 trivial calls)
    last = max(sent_ns)
    assert sent_ns[last] < result.records[last].scheduled_ns - 1_000_000_000, "the rest waited for its schedule"


# -- what a run carried ---------------------------------------------------------------------------------


def test_run_stats_goodput_counts_failures_as_misses_over_the_window() -> None:
    records = [
        record(0.0, ttft=0.1),
        record(0.5, ttft=0.2),
        record(1.0, ttft=3.0),  # the third misses ttft
        record(1.5, error="HTTP 503: busy"),  # a failure is a miss
        record(2.0, ttft=0.1, tokens=1),  # one token: no TPOT, cannot miss a TPOT target
    ]
    for i, r in enumerate(records):
        r.scheduled_ns = int(i * 0.5 * NS)
    result = dispatch.RunResult(load.constant(2), records, 0, records[-1].end_ns + int(1.0 * NS), 2.5, 256)
    stats = {s.metric.name: s.value for s in load_stats.run_stats(result, {"ttft_s": 1.0, "tpot_s": 0.05})}
    assert stats["requests_met"] == 3
    assert stats["goodput_rps"] == pytest.approx(3 / 2.5)  # over the schedule's window
    assert stats["target_attainment"] == pytest.approx(3 / 5)
    assert stats["offered_rps"] == pytest.approx(2.0)
    span = result.span_s
    assert stats["request_throughput_rps"] == pytest.approx(4 / 2.5)  # succeeded, over the same window
    assert stats["output_tps"] == pytest.approx((5 + 5 + 5 + 1) / 2.5)
    assert stats["drain_s"] == pytest.approx(span - 2.5)  # the drain, reported apart
    assert stats["goodput_rps"] <= stats["request_throughput_rps"] <= stats["offered_rps"]
    assert stats["ttft_p50_s"] == pytest.approx(0.15)  # of the 4 that succeeded
    assert stats["tpot_p99_s"] == pytest.approx(0.02)
    assert "schedule_lag_p99_s" in stats
    assert load_stats.meets(records[4], {"tpot_s": 0.001}) and not load_stats.meets(records[3], {})


def test_sweep_rates_and_the_knee() -> None:
    assert sweep.sweep_rates(1.0, 3.0, 4) == [1.5, 2.0, 2.5, 3.0]
    assert sweep.sweep_rates(2.0, 2.0, 2) == [3.0, 4.0]  # no scaling: up to twice the synchronous rate
    pts = [
        Point("synchronous", 1.0, 1.0, 1.0, False),
        Point("concurrency=32", 3.0, 0.3, 0.1, False),
        Point("rate=1.5", 1.5, 1.45, 0.97),
        Point("rate=2", 2.0, 1.9, 0.95),
        Point("rate=2.5", 2.5, 1.2, 0.5),
        Point("rate=3", 3.0, 2.8, 0.93),
    ]
    knee = sweep.knee(pts, 0.9)
    assert knee.point.scenario == "rate=2" and knee.max_goodput_rps == 1.9  # rate=3 held above a break: noise
    assert knee.broke_at.scenario == "rate=2.5" and "rate=2.5 met 50%" in knee.text()
    none = sweep.knee([Point("synchronous", 1.0, 0.2, 0.2, False), Point("rate=2", 2.0, 0.1, 0.05)], 0.9)
    assert none.max_goodput_rps == 0.0 and "no rate held" in none.text()


def test_params_say_what_is_wrong() -> None:
    def error(**kw: Any) -> str:
        with pytest.raises(ValidationError) as info:
            load_probe.LoadParams(**kw)
        return str(info.value)

    assert "needs latency targets" in error(profile="sweep")
    assert "ttft_s or e2e_s" in error(profile="sweep", targets={"tpot_s": 0.1})
    assert "needs a rate" in error(profile="constant")
    assert "greater than 0" in error(profile="constant", rate=-1)
    assert "rate applies" in error(profile="concurrent", concurrency=2, rate=1)
    assert "agent workload" in error(profile="synchronous", workload="synthetic", conversations=3)
    p = load_probe.LoadParams(profile="synchronous", turns=3)
    assert p.workload == "agent" and p.duration_s == 20.0
    again = load_probe.LoadParams.model_validate_json(p.model_dump_json())  # as the flow hands it to the task
    assert again == p
    assert load_probe.LoadParams(profile="constant", rate=2, requests=10).duration_s is None


def test_agent_workload_shares_prefixes_turn_over_turn() -> None:
    p = load_probe.LoadParams(
        profile="synchronous", conversations=2, turns=3, system_tokens=20, task_tokens=10, turn_tokens=5, max_tokens=4
    )
    w = Workload(p, "s", "shared")
    (m0, l0), (m1, _), (m2, l2), (m4, l4) = (w.prepare(i) for i in (0, 1, 2, 4))
    assert (l0["conversation"], l0["turn"]) == (0, 0) and (l2["conversation"], l2["turn"]) == (0, 1) and l4["turn"] == 2
    assert m2[: len(m0)] == m0 and len(m2) == len(m0) + 2  # turn 1 extends turn 0's prompt
    assert m4[: len(m2)] == m2
    assert m0[0] == m1[0] and m0[1] != m1[1]  # one system prompt, a task per conversation
    _, l6 = w.prepare(6)
    assert l6["generation"] == 1 and l6["turn"] == 0  # after `turns` turns a conversation starts over


# -- gates -------------------------------------------------------------------------------------------------
#
# A gate's unit is the server run (block): every hand-built frame below gives each arm several
# runs (distinct `repeat` values of one `item_key`, so blocks "load/b0", "load/b1", ...), with
# the run-to-run spread a restart brings, and the expected intervals are recomputed here from
# the per-run values (t over runs, log scale) rather than copied from the output.


def rows_of(arm: str, sink: MemorySink, block: int = 0) -> list[dict[str, Any]]:
    return [{**m, "arm_id": arm, "probe": "load", "repeat": block, "item_key": "load"} for m in sink.measurements]


def run_rows(
    arm: str,
    scenario: str,
    *,
    met: int,
    offered: int,
    window: float,
    failed: int = 0,
    block: int = 0,
    ttft: list[float] | None = None,
    extra: dict[str, tuple[float, str]] | None = None,
) -> list[dict[str, Any]]:
    """The rows the probe writes for one run (summary and per-request TTFT) in block `block`."""
    base = {
        "arm_id": arm,
        "probe": "load",
        "scenario": scenario,
        "context": 0,
        "mode": "canonical",
        "repeat": block,
        "item_key": "load",
        "unit": "",
        "source": "",
    }
    out = [
        {**base, "metric": m, "value": float(v), "kind": "summary"}
        for m, v in (
            ("requests_met", met),
            ("requests", offered),
            ("requests_failed", failed),
            ("window_s", window),
            ("goodput_rps", met / window),
            ("offered_rps", offered / window),
            ("target_attainment", met / offered),
        )
    ]
    for metric, (value, source) in (extra or {}).items():
        out.append({**base, "metric": metric, "value": value, "kind": "summary", "source": source})
    out += [{**base, "metric": "ttft_s", "value": v, "trial": i} for i, v in enumerate(ttft or [])]
    return out


def runs_rows(
    arm: str, scenario: str, mets: list[int], *, offered: int, window: float, failed: int = 0
) -> list[dict[str, Any]]:
    """One run per block 0, 1, ...: `mets[b]` of `offered` requests met their targets in block b."""
    return [
        row
        for b, met in enumerate(mets)
        for row in run_rows(arm, scenario, met=met, offered=offered, window=window, failed=failed, block=b)
    ]


def t_interval(logs: list[float]) -> tuple[float, float, float]:
    """(center, low, high) back on the ratio scale: the 95% t interval of the mean of `logs`."""
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def gate(predicate: str, params: dict[str, Any], subjects: list[str], baseline: list[str] | None = None) -> GateEntry:
    return GateEntry(id="g", predicate=predicate, params=params, subjects=subjects, baseline=baseline or [])


def test_goodput_gate_interval_errors_and_the_sweep_cell() -> None:
    b_met, a_met = [37, 39, 38, 36], [20, 21, 19, 22]  # of 40 over 20 s, per block: B ~1.9 req/s, A ~1.0
    rows = pd.DataFrame(
        runs_rows("B", "rate=2", b_met, offered=40, window=20) + runs_rows("A", "rate=2", a_met, offered=40, window=20)
    )
    result = evaluate(gate("load_goodput", {"scenario": "rate=2", "min_gain": 0.2}, ["B"], ["A"]), rows)
    # paired over the 4 shared blocks: the t interval of the per-block log ratios of each run's met / window
    ratio, lo, hi = t_interval([math.log(b / a) for b, a in zip(b_met, a_met)])
    cmp = result.evidence["comparisons"][0]
    assert cmp["pairs"] == 4 and "paired" in cmp["method"]
    assert (cmp["change"], cmp["change_low"], cmp["change_high"]) == pytest.approx(
        (ratio - 1, lo - 1, hi - 1), rel=1e-6
    )
    assert (
        f"{pct(ratio - 1)} [{pct(lo - 1)}, {pct(hi - 1)}] 95% CI, paired over 4 blocks, 4 runs x 40 requests, a summary each"
        in result.reason
    ), result.reason
    assert lo - 1 > 0.2 and result.verdict == Verdict.PASS, result.reason
    assert "goodput_rps at rate=2" in result.reason and "B 1.87" in result.reason
    # a floor: the whole CI over runs must clear it
    center, low, high = t_interval([math.log(m / 20) for m in b_met])
    assert low < 1.8 < high  # 1.87 [1.78, 1.97]
    floor = evaluate(gate("load_goodput", {"scenario": "rate=2", "min_rps": 1.8}, ["B"]), rows)
    assert floor.verdict == Verdict.INCONCLUSIVE and "straddles" in floor.reason, floor.reason
    cell = floor.evidence["cells"][0]
    assert (
        cell["n"] == 4
        and cell["requests_per_run"] == [40] * 4
        and cell["run_values"] == pytest.approx([m / 20 for m in b_met])
    )
    assert (cell["median"], cell["low"], cell["high"]) == pytest.approx((center, low, high), rel=1e-6)
    assert cell["basis"] == f"{sum(b_met)} of 160 requests over 80.0 s"
    assert evaluate(gate("load_goodput", {"scenario": "rate=2", "min_rps": 1.5}, ["B"]), rows).verdict == Verdict.PASS
    assert evaluate(gate("load_goodput", {"scenario": "rate=2", "min_rps": 2.5}, ["B"]), rows).verdict == Verdict.FAIL
    # one run is no spread: however clear its goodput, it cannot decide
    one = evaluate(
        gate("load_goodput", {"scenario": "rate=2", "min_rps": 0.5}, ["B"]),
        pd.DataFrame(run_rows("B", "rate=2", met=40, offered=40, window=20)),
    )
    assert one.verdict == Verdict.INCONCLUSIVE and "B has 1 run; needs 3" in one.reason, one.reason
    # a subject surely failing more than the limit cannot pass, however much goodput it shows (6/40 = 15% in every run);
    # 3/40 (7.5%) is over it at its point but not surely: it cannot pass either, nor is it failed
    flaky = pd.DataFrame(runs_rows("B", "rate=2", b_met, offered=40, window=20, failed=6))
    bad = evaluate(gate("load_goodput", {"scenario": "rate=2", "min_rps": 0.5}, ["B"]), flaky)
    assert bad.verdict == Verdict.FAIL and "B failed 24/160 requests" in bad.reason, bad.reason
    unsure = evaluate(
        gate("load_goodput", {"scenario": "rate=2", "min_rps": 0.5}, ["B"]),
        pd.DataFrame(runs_rows("B", "rate=2", b_met, offered=40, window=20, failed=3)),
    )
    assert (
        unsure.verdict == Verdict.INCONCLUSIVE
        and "B failed 12/160 requests" in unsure.reason
        and "but not surely" in unsure.reason
    ), unsure.reason
    # ... and a baseline over it cannot decide against the subject
    against_flaky = pd.DataFrame(
        runs_rows("B", "rate=2", b_met, offered=40, window=20)
        + runs_rows("A", "rate=2", a_met, offered=40, window=20, failed=3)
    )
    shaky = evaluate(gate("load_goodput", {"scenario": "rate=2", "min_gain": 0.2}, ["B"], ["A"]), against_flaky)
    assert shaky.verdict == Verdict.INCONCLUSIVE and "baseline A failed" in shaky.reason, shaky.reason
    # the sweep's maximum is read through the run its source names, in every block
    swept_met = [57, 55, 58, 56]  # of 60 at rate=3 over 20 s
    sweep = pd.DataFrame(
        runs_rows("B", "rate=3", swept_met, offered=60, window=20)
        + [
            r
            for b, m in enumerate(swept_met)
            for r in run_rows(
                "B", "sweep", met=0, offered=1, window=1, block=b, extra={"max_goodput_rps": (m / 20, "rate=3")}
            )
        ]
        + runs_rows("A", "synchronous", [2, 3, 1, 2], offered=20, window=20)
        + [
            r
            for b in range(4)
            for r in run_rows("A", "sweep", met=0, offered=1, window=1, block=b, extra={"max_goodput_rps": (0.0, "")})
        ]
    )
    swept = evaluate(gate("load_goodput", {"min_gain": 0.5}, ["B"], ["A"]), sweep)
    assert swept.verdict == Verdict.PASS and "A carried nothing" in swept.reason, swept.reason
    subject = next(c for c in swept.evidence["cells"] if c["arm"] == "B")
    assert subject["basis"] == f"{sum(swept_met)} of 240 requests over 80.0 s"
    assert subject["run_values"] == pytest.approx([m / 20 for m in swept_met]) and subject["blocks"] == [
        f"load/b{b}" for b in range(4)
    ]
    # a zero baseline still needs the subject's runs: one run of B against it decides nothing
    first = sweep[sweep["repeat"] == 0]
    once = evaluate(gate("load_goodput", {"min_gain": 0.5}, ["B"], ["A"]), first)
    assert once.verdict == Verdict.INCONCLUSIVE and "B has 1 run" in once.reason, once.reason


def test_latency_gate_needs_enough_requests_to_bound_a_high_percentile() -> None:
    def runs(values: Any, blocks: int = 4) -> pd.DataFrame:
        """`values(b)`: the TTFTs of block b's run, 50 requests each unless it says otherwise."""
        return pd.DataFrame(
            [
                r
                for b in range(blocks)
                for r in run_rows(
                    "B", "rate=2", met=len(values(b)), offered=len(values(b)), window=25, block=b, ttft=values(b)
                )
            ]
        )

    fast = runs(lambda b: [0.2 + 0.01 * b + 0.001 * i for i in range(50)])  # each restart a little slower
    p99 = evaluate(gate("load_latency", {"scenario": "rate=2", "percentile": 99, "max_value": 1.0}, ["B"]), fast)
    assert "runs have 50 requests each" in p99.reason and "needs >= 368" in p99.reason, p99.reason
    p90 = evaluate(gate("load_latency", {"scenario": "rate=2", "percentile": 90, "max_value": 1.0}, ["B"]), fast)
    assert p90.verdict == Verdict.PASS and "needs >=" not in p90.reason, p90.reason
    cell = p90.evidence["cells"][0]
    per_run = [float(pd.Series([0.2 + 0.01 * b + 0.001 * i for i in range(50)]).quantile(0.9)) for b in range(4)]
    assert cell["n"] == 4 and cell["run_values"] == pytest.approx(per_run)
    assert (cell["median"], cell["low"], cell["high"]) == pytest.approx(
        t_interval([math.log(v) for v in per_run]), rel=1e-6
    )
    assert cell["request_high"] < 1.0  # the pooled request-level interval is shown beside it
    slow = runs(lambda b: [2.0 + 0.05 * b + 0.01 * i for i in range(50)])
    assert (
        evaluate(gate("load_latency", {"scenario": "rate=2", "percentile": 50, "max_value": 1.0}, ["B"]), slow).verdict
        == Verdict.FAIL
    )
    # a ceiling close to the runs' spread is not decided either way
    near = per_run[0] * 0.5 + per_run[-1] * 0.5
    assert (
        evaluate(gate("load_latency", {"scenario": "rate=2", "percentile": 90, "max_value": near}, ["B"]), fast).verdict
        == Verdict.INCONCLUSIVE
    )
    # one run, however many requests, is not enough
    single = evaluate(
        gate("load_latency", {"scenario": "rate=2", "percentile": 90, "max_value": 1.0}, ["B"]),
        runs(lambda b: [0.2] * 400, blocks=1),
    )
    assert single.verdict == Verdict.INCONCLUSIVE and "B has 1 run; needs 3" in single.reason, single.reason
    assert needed_for_upper(0.99) == 368
    low, high, _ = quantile_interval(list(range(1, 1001)), 0.99)
    assert (low, high) == (983.0, 997.0)
    assert math.isinf(quantile_interval(list(range(50)), 0.99)[1])


def test_a_ceiling_on_a_p99_of_small_runs_is_no_pass() -> None:
    """Four runs of 50 requests, all far below the ceiling: their p99s are their maxima, so
    what they bound is nearer the p97 than the p99, and a ceiling on the p99 cannot pass."""
    rows = pd.DataFrame(
        [
            r
            for b in range(4)
            for r in run_rows(
                "B",
                "rate=2",
                met=50,
                offered=50,
                window=25,
                block=b,
                ttft=[0.2 + 0.01 * b + 0.001 * i for i in range(50)],
            )
        ]
    )
    p99 = evaluate(gate("load_latency", {"scenario": "rate=2", "percentile": 99, "max_value": 1.0}, ["B"]), rows)
    assert p99.verdict == Verdict.INCONCLUSIVE, p99.reason


def test_the_sweep_cell_is_found_when_rows_carry_their_settings() -> None:
    """The sweep case of the goodput test, with the `settings_hash` column the store adds."""
    swept_met = [57, 55, 58, 56]
    rows = pd.DataFrame(
        runs_rows("B", "rate=3", swept_met, offered=60, window=20)
        + [
            r
            for b, m in enumerate(swept_met)
            for r in run_rows(
                "B", "sweep", met=0, offered=1, window=1, block=b, extra={"max_goodput_rps": (m / 20, "rate=3")}
            )
        ]
        + [
            r
            for b, m in enumerate([30, 29, 31, 30])
            for r in run_rows(
                "A", "sweep", met=0, offered=1, window=1, block=b, extra={"max_goodput_rps": (m / 20, "rate=3")}
            )
        ]
        + runs_rows("A", "rate=3", [30, 29, 31, 30], offered=60, window=20)
    ).assign(settings_hash="cfd5005c9522c35f")
    swept = evaluate(gate("load_goodput", {"min_gain": 0.5}, ["B"], ["A"]), rows)
    assert swept.verdict == Verdict.PASS, swept.reason


def test_the_lag_bound_is_relative_to_what_the_run_measured_and_a_busy_loop_is_named() -> None:
    """A ramp of connections against a slow server (TTFT p50 20 s) lags 80 ms: 0.4% of what
    the gate reads, so the run is valid; 300 ms is 1.5% of it, so it is not, and the reason
    says against what. A client whose event loop woke a ticker 120 ms late is refused
    whatever its lag, naming the loop."""

    def rows(extra: dict[str, tuple[float, str]]) -> pd.DataFrame:
        b = runs_rows("B", "rate=2", [37, 39, 38, 36], offered=40, window=20)
        a = [
            r
            for i, m in enumerate([20, 21, 19, 22])
            for r in run_rows("A", "rate=2", met=m, offered=40, window=20, block=i, extra=extra if i == 2 else None)
        ]
        return pd.DataFrame(b + a)

    params = {"scenario": "rate=2", "min_gain": 0.3}
    slow = {"ttft_p50_s": (20.0, "")}
    ramp = evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({**slow, "schedule_lag_p99_s": (0.080, "")}))
    assert ramp.verdict == Verdict.PASS, ramp.reason
    late = evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({**slow, "schedule_lag_p99_s": (0.300, "")}))
    assert late.verdict == Verdict.INCONCLUSIVE
    assert "lag p99 300 ms > 1% of the run's TTFT p50 20000 ms" in late.reason, late.reason
    busy = evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({"loop_lag_p99_s": (0.120, "")}))
    assert busy.verdict == Verdict.INCONCLUSIVE and "event loop" in busy.reason and "120 ms late > 50 ms" in busy.reason
    calm = evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({"loop_lag_p99_s": (0.004, "")}))
    assert calm.verdict == Verdict.PASS


async def test_the_loop_ticker_sees_a_blocked_event_loop() -> None:
    import time as clock

    from arms.workloads.dispatch import LoopTicker

    ticker = LoopTicker()
    ticker.start()
    await asyncio.sleep(0.05)
    clock.sleep(0.12)  # the loop held by something else, as a busy client's is
    await asyncio.sleep(0.03)
    await ticker.stop()
    assert max(ticker.lags_ns) >= 90_000_000 and min(ticker.lags_ns) < 20_000_000, ticker.lags_ns


# -- the probe on the simulator ----------------------------------------------------------------------------

SIM = {"prefill_tps": 2000.0, "decode_tps": 60.0, "batch_penalty": 0.1}
AGENT = {"conversations": 4, "turns": 6, "system_tokens": 200, "task_tokens": 400, "turn_tokens": 160, "max_tokens": 16}


def sim_target(url: str) -> ProbeTarget:
    return ProbeTarget.speaking(
        registry.get("simulator"), base_url=url, model="sim-model", sampling={"temperature": 1.0}
    )


BLOCKS = 3  # server runs per arm: what a gate needs (min_runs)


def test_a_run_where_the_client_fell_behind_or_its_stamps_fell_back_is_no_measurement() -> None:
    """The same rows that pass a goodput gate, with one block of the baseline's client over
    the lag bound (or its request times fallen back to read time), leave it inconclusive,
    naming the arm, the cell and why; a gate may raise the bound or accept fallbacks."""

    def rows(extra: dict[str, tuple[float, str]] | None = None, block: int = 2) -> pd.DataFrame:
        b = runs_rows("B", "rate=2", [37, 39, 38, 36], offered=40, window=20)
        a = [
            r
            for i, m in enumerate([20, 21, 19, 22])
            for r in run_rows("A", "rate=2", met=m, offered=40, window=20, block=i, extra=extra if i == block else None)
        ]
        return pd.DataFrame(b + a)

    params = {"scenario": "rate=2", "min_gain": 0.3}
    assert evaluate(gate("load_goodput", params, ["B"], ["A"]), rows()).verdict == Verdict.PASS
    assert (
        evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({"schedule_lag_p99_s": (0.004, "40 sends")})).verdict
        == Verdict.PASS
    )  # within 10 ms
    late = evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({"schedule_lag_p99_s": (0.080, "40 sends")}))
    assert late.verdict == Verdict.INCONCLUSIVE and "not a valid measurement of the server: A rate=2" in late.reason, (
        late.reason
    )
    assert "fell behind its schedule, lag p99 80 ms > 10 ms" in late.reason
    flagged = {c["arm"]: c.get("faults") for c in late.evidence["cells"]}  # the gate page marks the cell read
    assert flagged["B"] is None and len(flagged["A"]) == 1 and "fell behind its schedule" in flagged["A"][0]
    lenient = evaluate(
        gate("load_goodput", {**params, "max_schedule_lag_s": 0.1}, ["B"], ["A"]),
        rows({"schedule_lag_p99_s": (0.080, "")}),
    )
    assert lenient.verdict == Verdict.PASS
    busy = evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({"client_cpu_share": (0.97, "")}))
    assert busy.verdict == Verdict.INCONCLUSIVE and "the client used 97% of a core (over 90%)" in busy.reason, (
        busy.reason
    )
    assert (
        evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({"client_cpu_share": (0.3, "")})).verdict
        == Verdict.PASS
    )
    fallen = evaluate(gate("load_goodput", params, ["B"], ["A"]), rows({"stamp_fallbacks": (3, "")}))
    assert fallen.verdict == Verdict.INCONCLUSIVE and "3 requests' times fell back to read time" in fallen.reason
    from reports import load_curve

    marked = load_curve.coverage_text(rows({"schedule_lag_p99_s": (0.080, "")}).assign(context=0))
    assert marked["A"].endswith("· 1 run measured the client (a gate reading them is inconclusive)"), marked
    assert "measured the client" not in marked["B"]
    latency = evaluate(
        gate("load_latency", {"metric": "ttft_s", "percentile": 90, "scenario": "rate=2", "max_value": 1.0}, ["A"]),
        rows({"schedule_lag_p99_s": (0.080, "")}),
    )
    assert latency.verdict in (Verdict.INCONCLUSIVE, Verdict.PENDING)


def test_the_simulators_own_stamps_bracket_the_clients_ttft() -> None:
    """With `write_stamps`, a stream's last chunk says when the simulator got the request
    and wrote its first token chunk, on the clock the client stamps with: the client's
    send comes before the server's receipt, the server's own TTFT is inside the client's,
    and the two differ by the loopback (here under 50 ms, a bound wide enough for a busy
    machine; `benchmarks/ttft_truth.py` measures it: about 1 ms). Off by default."""
    from aiohttp import web

    from arms.measures import RequestRecord, ttft_parts
    from arms.probes.base import MemorySink, ProbeTarget
    from arms.runtimes import catalog as runtimes
    from arms.simulator.app import make_app
    from arms.simulator.profile import SimProfile

    def parts(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
        splits = [
            ttft_parts(RequestRecord(**{k: v for k, v in r.items() if k in RequestRecord.__dataclass_fields__}))
            for r in rows
        ]
        return {
            name: [s[name] for s in splits if s]
            for name in ("send side", "server TTFT", "receive side", "client - server")
        }

    async def go(stamps: bool) -> list[dict[str, Any]]:
        runner = web.AppRunner(make_app(SimProfile(prefill_tps=20000.0, decode_tps=400.0, write_stamps=stamps)))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            target = ProbeTarget.speaking(
                runtimes.get("simulator"), base_url=f"http://127.0.0.1:{port}", model="m", simulated=True
            )
            sink = MemorySink()
            await load_probe.run(
                target, sink, load_probe.LoadParams(profile="constant", rate=10, duration_s=0.5, max_tokens=4)
            )
            return sink.requests
        finally:
            await runner.cleanup()

    rows = asyncio.run(go(True))
    found = parts(rows)
    assert len(found["send side"]) == len(rows) == 5
    assert all(0 <= v < 0.05 for v in found["send side"]) and all(v > 0 for v in found["server TTFT"])
    assert all(abs(v) < 0.05 for v in found["receive side"])
    assert all(0 <= d < 0.1 for d in found["client - server"])
    assert not parts(asyncio.run(go(False)))["send side"]  # no stamps unless asked


def test_a_trace_profile_sends_at_its_times_and_its_window_gives_its_mean_rate() -> None:
    """Evenly spaced sends at 1/r have window n / r (as a constant rate's); a cut by
    duration or count keeps the sends before it; the scenario names the trace."""
    even = load.trace([0.0, 0.5, 1.0, 1.5], "agents")
    assert even.scenario == "trace=agents" and load.is_open_loop(even.scenario)
    assert even.offsets(None, None) == ([0.0, 0.5, 1.0, 1.5], 2.0) and even.rate == pytest.approx(2.0)
    assert even.offsets(1.0, None) == ([0.0, 0.5], 1.0)
    assert even.offsets(None, 3)[0] == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="in order"):
        load.trace([1.0, 0.5], "bad")
    with pytest.raises(ValueError, match="at least one"):
        load.trace([], "empty")


def test_the_page_says_which_runs_are_closed_loops_and_which_never_settled() -> None:
    """Coordinated omission and the steady window are said on the arm page, per run: a
    closed loop's latencies are marked; a run whose steady window was 0 in any block is
    named with how many of its runs never settled; a settled open loop gets neither."""
    from reports.load_curve import run_notes

    def row(scenario: str, window: float) -> dict[str, Any]:
        return {"scenario": scenario, "mode": "canonical", "context": 0, "metric": "steady_window_s", "value": window}

    records = [row("synchronous", 4.0), row("concurrency=8", 0.0), row("concurrency=8", 3.0), row("rate=2", 5.0)]
    notes = run_notes(records, "canonical", 0)
    assert len(notes) == 2
    assert "synchronous, concurrency=8" in notes[0] and "coordinated omission" in notes[0]
    assert "open-loop runs keep their schedule" in notes[0]
    assert "concurrency=8 (1 of 2)" in notes[1] and "rate=2" not in notes[1]
    assert run_notes([row("rate=2", 5.0)], "canonical", 0) == []
