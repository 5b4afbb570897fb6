"""Predicates on crafted frames: pass, fail, edge at the threshold, pending, greedy ignored."""

from __future__ import annotations

import pandas as pd

from campaign.schema import GateEntry
from campaign.states import Verdict
from gates.engine import canonical_only, evaluate


def frame(rows: list[tuple[str, str, str, str, float]]) -> pd.DataFrame:
    """(arm, mode, metric, scenario, value) rows."""
    return pd.DataFrame(
        [
            {"arm_id": a, "mode": m, "metric": metric, "scenario": s, "value": v, "probe": "decode" if metric == "decode_tps" else "cache-probe", "context": 4096, "trial": i}
            for i, (a, m, metric, s, v) in enumerate(rows)
        ]
    )


REL = GateEntry(id="g", predicate="relative_improvement", params={"metric": "decode_tps", "min_gain": 0.10}, subjects=["C"], baseline=["B"])


def test_relative_improvement_pass_fail_and_edge() -> None:
    base = [("B", "canonical", "decode_tps", "decode", 50.0)] * 3
    passing = evaluate(REL, frame(base + [("C", "canonical", "decode_tps", "decode", 60.0)] * 3))
    assert passing.verdict == Verdict.PASS
    assert passing.reason == "decode_tps: C 60.0 (+20% [+20%, +20%]) vs B 50.0; needs +10% or more"
    failing = evaluate(REL, frame(base + [("C", "canonical", "decode_tps", "decode", 52.0)] * 3))
    assert failing.verdict == Verdict.FAIL
    edge = evaluate(REL, frame(base + [("C", "canonical", "decode_tps", "decode", 55.0)] * 3))
    assert edge.verdict == Verdict.PASS  # exactly +10% meets "at least +10%"
    assert abs(edge.evidence["comparisons"][0]["gain"] - 0.1) < 1e-9


def test_medians_not_means() -> None:
    """One wild trial on each side: the means say C is slower, the medians (and their
    intervals, which leave one outlier out at n = 10) say +12%."""
    rows = [("B", "canonical", "decode_tps", "decode", v) for v in [50] * 9 + [500]]
    rows += [("C", "canonical", "decode_tps", "decode", v) for v in [56] * 9 + [1]]
    assert evaluate(REL, frame(rows)).verdict == Verdict.PASS


def test_greedy_rows_never_reach_a_predicate() -> None:
    rows = [("B", "canonical", "decode_tps", "decode", 50.0), ("C", "greedy", "decode_tps", "decode", 99.0)]
    result = evaluate(REL, frame(rows))
    assert result.verdict == Verdict.PENDING
    assert "no canonical decode_tps for C" in result.reason
    assert set(canonical_only(frame(rows))["mode"]) == {"canonical"}


def test_threshold_per_scenario() -> None:
    gate = GateEntry(id="t", predicate="threshold", params={"metric": "reuse", "value": 0.95, "scenarios": ["identical", "append"]}, subjects=["L"])
    ok = evaluate(gate, frame([("L", "canonical", "reuse", "identical", 1.0), ("L", "canonical", "reuse", "append", 0.95)] * 3))
    assert ok.verdict == Verdict.PASS
    bad = evaluate(gate, frame([("L", "canonical", "reuse", "identical", 1.0), ("L", "canonical", "reuse", "append", 0.5)] * 3))
    assert bad.verdict == Verdict.FAIL
    assert "L append 0.50" in bad.reason


def test_blocked_arm_makes_a_blocked_gate_with_the_message_word_for_word() -> None:
    msg = "Private ANE procedure-bank compiler is unavailable"
    result = evaluate(REL, frame([]), blocked={"C": msg})
    assert result.verdict == Verdict.BLOCKED
    assert msg in result.reason
