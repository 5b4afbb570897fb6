"""Comparing the same arms across two sides (`gates.across`), on generated runs: the
power of the regression check for a real regression, the labels, and the refusals (its
false-alarm rate is `tests/integration/test_across_calibration.py`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from campaign.store.sides import ArmSide, Side
from gates.across import IMPROVEMENT, REGRESSION, UNSETTLED, compare_sides


def side(
    label: str,
    runs: dict[str, list[float]],
    *,
    model: str = "m/q4",
    version: str = "build 1",
    settings: str = "s1",
    metric: str = "decode_tps",
) -> Side:
    """One side: per arm, one value per server run (block), each the run's one summary."""
    rows = []
    for arm, values in runs.items():
        for block, value in enumerate(values):
            rows.append(
                {
                    "arm_id": arm,
                    "mode": "canonical",
                    "metric": metric,
                    "scenario": "decode",
                    "probe": "decode",
                    "context": 4096,
                    "kind": "summary",
                    "trial": 0,
                    "value": float(value),
                    "source": "",
                    "repeat": block,
                    "item_key": "item",
                    "block_id": f"b{block}",
                    "server_block": "",
                    "settings_hash": settings,
                    "attempt_id": block,
                }
            )
    arms = {a: ArmSide(a, model, ("served",), "rt", (version,)) for a in runs}
    return Side(label, "camp", pd.DataFrame(rows), arms)


def draws(rng: np.random.Generator, n: int, center: float, sd: float = 0.04) -> list[float]:
    return list(center * np.exp(rng.normal(0.0, sd, n)))


def test_a_real_regression_is_named_with_its_interval_and_raises_the_alarm() -> None:
    """A build 15% slower on one arm: named a regression with an interval over 5 vs 5 runs,
    and `regression:5%` alarms on it (power: in at least 80% of 40 generated cases); the
    other arm, unchanged, is not named."""
    rng = np.random.default_rng(3)
    hits = 0
    for k in range(40):
        before = side("before", {"L": draws(rng, 5, 50.0), "M": draws(rng, 5, 40.0)})
        after = side("after", {"L": draws(rng, 5, 42.5), "M": draws(rng, 5, 40.0)})
        result = compare_sides(before, after, fail_on=0.05)
        hits += [c.arm for c in result.alarms] == ["L"]
        if k == 0:
            (l_change,) = [c for c in result.changes if c.arm == "L"]
            assert l_change.label == REGRESSION and l_change.text(0.95).startswith("decode_tps L decode/decode@4K: -1")
            assert "95% CI over 5 vs 5 runs: regression" in l_change.text(0.95)
    assert hits >= 32, hits


def test_lower_is_better_metrics_regress_upwards_and_an_unsettled_change_says_what_would_settle_it() -> None:
    """TTFT 20% longer is a regression (its change is +20%); a 3.5% slowdown within 4% run-to-run noise is
    "no change established", with the runs a side that would settle it."""
    before = side("before", {"L": [0.50, 0.52, 0.49, 0.51]}, metric="ttft_s")
    after = side("after", {"L": [0.60, 0.62, 0.59, 0.61]}, metric="ttft_s")
    (change,) = compare_sides(before, after, fail_on=0.05).changes
    assert change.label == REGRESSION and change.change == pytest.approx(0.2, abs=0.01) and change.alarm
    before, after = side("before", {"L": [50, 53, 48, 51]}), side("after", {"L": [48, 51, 46, 50]})
    (wobble,) = compare_sides(before, after).changes
    assert wobble.label == UNSETTLED and wobble.note == "about 13 runs a side would settle it"
    checked = compare_sides(before, after, fail_on=0.05)
    (unsure,) = checked.changes
    assert not unsure.alarm and checked.unsettled == [unsure]  # its CI reaches -10%: could be a 5% regression
    assert "5% regression" in unsure.note or "more than 50 runs" in unsure.note
    faster = compare_sides(side("before", {"L": [50, 51, 49, 50]}), side("after", {"L": [60, 61, 59, 60]}))
    assert faster.changes[0].label == IMPROVEMENT


def test_cells_match_by_settings_and_a_changed_model_is_refused() -> None:
    """Runs at other settings are another cell, never compared; an arm whose model changed
    between the sides is refused when the question is the runtime, saying what changed."""
    other = compare_sides(side("before", {"L": [50, 51, 49]}), side("after", {"L": [40, 41, 39]}, settings="s2"))
    assert other.changes == []
    swapped = compare_sides(side("before", {"L": [50, 51, 49]}), side("after", {"L": [40, 41, 39]}, model="m/q8"))
    assert swapped.changes == [] and swapped.refused == [
        "L: the model changed (m/q4 -> m/q8); the question is the runtime: not compared"
    ]
    allowed = compare_sides(
        side("before", {"L": [50, 51, 49]}), side("after", {"L": [40, 41, 39]}, model="m/q8"), allow_model_change=True
    )
    assert allowed.changes and allowed.changes[0].label == REGRESSION
