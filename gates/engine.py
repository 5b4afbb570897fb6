"""The verdict engine: picks a gate's rows, strips greedy rows, runs its predicate."""

from __future__ import annotations

import pandas as pd

from campaign.schema import GateEntry
from campaign.states import WARMUP_TRIAL, Mode, Verdict
from gates import catalog
from gates.result import GateResult


def canonical_only(frame: pd.DataFrame) -> pd.DataFrame:
    """The single place where greedy (diagnostic) rows, and warm-up rows (trial
    WARMUP_TRIAL and below), are kept away from verdicts, whatever a predicate filters."""
    if frame.empty:
        return frame
    keep = frame["mode"] == Mode.CANONICAL.value
    if "trial" in frame:
        keep &= frame["trial"] > WARMUP_TRIAL
    return frame[keep].reset_index(drop=True)


def evaluate(gate: GateEntry, frame: pd.DataFrame, blocked: dict[str, str] | None = None) -> GateResult:
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
    params = catalog.params_model(gate.predicate).model_validate(gate.params)
    return fn(rows, gate, params)
