"""Resolve a campaign file against what this installation knows: the resolve step after parsing.

The core schema (`campaign.core.schema`) checks a file's structure and its internal references,
and imports nothing above it. Whether an adapter, a predicate or a predicate parameter
exists is a fact of the registries (arms and gates), and whether an arm's `simulate` table
names real simulator knobs is a fact of the simulator; this layer sits above both, so it
owns the check. Plugins (a campaign's own predicates) are imported first so they are
registered before names are checked.

Two design checks sit here too, because they read facts the core cannot import: an
`attribution` gate's ablation arm must be its subject with only the claimed mechanism
switched (the mechanisms' recipe fields are `campaign.core.mechanisms.MECHANISMS`, and
`attribution`/`all_of` are gate predicates) and must run in the same blocks as the
subject; and the items feeding one gate must give a probe they share the same settings
(which override keys belong to a probe is a fact of the probe registry). Whether they
run a shared arm with the same recipe needs no registry: `campaign.core.schema` checks it.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from arms.probes import registry as probe_registry
from arms.runtimes import catalog as runtime_registry
from arms.simulator.profile import SimProfile
from campaign.core import metrics as metric_catalogue
from campaign.core.loader import KnownNames, item_label, pooled_pairs, read_campaign, read_toml
from campaign.core.mechanisms import MECHANISMS
from campaign.core.schema import (
    CampaignFileError,
    CampaignSpec,
    GateEntry,
    OverrideKeys,
    QueueItem,
    Recipe,
    recipe_differences,
    recipe_value_text,
)
from flows.overrides import FILE_OVERRIDES
from gates import catalog as gate_predicates
from gates.blockstats import pass_bar, sequential_pass_bar
from gates.calibration import VariationModel
from gates.compare import DEFAULT_MIN_RUNS
from gates.engine import params_for as gate_params_for
from gates.engine import read_items
from gates.family import planned_members
from gates.looks import looks_for
from gates.power import detectable_gain, detectable_margin


def known_names() -> KnownNames:
    """The registries' names now (after any plugin import)."""
    predicates = frozenset(gate_predicates.names())
    return KnownNames(
        adapters=frozenset(runtime_registry.names()),
        predicates=predicates,
        predicate_params={name: gate_predicates.params_model(name) for name in predicates},
        probes=frozenset(probe_registry.names()),
    )


def simulated_adapters() -> frozenset[str]:
    """Adapters whose rows are simulated (stored on each arm, shown on every page)."""
    return frozenset(name for name in runtime_registry.names() if runtime_registry.get(name).simulated)


def load_campaign(path: str | Path) -> CampaignSpec:
    """Read a campaign file, import its plugins, and check every name it uses.

    Raises CampaignFileError naming the file and each problem (path in the file, what was
    found, what was expected).
    """
    path = Path(path)
    data = read_toml(path)
    meta = data.get("campaign")
    plugin_problems = load_plugins(meta.get("plugins", []) if isinstance(meta, dict) else [], path.parent)
    if plugin_problems:
        raise CampaignFileError(path, plugin_problems)
    spec = read_campaign(path, known_names())
    anchor_paths(spec, path.parent)
    problems = (
        options_problems(spec)
        + simulate_problems(spec)
        + metric_problems(spec)
        + ablation_problems(spec)
        + probe_pooling_problems(spec)
    )
    if problems:
        raise CampaignFileError(path, problems)
    return spec


def anchor_paths(spec: CampaignSpec, folder: Path) -> None:
    """A relative file a queue item's overrides name is the campaign file's neighbour,
    as its plugins are: `trace = "traces/agents.jsonl"` beside the file, wherever the
    command runs. A path that is not there is left as written (the probe's check then
    names it)."""
    for item in spec.queue:
        for key in FILE_OVERRIDES:
            value = item.overrides.get(key)
            if isinstance(value, str) and value and not Path(value).is_absolute() and (folder / value).is_file():
                item.overrides[key] = str((folder / value).resolve())


