"""What a planned design can detect: the smallest gain past a gate's threshold that it
passes with 80% probability under the calibrated restart noise.

Why: three blocks cannot settle a +10% gate whose true gain is +15%, and a user should
know that before spending the server starts, not after an "inconclusive". The number is
the power of the test the gate will read (the paired t over blocks, at Holm's strictest
level for the planned family; the confidence sequence at its budget for an adaptive item)
on per-block log ratios whose spread comes from two independent server starts of
`run_sd` each (`gates.calibration.VariationModel`, the simulator's and the calibration's
noise). The noncentral t gives it exactly for normal log run values.
"""

from __future__ import annotations

import math

from scipy import optimize
from scipy import stats as st

from gates.blockstats import sequential_t

POWER = 0.8


def detectable_margin(
    blocks: int,
    family: int,
    confidence: float,
    run_sd: float,
    sequential: bool = False,
    power: float = POWER,
) -> float:
    """The log-ratio distance past a threshold at which a paired gate over `blocks` blocks
    passes with probability `power` (infinite: it cannot pass at all)."""
    if blocks < 2 or family < 1 or run_sd <= 0:
        return math.inf
    alpha = (1.0 - confidence) / 2 / family
    df = blocks - 1
    crit = sequential_t(blocks, df, alpha) if sequential else float(st.t.ppf(1.0 - alpha, df))
    if math.isinf(crit):
        return math.inf
    sd = math.sqrt(2.0) * run_sd  # the spread of a log ratio of two independent starts
    scale = math.sqrt(blocks) / sd

    def short(delta: float) -> float:
        return float(st.nct.sf(crit, df, delta * scale)) - power

    hi = sd
    while short(hi) < 0:
        hi *= 2
        if hi > 50:
            return math.inf
    return float(optimize.brentq(short, 0.0, hi, xtol=1e-7))


def detectable_gain(threshold: float, margin: float, higher_is_better: bool = True) -> float:
    """The true change (value / baseline - 1) at `margin` past a gain `threshold`: for a
    lower-is-better metric a cut, negative."""
    if math.isinf(margin):
        return math.inf if higher_is_better else -1.0
    if higher_is_better:
        return (1.0 + threshold) * math.exp(margin) - 1.0
    return (1.0 - threshold) * math.exp(-margin) - 1.0
