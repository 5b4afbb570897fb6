"""A gate's p-values are typed fields of its result, set from the claims its predicate
tested, and the evidence keeps the same keys (stored verdicts and pages read those).

Generated runs: a comparative gate (relative_improvement) and a bound on one arm
(threshold) carry p-values and join the family; a `control` gate that only
characterises, and a pending gate, carry none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates.compare import INTERVAL_METHOD
from gates.engine import evaluate, evaluate_family
from gates.result import GateResult


def runs(rng: np.random.Generator, arm: str, center: float, blocks: int = 5) -> list[dict]:
    """One decode_tps value per block (a server run's median), 3% spread between runs."""
    return [
        {
            "arm_id": arm,
            "mode": "canonical",
            "metric": "decode_tps",
            "scenario": "decode",
            "value": float(center * np.exp(rng.normal(0, 0.03))),
            "probe": "decode",
            "context": 4096,
            "trial": 0,
            "repeat": block,
            "item_key": "item",
        }
        for block in range(blocks)
    ]


@pytest.fixture
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    return pd.DataFrame([*runs(rng, "A", 50.0), *runs(rng, "B", 75.0)])


def gate(gid: str, predicate: str, params: dict, subjects: list[str], baseline: list[str] | None = None) -> GateEntry:
    return GateEntry(id=gid, predicate=predicate, params=params, subjects=subjects, baseline=baseline or [])


def assert_typed_as_evidence(result: GateResult) -> None:
    assert result.comparative
    assert result.p_pass is not None and result.p_fail is not None
    assert result.evidence["p_pass"] == result.p_pass and result.evidence["p_fail"] == result.p_fail
    assert result.evidence["statistical_fail"] is result.statistical_fail


def test_a_comparative_gate_carries_its_p_values_typed(frame: pd.DataFrame) -> None:
    faster = gate("faster", "relative_improvement", {"metric": "decode_tps", "min_gain": 0.10}, ["B"], ["A"])
    result = evaluate(faster, frame)
    assert result.verdict == Verdict.PASS, result.reason
    assert_typed_as_evidence(result)
    assert result.p_pass is not None and result.p_pass <= 0.025 and result.statistical_fail
    assert result.method == INTERVAL_METHOD == result.evidence["interval_method"]
    slower = gate("slower", "relative_improvement", {"metric": "decode_tps", "min_gain": 0.10}, ["A"], ["B"])
    failed = evaluate(slower, frame)
    assert failed.verdict == Verdict.FAIL and failed.p_fail is not None and failed.p_fail <= 0.025
    assert_typed_as_evidence(failed)


def test_a_threshold_gate_carries_the_p_values_of_its_bound(frame: pd.DataFrame) -> None:
    holds = gate("holds", "threshold", {"metric": "decode_tps", "op": ">=", "value": 40.0}, ["A"])
    result = evaluate(holds, frame)
    assert result.verdict == Verdict.PASS, result.reason
    assert_typed_as_evidence(result)
    straddles = evaluate(gate("close", "threshold", {"metric": "decode_tps", "op": ">=", "value": 50.0}, ["A"]), frame)
    assert straddles.verdict == Verdict.INCONCLUSIVE and straddles.comparative
    assert straddles.p_pass is not None and straddles.p_pass > 0.025


def test_a_gate_that_claims_nothing_carries_no_p_values(frame: pd.DataFrame) -> None:
    characterise = gate("ctl", "control", {"metric": "decode_tps", "role": "control"}, ["B"], ["A"])
    result = evaluate(characterise, frame)
    assert result.verdict == Verdict.CONTROL
    assert not result.comparative and result.p_pass is None and "p_pass" not in result.evidence
    waiting = evaluate(gate("none", "threshold", {"metric": "ttft_s", "op": "<=", "value": 1.0}, ["A"]), frame)
    assert waiting.verdict == Verdict.PENDING and not waiting.comparative


def test_the_family_and_planned_looks_read_and_write_the_typed_fields(frame: pd.DataFrame) -> None:
    gates = [
        gate("faster", "relative_improvement", {"metric": "decode_tps", "min_gain": 0.10}, ["B"], ["A"]),
        gate("holds", "threshold", {"metric": "decode_tps", "op": ">=", "value": 40.0}, ["A"]),
    ]
    once = evaluate(gates[0], frame)
    looked = evaluate(gates[0], frame, looks=4)
    assert looked.p_pass == pytest.approx(min(1.0, (once.p_pass or 0) * 4))
    assert looked.evidence["planned_looks"] == 4
    assert_typed_as_evidence(looked)
    family = evaluate_family(gates, {g.id: frame for g in gates})
    for result in family.values():
        assert result.evidence["family_size"] == 2
        assert_typed_as_evidence(result)


def test_a_result_made_with_typed_p_values_writes_them_into_its_evidence() -> None:
    made = GateResult(verdict=Verdict.FAIL, reason="r", p_pass=1.0, p_fail=0.0, statistical_fail=False)
    assert made.evidence == {"p_pass": 1.0, "p_fail": 0.0, "statistical_fail": False}
    told = GateResult(verdict=Verdict.PASS, reason="r", evidence={"p_pass": 0.01, "p_fail": 1.0})
    assert told.comparative and told.p_values == (0.01, 1.0) and told.statistical_fail
