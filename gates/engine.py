"""The verdict engine: picks a gate's rows, strips greedy rows, runs its predicate, and
adjusts a campaign's comparative verdicts as one family (`gates.family`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from campaign.core.schema import GateEntry, read_items
from campaign.core.states import Mode, Verdict
from campaign.store.samples import without_warmups
from gates import catalog, family
from gates.intervals import CONFIDENCE
from gates.result import GateResult


def canonical_only(frame: pd.DataFrame) -> pd.DataFrame:
    """The single place where greedy (diagnostic) rows, and warm-up rows, are kept away
    from verdicts, whatever a predicate filters."""
    if frame.empty:
        return frame
    return without_warmups(frame[frame["mode"] == Mode.CANONICAL.value]).reset_index(drop=True)


def gate_rows(gate: GateEntry, frame: pd.DataFrame, feeding: Sequence[str]) -> pd.DataFrame:
    """`frame` cut to the rows `gate` reads (`read_items`)."""
    items = read_items(gate, feeding)
    if items is None or frame.empty:
        return frame
    return frame[frame["item_key"].isin(items)]


def params_for(gate: GateEntry, confidence: float = CONFIDENCE, sequential: bool = False, looks: int = 1) -> dict:
    """The gate's params with the campaign's confidence filled in where the predicate
    takes one and the gate does not set its own, and each metric's direction from the
    catalogue where the gate does not set it (also inside all_of's checks). How the
    gate's blocks were looked at (`gates.looks`) decides its test, whatever the gate
    says: with `sequential` every interval is a confidence sequence; with `looks` > 1 (an
    item that adds blocks until settled, its looks planned) every claim is tested at
    alpha / looks, a confidence of 1 - (1 - confidence) / looks (Bonferroni over the
    planned looks)."""
    params = _with_design(
        gate.predicate, catalog.with_directions(gate.predicate, dict(gate.params)), confidence, sequential, looks
    )
    if gate.predicate == "all_of" and isinstance(params.get("checks"), list):
        checks = []
        for check in params["checks"]:
            if isinstance(check, dict) and isinstance(check.get("params", {}), dict):
                name = str(check.get("predicate", ""))
                inner = catalog.with_directions(name, dict(check.get("params", {})))
                check = {**check, "params": _with_design(name, inner, confidence, sequential, looks)}
            checks.append(check)
        params["checks"] = checks
    return params


def _with_design(predicate: str, params: dict, confidence: float, sequential: bool, looks: int) -> dict:
    try:
        fields = catalog.params_model(predicate).model_fields
    except KeyError:
        return params  # an unknown predicate: refused where its params are validated
    if "confidence" in fields:
        own = float(params.get("confidence", confidence))
        params["confidence"] = 1.0 - (1.0 - own) / looks if looks > 1 and not sequential else own
    if sequential and "sequential" in fields:
        params["sequential"] = True
    return params


def evaluate(
    gate: GateEntry,
    frame: pd.DataFrame,
    blocked: dict[str, str] | None = None,
    confidence: float = CONFIDENCE,
    sequential: bool = False,
    looks: int = 1,
) -> GateResult:
    """Verdict for one gate from the measurement frame (any modes; greedy is dropped here).

    `blocked` maps arm id -> the external reason it could not be measured; a gate whose
    arm is blocked is blocked, with that reason word for word. With planned `looks` the
    gate's p-values are Bonferroni-adjusted (times `looks`), so the family (`gates.family`)
    and an adaptive item's stop compare them with alpha as they do any other gate's.
    """
    blocked = blocked or {}
    arms = gate.arms_read()
    stuck = [a for a in arms if a in blocked]
    if stuck:
        first = stuck[0]
        return GateResult(
            verdict=Verdict.BLOCKED,
            reason=f"Blocked: {blocked[first]!r} ({'/'.join(stuck)})",
            evidence={"blocked_arms": {a: blocked[a] for a in stuck}},
        )
    rows = canonical_only(frame)
    if not rows.empty:
        rows = rows[rows["arm_id"].isin(arms)].reset_index(drop=True)
    fn = catalog.get(gate.predicate)
    looks = 1 if sequential else max(1, looks)
    params = catalog.params_model(gate.predicate).model_validate(params_for(gate, confidence, sequential, looks))
    result = fn(rows, gate, params)
    if looks > 1 and result.comparative:
        p_pass, p_fail = result.p_values
        result = result.with_p(min(1.0, p_pass * looks), min(1.0, p_fail * looks), planned_looks=looks)
    return result


def evaluate_family(
    gates: Sequence[GateEntry],
    frames: Mapping[str, pd.DataFrame],
    blocked: dict[str, str] | None = None,
    confidence: float = CONFIDENCE,
    sequential: Sequence[str] = (),
    looks: Mapping[str, int] | None = None,
) -> dict[str, GateResult]:
    """Every gate of `frames` (gate id -> the rows it reads), then Holm over the family;
    the gates named in `sequential` with confidence sequences, those in `looks` with
    their planned looks (`params_for`)."""
    looks = looks or {}
    results = {
        g.id: evaluate(g, frames[g.id], blocked, confidence, g.id in sequential, looks.get(g.id, 1))
        for g in gates
        if g.id in frames
    }
    return name_stated_wins(family.adjust(results, gates, confidence), gates)


NEEDS = "; needs "  # where a comparison's words end and its threshold's begin (`compare.Outcome.text`)


def name_stated_wins(results: dict[str, GateResult], gates: Sequence[GateEntry]) -> dict[str, GateResult]:
    """A credit's reason opens with the win it credits (the comparison, in its numbers);
    where another gate of the campaign states that very comparison, the credit names
    that gate instead of repeating it, so no reason repeats another gate's comparison."""
    stated: dict[str, str] = {}  # a comparison's words -> the gate whose reason opens with them
    for g in gates:
        r = results.get(g.id)
        if r is not None and g.predicate != "attribution" and NEEDS in r.reason:
            stated.setdefault(r.reason.split(NEEDS, 1)[0], g.id)
    out = dict(results)
    for g in gates:
        r = results.get(g.id)
        win = r.evidence.get("win_text") if r is not None and g.predicate == "attribution" else None
        if not isinstance(win, str) or r is None:
            continue
        words = win.split(NEEDS, 1)[0]
        owner = stated.get(words)
        if owner and r.reason.startswith(words):
            out[g.id] = r.model_copy(
                update={"reason": f"the win (gate {owner!r}: {results[owner].verdict})" + r.reason[len(words) :]}
            )
    return out