def options_problems(spec: CampaignSpec) -> list[str]:
    """Each runtime's `options` against its adapter's `options_model`: a misspelt key would
    otherwise be ignored, and the server started without the setting the user asked for;
    a value of the wrong type (`threads = "four"`) would pass the load and crash the launch."""
    from arms.runtimes.options import option_problems

    problems = []
    for i, runtime in enumerate(spec.runtimes):
        try:
            adapter = runtime_registry.get(runtime.adapter)
        except KeyError:
            continue  # the schema already named the unknown adapter
        for key, text in option_problems(runtime.adapter, adapter.options_model, runtime.options):
            problems.append(f"runtimes[{i}] (name {runtime.name!r}).options.{key}: {text}")
    return problems


def launch_blockers(spec: CampaignSpec) -> list[str]:
    """What this machine lacks to start the servers of the arms the queue runs here
    (`RuntimeAdapter.blockers`: a server binary, a model file nothing writes), one line
    per reason with the arms it blocks. Why before the run: each of their attempts would
    end `blocked` with the same words, after the Prefect server and the items before it.
    An arm placed on another host is that host's to check, when it launches."""
    found: dict[str, list[str]] = {}
    for arm_id in dict.fromkeys(a for item in spec.queue for a in item.arms):
        if spec.host_of(arm_id):
            continue
        arm = spec.arm(arm_id)
        runtime = spec.runtime(arm.runtime)
        for reason in runtime_registry.get(runtime.adapter).blockers(runtime, spec.model_for(arm)):
            found.setdefault(reason, []).append(arm_id)
    return [f"arm{'s' if len(arms) > 1 else ''} {', '.join(arms)}: {reason}" for reason, arms in found.items()]


def simulate_problems(spec: CampaignSpec) -> list[str]:
    """Each arm's `simulate` table, checked as simulator profile fields.

    Only arms on a simulated runtime are checked: on a real runtime the table is ignored,
    as the schema documents.
    """
    simulated = simulated_adapters()
    problems: list[str] = []
    for i, arm in enumerate(spec.arms):
        if not arm.simulate or spec.runtime(arm.runtime).adapter not in simulated:
            continue
        try:
            SimProfile.model_validate(arm.simulate)
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(part) for part in err["loc"])
                if err["type"] == "extra_forbidden":
                    problems.append(
                        f"arms[{i}] (id {arm.id!r}).simulate.{where}: not a simulator profile field;"
                        f" expected one of: {', '.join(sorted(SimProfile.model_fields))}"
                    )
                else:
                    problems.append(
                        f"arms[{i}] (id {arm.id!r}).simulate.{where}: {err['msg']} (found {err.get('input')!r})"
                    )
    return problems


# -- metrics: every gate reads one its items' probes store ------------------------------------


def _judgements(spec: CampaignSpec) -> list[tuple[str, GateEntry, str, dict[str, Any], list[str], list[str]]]:
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
    for where, gate, predicate, params, _, _ in _judgements(spec):
        read, _ = _read_items(spec, gate)
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


def design_warnings(spec: CampaignSpec) -> list[str]:
    """What loads but reads oddly or cannot decide much: a gate direction set against its
    metric's, a comparative gate with too few blocks to pass. Printed by `campaign check` and
    before `campaign run` starts."""
    return direction_warnings(spec) + power_warnings(spec)


def direction_warnings(spec: CampaignSpec) -> list[str]:
    """A gate direction set against its metric's (`higher_is_better = true` on seconds)."""
    warnings = []
    for where, _, predicate, params, _, _ in _judgements(spec):
        for key, name, _ in gate_predicates.metric_fields(predicate, params):
            flag = gate_predicates.direction_key(key)
            natural = metric_catalogue.direction(name)
            if flag in params and natural is not None and bool(params[flag]) != natural:
                metric = metric_catalogue.get(name)
                assert metric is not None
                warnings.append(
                    f"{where}.params.{flag}: set to {str(bool(params[flag])).lower()} for {name!r} ({metric.unit}), "
                    f"whose catalogue direction is {metric.direction}: the gate reads it the other way"
                )
    return warnings


