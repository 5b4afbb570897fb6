"""The regression check's false-alarm rate for identical builds (`gates.across`), on
generated runs: a few hundred comparisons, so it lives in the integration lane."""

from __future__ import annotations

import numpy as np
import pytest

from gates.across import compare_sides
from tests.unit.test_across import draws, side


@pytest.mark.integration
def test_identical_builds_raise_the_regression_alarm_at_most_5_percent_of_the_time() -> None:
    """Two builds with the same speed (4% run-to-run spread, 5 runs a side, three arms, so
    three cells in the family): `--fail-on regression:0%` -- the most trigger-happy
    threshold -- alarms in at most 5% of 300 comparisons (the claim: (1 - 0.95) / 2 = 2.5%
    with Holm over the cells). A check without Holm or with a one-sided 10% test would
    fail this."""
    rng = np.random.default_rng(7)
    alarms = 0
    trials = 300
    for _ in range(trials):
        before = side("before", {a: draws(rng, 5, 50.0) for a in "ABC"})
        after = side("after", {a: draws(rng, 5, 50.0) for a in "ABC"})
        result = compare_sides(before, after, fail_on=0.0)
        alarms += bool(result.alarms)
    assert alarms / trials <= 0.05, alarms
