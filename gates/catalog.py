"""Every built-in predicate, registered: import this to judge gates or check names.

The predicate modules only register themselves; this module is the one place that
lists them, so the registry is complete without a caller knowing the module list and
without any predicate module importing another layer's catalogue.
"""

from __future__ import annotations

from typing import Any

from campaign.core import metrics
from gates import (  # noqa: F401  (each registers itself on import)
    acceptance,
    all_of,
    attribution,
    best_of,
    ceiling,
    control,
    goodput,
    load_goodput,
    load_latency,
    majority,
    predicates,
    regression_guard,
)
from gates.registry import get, names, params_model, register

__all__ = ["direction_key", "get", "metric_fields", "names", "params_model", "register", "with_directions"]


def direction_key(metric_key: str) -> str:
    """The params key that says which way `metric_key`'s metric reads: `higher_is_better`
    for `metric`, `also_higher_is_better` for `also_metric`, and so on."""
    return metric_key.removesuffix("metric") + "higher_is_better"


def metric_fields(predicate: str, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(key, metric, probe or None) for each metric a judgement reads: `metric`,
    `also_metric`, `guard_metric`, `worse_metric` and any other `*_metric` key, with the
    probe its twin key names (`also_probe` for `also_metric`; the judgement's `probe` for
    `metric` and for a key without a twin), and the predicate's default metric when
    `metric` is not set (`majority` reads tool_loop_pass)."""
    try:
        fields = params_model(predicate).model_fields
    except KeyError:
        return []
    out = []
    for key in sorted(set(fields) | set(params)):
        if key != "metric" and not key.endswith("_metric"):
            continue
        value = params.get(key, fields[key].default if key in fields else None)
        if not isinstance(value, str) or not value:
            continue
        twin = key.removesuffix("metric") + "probe"
        probe = params.get(twin, fields[twin].default) if twin in fields else params.get(twin)
        if probe is None:
            probe = params.get("probe", fields["probe"].default if "probe" in fields else None)
        out.append((key, value, probe if isinstance(probe, str) else None))
    return out


def with_directions(predicate: str, params: dict[str, Any]) -> dict[str, Any]:
    """`params` with each metric's direction filled in from the catalogue where the
    predicate takes one and the gate does not set it: a gate on seconds reads lower as
    better without saying so (before, every gate defaulted to higher is better)."""
    try:
        fields = params_model(predicate).model_fields
    except KeyError:
        return params
    out = dict(params)
    for key, name, _ in metric_fields(predicate, params):
        flag, natural = direction_key(key), metrics.direction(name)
        if flag in fields and flag not in out and natural is not None:
            out[flag] = natural
    return out