# A design whose pass needs the gain to clear its threshold by more than this many
# between-block spreads is warned about, and the warning names the blocks that bring the
# bar down to SUGGESTED_BAR (see `gates.blockstats.pass_bar`).
WARN_BAR = 3.0
SUGGESTED_BAR = 2.0


def _paired_blocks(spec: CampaignSpec, gate: GateEntry) -> tuple[int, str, str] | None:
    """The fewest blocks any (subject, baseline) pair of `gate` is compared over, with that
    pair: an item the gate reads that runs both pairs them over its blocks (its repeats); a
    pair no such item holds is compared unpaired, over the fewer runs of the two arms."""
    items, _ = _read_items(spec, gate)
    worst: tuple[int, str, str] | None = None
    for subject in gate.subjects:
        for base in gate.baseline:
            if base == subject:
                continue
            together = [spec.blocks(q).most for q in items if subject in q.arms and base in q.arms]
            if together:
                n = max(together)
            else:
                n = min(sum(spec.blocks(q).most for q in items if arm in q.arms) for arm in (subject, base))
            if worst is None or n < worst[0]:
                worst = (n, subject, base)
    return worst


def _planned_looks(spec: CampaignSpec, gate: GateEntry, family: int, confidence: float) -> int:
    """The planned looks an adaptive gate's test is Bonferroni-adjusted over, or 1 where it
    reads the confidence sequence (`gates.looks.looks_for`, as the flow decides)."""
    plans = [
        (spec.blocks(q).least, spec.blocks(q).most) for q in spec.queue if q.gate == gate.id and spec.blocks(q).adaptive
    ]
    return looks_for(plans, (1.0 - confidence) / 2 / max(family, 1))


def power_warnings(spec: CampaignSpec) -> list[str]:
    """Comparative gates that, as planned, can pass only on a gain far past their threshold:
    the bar of `gates.blockstats.pass_bar` for the gate's fewest paired blocks and the family
    (the campaign's non-exploratory gates that compare arms, an upper bound on what Holm will
    adjust over). Known before anything runs, from the file alone."""
    comparative = planned_members(spec.gates)
    family = len(comparative)
    adaptive = spec.adaptive_gates()
    out = []
    for i, gate in enumerate(spec.gates):
        if gate not in comparative:
            continue
        found = _paired_blocks(spec, gate)
        if found is None:
            continue
        n, subject, base = found
        min_runs = int(gate.params.get("min_runs", DEFAULT_MIN_RUNS))
        confidence = float(gate.params.get("confidence", spec.campaign.confidence))  # a gate may set its own
        adaptive_gate = gate.id in adaptive
        looks = _planned_looks(spec, gate, family, confidence) if adaptive_gate else 1
        if looks > 1:

            def bar_of(blocks: int, members: int, level: float, looks: int = looks) -> float:
                return pass_bar(blocks, members * looks, level)  # Bonferroni over the planned looks
        else:
            bar_of = sequential_pass_bar if adaptive_gate else pass_bar
        bar = bar_of(n, family, confidence)
        if n >= min_runs and bar <= WARN_BAR:
            continue
        better = next(
            (k for k in range(max(n + 1, min_runs), 51) if bar_of(k, family, confidence) <= SUGGESTED_BAR), None
        )
        holm = f"Holm over up to {family} comparative gates" if family > 1 else "its one-sided test"
        blocks = f"{'at most ' if adaptive_gate else ''}{n} block{'s' if n != 1 else ''}{' (max_blocks)' if adaptive_gate else ''}"
        head = f"gates[{i}] (id {gate.id!r}): {subject} meets {base} in {blocks}"
        if n < min_runs:
            text = f"{head}, fewer than the {min_runs} server runs a gate decides on: it can only be inconclusive"
        elif bar == math.inf:
            text = (
                f"{head}; the confidence sequence an adaptive item reads cannot exclude any threshold with so few "
                f"blocks ({holm}): it can only be inconclusive"
            )
        else:
            text = (
                f"{head}; to pass {holm}, its gain must clear the threshold by {bar:.1f} times the spread "
                f"of the per-block log ratios between server runs{' by the last block' if adaptive_gate else ''}"
            )
        if better:
            what = "max_blocks" if adaptive_gate else "the items' repeats"
            text += f"; with {better} blocks ({what}) a pass needs {bar_of(better, family, confidence):.1f} spreads" + (
                "" if n >= min_runs else f" ({holm})"
            )
        out.append(text)
    return out


