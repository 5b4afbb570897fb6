"""Holm's step-down adjustment, the family-wise correction of every gate family and of a
gate's cells: one place.

Computed here rather than by statsmodels' `multipletests(method="holm")`, whose Holm
branch ends with a full `gc.collect()` on every call: 0.15-0.2 s in a campaign process
holding Prefect's and pandas' objects, paid by each family at each verdict computation
(0.9 s of the 2.6 s three computations of the demo's verdicts took) and by each of the
calibration benchmark's thousands of simulated campaigns. A unit test holds this to
statsmodels' results on random p-values (tests/unit/test_holm.py).
"""

from __future__ import annotations

from collections.abc import Sequence


def holm(ps: Sequence[float], alpha: float) -> list[tuple[bool, float]]:
    """(rejected at family-wise `alpha`, Holm-adjusted p) for each of `ps`, in order.

    Sorted ascending, the i-th smallest (0-based, of m) is compared with alpha / (m - i);
    testing stops at the first that is not rejected, and every larger one stays. Its
    adjusted p is the running maximum of (m - i) * p, capped at 1."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out: list[tuple[bool, float]] = [(False, 1.0)] * m
    running, rejecting = 0.0, True
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        rejecting = rejecting and ps[i] <= alpha / (m - rank)
        out[i] = (rejecting, running)
    return out
