"""A load run's steady window (MSER-5), and the marks a run's numbers carry: a run that
never settled, and closed-loop latencies subject to coordinated omission."""

from __future__ import annotations

import random

from arms.workloads.steady import mser5, per_second, steady_window


def test_mser5_drops_the_warm_up_and_the_cool_down() -> None:
    rng = random.Random(1)
    ramp = [10.0 * i for i in range(10)]  # 10 s filling the server's queue
    plateau = [100.0 + rng.gauss(0, 3) for _ in range(60)]
    drain = [100.0 - 12.0 * i for i in range(1, 8)]
    series = ramp + plateau + drain
    steady = steady_window(series)
    assert steady is not None
    assert 5 <= steady.start_s <= 15 and len(series) - 15 <= steady.end_s <= len(series) - 5, steady
    assert abs(steady.rate - 100.0) < 3.0


def test_a_run_that_never_settles_has_no_steady_window() -> None:
    climbing = [float(i) for i in range(60)]  # a queue that grows for the whole run
    assert steady_window(climbing) is None
    assert mser5([1.0, 2.0, 3.0]) is None  # too short to say


def test_per_second_counts_whole_seconds_from_the_start() -> None:
    ns = 1_000_000_000
    assert per_second([0, ns // 2, ns + 1, 2 * ns + 5], 0, 2 * ns + 10) == [2.0, 1.0]


def test_closed_loop_latencies_say_they_are_subject_to_coordinated_omission() -> None:
    from arms.measures import RequestRecord
    from arms.workloads.dispatch import RunResult
    from arms.workloads.load_stats import run_stats
    from arms.workloads.profiles import Kind, Profile

    def record(i: int) -> RequestRecord:
        t = i * 1_000_000_000
        return RequestRecord(
            send_ns=t,
            end_ns=t + 500_000_000,
            event_ns=[t + 100_000_000, t + 200_000_000],
            event_kind=["content", "content"],
            event_tokens=[1, 1],
            finish_reason="stop",
            scheduled_ns=t,
        )

    records = [record(i) for i in range(10)]
    for kind, closed in ((Kind.CONCURRENT, True), (Kind.CONSTANT, False)):
        profile = Profile(kind, concurrency=2) if closed else Profile(kind, rate=1.0)
        result = RunResult(profile, records, 0, 10_500_000_000, 10.0, 2)
        stats = {s.metric.name: s for s in run_stats(result, {})}
        marked = "coordinated omission" in stats["ttft_p99_s"].source
        assert marked == closed, (kind, stats["ttft_p99_s"].source)
