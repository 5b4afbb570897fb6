"""The checks of a `[search]` that need the registries: its metrics against the catalogue
and the probes that store them, and its fields against what the base's runtime can vary.

Why before the run: a search spends tens of server starts; an objective no probe stores
would leave every trial without a value, and a field the runtime ignores would spend the
starts on identical servers.
"""

from __future__ import annotations

from arms.runtimes import catalog as runtime_registry
from campaign.core import metrics as metric_catalogue
from campaign.core.schema import CampaignSpec
from campaign.core.search import CONTEXT, MODEL, SearchPlan, SearchState


def search_problems(spec: CampaignSpec) -> list[str]:
    search = spec.search
    if search is None or search.base not in {a.id for a in spec.arms}:
        return []  # none, or the loader named the missing base already
    problems: list[str] = []
    first = search.objectives[0]
    reads = [(f"search.objectives[{i}]", o.metric, o.probe) for i, o in enumerate(search.objectives)]
    reads += [(f"search.constraints[{i}]", c.metric, c.probe or first.probe) for i, c in enumerate(search.constraints)]
    for where, name, probe in reads:
        metric = metric_catalogue.get(name)
        if metric is None:
            problems.append(
                f"{where}.metric: found {name!r}, a metric no probe stores{metric_catalogue.suggest(name)}; "
                "docs/metrics.md lists every metric and the probes that store it"
            )
        elif probe not in metric.probes:
            problems.append(
                f"{where}.probe: probe {probe!r} does not store {name!r}; it comes from {', '.join(metric.probes)}"
            )
    for i, obj in enumerate(search.objectives):
        metric = metric_catalogue.get(obj.metric)
        if metric is not None and obj.direction is None and metric.higher_is_better is None:
            problems.append(
                f"search.objectives[{i}].direction: {obj.metric!r} has no direction in the catalogue; "
                "set direction = 'maximize' or 'minimize'"
            )
    if search.sampler == "gp":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            problems.append(
                "search.sampler: 'gp' is Optuna's GPSampler, which needs PyTorch (pip install torch); "
                "'tpe' needs nothing more"
            )
    runtime = spec.runtime(spec.arm(search.base).runtime)
    try:
        adapter = runtime_registry.get(runtime.adapter)
    except KeyError:
        return problems  # the loader named the unknown adapter
    for name in search.space:
        if name in (MODEL, CONTEXT) and not adapter.launches:
            problems.append(
                f"search.space.{name}: runtime {runtime.name!r} ({runtime.adapter}) measures a server it does not "
                f"start, so its {name} cannot be varied"
            )
        elif name not in (MODEL, CONTEXT) and name not in adapter.search_fields:
            offered = ", ".join(sorted(adapter.search_fields)) or "none"
            problems.append(
                f"search.space.{name}: runtime {runtime.name!r} ({runtime.adapter}) does not turn {name!r} into a "
                f"server setting, so every trial would serve the same thing (it varies: {offered})"
            )
    return problems + _override_problems(spec)


def _override_problems(spec: CampaignSpec) -> list[str]:
    """`search.overrides` as a trial item runs them, checked as any item's overrides are."""
    from flows.overrides import check_campaign

    plan = SearchPlan(spec)
    expanded = plan.expand(SearchState(arms=(plan.arm_for(plan.base_params()),)))
    key = plan.item_key(plan.base.id)
    title = expanded.item(key).title
    return [f"search.overrides (as each trial runs them): {p}" for p in check_campaign(expanded) if repr(title) in p]
