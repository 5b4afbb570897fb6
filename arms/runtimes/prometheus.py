"""A small parser for the Prometheus text exposition format (enough for serving metrics)."""

from __future__ import annotations

import math
import re

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse(text: str) -> dict[str, float]:
    """Sum samples per metric name (labels folded): counters and gauges by bare name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        name = match.group(1)
        out[name] = out.get(name, 0.0) + value
    return out
