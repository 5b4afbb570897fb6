"""Does a load step offer the rate it is labelled with? A benchmark, not a test.

A sweep labels each open-loop step with its rate and plots the curve against it. For the
rates a sweep runs (by default those of a 4-slot simulator sweep: 1.2 to 2.94 req/s) and
step lengths of 3, 5 and 20 s, over `--seeds` seeds, it prints the offered rate (requests
/ window) of

- the unconditioned Poisson draw the load probe used before (exponential gaps until the
  duration, the window the duration, every step from one seed), reproduced here as the
  reference, and
- the profile it uses now (`arms.workloads.profiles.poisson`: the count is rate x duration, the times
  uniform over n / rate, each step its own seed, `arms.workloads.profiles.step_seed`),

as the median and the worst relative shortfall or excess over the seeds, and, for the old
draw, how correlated the steps' shortfalls were (one seed for all: the same bursts).

    python benchmarks/load_offered.py
    python benchmarks/load_offered.py --rates 0.5 2 8 --seeds 200
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arms.workloads import profiles as load  # noqa: E402


def former_offered(rate: float, duration: float, seed: int) -> float:
    """The former draw: exponential gaps from `seed` until `duration`, over `duration`."""
    rng = random.Random(seed)
    t, n = 0.0, 0
    while t < duration:
        n += 1
        t += rng.expovariate(rate)
    return n / duration


def now_offered(rate: float, duration: float, seed: int) -> float:
    profile = load.poisson(rate, load.step_seed(seed, load.constant(rate).scenario))
    offsets, window = profile.offsets(duration, None)
    return len(offsets) / window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=float, nargs="+", default=[1.2, 1.78, 2.36, 2.94])
    ap.add_argument("--durations", type=float, nargs="+", default=[3.0, 5.0, 20.0])
    ap.add_argument("--seeds", type=int, default=100)
    args = ap.parse_args()
    print(f"{'label':>6} {'step':>5}  {'before: median':>14} {'worst':>7}  {'now: median':>11} {'worst':>7}")
    worst_now = 0.0
    for duration in args.durations:
        for rate in args.rates:
            before = [former_offered(rate, duration, s) / rate - 1 for s in range(args.seeds)]
            now = [now_offered(rate, duration, s) / rate - 1 for s in range(args.seeds)]
            worst = lambda xs: max(xs, key=abs)  # noqa: E731
            worst_now = max(worst_now, abs(worst(now)))
            print(
                f"{rate:6.2f} {duration:4.0f}s  {statistics.median(before):+14.1%} {worst(before):+7.1%}"
                f"  {statistics.median(now):+11.1%} {worst(now):+7.1%}"
            )
    # one seed for every step: the shortfalls of two steps of one sweep move together
    for duration in args.durations:
        a = [former_offered(args.rates[0], duration, s) / args.rates[0] for s in range(args.seeds)]
        b = [former_offered(args.rates[-1], duration, s) / args.rates[-1] for s in range(args.seeds)]
        print(
            f"before, {duration:.0f} s steps: correlation of two steps' offered/label over seeds "
            f"{statistics.correlation(a, b):+.2f} (now each step draws its own seed)"
        )
    print(f"now: worst offered/label - 1 over every rate, step and seed: {worst_now:+.2%}")


if __name__ == "__main__":
    main()
