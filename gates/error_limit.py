"""The error limit: when an arm's failed requests decide a claim before its numbers do.

The rule (`gates.compare`'s module doc, rule 4): a subject surely over `max_error_rate`
fails, one over it at its point but not surely is inconclusive, and a baseline or control
over it makes the gate inconclusive, never a fail for the subject.
"""

from __future__ import annotations

from campaign.core.states import Verdict
from campaign.core.units import num
from gates.cells import ArmErrors, CellStat
from gates.rigor import EPS, Rigor


def error_counts(stat: CellStat) -> ArmErrors | None:
    """What an arm's error limit is judged on: every request the arm made in the rows the
    gate reads (`ArmErrors`), else the cell's own request counters; None when neither
    was counted."""
    if stat.arm_errors is not None and stat.arm_errors.requests:
        return stat.arm_errors
    if stat.requests:
        return ArmErrors(stat.arm, stat.requests, stat.failed or 0, dict(stat.errors_by_kind))
    return None


def flaky(stat: CellStat, rigor: Rigor) -> bool:
    """The arm's failure rate is over the limit at its point: a baseline's or a control's
    numbers cannot decide then (the gate is inconclusive, never a fail for the subject)."""
    errors = error_counts(stat)
    return errors is not None and (errors.rate or 0.0) > rigor.max_error_rate + EPS


def error_rule(
    errors: ArmErrors | None, limit: float, confidence: float, consequence: str = "cannot pass"
) -> tuple[Verdict, str] | None:
    """The error limit for an arm whose verdict is claimed (a subject), by the exact
    interval of its failure rate, each end at (1 - confidence) / 2: a fail (a rule, no p)
    only when the rate is surely over `limit` (the lower end above it); inconclusive when
    it is over at its point but not surely; None within it.

    Why not the point rate: at 30 requests a subject failing 4% of them (limit 5%) has 2
    or more failures 34% of the time. Why not also "surely within" for a pass: with no
    failure at all the exact upper end falls under 5% only from 72 requests, more than
    most gated items make, so every pass of a short item would turn inconclusive; a
    subject failing 10% of 30 requests still shows at most 1 failure 18% of the time, and
    nothing here stops that."""
    if errors is None or not errors.requests or (errors.rate or 0.0) <= limit + EPS:
        return None
    found = errors.interval(confidence)
    if found is not None and found[0] > limit + EPS:
        return Verdict.FAIL, f"{errors.text(confidence)} > {num(limit)}: {consequence}"
    return Verdict.INCONCLUSIVE, f"{errors.text(confidence)}: over {num(limit)}, but not surely: cannot decide"


def subject_errors(stat: CellStat, rigor: Rigor, consequence: str = "cannot pass") -> tuple[Verdict, str] | None:
    """`error_rule` for a subject's cell."""
    return error_rule(error_counts(stat), rigor.max_error_rate, rigor.confidence, consequence)


def error_note(stat: CellStat, rigor: Rigor) -> str:
    """'B failed 4/10 requests (0.40 [0.122, 0.738] 95% CI): read_timeout 4 > 0.05'."""
    errors = error_counts(stat)
    if errors is None:
        return f"{stat.arm} error rate {num(stat.error_rate)} > {num(rigor.max_error_rate)}"
    return f"{errors.text(rigor.confidence)} > {num(rigor.max_error_rate)}"
