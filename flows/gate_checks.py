"""Checks of a campaign's gates that need the registries: their metrics, attribution claims and pooled settings.

Each is a reason to refuse a file before anything runs, and each reads facts the core
cannot import: which metric a probe stores (the catalogue and the probe registry), what a
predicate reads (`gates.catalog`), and which recipe fields a mechanism switches
(`campaign.core.mechanisms`). An `attribution` gate's ablation arm must be its subject
with only the claimed mechanism switched, and must run in the same blocks as the
subject; the items feeding one gate must give a probe they share the same settings.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from arms.probes import registry as probe_registry
from campaign.core import metrics as metric_catalogue
from campaign.core.mechanisms import MECHANISMS
from campaign.core.pooling import item_label, pooled_pairs
from campaign.core.schema import CampaignSpec, GateEntry, OverrideKeys, QueueItem
from campaign.core.serving import Recipe, recipe_differences
from campaign.core.units import recipe_value_text
from gates import catalog as gate_predicates
from gates.engine import read_items

ATTRIBUTION = "attribution"
ALL_OF = "all_of"


def judgements(spec: CampaignSpec) -> list[tuple[str, GateEntry, str, dict[str, Any], list[str], list[str]]]:
    """(where, gate, predicate, params, subjects, baseline) for every gate and every check
    inside an `all_of` (a check's own arms where it names them, else the gate's)."""
    found = []
    for i, gate in enumerate(spec.gates):
        where = f"gates[{i}] (id {gate.id!r})"
        found.append((where, gate, gate.predicate, gate.params, list(gate.subjects), list(gate.baseline)))
        if gate.predicate == ALL_OF:
            for j, check in enumerate(gate.params.get("checks") or []):
                if isinstance(check, dict) and isinstance(check.get("params", {}), dict):
                    subjects = check.get("subjects") or gate.subjects
                    baseline = gate.baseline if check.get("baseline") is None else check["baseline"]
                    found.append(
                        (
                            f"{where}.params.checks[{j}]",
                            gate,
                            str(check.get("predicate", "")),
                            check.get("params") or {},
                            list(subjects),
                            list(baseline),
                        )
                    )
    return found


def metric_problems(spec: CampaignSpec) -> list[str]:
    """Every metric a gate reads is in the catalogue (`campaign.core.metrics`) and is stored by
    a probe of an item the gate reads; a probe the gate names must be one that stores it.

    Why: before, a misspelled metric (`tfft_s`) or one its probe never writes ran the
    whole campaign and left the gate pending for good, with nothing said before the
    first server started."""
    problems: list[str] = []
    for where, gate, predicate, params, _, _ in judgements(spec):
        read, _ = items_read(spec, gate)
        ran = sorted({str(p) for q in read for p in q.probes})
        for key, name, probe in gate_predicates.metric_fields(predicate, params):
            metric = metric_catalogue.get(name)
            if metric is None:
                problems.append(
                    f"{where}.params.{key}: found {name!r}, a metric no probe stores{metric_catalogue.suggest(name)}; "
                    f"docs/metrics.md lists every metric and the probes that store it"
                )
                continue
            if probe is not None and probe not in metric.probes:
                problems.append(
                    f"{where}.params.{key}: probe {probe!r} does not store {name!r}; it comes from {', '.join(metric.probes)}"
                )
                continue
            if not set(metric.probes) & set(ran):
                problems.append(
                    f"{where}.params.{key}: {name!r} comes from {', '.join(metric.probes)}, and no queue item this gate "
                    f"reads runs one (they run {', '.join(ran) or 'nothing'}); add the probe to an item that feeds {gate.id!r}"
                )
    return problems


def _attributions(spec: CampaignSpec) -> list[tuple[str, GateEntry, str, list[str], dict[str, Any]]]:
    """Every `attribution` judgement in the file: (where, gate, subject, baseline, params),
    a gate's own and each inside an `all_of` gate's checks (with the check's arms, if any)."""
    return [
        (where, gate, subjects[0], baseline, params)
        for where, gate, predicate, params, subjects, baseline in judgements(spec)
        if predicate == ATTRIBUTION
    ]


def _ablation_mismatch(
    spec: CampaignSpec, subject: str, ablation: str, claim: str, rs: Recipe, ra: Recipe
) -> str | None:
    """Why `ablation` (recipe `ra`) is not `subject` (recipe `rs`) with only the claimed
    mechanism switched, or None when it is."""
    fields = MECHANISMS[claim]
    s, a = spec.arm(subject), spec.arm(ablation)
    ms, ma = spec.model_for(s), spec.model_for(a)
    diffs = [
        f"{name} ({subject}: {x}, {ablation}: {y})"
        for name, x, y in (
            ("model", ms.name, ma.name),
            ("quant", ms.quant, ma.quant),
            ("runtime", s.runtime, a.runtime),
            ("context", s.context, a.context),
        )
        if x != y
    ]
    changed = recipe_differences(rs, ra)
    diffs += [
        f"{f} ({subject}: {recipe_value_text(f, getattr(rs, f))}, {ablation}: {recipe_value_text(f, getattr(ra, f))})"
        for f in changed
        if f not in fields
    ]
    named = f"the {claim} field{'s' if len(fields) > 1 else ''} ({', '.join(fields)})"
    if diffs:
        return f"ablation arm {ablation!r} differs from subject {subject!r} in {'; '.join(diffs)}, not only in {named}"
    if not any(f in fields for f in changed):
        return f"ablation arm {ablation!r} does not differ from subject {subject!r} in {named}: it does not switch the {claim} off"
    return None


def items_read(spec: CampaignSpec, gate: GateEntry) -> tuple[list[QueueItem], str]:
    """The items whose measurements a gate reads (as `flows.verdicts.compute_verdicts`
    selects them) and how to say which."""
    feeding = spec.feeding(gate.id)
    if read_items(gate, [q.key for q in feeding]) is not None:
        return (
            feeding,
            f"no queue item feeding gate {gate.id!r} lists both (feeding it: {', '.join(q.key for q in feeding)})",
        )
    why = "no item feeds it" if not feeding else "its reads = 'all'"
    return list(
        spec.queue
    ), f"no queue item lists both ({why}, so it reads every item: {', '.join(q.key for q in spec.queue)})"


def ablation_problems(spec: CampaignSpec) -> list[str]:
    """Each `attribution` claim names a known mechanism, and its ablation arm is the subject
    with only that mechanism's recipe fields changed, measured in the same blocks.

    Why: the predicate credits the mechanism with whatever switching it off costs. If the
    ablation also differs in model, quant, runtime, context or another recipe field, the
    cost is the sum of both changes and the credit goes to a confound; if it changes
    nothing of the mechanism, it measures nothing. If the two arms never run in one item,
    they never share a block (a server start each, in one randomised order), and drift
    between runs reads as the mechanism's worth. The arms are compared as defined and as
    every shared item runs them (an item's `recipe.*` overrides reach both arms).
    """
    problems: list[str] = []
    arms = {a.id for a in spec.arms}
    position = {id(q): i for i, q in enumerate(spec.queue)}
    for where, gate, subject, baseline, params in _attributions(spec):
        claim = params.get("claim")
        if not isinstance(claim, str) or claim not in MECHANISMS:
            problems.append(
                f"{where}.params.claim: found {claim!r}, expected one of the mechanisms a gate may credit: "
                f"{', '.join(sorted(MECHANISMS))}"
            )
            continue
        ablation = params.get("ablation")
        if ablation is None:
            continue  # counters only: the predicate never passes on them, and says so
        if subject not in arms:  # an all_of check's own subjects are not checked elsewhere
            problems.append(f"{where}.subjects: arm {subject!r} does not exist (arms: {', '.join(sorted(arms))})")
            continue
        if ablation not in arms:
            problems.append(
                f"{where}.params.ablation: arm {ablation!r} does not exist (arms: {', '.join(sorted(arms))})"
            )
            continue
        if ablation == subject:
            problems.append(
                f"{where}.params.ablation: found {ablation!r}, the subject itself; expected the subject's recipe "
                f"with the {claim} switched off ({', '.join(MECHANISMS[claim])})"
            )
            continue
        if ablation not in baseline:
            problems.append(
                f"{where}.params.ablation: arm {ablation!r} must be listed in the baseline "
                f"({', '.join(baseline) or 'none'}), where the predicate looks for it"
            )
        mismatch = _ablation_mismatch(
            spec, subject, ablation, claim, spec.recipe_for(subject), spec.recipe_for(ablation)
        )
        if mismatch:
            problems.append(f"{where}: {mismatch}")
            continue
        read, none_shared = items_read(spec, gate)
        shared = [q for q in read if subject in q.arms and ablation in q.arms]
        if not shared:
            problems.append(
                f"{where}: ablation arm {ablation!r} shares no block with subject {subject!r}: {none_shared}; "
                f"list both arms in one item, so that they run in the same blocks"
            )
        for item in shared:
            try:
                rs, ra = spec.recipe_for(subject, item), spec.recipe_for(ablation, item)
            except ValidationError:
                continue  # a bad recipe.* value: flows.overrides reports it
            mismatch = _ablation_mismatch(spec, subject, ablation, claim, rs, ra)
            if mismatch:
                problems.append(f"{where}: as {item_label(position[id(item)], item)} runs them, {mismatch}")
    return problems


# -- the probe settings one gate pools --------------------------------------------------------

_UNSET = object()


def _setting_text(value: Any) -> str:
    return "unset (the probe's default)" if value is _UNSET else repr(value)


def _probe_settings(item: QueueItem, probe: str) -> dict[str, Any]:
    """The item's overrides that reach `probe`: its parameters (not those that only size
    a run's sample, `ProbeSpec.sample_fields`) and the simulator's profile."""
    spec = probe_registry.get(probe)
    accepted = {key for key, name in spec.keys.items() if name not in spec.unsettled}
    parts = OverrideKeys.of(item.overrides)
    return {**{k: v for k, v in parts.probe.items() if k in accepted}, **parts.sim_keys()}


def probe_pooling_problems(spec: CampaignSpec) -> list[str]:
    """Items feeding one gate that share a probe give it the same settings.

    Why: a gate pools every row of a probe from the items that feed it, so a decode run at
    max_tokens 16 and one at 48 would be one sample of two workloads. The settings compared
    are an item's non-recipe overrides that reach that probe: its own parameters and the
    `sim.*` profile fields (recipe.* overrides are the recipe, checked by
    `campaign.core.schema`). A key another probe of the item takes does not count, nor does a
    sample size (decode's `repeats`): more timed requests per run are the same cell.
    """
    problems: list[str] = []
    for gate, first, second, one, two in pooled_pairs(spec):
        for probe in [p for p in second.probes if p in first.probes]:
            a, b = _probe_settings(first, probe), _probe_settings(second, probe)
            keys = [k for k in sorted(set(a) | set(b)) if a.get(k, _UNSET) != b.get(k, _UNSET)]
            if not keys:
                continue
            shown = "; ".join(
                f"{k} ({first.key}: {_setting_text(a.get(k, _UNSET))}, {second.key}: {_setting_text(b.get(k, _UNSET))})"
                for k in keys
            )
            problems.append(
                f"{two}.overrides: gate {gate!r} is also fed by {one}, and both run probe {probe} "
                f"but with other settings: {shown}; one verdict must not pool unlike settings (make them equal, or feed another gate)"
            )
    return problems
