"""The verdict engine: picks a gate's rows, strips greedy rows, runs its predicate, and
adjusts a campaign's comparative verdicts as one family (`gates.family`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from campaign.samples import without_warmups
from campaign.schema import GateEntry, read_items
from campaign.states import Mode, Verdict
from gates import catalog, family
from gates.intervals import CONFIDENCE
from gates.result import GateResult


def canonical_only(frame: pd.DataFrame) -> pd.DataFrame:
    """The single place where greedy (diagnostic) rows, and warm-up rows, are kept away
    from verdicts, whatever a predicate filters."""
    if frame.empty:
        return frame
    return without_warmups(frame[frame["mode"] == Mode.CANONICAL.value]).reset_index(drop=True)


def gate_arms(gate: GateEntry) -> list[str]:
    """Every arm a gate's verdict reads: its subjects and baseline, and those an all_of
    check names of its own."""
    arms = [*gate.subjects, *gate.baseline]
    for check in gate.params.get("checks", []) if gate.predicate == "all_of" else []:
        if isinstance(check, dict):
            arms += [*(check.get("subjects") or []), *(check.get("baseline") or [])]
    return list(dict.fromkeys(arms))


def gate_rows(gate: GateEntry, frame: pd.DataFrame, feeding: Sequence[str]) -> pd.DataFrame:
    """`frame` cut to the rows `gate` reads (`read_items`)."""
    items = read_items(gate, feeding)
    if items is None or frame.empty:
        return frame
    return frame[frame["item_key"].isin(items)]


def params_for(gate: GateEntry, confidence: float = CONFIDENCE, sequential: bool = False) -> dict:
    """The gate's params with the campaign's confidence filled in where the predicate
    takes one and the gate does not set its own, and each metric's direction from the
    catalogue where the gate does not set it (also inside all_of's checks). With
    `sequential` (an item feeding the gate adds blocks until it is settled) every
    interval is a confidence sequence, whatever the gate says: looking after each block
    is what that item does."""
    params = catalog.with_directions(gate.predicate, dict(gate.params))
    model = catalog.params_model(gate.predicate)
    if "confidence" in model.model_fields and "confidence" not in params:
        params["confidence"] = confidence
    if sequential and "sequential" in model.model_fields:
        params["sequential"] = True
    if gate.predicate == "all_of" and isinstance(params.get("checks"), list):
        checks = []
        for check in params["checks"]:
            if isinstance(check, dict) and isinstance(check.get("params", {}), dict):
                inner = catalog.with_directions(str(check.get("predicate", "")), dict(check.get("params", {})))
                try:
                    takes = "confidence" in catalog.params_model(check.get("predicate", "")).model_fields
                except KeyError:
                    takes = False
                if takes and "confidence" not in inner:
                    inner["confidence"] = confidence
                if takes and sequential:
                    inner["sequential"] = True
                check = {**check, "params": inner}
            checks.append(check)
        params["checks"] = checks
    return params


def evaluate(
    gate: GateEntry, frame: pd.DataFrame, blocked: dict[str, str] | None = None, confidence: float = CONFIDENCE,
    sequential: bool = False,
) -> GateResult:
    """Verdict for one gate from the measurement frame (any modes; greedy is dropped here).

    `blocked` maps arm id -> the external reason it could not be measured; a gate whose
    arm is blocked is blocked, with that reason word for word.
    """
    blocked = blocked or {}
    arms = [*gate.subjects, *gate.baseline]
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
    params = catalog.params_model(gate.predicate).model_validate(params_for(gate, confidence, sequential))
    return fn(rows, gate, params)


def evaluate_family(
    gates: Sequence[GateEntry], frames: Mapping[str, pd.DataFrame], blocked: dict[str, str] | None = None,
    confidence: float = CONFIDENCE, sequential: Sequence[str] = (),
) -> dict[str, GateResult]:
    """Every gate of `frames` (gate id -> the rows it reads), then Holm over the family;
    the gates named in `sequential` with confidence sequences (`params_for`)."""
    results = {g.id: evaluate(g, frames[g.id], blocked, confidence, g.id in sequential) for g in gates if g.id in frames}
    return family.adjust(results, gates, confidence)
