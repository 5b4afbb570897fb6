"""How good is a search's answer? Starts to the optimum, confirmed right, false winner, measured.

Runs `--searches` searches (default 100) per sampler (Optuna's TPE, random search, and the
full grid of the same space in a random order) through the real search code
(`flows.search_calibration`: the loop, Optuna, the nomination, the confirmation gates
with Holm) on a response surface with a known optimum, measured with the server
variation model (run_sd 3% per server start, drift, request noise). The surface is a
fixture mirroring the simulator's mechanisms (slots = conversations, a chunk size, a
cache size); the docstring of `flows.search_calibration` says what it is and is not.

For each sampler it prints:
- server starts until an arm within 5% of the optimum was measured (median, and the share
  of searches that got there within the budget);
- confirmed right: the share of searches whose winner passed "beats the base" on fresh
  blocks and is the true best or within 5% of it;
and, on a space where every recipe is identical to the base (`--null`, default 200
searches of TPE), the false-winner rate: the share in which a winner is nonetheless
confirmed as beating the base. Every rate has its exact (Clopper-Pearson) 95% interval.
The last line is

    search: optimum within 5% after N starts (grid M); confirmed right P%; false winner F%

with N and P for TPE, M for the grid. The goals: F <= 5 and N < M.

    python benchmarks/search.py [--searches 100] [--null 200] [--starts 30] [--run-sd 0.03]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flows.search_calibration import (  # noqa: E402
    flat,
    grid_size,
    run_one,
    starts_to_reach,
    surface,
)
from gates.calibration import VariationModel, rate_text  # noqa: E402

ci = rate_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--searches", type=int, default=100, help="searches per sampler on the surface")
    parser.add_argument("--null", type=int, default=200, help="searches on the flat space (false winner)")
    parser.add_argument("--starts", type=int, default=30, help="each search's budget of server starts")
    parser.add_argument("--run-sd", type=float, default=0.03, help="run-to-run sd (log scale)")
    args = parser.parse_args()
    model = VariationModel(run_sd=args.run_sd)
    grid = grid_size()
    print(
        f"space: slots 1..8 x 5 chunks x 4 caches = {grid} arms; budget {args.starts} starts; run_sd {args.run_sd:.0%}"
    )
    medians: dict[str, float] = {}
    right_tpe = 0
    for sampler, starts in (("tpe", args.starts), ("random", args.starts), ("grid", grid + 2)):
        began = time.monotonic()
        reached, right, n = [], 0, args.searches
        for seed in range(n):
            run = run_one(sampler, surface, starts, 1000 + seed, model)
            got = starts_to_reach(run)
            reached.append(got if got is not None else starts + 1)
            right += run.verdict == "pass" and run.winner_truth >= run.optimum * 0.95
        medians[sampler] = statistics.median(reached)
        within = sum(r <= starts for r in reached)
        if sampler == "tpe":
            right_tpe = right
        print(
            f"{sampler:>6}: optimum within 5% after {medians[sampler]:.0f} starts (median; reached in {ci(within, n)} "
            f"of searches within {starts}); confirmed right {ci(right, n)}  ({time.monotonic() - began:.0f} s)"
        )
    began = time.monotonic()
    false = sum(run_one("tpe", flat, args.starts, 5000 + seed, model).verdict == "pass" for seed in range(args.null))
    print(
        f"  null: every recipe identical to the base: false winner {ci(false, args.null)} "
        f"({args.null} TPE searches, {time.monotonic() - began:.0f} s)"
    )
    print(
        f"search: optimum within 5% after {medians['tpe']:.0f} starts (grid {medians['grid']:.0f}); "
        f"confirmed right {right_tpe / args.searches:.0%}; false winner {false / args.null:.1%}"
    )


if __name__ == "__main__":
    main()
