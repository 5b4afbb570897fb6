"""The load probe against simulator processes: what a sweep stores and the report draws,
and an open loop that shows the queue a closed loop hides."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest

from arms.probes import load as load_probe
from arms.probes.base import MemorySink
from arms.workloads import profiles as load
from campaign.core.states import Verdict
from gates.engine import evaluate
from reports import charts, load_curve
from tests.unit.test_load import AGENT, SIM, gate, rows_of, sim_target  # noqa: F401 - helpers and fixtures

# open-loop schedules must send on time: these run in the CPU-bound xdist group
pytestmark = pytest.mark.cpu_bound


@pytest.mark.integration
def test_a_sweep_of_two_servers_stores_its_curve_its_schedule_and_what_the_report_draws(tmp_path: Path) -> None:
    """The same agent workload swept once on 2 and once on 4 simulated slots, one server
    after the other (side by side, the client and both servers would share two cores): each
    run stores a five-point curve that starts synchronous, its schedule lag, every open-loop
    request's schedule; the report draws the curve and the coverage matrix says which arms
    have one. That 4 slots carry more goodput is a claim over blocks, decided by the sweep
    example's gate through the campaign (`tests/e2e/test_sweep_example.py`); one block here
    says only that B's best rate is measured."""
    from tests.simproc import simulator

    params = load_probe.LoadParams(
        profile="sweep",
        duration_s=2.5,
        rates=3,
        max_concurrency=8,
        targets={"ttft_s": 1.0, "tpot_s": 0.1},
        stop_at_saturation=False,
        **AGENT,
    )  # the whole curve
    sinks = {"A": MemorySink(), "B": MemorySink()}
    for arm in "AB":
        with simulator(tmp_path, slots=2 if arm == "A" else 4, **SIM) as url:
            asyncio.run(load_probe.run(sim_target(url), sinks[arm], params))
    scenarios: dict[str, set[str]] = {"A": set(), "B": set()}
    for arm, s in sinks.items():
        best = load_probe.sweep_result(s.measurements)[("canonical", 0)]
        assert best["max_goodput_rps"] > 0, (arm, best)
        curve = load_probe.curve_rows(s.measurements)
        assert [r["scenario"] for r in curve][0] == "synchronous" and len(curve) == 5
        scenarios[arm] |= {r["scenario"] for r in curve}
        assert not s.values("errors")
        lags = s.values("schedule_lag_p99_s")
        # the lag is stored for every run (its bound is measured by benchmarks/load_lag.py,
        # not asserted here: a busy machine delays any client)
        assert lags and len(lags) == len(curve) and min(lags) >= 0
        requests = [r for r in s.requests if load.is_open_loop(r["scenario"])]
        assert requests and all(r["scheduled_ns"] and r["send_ns"] >= r["scheduled_ns"] for r in requests)
    rows = pd.DataFrame([r for arm, s in sinks.items() for r in rows_of(arm, s)])
    # one run per arm: the gate reads the stored rows and says it needs 3 runs, never a verdict
    verdict = evaluate(gate("load_goodput", {"min_gain": 0.3}, ["B"], ["A"]), rows)
    assert verdict.verdict == Verdict.INCONCLUSIVE and "needs 3 (blocks" in verdict.reason, verdict.reason
    curves = load_curve.runs(load_curve.load_rows(rows), "B", "arm-b")
    assert len(curves) == 1 and curves[0].runs == len(scenarios["B"]) == 5 and "max goodput" in curves[0].summary
    for chart in (curves[0].latency_chart, curves[0].goodput_chart):
        assert "<svg" in chart and not charts.external_references(str(chart))
    text = load_curve.coverage_text(load_curve.load_rows(rows))
    assert text["A"].startswith("curve, 5 runs") and "max goodput" in text["B"]


