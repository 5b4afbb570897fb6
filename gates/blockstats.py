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

The t quantiles and tail probabilities are scipy's (`scipy.special.stdtr` and `stdtrit`,
which `scipy.stats.t` computes them by, called directly: a gate asks for thousands).
Their coverage is exact when the log run values are normal;
`benchmarks/verdict_calibration.py` measures the real false verdict rates on the
simulator's variation model.

**Sequential** (an item that adds blocks until its gate is settled, `max_blocks`): a
t interval looked at after every block and acted on when it excludes the threshold is
wrong far more often than it says (re-testing after each of 3..10 blocks passes a true
+10% against a +10% gate about 9% of the time at a nominal 2.5%). There the same
estimates carry a *confidence sequence* instead, built from the mixture Bayes factor on
the t statistic

    BF(t; n, nu) = (1 + n g)^-1/2 * [(1 + t^2/nu) / (1 + t^2/((1 + n g) nu))]^((nu + 1)/2)

(a normal prior of variance `g` on the standardised effect and the scale-invariant prior
on the spread: the "safe t-test" of Grunwald, de Heide and Koolen, after Lai 1976). Under
the null it is a nonnegative martingale in the number of blocks, so by Ville's inequality
it ever reaches 1/alpha with probability at most alpha, whenever one looks. Each claim is
one-sided, so the factor used is the half-normal mixture's (the effect on the claimed
side only), bounded below in closed form: for t >= 0 the other half contributes at most
(1 + n g)^-1/2 (the noncentral t's likelihood ratio falls in t for a negative effect, and
equals exp(-n d^2 / 2) at t = 0), so

    BF+(t) >= 2 BF(t) - (1 + n g)^-1/2 =: E(t),

and a claim is made when E(t) >= 1/alpha. A lower bound of a test martingale crosses no
more often than it does, and E rises with t, so a pass at the threshold excludes every
true value below it: the lower edge of the sequence holds at every block count at once,
each side with error at most alpha, however the stopping goes. The price is width: no
decision before a few blocks (E is at most 2 (1 + n g)^((nu)/2) - (1 + n g)^-1/2), and
more blocks than a fixed design for a gain just past its threshold. `g` is chosen by the
calibration benchmark (`benchmarks/verdict_calibration.py`, part 3) for the effects serving
shows: a +15% gain against a +10% threshold at 3% restart noise (a standardised effect
near 1 per block), stopping anywhere in 3..8 blocks, passes 28% of the time with g = 10,
31.5% with g = 3 (the best of 0.3 to 10; 26% with g = 1, 16% with 0.5), so g = 3. No
mixing prior of this family reaches 40% there: the price of validity at every block count
with an unknown spread over a handful of blocks. No package offers this interval
for an unknown spread at a handful of observations (confseq's need a known bound or
scale), hence the closed form here, held to its error rates by tests on generated data.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import optimize, special

PAIRED_METHOD = "paired t over shared blocks, on log ratios of run medians"
UNPAIRED_METHOD = "Welch t over runs, on log run medians (the arms shared no block)"
RAW_PAIRED_METHOD = "paired t over shared blocks, on differences of run medians (values <= 0: no log scale)"
RAW_UNPAIRED_METHOD = "Welch t over runs, on run medians (values <= 0: no log scale)"
ONE_ARM_METHOD = "t interval over runs, of the mean log run median"
RAW_ONE_ARM_METHOD = "t interval over runs, of the mean run median (values <= 0: no log scale)"
SEQUENTIAL_NOTE = "confidence sequence (one-sided safe t, g = {g:g}; valid at every block count)"
SEQUENTIAL_UNPAIRED_METHOD = "two-sample t over runs, pooled spread, on log run medians (the arms shared no block)"
RAW_SEQUENTIAL_UNPAIRED_METHOD = "two-sample t over runs, pooled spread, on run medians (values <= 0: no log scale)"

