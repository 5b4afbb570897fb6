"""How numbers read wherever a person reads them: report tables, chart tooltips and axes,
the coverage matrix and gate reasons.

One module so a median reads the same in a gate's reason, in the table beside it and in
the chart above it; before, each page rounded on its own and a gate could print 0.00 for
a 3 ms TTFT that the table showed as 0.003. It sits in the campaign core and imports
nothing of the project, so every layer may use it.
"""

from __future__ import annotations

import math
from typing import Any


def num(value: Any, digits: int = 3) -> str:
    """A measured value: at least `digits` significant digits, at least two decimals below
    10, thousands separated from 1,000 (1,234 · 56.7 · 4.50 · 0.853 · 0.0031).

    Why both rules: a fixed two decimals reads 3 ms as 0.00, and bare significant digits
    drop the zeros that keep 4.50 and 4.55 the same width in a column. NaN reads "—",
    infinities "inf" and "-inf"; what is not a number is shown as it is."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    magnitude = math.floor(math.log10(abs(v))) if v else 0
    if abs(v) >= 10:
        return f"{v:,.{max(0, digits - 1 - magnitude)}f}"
    text = f"{v:.{max(2, digits - 1 - magnitude)}f}"
    whole, _, decimals = text.partition(".")
    return f"{whole}.{decimals[:2]}{decimals[2:].rstrip('0')}"  # zeros past the second decimal say nothing


def plain(value: float) -> str:
    """A round number as written by hand: axis ticks, bits per weight (0.5, 20, 1,500).
    No padding zeros: ticks are chosen round, and "20.0" on an axis is noise."""
    return f"{value:,g}"


def pct(value: float) -> str:
    """A relative change, signed and whole: +12%, -55%, +inf%."""
    if not math.isfinite(value):
        return "+inf%" if value > 0 else "-inf%"
    return f"{value * 100:+.0f}%"


def ratio(value: float) -> str:
    """A share between 0 and 1 (reuse, attainment) to three decimals: 0.996, 0.980, 0.000.
    Why not `num`: its significant digits show a cold request's 0.000489 beside a warm
    0.996 as if the small one were measured to more places; why not two decimals: 0.996
    would read 1.00, a perfect cache it was not."""
    if not math.isfinite(value):
        return num(value)
    return f"{value:.3f}"


def context_label(tokens: int) -> str:
    """A context size: 8192 -> "8K", 262144 -> "256K"; a size that is not a whole number
    of K stays exact (4000 -> "4000"), so two different contexts never share a label."""
    if tokens and tokens % 1024 == 0:
        return f"{tokens // 1024}K"
    return str(tokens)


# Recipe fields that hold byte sizes (written "8G" in a file, stored as a count of bytes).
SIZE_FIELDS = ("prefix_cache", "session_cache_cap")


def size(value: int | None) -> str:
    """A byte count as people write it, in binary units: 8.0 GiB, 512.0 MiB, 300 B; "" for
    none. Every page shows sizes this way (the exact count is in the exports)."""
    if not value:
        return ""
    for unit, step in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= step:
            return f"{value / step:.1f} {unit}"
    return f"{value} B"