@pytest.mark.integration
def test_open_loop_on_the_simulator_shows_the_queue_a_closed_loop_hides(tmp_path: Path) -> None:
    """Past one slot's capacity, an open-loop rate builds a queue and TTFT grows; the same
    server under one closed-loop client never queues."""
    from tests.simproc import simulator

    synthetic = {"prompt_tokens": 100, "max_tokens": 16, "duration_s": 3.0}
    with simulator(tmp_path, slots=1, prefill_tps=4000.0, decode_tps=80.0) as url:
        over, single = MemorySink(), MemorySink()
        asyncio.run(
            load_probe.run(sim_target(url), over, load_probe.LoadParams(profile="constant", rate=8, **synthetic))
        )
        asyncio.run(load_probe.run(sim_target(url), single, load_probe.LoadParams(profile="synchronous", **synthetic)))
    assert over.values("queue_depth_max", scenario="rate=8")[0] >= 3
    assert single.values("queue_depth_max", scenario="synchronous")[0] == 0
    assert over.values("ttft_p99_s")[0] > 4 * single.values("ttft_p99_s")[0]
    assert over.values("offered_rps")[0] == pytest.approx(8.0)  # offered as scheduled, whatever the server did
    # every rate is per the schedule's window, so what one slot could not carry in it shows
    # as the drain: the last of the 24 requests came back long after the 3 s window
    assert over.values("request_throughput_rps")[0] <= over.values("offered_rps")[0]
    assert over.values("drain_s")[0] > 1.0 and single.values("drain_s")[0] == 0.0


@pytest.mark.integration
def test_a_sweep_stops_at_the_first_rate_that_does_not_hold_and_says_why(tmp_path: Path) -> None:
    """One slot cannot carry any rate above its synchronous one within a tight TTFT target:
    the first open-loop rate breaks, the sweep runs no higher one (the knee is decided
    there) and records why and what it saved; with the stop off, every rate runs."""
    from tests.simproc import simulator

    synthetic = {
        "prompt_tokens": 100,
        "max_tokens": 16,
        "duration_s": 2.5,
        "rates": 4,
        "max_concurrency": 4,
        "targets": {"ttft_s": 0.15},
    }
    sinks = {}
    with simulator(tmp_path, slots=1, prefill_tps=4000.0, decode_tps=80.0) as url:
        for stop in (True, False):
            sinks[stop] = MemorySink()
            asyncio.run(
                load_probe.run(
                    sim_target(url),
                    sinks[stop],
                    load_probe.LoadParams(profile="sweep", stop_at_saturation=stop, **synthetic),
                )
            )
    stopped, whole = sinks[True], sinks[False]
    curve = load_probe.curve_rows(stopped.measurements)
    rates = [r for r in curve if r["open_loop"]]
    assert rates and rates[-1]["target_attainment"] < 0.9 and all(r["target_attainment"] >= 0.9 for r in rates[:-1])
    skipped = stopped.values("sweep_rates_skipped", scenario="sweep")[0]
    assert len(rates) + skipped == 4 and skipped >= 1
    why = next(m["source"] for m in stopped.measurements if m["metric"] == "sweep_rates_skipped")
    assert why.startswith(f"saturated at {rates[-1]['scenario']}:") and "queue grew" in why, why
    assert stopped.values("sweep_time_saved_s", scenario="sweep")[0] == pytest.approx(skipped * 2.5)
    assert whole.values("sweep_rates_skipped", scenario="sweep") == [0]
    assert len([r for r in load_probe.curve_rows(whole.measurements) if r["open_loop"]]) == 4


@pytest.mark.integration
def test_a_ramp_of_256_connections_to_a_slow_server_is_no_client_fault(tmp_path: Path) -> None:
    """256 requests sent at once-per-4-ms to a slow server (TTFT in seconds): the client
    opens its connections before the schedule starts, so no request pays a connect, the
    lag leaves connects out, and the validity rules (lag against 1% of the run's TTFT p50,
    the loop's own lateness, the CPU share) find nothing; the run stores its connect count,
    its loop lag and its steady window."""
    from gates.load_validity import run_faults
    from tests.simproc import simulator

    params = load_probe.LoadParams(
        profile="constant", rate=250.0, requests=256, max_in_flight=256, prompt_tokens=600, max_tokens=4
    )
    sink = MemorySink()
    with simulator(tmp_path, slots=64, prefill_tps=20000.0, decode_tps=50.0) as url:
        asyncio.run(load_probe.run(sim_target(url), sink, params))
    assert not sink.values("errors")
    assert sink.values("connects") == [0.0]  # every connection was open before the first send
    ttft = sink.values("ttft_p50_s")[0]
    lag = sink.values("schedule_lag_p99_s")[0]
    assert ttft > 1.0 and lag < 0.01 * ttft, (lag, ttft)
    assert sink.values("loop_lag_p99_s") and sink.values("steady_window_s")
    rows = pd.DataFrame(rows_of("A", sink))
    summary = rows[rows["kind"] == "summary"]
    # no rule about the lag or the client's CPU fires; a machine too busy to wake the
    # client's event loop on time (the suite's other workers) is named as such, and only that
    faults = [f for f in run_faults(summary, "A") if "event loop" not in f]
    assert faults == [], faults


