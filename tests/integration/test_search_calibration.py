"""The search's error rate on generated data, through the real code (the loop, Optuna,
the nomination, the confirmation gates with Holm): on a space where every recipe is the
base, a confirmed winner is false, and it must be as rare as any false verdict, although
the search's own best run always looks better than the base (the winner's curse)."""

from __future__ import annotations

import statistics

from flows.search_calibration import flat, grid_size, run_one, starts_to_reach, surface


def test_a_search_over_identical_recipes_rarely_confirms_a_winner() -> None:
    n, false, claimed = 40, 0, []
    for seed in range(n):
        run = run_one("tpe", flat, 16, 7000 + seed)
        false += run.verdict == "pass"
        claimed.append(run.claimed)
    assert false <= 3, f"{false} of {n} null searches confirmed a winner"  # 5% of 40 is 2; the goal is <= 5%
    # what the search alone would have said: its best of one-run arms beats the base, by
    # more than the run-to-run spread (3%) on average, though every arm is the base
    assert statistics.mean(claimed) > 0.03 and sum(c > 0 for c in claimed) >= 0.9 * n, claimed


def test_the_search_finds_the_optimum_in_fewer_starts_than_the_grid_and_confirms_it() -> None:
    tpe = [run_one("tpe", surface, 30, 1000 + seed) for seed in range(8)]
    grid = [run_one("grid", surface, grid_size() + 2, 1000 + seed) for seed in range(8)]
    reach_tpe = statistics.median(starts_to_reach(r) or 31 for r in tpe)
    reach_grid = statistics.median(starts_to_reach(r) or grid_size() + 3 for r in grid)
    assert reach_tpe < reach_grid, (reach_tpe, reach_grid)
    right = sum(r.verdict == "pass" and r.winner_truth >= 0.95 * r.optimum for r in tpe)
    assert right >= 5, f"{right} of 8 TPE searches confirmed a winner within 5% of the optimum"
