"""Read the Prometheus text exposition format with `prometheus_client`'s own parser.

Why not a regular expression: label values may hold any character, `}` and `,` and
escaped quotes included (a model path, a request route), and a hand-made pattern that
stops at the first `}` drops those samples without a word. prometheus_client is
installed with Prefect and parses the format as its authors define it.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> dict[str, float]:
    """Sum samples per sample name (labels folded): counters and gauges by bare name.

    A malformed line does not cost the rest: if the text as a whole does not parse, it
    is read again line by line and only the lines that parse are kept.
    """
    out: dict[str, float] = {}
    try:
        _add(out, text)
    except ValueError:
        out.clear()
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            try:
                _add(out, line + "\n")
            except ValueError:
                continue
    return out


def _add(out: dict[str, float], text: str) -> None:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value = float(sample.value)
            if math.isnan(value):
                continue
            found[sample.name] = found.get(sample.name, 0.0) + value
    for name, value in found.items():  # only once the whole text parsed
        out[name] = out.get(name, 0.0) + value
