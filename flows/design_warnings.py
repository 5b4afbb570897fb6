"""Design warnings: what loads but reads oddly or cannot decide much, known from the file alone.

A gate direction set against its metric's, and a comparative gate with too few blocks to
pass on any gain near its threshold (`gates.blockstats.pass_bar`, over the family Holm
will adjust and the looks an adaptive item plans). Printed by `campaign check` and before
`campaign run` starts; nothing here refuses a file.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from campaign.core import metrics as metric_catalogue
from campaign.core.schema import CampaignSpec, GateEntry
from flows.gate_checks import items_read, judgements
from gates import catalog as gate_predicates
from gates.blockstats import pass_bar, sequential_pass_bar
from gates.calibration import VariationModel
from gates.engine import params_for as gate_params_for
from gates.family import planned_members
from gates.looks import looks_for
from gates.power import detectable_gain, detectable_margin
from gates.rigor import DEFAULT_MIN_RUNS


def design_warnings(spec: CampaignSpec) -> list[str]:
    """What loads but reads oddly or cannot decide much: a gate direction set against its
    metric's, a comparative gate with too few blocks to pass. Printed by `campaign check` and
    before `campaign run` starts."""
    return direction_warnings(spec) + power_warnings(spec)


def direction_warnings(spec: CampaignSpec) -> list[str]:
    """A gate direction set against its metric's (`higher_is_better = true` on seconds)."""
    warnings = []
    for where, _, predicate, params, _, _ in judgements(spec):
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
    items, _ = items_read(spec, gate)
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
    plans = [(spec.blocks(q).least, spec.blocks(q).most) for q in spec.feeding(gate.id) if spec.blocks(q).adaptive]
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
        bar_of: Callable[[int, int, float], float]
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