PRIOR_G = 3.0  # the mixture's prior variance of the standardised effect (see the module doc)


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
    sequential: bool = False  # a confidence sequence: valid whenever it is looked at
    n_eff: float = 0.0  # the t statistic's effective sample size (n; n1 n2 / (n1 + n2) for two samples)

    def interval(self, confidence: float) -> tuple[float, float]:
        """The two-sided interval at `confidence`, on the estimate's own scale. Sequential:
        each side holds with (1 + confidence) / 2 at every block count at once, so that the
        interval and the one-sided tests at (1 - confidence) / 2 decide alike."""
        if self.df <= 0 or math.isnan(self.se):
            return -math.inf, math.inf
        if self.se < FLAT:
            return self.center, self.center
        if self.sequential:
            half = sequential_t(self.n_eff, self.df, (1.0 - confidence) / 2) * self.se
        else:
            half = t_quantile(0.5 + confidence / 2, self.df) * self.se
        return self.center - half, self.center + half

    def p_above(self, bound: float) -> float:
        """One-sided p of H0 "true <= bound" (small: the value surely exceeds it).
        Sequential: 1 / the Bayes factor, an anytime-valid p (P(p <= a) <= a at any
        stopping time). With no spread (`FLAT`) the values decide by themselves: a centre
        beyond the bound by more than `TIE` gives p 0, one on it (`on_bound`) gives 1 both
        ways: a tie in every block is no evidence of a difference in either direction."""
        if math.isinf(bound):
            return 0.0 if bound < 0 else 1.0
        if self.df <= 0 or math.isnan(self.se):
            return 1.0
        if self.se < FLAT:
            return 0.0 if self.center > bound + TIE else 1.0
        t = (self.center - bound) / self.se
        if self.sequential:
            return 1.0 if t <= 0 else min(1.0, 1.0 / one_sided_factor(t, self.n_eff, self.df))
        return float(special.stdtr(self.df, -t))

    def on_bound(self, bound: float) -> bool:
        """Every block gave the same value, and it is the bound's (within `TIE`): the case
        in which neither side of the bound can be claimed."""
        return self.df > 0 and not math.isnan(self.se) and self.se < FLAT and abs(self.center - bound) <= TIE

    def p_below(self, bound: float) -> float:
        """One-sided p of H0 "true >= bound" (small: the value surely falls short); as
        `p_above`, mirrored."""
        if math.isinf(bound):
            return 0.0 if bound > 0 else 1.0
        if self.df <= 0 or math.isnan(self.se):
            return 1.0
        if self.se < FLAT:
            return 0.0 if self.center < bound - TIE else 1.0
        t = (self.center - bound) / self.se
        if self.sequential:
            return 1.0 if t >= 0 else min(1.0, 1.0 / one_sided_factor(t, self.n_eff, self.df))
        return float(special.stdtr(self.df, t))


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """The t distribution's q-quantile on `df` degrees of freedom. Cached: the same few
    (level, df) pairs are asked for by every interval and `blocks_to_decide`'s search."""
    return float(special.stdtrit(df, q))


def mixture_bf(t: float, n_eff: float, df: float, g: float = PRIOR_G) -> float:
    """The safe t-test's Bayes factor for a t statistic on `df` degrees of freedom from
    `n_eff` effective observations (the module doc's formula), computed on the log scale."""
    if df <= 0 or n_eff <= 0:
        return 1.0
    k = 1.0 + n_eff * g
    log_bf = -0.5 * math.log(k) + (df + 1) / 2 * (math.log1p(t * t / df) - math.log1p(t * t / (k * df)))
    return math.exp(min(log_bf, 700.0))


def one_sided_factor(t: float, n_eff: float, df: float, g: float = PRIOR_G) -> float:
    """E(|t|) of the module doc: a lower bound of the half-normal mixture's factor for the
    claim on t's side, 2 BF - (1 + n g)^-1/2."""
    if df <= 0 or n_eff <= 0:
        return 1.0
    return 2.0 * mixture_bf(t, n_eff, df, g) - (1.0 + n_eff * g) ** -0.5


@functools.lru_cache(maxsize=4096)
def sequential_t(n_eff: float, df: float, alpha: float, g: float = PRIOR_G) -> float:
    """The |t| at which `one_sided_factor` reaches 1/alpha: the confidence sequence's
    half-width in standard errors (each side at alpha). Infinite where even an unbounded
    t cannot reach it (too few blocks yet: see the module doc). Cached: a root found once
    per (n, df, alpha), though every interval, stopping check and `blocks_to_decide` asks."""
    if df <= 0 or n_eff <= 0:
        return math.inf
    k = 1.0 + n_eff * g
    need = (1.0 / alpha + k**-0.5) / 2  # the symmetric factor at which E reaches 1/alpha
    target = math.log(need)
    if -0.5 * math.log(k) + (df + 1) / 2 * math.log(k) <= target + 1e-12:
        return math.inf
    f = lambda t: math.log(mixture_bf(t, n_eff, df, g)) - target  # noqa: E731 - increasing in t >= 0
    hi = 1.0
    while f(hi) < 0:
        hi *= 2
    return float(optimize.brentq(f, 0.0, hi, xtol=1e-10))


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def positive(*groups: Sequence[float]) -> bool:
    return all(v > 0 for g in groups for v in g)


