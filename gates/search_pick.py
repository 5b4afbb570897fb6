"""Which trial arms of a search go to confirmation, and what the search itself claimed.

Why a rule of its own: the best of many noisy one-run measurements looks better than it
is (the winner's curse), and near-ties are ordered by noise. So the search never decides
anything: it nominates. The best `top` arms, and every arm whose single-run value is
within the noise of the best, are measured again on fresh server runs, and the ordinary
gates decide on those runs alone (`campaign.core.search.SearchPlan.confirm_gates`).

The noise of one run is the run-to-run spread on the log scale, pooled over the arms the
search measured more than once (the base runs twice); a single run of each of two arms
differs by noise alone within z * sqrt(2) * sd of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as st

SD_FLOOR = 0.03  # the least run-to-run spread assumed (log scale): what the simulator and llama.cpp show


@dataclass(frozen=True)
class Measured:
    """A trial arm's search runs: per block, one value per objective; `feasible` when its
    constraints held (on the mean of its runs)."""

    arm_id: str
    runs: tuple[tuple[float, ...], ...]
    feasible: bool = True

    @property
    def value(self) -> tuple[float, ...]:
        """Per objective, the geometric mean of its runs (the scale every gate compares on)."""
        return tuple(
            math.exp(sum(math.log(r[i]) for r in self.runs) / len(self.runs)) for i in range(len(self.runs[0]))
        )


@dataclass(frozen=True)
class Pick:
    """The confirmation's arms (winner first) and why; `winner` None when no trial arm but
    the base met the constraints."""

    winner: str | None
    candidates: tuple[str, ...]
    margin: float  # the log-scale distance within which a single run cannot order two arms
    sd: float
    why: str


def run_sd(measured: Sequence[Measured]) -> float:
    """The pooled run-to-run sd of the first objective's log value, over the arms with at
    least two runs, never below `SD_FLOOR`."""
    ss, df = 0.0, 0
    for m in measured:
        logs = [math.log(r[0]) for r in m.runs if r[0] > 0]
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    return max(SD_FLOOR, math.sqrt(ss / df)) if df else SD_FLOOR


def _key(m: Measured, maximize: bool, i: int = 0) -> float:
    v = math.log(m.value[i])
    return -v if maximize else v


def ranked(measured: Sequence[Measured], maximize: bool) -> list[Measured]:
    """Feasible arms, best first on the first objective."""
    return sorted((m for m in measured if m.feasible and m.runs), key=lambda m: _key(m, maximize))


def pareto_front(measured: Sequence[Measured], maximize: Sequence[bool]) -> list[Measured]:
    """The feasible arms no other feasible arm is at least as good as on every objective
    and better on one; best first on the first objective."""
    pool = ranked(measured, maximize[0])
    keys = {m.arm_id: [_key(m, mx, i) for i, mx in enumerate(maximize)] for m in pool}

    def dominated(m: Measured) -> bool:
        mine = keys[m.arm_id]
        return any(
            all(a <= b for a, b in zip(keys[o.arm_id], mine, strict=True)) and keys[o.arm_id] != mine
            for o in pool
            if o.arm_id != m.arm_id
        )

    return [m for m in pool if not dominated(m)]


def pick(
    measured: Sequence[Measured],
    maximize: Sequence[bool],
    base_id: str,
    top: int,
    most: int,
    confidence: float = 0.95,
) -> Pick:
    """The arms to confirm: with one objective the best `top` (the base left out: it is in
    the confirmation anyway) and every arm within the margin of the best, at most `most`;
    with two, the Pareto front, best first on the first objective, at most `most`."""
    sd = run_sd(measured)
    margin = st.norm.ppf(1 - (1 - confidence) / 2) * math.sqrt(2) * sd
    others = [m for m in measured if m.arm_id != base_id]
    if len(maximize) > 1:
        front = pareto_front(others, maximize)[:most]
        if not front:
            return Pick(None, (), margin, sd, "no trial arm but the base met the constraints")
        return Pick(
            front[0].arm_id,
            tuple(m.arm_id for m in front),
            margin,
            sd,
            f"the Pareto front of {len(front)} arm{'s' if len(front) != 1 else ''}, best first on the first objective",
        )
    order = ranked(others, maximize[0])
    if not order:
        return Pick(None, (), margin, sd, "no trial arm but the base met the constraints")
    best = _key(order[0], maximize[0])
    near = [m for m in order[top:] if _key(m, maximize[0]) - best <= margin]
    chosen = (order[:top] + near)[:most]
    why = f"the best {min(top, len(order))}" + (
        f" and {len(chosen) - min(top, len(order))} within the noise of one run of the best "
        f"(+-{math.expm1(margin):.0%}, run-to-run sd {sd:.1%})"
        if len(chosen) > top
        else ""
    )
    return Pick(order[0].arm_id, tuple(m.arm_id for m in chosen), margin, sd, why)


def search_gain(measured: Sequence[Measured], winner: str, base_id: str, i: int = 0) -> float | None:
    """What the search's own runs say the winner gains over the base (a ratio - 1, on the
    metric's own scale): the number the winner's curse inflates, shown beside the
    confirmed one."""
    by_id = {m.arm_id: m for m in measured}
    if winner not in by_id or base_id not in by_id:
        return None
    return by_id[winner].value[i] / by_id[base_id].value[i] - 1.0


def improved(history: Sequence[float], maximize: bool) -> list[bool]:
    """For each completed trial's first-objective value in order, whether it set a new best."""
    out, best = [], None
    for v in history:
        new = best is None or (v > best if maximize else v < best)
        out.append(new)
        if new:
            best = v
    return out
