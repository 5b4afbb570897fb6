"""Confidence intervals the verdicts use: of a median, and of a pass rate.

Both are exact and distribution-free, so they need no seed and no assumption about how
latencies or decode rates are distributed (they are skewed, and n is often 3 to 10):

- **median**: the order-statistic interval. For sorted values x(1) <= ... <= x(n), the
  interval [x(j), x(n+1-j)] covers the true median with probability
  1 - 2 * P(Binomial(n, 1/2) <= j - 1). We take the narrowest one covering at least
  `confidence`; when n is too small for that (n < 6 at 95%), the widest one, [min, max],
  and say what it covers (75% at n = 3). A bootstrap would give a narrower interval at
  small n only by pretending to know more than three numbers can tell.
- **pass rate** (k passes in n trials): Clopper-Pearson, the exact binomial interval.

Both return the coverage they actually have, so a reason can say "[min, max], 75%".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from scipy import special

CONFIDENCE = 0.95
MEDIAN_METHOD = "exact order-statistic interval of the median (binomial, distribution-free)"
RATE_METHOD = "Clopper-Pearson exact binomial interval"


def _log_pmf(n: int, k: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return min(1.0, sum(math.exp(_log_pmf(n, i, p)) for i in range(k + 1)))


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low, high, coverage) of the median of `values` by order statistics.

    One value: (v, v, 0.0) -- a single number carries no interval at all.
    """
    data = sorted(float(v) for v in values)
    n = len(data)
    if n == 0:
        raise ValueError("no values")
    if n == 1:
        return data[0], data[0], 0.0
    covers = _median_coverages(n)
    best_j = 1
    for j in range(2, n // 2 + 1):
        if covers[j - 1] < confidence:
            break
        best_j = j
    return data[best_j - 1], data[n - best_j], covers[best_j - 1]


@functools.lru_cache(maxsize=1024)
def _median_coverages(n: int) -> tuple[float, ...]:
    """Coverage of [x(j), x(n+1-j)] for j = 1 .. n // 2 (scipy's binomial cdf)."""
    from scipy.stats import binom

    return tuple(float(1.0 - 2.0 * binom.cdf(j - 1, n, 0.5)) for j in range(1, max(n // 2, 1) + 1))


def rate_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Clopper-Pearson interval of a pass rate, k passes in n trials: each end is the rate
    at which k or more (fewer) passes have probability (1 - confidence) / 2, the beta
    quantiles of the binomial tails (`scipy.special.betaincinv`)."""
    if n <= 0:
        raise ValueError("no trials")
    tail = (1.0 - confidence) / 2
    lower = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, tail))
    upper = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1.0 - tail))
    return lower, upper


def rate_p(k: int, n: int, rate: float) -> tuple[float, float]:
    """The exact one-sided p-values of k passes in n trials at a true `rate`: P(X >= k),
    small when the true rate is surely above `rate`, and P(X <= k), small when surely
    below. At a one-sided level a they decide as `rate_interval` at confidence 1 - 2a
    does: its lower end is above `rate` exactly when the first is below a."""
    above = 1.0 if k <= 0 else float(special.bdtrc(k - 1, n, rate))
    below = 1.0 if k >= n else float(special.bdtr(k, n, rate))
    return above, below


def quantile_interval(values: Sequence[float], q: float, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low, high, coverage) of the q-quantile (0 < q < 1) of `values` by order statistics.

    [x(j), x(k)] covers the true quantile with probability P(j <= B <= k - 1), B ~
    Binomial(n, q); each end is chosen so that its tail is at most (1 - confidence) / 2.
    Where n is too small for an end, that end is unbounded (-inf or +inf) rather than
    guessed: 50 values cannot bound a 99th percentile from above (`needed_for_upper`).
    """
    data = sorted(float(v) for v in values)
    n = len(data)
    if n == 0:
        raise ValueError("no values")
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), found {q}")
    tail = (1.0 - confidence) / 2
    j = 0  # largest j with P(B <= j - 1) <= tail; 0: no lower bound
    while j < n and binom_cdf(j, n, q) <= tail:
        j += 1
    k = n + 1  # smallest k with P(B >= k) <= tail; n + 1: no upper bound
    while k > 1 and 1.0 - binom_cdf(k - 2, n, q) <= tail:
        k -= 1
    low = data[j - 1] if j >= 1 else -math.inf
    high = data[k - 1] if k <= n else math.inf
    coverage = (binom_cdf(k - 1, n, q) if k <= n else 1.0) - (binom_cdf(j - 1, n, q) if j >= 1 else 0.0)
    return low, high, coverage


def needed_for_upper(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest values whose largest bounds the q-quantile from above: q^n <= (1 - confidence) / 2."""
    return math.ceil(math.log((1.0 - confidence) / 2) / math.log(q))