def detectable_lines(spec: CampaignSpec) -> list[str]:
    """For each comparative gate with a gain threshold, the smallest true gain its planned
    design passes 80% of the time under the calibrated restart noise (`gates.power`), so
    that a user sees before the run whether the blocks can settle the question."""
    family = len(planned_members(spec.gates))
    adaptive = spec.adaptive_gates()
    run_sd = VariationModel.run_sd
    out = []
    for gate in planned_members(spec.gates):
        if gate.predicate in ("control", "equivalence"):
            continue  # their claims are bounds on an advantage, not a gain to detect
        found = _paired_blocks(spec, gate)
        if found is None:
            continue
        n = found[0]
        params = gate_params_for(gate, spec.campaign.confidence)
        confidence = float(params.get("confidence", spec.campaign.confidence))
        higher = bool(params.get("higher_is_better", not params.get("lower_is_better", False)))
        threshold = float(params.get("min_gain", 0.0) or 0.0)
        looks = _planned_looks(spec, gate, max(family, 1), confidence) if gate.id in adaptive else 1
        sequential = gate.id in adaptive and looks == 1
        margin = detectable_margin(n, max(family, 1) * looks, confidence, run_sd, sequential=sequential)
        blocks = f"{'at most ' if gate.id in adaptive else ''}{n} block{'s' if n != 1 else ''}"
        need = "any gain" if threshold == 0 else (f"{threshold:+.0%}" if higher else f"{-threshold:+.0%}")
        if math.isinf(margin):
            text = f"{gate.id}: over {blocks} no true gain passes (needs {need})"
        else:
            true = detectable_gain(threshold, margin, higher)
            text = f"{gate.id}: over {blocks} detects a true {true:+.0%} or {'more' if higher else 'better'} (needs {need})"
        out.append(
            f"{text}; 80% power at {run_sd:.0%} restart noise{', Holm over ' + str(family) if family > 1 else ''}"
        )
    return out


# -- attribution: the ablation is the subject with one mechanism switched ----------------------

ATTRIBUTION = "attribution"
ALL_OF = "all_of"


def _attributions(spec: CampaignSpec) -> list[tuple[str, GateEntry, str, list[str], dict[str, Any]]]:
    """Every `attribution` judgement in the file: (where, gate, subject, baseline, params),
    a gate's own and each inside an `all_of` gate's checks (with the check's arms, if any)."""
    return [
        (where, gate, subjects[0], baseline, params)
        for where, gate, predicate, params, subjects, baseline in _judgements(spec)
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


def _read_items(spec: CampaignSpec, gate: GateEntry) -> tuple[list[QueueItem], str]:
    """The items whose measurements a gate reads (as `flows.campaign_flow.compute_verdicts`
    selects them) and how to say which."""
    feeding = [q for q in spec.queue if q.gate == gate.id]
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
        if claim not in MECHANISMS:
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
        read, none_shared = _read_items(spec, gate)
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


def load_plugins(plugins: Any, base: Path) -> list[str]:
    """Import the modules that register custom predicates; problems are returned, not raised."""
    problems = []
    if not isinstance(plugins, list):
        return []
    for i, name in enumerate(plugins):
        try:
            if str(name).endswith(".py"):
                file = (base / name).resolve()
                module_name = f"campaign_plugin_{file.stem}"
                if module_name in sys.modules:
                    continue
                spec = importlib.util.spec_from_file_location(module_name, file)
                if spec is None or spec.loader is None:
                    raise ImportError(f"no such file {file}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_name] = module
                spec.loader.exec_module(module)
            else:
                importlib.import_module(str(name))
        except Exception as exc:  # a user's plugin may fail in any way; say which and why
            problems.append(f"campaign.plugins[{i}]: cannot import {name!r}: {type(exc).__name__}: {exc}")
    return problems
