"""The predicate library on crafted frames: pass, fail, control, edge at the threshold.

Each cell holds three identical trials (`n3`): enough for the comparison primitive's
minimum n, with intervals that collapse to the value, so these tests check each
predicate's own logic and wording; `test_comparison.py` checks n, intervals and errors."""

from __future__ import annotations

import pandas as pd
import pytest

from campaign.schema import GateEntry
from campaign.states import Verdict
from gates.engine import evaluate


def rows(*specs: tuple) -> pd.DataFrame:
    """(arm, metric, value[, scenario[, context[, trial[, repeat[, mode[, probe]]]]]])"""
    out = []
    for spec in specs:
        arm, metric, value, *rest = spec
        scenario, context, trial, repeat, mode, probe = (rest + ["", 0, 0, 0, "canonical", ""][len(rest):])
        out.append({"arm_id": arm, "metric": metric, "value": float(value), "scenario": scenario, "context": context,
                    "trial": trial, "repeat": repeat, "mode": mode, "probe": probe})
    return pd.DataFrame(out)


def n3(*specs: tuple) -> pd.DataFrame:
    """`rows`, with each spec measured in three trials of the same value."""
    out = []
    for spec in specs:
        arm, metric, value, *rest = spec
        scenario, context, _trial, repeat, mode, probe = (rest + ["", 0, 0, 0, "canonical", ""][len(rest):])
        out += [(arm, metric, value, scenario, context, t, repeat, mode, probe) for t in range(3)]
    return rows(*out)


def gate(predicate: str, params: dict, subjects: list[str], baseline: list[str] | None = None) -> GateEntry:
    return GateEntry(id="g", predicate=predicate, params=params, subjects=subjects, baseline=baseline or [])


def test_relative_with_also_metric_seed_gate_11() -> None:
    g = gate("relative_improvement", {"metric": "decode_tps", "min_gain": 0.10, "also_metric": "e2e_s", "also_min_gain": 0.10, "also_higher_is_better": False}, ["X", "W"], ["Q"])
    frame = n3(("Q", "decode_tps", 20), ("X", "decode_tps", 22.8), ("W", "decode_tps", 24.8),
               ("Q", "e2e_s", 100), ("X", "e2e_s", 95), ("W", "e2e_s", 97))
    result = evaluate(g, frame)
    assert result.verdict == Verdict.FAIL
    assert result.reason == (
        "decode_tps: X 22.8 (+14% [+14%, +14%]), W 24.8 (+24% [+24%, +24%]) vs Q 20.0; needs +10% or more, "
        "but e2e_s: X 95.0 (-5% [-5%, -5%]), W 97.0 (-3% [-3%, -3%]) vs Q 100; needs -10% or lower"
    )
    frame.loc[frame["metric"] == "e2e_s", "value"] = [100] * 3 + [60] * 3 + [50] * 3
    assert evaluate(g, frame).verdict == Verdict.PASS


def test_interval_straddling_the_threshold_is_inconclusive() -> None:
    g = gate("relative_improvement", {"metric": "decode_tps", "min_gain": 0.10}, ["B"], ["A"])
    # medians +10.5%, but per interleaved repeat the gain is +2%, +11%, +19%
    frame = rows(("A", "decode_tps", 100, "", 0, 0, 0), ("B", "decode_tps", 102, "", 0, 0, 0),
                 ("A", "decode_tps", 100, "", 0, 0, 1), ("B", "decode_tps", 111, "", 0, 0, 1),
                 ("A", "decode_tps", 100, "", 0, 0, 2), ("B", "decode_tps", 119, "", 0, 0, 2))
    result = evaluate(g, frame)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "B 111 (+11% [+2%, +19%]) vs A 100" in result.reason and "B's interval straddles +10%" in result.reason
    assert result.evidence["comparisons"][0]["method"] == "paired by interleaved repeat (3 repeats)"
    tight = rows(*[(a, "decode_tps", v, "", 0, 0, r) for r in range(3) for a, v in (("A", 100), ("B", 130 + r))])
    assert evaluate(g, tight).verdict == Verdict.PASS


