"""Estimators over server runs: the statistics a comparative verdict is decided by.

Why runs and not requests: a server start draws its own speed (weights paged in, threads
placed, clocks where they are), so the requests of one run share that draw and are not
independent evidence. Treating 30 requests of one run as 30 replicates makes the interval
far too narrow: two identical arms "win" a third of the time once servers vary between
restarts by a few percent. Here each (arm, block, cell) is one number -- the median of its
requests -- and every interval is over those numbers.

Ratios are estimated on the log scale: a speed-up is multiplicative, the log of a rate is
close to normal across restarts, and the interval of a log ratio maps back to a ratio
without the bias of dividing two means.

- **paired** (both arms ran in the same blocks, each block one server start per arm in a
  randomised order): the t interval of the mean per-block log ratio, n - 1 degrees of
  freedom. Block-level drift and load hit both sides of a pair alike and cancel.
- **unpaired** (the arms never shared enough blocks): Welch's t interval of the difference
  of the two arms' mean log values, Welch-Satterthwaite degrees of freedom.
- **one arm** (a bound on one arm's value): the t interval of its mean log value.

Each comes with the one-sided p-values of "the true value clears the threshold" (pass) and
"it does not" (fail). An interval at `confidence` and a one-sided test at
(1 - confidence) / 2 decide alike, so a 95% CI wholly above the threshold is a pass at
2.5% error, wholly below is a fail at 2.5%. Equivalence ("within 5%") is two one-sided
tests (TOST): both sides rejected at (1 - confidence) / 2.

The t quantiles and tail probabilities are scipy.stats'. Their coverage is exact when the
log run values are normal; `benchmarks/verdict_calibration.py` measures the real false
verdict rates on the simulator's variation model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as st

PAIRED_METHOD = "paired t over shared blocks, on log ratios of run medians"
UNPAIRED_METHOD = "Welch t over runs, on log run medians (the arms shared no block)"
RAW_PAIRED_METHOD = "paired t over shared blocks, on differences of run medians (values <= 0: no log scale)"
RAW_UNPAIRED_METHOD = "Welch t over runs, on run medians (values <= 0: no log scale)"
ONE_ARM_METHOD = "t interval over runs, of the mean log run median"
RAW_ONE_ARM_METHOD = "t interval over runs, of the mean run median (values <= 0: no log scale)"


TIE = 1e-9  # a log ratio this close to its bound is on it (floating-point rounding decides nothing)
FLAT = 1e-12  # a standard error below this is no spread at all (every run gave the same ratio)


@dataclass(frozen=True)
class Estimate:
    """A location with its standard error and degrees of freedom, on the scale it was
    estimated on (`log` says which). `df` 0 means no spread could be estimated."""

    center: float
    se: float
    df: float
    n: int
    log: bool
    method: str

    def interval(self, confidence: float) -> tuple[float, float]:
        """The two-sided interval at `confidence`, on the estimate's own scale."""
        if self.df <= 0 or math.isnan(self.se):
            return -math.inf, math.inf
        if self.se < FLAT:
            return self.center, self.center
        half = float(st.t.ppf(0.5 + confidence / 2, self.df)) * self.se
        return self.center - half, self.center + half

    def p_above(self, bound: float) -> float:
        """One-sided p of H0 "true <= bound" (small: the value surely exceeds it)."""
        if self.df <= 0 or math.isnan(self.se):
            return 1.0
        if self.se < FLAT:  # on the bound counts as reaching it, as "gain >= threshold" says
            return 0.0 if self.center >= bound - TIE else 1.0
        return float(st.t.sf((self.center - bound) / self.se, self.df))

    def p_below(self, bound: float) -> float:
        """One-sided p of H0 "true >= bound" (small: the value surely falls short)."""
        if self.df <= 0 or math.isnan(self.se):
            return 1.0
        if self.se < FLAT:
            return 0.0 if self.center <= bound + TIE else 1.0
        return float(st.t.cdf((self.center - bound) / self.se, self.df))


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def positive(*groups: Sequence[float]) -> bool:
    return all(v > 0 for g in groups for v in g)


def paired(subject: Sequence[float], baseline: Sequence[float]) -> Estimate:
    """Mean per-block log ratio subject/baseline (raw difference when a value is <= 0)."""
    log = positive(subject, baseline)
    diffs = [math.log(s) - math.log(b) if log else s - b for s, b in zip(subject, baseline, strict=True)]
    mean, sd = _mean_sd(diffs)
    n = len(diffs)
    return Estimate(mean, sd / math.sqrt(n) if n > 1 else math.nan, n - 1, n, log, PAIRED_METHOD if log else RAW_PAIRED_METHOD)


def unpaired(subject: Sequence[float], baseline: Sequence[float]) -> Estimate:
    """Difference of mean log values (Welch); raw difference when a value is <= 0."""
    log = positive(subject, baseline)
    a = [math.log(v) if log else v for v in subject]
    b = [math.log(v) if log else v for v in baseline]
    ma, sa = _mean_sd(a)
    mb, sb = _mean_sd(b)
    method = UNPAIRED_METHOD if log else RAW_UNPAIRED_METHOD
    if len(a) < 2 or len(b) < 2:
        return Estimate(ma - mb, math.nan, 0, min(len(a), len(b)), log, method)
    va, vb = sa**2 / len(a), sb**2 / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        df = float(len(a) + len(b) - 2)
    else:
        df = (va + vb) ** 2 / ((va**2 / (len(a) - 1)) + (vb**2 / (len(b) - 1)))
    return Estimate(ma - mb, se, df, min(len(a), len(b)), log, method)


def one_arm(values: Sequence[float]) -> Estimate:
    """Mean log value of one arm's runs (raw mean when a value is <= 0)."""
    log = positive(values)
    xs = [math.log(v) if log else v for v in values]
    mean, sd = _mean_sd(xs)
    n = len(xs)
    return Estimate(mean, sd / math.sqrt(n) if n > 1 else math.nan, n - 1, n, log, ONE_ARM_METHOD if log else RAW_ONE_ARM_METHOD)


def back(est: Estimate, x: float) -> float:
    """A value on the estimate's scale as the reader sees it: exp for log scale."""
    if not est.log:
        return x
    if x == math.inf:
        return math.inf
    if x == -math.inf:
        return 0.0
    return math.exp(x)


def pass_bar(blocks: int, family: int, confidence: float) -> float:
    """How far a paired gain must clear its threshold, in between-block standard deviations
    of the per-block log ratio, for its one-sided p to reach the strictest Holm level of a
    `family` of comparative gates: t(1 - alpha/family, blocks - 1) / sqrt(blocks), where
    alpha = (1 - confidence) / 2 (`gates.compare.alpha_of`).

    Why: known before anything runs, it says whether a design can pass at all. Three blocks
    in a family of four need the gain to clear its threshold by 5.1 spreads (t > 8.86 on 2
    degrees of freedom); five blocks by 1.9. `paired` and `Estimate.p_above` are the test
    this bar is the edge of (a test holds them to each other)."""
    if blocks < 2 or family < 1:
        return math.inf
    alpha = (1.0 - confidence) / 2 / family
    return float(st.t.ppf(1.0 - alpha, blocks - 1)) / math.sqrt(blocks)
