"""Predicates on crafted frames: pass, fail, edge at the threshold, pending, greedy ignored.

Each row is one server run's value unless it names its run: an arm's k-th value of a
metric and scenario is its run in block k, so two arms measured side by side share blocks."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates.engine import canonical_only, evaluate


def frame(rows: list[tuple]) -> pd.DataFrame:
    """(arm, mode, metric, scenario, value[, run]) rows; without a run, the arm's next block."""
    seen: Counter = Counter()
    out = []
    for i, (a, m, metric, s, v, *run) in enumerate(rows):
        key = (a, m, metric, s)
        block = run[0] if run else seen[key]
        seen[key] += 1
        out.append(
            {
                "arm_id": a,
                "mode": m,
                "metric": metric,
                "scenario": s,
                "value": v,
                "probe": "decode" if metric == "decode_tps" else "cache-probe",
                "context": 4096,
                "trial": i,
                "repeat": block,
                "item_key": "item",
            }
        )
    return pd.DataFrame(out)


REL = GateEntry(
    id="g",
    predicate="relative_improvement",
    params={"metric": "decode_tps", "min_gain": 0.10},
    subjects=["C"],
    baseline=["B"],
)


def decode(arm: str, values: list[float]) -> list[tuple]:
    return [(arm, "canonical", "decode_tps", "decode", float(v)) for v in values]


def test_relative_improvement_pass_fail_and_edge() -> None:
    base = decode("B", [50, 51, 49, 50.5])
    passing = evaluate(REL, frame(base + decode("C", [60, 61.7, 58.3, 60.4])))
    assert passing.verdict == Verdict.PASS
    assert (
        passing.reason
        == "decode_tps: C 60.1 (+20% [+19%, +21%] 95% CI, paired over 4 blocks, 4 runs x 1 requests) vs B 50.1; needs +10% or more"
    )
    failing = evaluate(REL, frame(base + decode("C", [52, 53.2, 50.8, 52.3])))
    assert failing.verdict == Verdict.FAIL
    # edge: exactly +10% in every run, no spread: on the threshold, no claim either way
    edge = evaluate(REL, frame(decode("B", [50] * 3) + decode("C", [55] * 3)))
    assert edge.verdict == Verdict.INCONCLUSIVE and "exactly +10% in every block" in edge.reason
    assert abs(edge.evidence["comparisons"][0]["gain"] - 0.1) < 1e-9


def test_medians_not_means() -> None:
    """One wild request in each run on each side: per run, the means say C is slower; the
    run medians (what a run is summarised by) say +12% in every block."""
    rows = []
    for r, b in enumerate((50, 51, 49, 50)):
        rows += [("B", "canonical", "decode_tps", "decode", v, r) for v in [b] * 9 + [500]]
        rows += [("C", "canonical", "decode_tps", "decode", v, r) for v in [b * 1.12] * 9 + [1]]
    df = frame(rows)
    means = df.groupby(["arm_id", "repeat"])["value"].mean().unstack(0)
    assert (means["C"] < means["B"]).all()
    result = evaluate(REL, df)
    assert result.verdict == Verdict.PASS
    assert "C 56.0 (+12% [+12%, +12%] 95% CI, paired over 4 blocks, 4 runs x 10 requests)" in result.reason


def test_greedy_rows_never_reach_a_predicate() -> None:
    rows = [("B", "canonical", "decode_tps", "decode", 50.0), ("C", "greedy", "decode_tps", "decode", 99.0)]
    result = evaluate(REL, frame(rows))
    assert result.verdict == Verdict.PENDING
    assert "no canonical decode_tps for C" in result.reason
    assert set(canonical_only(frame(rows))["mode"]) == {"canonical"}


def test_threshold_per_scenario() -> None:
    gate = GateEntry(
        id="t",
        predicate="threshold",
        params={"metric": "reuse", "value": 0.95, "scenarios": ["identical", "append"]},
        subjects=["L"],
    )
    identical = [("L", "canonical", "reuse", "identical", v) for v in (1.0, 1.0, 0.99, 1.0)]
    ok = evaluate(
        gate, frame(identical + [("L", "canonical", "reuse", "append", v) for v in (0.97, 0.98, 0.975, 0.985)])
    )
    assert ok.verdict == Verdict.PASS
    bad = evaluate(gate, frame(identical + [("L", "canonical", "reuse", "append", v) for v in (0.5, 0.52, 0.49, 0.5)]))
    assert bad.verdict == Verdict.FAIL
    assert "L append 0.50" in bad.reason
    one_run = evaluate(gate, frame(identical[:1] + [("L", "canonical", "reuse", "append", 0.97)]))
    assert one_run.verdict == Verdict.INCONCLUSIVE and "L has 1 run; needs 3" in one_run.reason


def test_blocked_arm_makes_a_blocked_gate_with_the_message_word_for_word() -> None:
    msg = "Private ANE procedure-bank compiler is unavailable"
    result = evaluate(REL, frame([]), blocked={"C": msg})
    assert result.verdict == Verdict.BLOCKED
    assert msg in result.reason


def test_a_gate_reads_the_rows_of_the_items_feeding_it_unless_it_asks_for_all() -> None:
    import pandas as pd

    from campaign.core.schema import GateEntry
    from gates.engine import gate_rows, read_items

    own = GateEntry(id="g", predicate="threshold", params={"metric": "reuse", "op": ">=", "value": 0.5}, subjects=["A"])
    every = own.model_copy(update={"reads": "all"})
    frame = pd.DataFrame({"item_key": ["a", "b", "c"], "value": [1.0, 2.0, 3.0]})
    assert (
        read_items(own, ["a", "b"]) == ["a", "b"] and read_items(own, []) is None and read_items(every, ["a"]) is None
    )
    assert list(gate_rows(own, frame, ["a", "c"])["value"]) == [1.0, 3.0]
    assert len(gate_rows(every, frame, ["a"])) == 3 and len(gate_rows(own, frame, [])) == 3