def _seq(method: str, sequential: bool) -> str:
    return f"{method}; {SEQUENTIAL_NOTE.format(g=PRIOR_G)}" if sequential else method


def paired(subject: Sequence[float], baseline: Sequence[float], sequential: bool = False) -> Estimate:
    """Mean per-block log ratio subject/baseline (raw difference when a value is <= 0)."""
    log = positive(subject, baseline)
    diffs = [math.log(s) - math.log(b) if log else s - b for s, b in zip(subject, baseline, strict=True)]
    mean, sd = _mean_sd(diffs)
    n = len(diffs)
    method = _seq(PAIRED_METHOD if log else RAW_PAIRED_METHOD, sequential)
    return Estimate(mean, sd / math.sqrt(n) if n > 1 else math.nan, n - 1, n, log, method, sequential, float(n))


def unpaired(subject: Sequence[float], baseline: Sequence[float], sequential: bool = False) -> Estimate:
    """Difference of mean log values (Welch); raw difference when a value is <= 0.
    Sequential: the pooled two-sample t (the mixture factor needs a statistic whose null
    law is free of the spreads; Welch's is not), assuming the arms' run spreads alike."""
    log = positive(subject, baseline)
    a = [math.log(v) if log else v for v in subject]
    b = [math.log(v) if log else v for v in baseline]
    ma, sa = _mean_sd(a)
    mb, sb = _mean_sd(b)
    if sequential:
        method = _seq(SEQUENTIAL_UNPAIRED_METHOD if log else RAW_SEQUENTIAL_UNPAIRED_METHOD, True)
        if len(a) < 2 or len(b) < 2:
            return Estimate(ma - mb, math.nan, 0, min(len(a), len(b)), log, method, True)
        df: float = len(a) + len(b) - 2
        pooled = math.sqrt(((len(a) - 1) * sa**2 + (len(b) - 1) * sb**2) / df)
        n_eff = len(a) * len(b) / (len(a) + len(b))
        return Estimate(ma - mb, pooled / math.sqrt(n_eff), df, min(len(a), len(b)), log, method, True, n_eff)
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


def one_arm(values: Sequence[float], sequential: bool = False) -> Estimate:
    """Mean log value of one arm's runs (raw mean when a value is <= 0)."""
    log = positive(values)
    xs = [math.log(v) if log else v for v in values]
    mean, sd = _mean_sd(xs)
    n = len(xs)
    method = _seq(ONE_ARM_METHOD if log else RAW_ONE_ARM_METHOD, sequential)
    return Estimate(mean, sd / math.sqrt(n) if n > 1 else math.nan, n - 1, n, log, method, sequential, float(n))


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
    alpha = (1 - confidence) / 2 (`gates.rigor.alpha_of`).

    Why: known before anything runs, it says whether a design can pass at all. Three blocks
    in a family of four need the gain to clear its threshold by 5.1 spreads (t > 8.86 on 2
    degrees of freedom); five blocks by 1.9. `paired` and `Estimate.p_above` are the test
    this bar is the edge of (a test holds them to each other)."""
    if blocks < 2 or family < 1:
        return math.inf
    alpha = (1.0 - confidence) / 2 / family
    return t_quantile(1.0 - alpha, blocks - 1) / math.sqrt(blocks)


MOST_BLOCKS = 50  # the schema's largest repeats / max_blocks


def blocks_to_decide(est: Estimate, bound: float, alpha: float, most: int = MOST_BLOCKS) -> int | None:
    """How many blocks in all would decide "true vs `bound`" at one-sided `alpha`, if the
    estimate and the spread between blocks stayed as they are: the least n past the
    current one whose half-width (the sequence's, or the t interval's) falls under the
    distance to the bound. None when it is more than `most`, when the spread is unknown,
    or for two unpaired samples (their growth is not one count)."""
    if est.df <= 0 or math.isnan(est.se) or est.se < FLAT or est.n_eff != est.n:
        return None
    gap = abs(est.center - bound)
    if gap <= TIE:
        return None
    sd = est.se * math.sqrt(est.n)
    for n in range(est.n + 1, most + 1):
        t = sequential_t(n, n - 1, alpha) if est.sequential else t_quantile(1.0 - alpha, n - 1)
        if t * sd / math.sqrt(n) < gap:
            return n
    return None


def sequential_pass_bar(blocks: int, family: int, confidence: float) -> float:
    """`pass_bar` for a sequential gate at its budget of `blocks`: the confidence
    sequence's half-width there, in between-block spreads (infinite: it cannot decide)."""
    if blocks < 2 or family < 1:
        return math.inf
    return sequential_t(blocks, blocks - 1, (1.0 - confidence) / 2 / family) / math.sqrt(blocks)