def test_control_promote_and_characterize() -> None:
    g = gate("control", {"metric": "decode_tps", "max_advantage": 0.05}, ["T"], ["U"])
    assert evaluate(g, n3(("T", "decode_tps", 30), ("U", "decode_tps", 31))).verdict == Verdict.PASS
    assert evaluate(g, n3(("T", "decode_tps", 30), ("U", "decode_tps", 31))).reason == (
        "T promoted; U just control, no advantage > 5% (decode_tps U +3% [+3%, +3%] over T 30.0)"
    )
    assert evaluate(g, n3(("T", "decode_tps", 30), ("U", "decode_tps", 33))).verdict == Verdict.FAIL
    # edge: exactly +5% is not more than 5%
    assert evaluate(g, n3(("T", "decode_tps", 40), ("U", "decode_tps", 42))).verdict == Verdict.PASS
    c = gate("control", {"metric": "decode_tps", "role": "control"}, ["Y", "Z"], ["V"])
    characterized = evaluate(c, n3(("Y", "decode_tps", 30), ("Z", "decode_tps", 30), ("V", "decode_tps", 39)))
    assert characterized.verdict == Verdict.CONTROL
    assert characterized.reason == "decode_tps Y 30.0, Z 30.0 vs V 39.0: V +30% [+30%, +30%] over Y 30.0"


def test_regression_guard_seed_gate_6() -> None:
    g = gate("regression_guard", {"metric": "ttft_s", "scenario": "cold", "higher_is_better": False, "min_gain": 0.3,
                                  "guard_metric": "reuse", "guard_scenarios": ["identical", "append"], "guard_min": 0.5,
                                  "worse_metric": "ttft_s", "worse_scenarios": ["identical", "append"]}, ["M", "N"], ["L"])
    frame = n3(("L", "ttft_s", 10, "cold"), ("M", "ttft_s", 4.5, "cold"), ("N", "ttft_s", 4.6, "cold"),
                 ("L", "ttft_s", 0.6, "identical"), ("M", "ttft_s", 4.0, "identical"), ("N", "ttft_s", 10.2, "identical"),
                 ("L", "ttft_s", 0.7, "append"), ("M", "ttft_s", 4.4, "append"), ("N", "ttft_s", 4.6, "append"),
                 ("M", "reuse", 0, "identical"), ("N", "reuse", 0, "identical"), ("M", "reuse", 0, "append"), ("N", "reuse", 0, "append"))
    result = evaluate(g, frame)
    assert result.verdict == Verdict.FAIL
    assert result.reason == (
        "ttft_s: M 4.50 (-55% [-55%, -55%]), N 4.60 (-54% [-54%, -54%]) vs L 10.0, "
        "but M reuse 0.00, N reuse 0.00 (needs >= 0.50); ttft_s 6-17x worse than L"
    )