@pytest.mark.integration
def test_a_run_sent_by_two_client_processes_is_one_run_on_one_clock(tmp_path: Path) -> None:
    """`client_procs = 2`: an open loop and a closed loop, each sent by two worker processes
    from one start. Every request is sent once and stored once, in request order; the
    sends keep the one schedule (each send after its scheduled time, on the shared clock);
    the peak in flight is counted over both processes; the CPU share names them."""
    from tests.simproc import simulator

    open_loop = load_probe.LoadParams(profile="constant", rate=40.0, requests=60, max_tokens=4, client_procs=2)
    closed = load_probe.LoadParams(profile="concurrent", concurrency=6, requests=30, max_tokens=4, client_procs=2)
    sinks = {"open": MemorySink(), "closed": MemorySink()}
    with simulator(tmp_path, slots=8, prefill_tps=20000.0, decode_tps=200.0) as url:
        asyncio.run(load_probe.run(sim_target(url), sinks["open"], open_loop))
        asyncio.run(load_probe.run(sim_target(url), sinks["closed"], closed))
    for name, sink in sinks.items():
        assert not sink.values("errors"), name
        requests = sink.requests
        assert [r["trial"] for r in requests] == list(range(len(requests))), name
        assert len(requests) == (60 if name == "open" else 30), name
        share = [m for m in sink.measurements if m["metric"] == "client_cpu_share"]
        assert share and "2 client processes" in share[0]["source"], share
    sends = sorted((r["scheduled_ns"], r["send_ns"]) for r in sinks["open"].requests)
    assert all(sent >= due for due, sent in sends), sends[:3]
    gaps = {b[0] - a[0] for a, b in zip(sends, sends[1:])}  # one schedule: 25 ms apart, whichever process sent
    assert min(gaps) >= 24_999_999 and max(gaps) <= 25_000_001, sorted(gaps)[:3]  # ns rounding
    # sent at 40 req/s over 1.5 s by two processes: the schedule is one, so the window is
    assert sinks["open"].values("window_s") == [pytest.approx(1.5, abs=0.05)]
    assert sinks["closed"].values("in_flight_peak")[0] <= 6


@pytest.mark.integration
def test_a_cpu_burner_beside_the_client_is_refused_and_named(tmp_path: Path) -> None:
    """The other side of the ramp test: the same kind of run with a thread burning CPU in
    the client's own process (a busy neighbour sharing the client's core and lock). The
    validity rules find it and say which fired, with numbers, so a gate reading the run is
    inconclusive rather than crediting the server with the client's lateness."""
    import sys
    import threading

    from gates.load_validity import run_faults
    from tests.simproc import simulator

    params = load_probe.LoadParams(profile="constant", rate=20.0, requests=40, max_tokens=8)
    sink = MemorySink()
    done = threading.Event()

    def burn() -> None:
        while not done.is_set():
            sum(range(10_000))

    switch = sys.getswitchinterval()
    with simulator(tmp_path, slots=8, prefill_tps=20000.0, decode_tps=100.0) as url:
        sys.setswitchinterval(0.1)  # the burner keeps the interpreter 100 ms at a time
        burner = threading.Thread(target=burn, daemon=True)
        burner.start()
        try:
            asyncio.run(load_probe.run(sim_target(url), sink, params))
        finally:
            done.set()
            burner.join()
            sys.setswitchinterval(switch)
    rows = pd.DataFrame(rows_of("A", sink))
    faults = run_faults(rows[rows["kind"] == "summary"], "A")
    assert faults, sink.values("client_cpu_share")
    named = " ".join(faults)
    assert "of a core" in named or "event loop" in named or "fell behind its schedule" in named, faults
    assert any(ch.isdigit() for ch in named)
