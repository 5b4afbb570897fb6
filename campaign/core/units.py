"""How numbers read wherever a person reads them: report tables, chart tooltips and axes,
the coverage matrix and gate reasons.

One module so a median reads the same in a gate's reason, in the table beside it and in
the chart above it; before, each page rounded on its own and a gate could print 0.00 for
a 3 ms TTFT that the table showed as 0.003. It sits in the campaign core and imports
nothing of the project, so every layer may use it.
"""

from __future__ import annotations

import math
import re
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


# -- sizes as a campaign file writes them

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(value: int | str) -> int:
    """Byte sizes as people write them in serving recipes ("8G", "48GB", "512MiB")."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 8G or 512M")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("expected a size >= 0")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 8G, 512M or 4096B, found {value!r}")
    number, unit, _ = match.groups()
    return int(float(number) * _UNITS[unit.upper()])


def unitless_size(value: Any) -> str:
    """What a size written as a bare number should have said ('' when `value` is not one).

    Why refused in a campaign file: llama.cpp's --cache-ram and the habits of serving
    recipes count in MiB, so `prefix_cache = 256` means 256 MiB to whoever wrote it, and
    read as bytes it is a cache too small to hold one prompt, with nothing said. 0 is 0 in
    every unit."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value == 0:
        return ""
    shown = int(value) if float(value).is_integer() else value
    return f'a size with its unit: write "{shown}M" or "{shown}MiB" ("{shown}G" for GiB, "{shown}B" for bytes)'


def recipe_value_text(field: str, value: Any) -> str:
    """A recipe value as a person wrote it: sizes as 48G, booleans as TOML, absent as unset."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if field in SIZE_FIELDS and isinstance(value, int):
        for unit in ("T", "G", "M", "K"):
            if value and value % _UNITS[unit] == 0:
                return f"{value // _UNITS[unit]}{unit}"
        return str(value)
    if isinstance(value, str):
        return repr(value)
    return str(value)