def test_best_of_majority_acceptance_ceiling() -> None:
    best = gate("best_of", {"metric": "decode_tps", "context": 32768, "label": "decode 32K"}, ["V"], ["S", "L"])
    frame = n3(("V", "decode_tps", 44.5, "", 32768), ("S", "decode_tps", 38, "", 32768), ("L", "decode_tps", 30, "", 32768))
    assert evaluate(best, frame).reason == "V best decode 32K: 44.5; next S 38.0 (V +17% [+17%, +17%])"
    frame.loc[frame["arm_id"] == "V", "value"] = 37
    assert evaluate(best, frame).verdict == Verdict.FAIL

    maj = gate("majority", {}, ["V"])
    two_of_three = rows(*[("V", "tool_loop_pass", v, "", 0, i, 0, "canonical", "tool-loop") for i, v in enumerate([1, 0, 1])])
    assert evaluate(maj, two_of_three).reason == "tool loop V 2/3 [0.0943, 0.992]; 3 trials cannot tell V's rate from 50%"
    nine_of_ten = rows(*[("V", "tool_loop_pass", int(i < 9), "", 0, i, 0, "canonical", "tool-loop") for i in range(10)])
    assert evaluate(maj, nine_of_ten).verdict == Verdict.PASS
    one_of_ten = rows(*[("V", "tool_loop_pass", int(i < 1), "", 0, i, 0, "canonical", "tool-loop") for i in range(10)])
    assert evaluate(maj, one_of_ten).verdict == Verdict.FAIL  # 1/10 [0.00, 0.45]: no majority

    acc = gate("acceptance_rate", {"min_rate": 0.7}, ["L"])
    assert evaluate(acc, rows(("L", "draft_tokens", 100), ("L", "accepted_tokens", 80))).reason == "draft acceptance L 0.80"
    assert evaluate(acc, rows(("L", "draft_tokens", 100), ("L", "accepted_tokens", 69))).verdict == Verdict.FAIL

    ceil = gate("holds_at_ceiling", {"context": 262144, "min_value": 12, "probe": None}, ["L", "T", "S"], ["V", "Y"])
    frame = n3(*[(a, "decode_tps", v, "", 262144) for a, v in (("L", 15.4), ("T", 14.1), ("S", 14.2), ("V", 6.1), ("Y", 8.7))])
    result = evaluate(ceil, frame)
    assert result.verdict == Verdict.PASS and result.reason == "at 256K: L 15.4 / T 14.1 / S 14.2 hold >= 12.0; V 6.10 / Y 8.70 collapse"


def test_all_of_mtp_gate_and_validation() -> None:
    g = gate("all_of", {"checks": [
        {"predicate": "relative_improvement", "params": {"metric": "e2e_s", "min_gain": 0.0, "higher_is_better": False}},
        {"predicate": "acceptance_rate", "params": {"min_rate": 0.7}, "baseline": []},
        {"predicate": "majority", "params": {}, "baseline": []},
    ]}, ["L"], ["K"])
    frame = pd.concat([
        n3(("K", "e2e_s", 100), ("L", "e2e_s", 80)),
        rows(("L", "draft_tokens", 100), ("L", "accepted_tokens", 81),
             *[("L", "tool_loop_pass", v, "", 0, i, 0, "canonical", "tool-loop") for i, v in enumerate([1] * 9 + [0])]),
    ])
    result = evaluate(g, frame)
    assert result.verdict == Verdict.PASS
    assert "draft acceptance L 0.81" in result.reason and "tool loop L 9/10 [0.555, 0.997]" in result.reason
    # three trials decide nothing, and the whole gate says so
    short = frame[~((frame["metric"] == "tool_loop_pass") & (frame["trial"] >= 3))]
    assert evaluate(g, short).verdict == Verdict.INCONCLUSIVE
    from pydantic import ValidationError

    from gates.catalog import params_model

    with pytest.raises(ValidationError):
        params_model("all_of").model_validate({"checks": [{"predicate": "majority", "params": {"nope": 1}}]})


def test_greedy_only_rows_leave_every_predicate_pending() -> None:
    frame = rows(("T", "decode_tps", 30, "", 0, 0, 0, "greedy"), ("U", "decode_tps", 31, "", 0, 0, 0, "greedy"))
    for predicate, params in (("control", {"metric": "decode_tps"}), ("best_of", {"metric": "decode_tps"}), ("relative_improvement", {"metric": "decode_tps", "min_gain": 0})):
        assert evaluate(gate(predicate, params, ["T"], ["U"]), frame).verdict == Verdict.PENDING


def test_threshold_partial_scenarios_reported() -> None:
    g = gate("threshold", {"metric": "reuse", "value": 0.95, "scenarios": ["identical", "append", "tool_turn"], "partial_scenarios": ["middle_mutation"]}, ["L", "T"])
    frame = n3(*[(a, "reuse", v, s) for a in ("L", "T") for s, v in (("identical", 1.0), ("append", 0.97), ("tool_turn", 0.99))],
                 ("L", "reuse", 0.38, "middle_mutation"), ("T", "reuse", 0.49, "middle_mutation"))
    result = evaluate(g, frame)
    assert result.verdict == Verdict.PASS and "middle_mutation partial (0.38-0.49)" in result.reason
