"""The predicate library on crafted frames: pass, fail, control, edge at the threshold.

Each cell holds three server runs of the same value (`n3`: blocks 0, 1, 2, shared by every
arm): enough for the comparison primitive's `min_runs`, with CIs that collapse to the
value, so these tests check each predicate's own logic and wording; `test_comparison.py`
checks runs, intervals and errors."""

from __future__ import annotations

import pandas as pd
import pytest

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates import blockstats
from gates.engine import evaluate
from gates.result import GateResult


def rows(*specs: tuple) -> pd.DataFrame:
    """(arm, metric, value[, scenario[, context[, trial[, repeat[, mode[, probe]]]]]])"""
    out = []
    for spec in specs:
        arm, metric, value, *rest = spec
        scenario, context, trial, repeat, mode, probe = rest + ["", 0, 0, 0, "canonical", ""][len(rest) :]
        out.append(
            {
                "arm_id": arm,
                "metric": metric,
                "value": float(value),
                "scenario": scenario,
                "context": context,
                "trial": trial,
                "repeat": repeat,
                "mode": mode,
                "probe": probe,
                "item_key": "item",
            }
        )
    return pd.DataFrame(out)


def n3(*specs: tuple) -> pd.DataFrame:
    """`rows`, with each spec measured in three server runs (blocks 0-2) of the same value."""
    out = []
    for spec in specs:
        arm, metric, value, *rest = spec
        scenario, context, _trial, _repeat, mode, probe = rest + ["", 0, 0, 0, "canonical", ""][len(rest) :]
        out += [(arm, metric, value, scenario, context, 0, block, mode, probe) for block in range(3)]
    return rows(*out)


def drafts(arm: str, runs: list[tuple[int, int]]) -> pd.DataFrame:
    """The server's speculation counters, (drafted, accepted) tokens per run (block)."""
    return rows(
        *[
            spec
            for block, (drafted, accepted) in enumerate(runs)
            for spec in (
                (arm, "draft_tokens", drafted, "", 0, 0, block),
                (arm, "accepted_tokens", accepted, "", 0, 0, block),
            )
        ]
    )


PAIRED3 = "95% CI, paired over 3 blocks, 3 runs x 1 requests"  # how a comparison over three shared blocks reads


def gate(predicate: str, params: dict, subjects: list[str], baseline: list[str] | None = None) -> GateEntry:
    return GateEntry(id="g", predicate=predicate, params=params, subjects=subjects, baseline=baseline or [])


def test_relative_with_also_metric_seed_gate_11() -> None:
    g = gate(
        "relative_improvement",
        {
            "metric": "decode_tps",
            "min_gain": 0.10,
            "also_metric": "e2e_s",
            "also_min_gain": 0.10,
            "also_higher_is_better": False,
        },
        ["X", "W"],
        ["Q"],
    )
    frame = n3(
        ("Q", "decode_tps", 20),
        ("X", "decode_tps", 22.8),
        ("W", "decode_tps", 24.8),
        ("Q", "e2e_s", 100),
        ("X", "e2e_s", 95),
        ("W", "e2e_s", 97),
    )
    result = evaluate(g, frame)
    assert result.verdict == Verdict.FAIL
    assert result.reason == (
        f"decode_tps: X 22.8 (+14% [+14%, +14%] {PAIRED3}), W 24.8 (+24% [+24%, +24%] {PAIRED3}) vs Q 20.0; needs +10% or more, "
        f"but e2e_s: X 95.0 (-5% [-5%, -5%] {PAIRED3}), W 97.0 (-3% [-3%, -3%] {PAIRED3}) vs Q 100; needs -10% or lower"
    )
    frame.loc[frame["metric"] == "e2e_s", "value"] = [100] * 3 + [60] * 3 + [50] * 3
    assert evaluate(g, frame).verdict == Verdict.PASS
    # one subject short on the main metric fails the whole gate, however well the other does
    frame.loc[(frame["metric"] == "decode_tps") & (frame["arm_id"] == "X"), "value"] = 21.0
    assert evaluate(g, frame).verdict == Verdict.FAIL


def test_interval_straddling_the_threshold_is_inconclusive() -> None:
    g = gate("relative_improvement", {"metric": "decode_tps", "min_gain": 0.10}, ["B"], ["A"])
    # the gain is +10% on average, but per block (one server start per arm) it is +2%, +11%, +19%
    frame = rows(
        ("A", "decode_tps", 100, "", 0, 0, 0),
        ("B", "decode_tps", 102, "", 0, 0, 0),
        ("A", "decode_tps", 100, "", 0, 0, 1),
        ("B", "decode_tps", 111, "", 0, 0, 1),
        ("A", "decode_tps", 100, "", 0, 0, 2),
        ("B", "decode_tps", 119, "", 0, 0, 2),
    )
    result = evaluate(g, frame)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert f"B 110 (+10% [-9%, +34%] {PAIRED3}) vs A 100" in result.reason and "B's CI straddles +10%" in result.reason
    assert result.evidence["comparisons"][0]["method"] == f"{blockstats.PAIRED_METHOD} (3 blocks)"
    tight = rows(*[(a, "decode_tps", v, "", 0, 0, r) for r in range(3) for a, v in (("A", 100), ("B", 130 + r))])
    assert evaluate(g, tight).verdict == Verdict.PASS


def test_control_promote_and_characterize() -> None:
    g = gate("control", {"metric": "decode_tps", "max_advantage": 0.05}, ["T"], ["U"])
    assert evaluate(g, n3(("T", "decode_tps", 30), ("U", "decode_tps", 31))).verdict == Verdict.PASS
    assert evaluate(g, n3(("T", "decode_tps", 30), ("U", "decode_tps", 31))).reason == (
        "T promoted; U just control, no advantage > 5% (decode_tps U +3% [+3%, +3%] over T 30.0, 3 runs x 1 requests)"
    )
    assert evaluate(g, n3(("T", "decode_tps", 30), ("U", "decode_tps", 33))).verdict == Verdict.FAIL
    c = gate("control", {"metric": "decode_tps", "role": "control"}, ["Y", "Z"], ["V"])
    characterized = evaluate(c, n3(("Y", "decode_tps", 30), ("Z", "decode_tps", 30), ("V", "decode_tps", 39)))
    assert characterized.verdict == Verdict.CONTROL
    run3 = ", 3 runs x 1 requests"
    assert (
        characterized.reason
        == f"decode_tps Y 30.0{run3}, Z 30.0{run3} vs V 39.0{run3}: V +30% [+30%, +30%] over Y 30.0{run3}"
    )
    assert "p_pass" not in characterized.evidence  # it only characterises: no claim for the campaign's family


def test_control_edge_exactly_at_the_max_advantage_decides_nothing() -> None:
    """Exactly +5% in every run, no spread: on the bound, no claim either way (a tie is no
    evidence), however the ratio rounds."""
    g = gate("control", {"metric": "decode_tps", "max_advantage": 0.05}, ["T"], ["U"])
    for t, u in ((30, 31.5), (40, 42)):
        result = evaluate(g, n3(("T", "decode_tps", t), ("U", "decode_tps", u)))
        assert result.verdict == Verdict.INCONCLUSIVE and "exactly +5% in every block" in result.reason, result.reason


def test_regression_guard_seed_gate_6() -> None:
    g = gate(
        "regression_guard",
        {
            "metric": "ttft_s",
            "scenario": "cold",
            "higher_is_better": False,
            "min_gain": 0.3,
            "guard_metric": "reuse",
            "guard_scenarios": ["identical", "append"],
            "guard_min": 0.5,
            "worse_metric": "ttft_s",
            "worse_scenarios": ["identical", "append"],
        },
        ["M", "N"],
        ["L"],
    )
    frame = n3(
        ("L", "ttft_s", 10, "cold"),
        ("M", "ttft_s", 4.5, "cold"),
        ("N", "ttft_s", 4.6, "cold"),
        ("L", "ttft_s", 0.6, "identical"),
        ("M", "ttft_s", 4.0, "identical"),
        ("N", "ttft_s", 10.2, "identical"),
        ("L", "ttft_s", 0.7, "append"),
        ("M", "ttft_s", 4.4, "append"),
        ("N", "ttft_s", 4.6, "append"),
        ("M", "reuse", 0, "identical"),
        ("N", "reuse", 0, "identical"),
        ("M", "reuse", 0, "append"),
        ("N", "reuse", 0, "append"),
    )
    result = evaluate(g, frame)
    assert result.verdict == Verdict.FAIL
    assert result.reason == (
        f"ttft_s: M 4.50 (-55% [-55%, -55%] {PAIRED3}), N 4.60 (-54% [-54%, -54%] {PAIRED3}) vs L 10.0, "
        "but M reuse 0.00, 3 runs x 1 requests, N reuse 0.00, 3 runs x 1 requests (needs >= 0.50); ttft_s 6-17x worse than L"
    )


def test_best_of_majority_acceptance_ceiling() -> None:
    best = gate("best_of", {"metric": "decode_tps", "context": 32768, "label": "decode 32K"}, ["V"], ["S", "L"])
    frame = n3(
        ("V", "decode_tps", 44.5, "", 32768), ("S", "decode_tps", 38, "", 32768), ("L", "decode_tps", 30, "", 32768)
    )
    assert (
        evaluate(best, frame).reason
        == "V best decode 32K: 44.5, 3 runs x 1 requests; next S 38.0, 3 runs x 1 requests (V +17% [+17%, +17%] 95% CI)"
    )
    frame.loc[frame["arm_id"] == "V", "value"] = 37
    assert evaluate(best, frame).verdict == Verdict.FAIL

    maj = gate("majority", {}, ["V"])
    two_of_three = rows(
        *[("V", "tool_loop_pass", v, "", 0, i, 0, "canonical", "tool-loop") for i, v in enumerate([1, 0, 1])]
    )
    assert (
        evaluate(maj, two_of_three).reason
        == "tool loop V 2/3 [0.0943, 0.992] 95% CI; 3 trials cannot tell V's rate from 50%"
    )
    nine_of_ten = rows(*[("V", "tool_loop_pass", int(i < 9), "", 0, i, 0, "canonical", "tool-loop") for i in range(10)])
    assert evaluate(maj, nine_of_ten).verdict == Verdict.PASS
    one_of_ten = rows(*[("V", "tool_loop_pass", int(i < 1), "", 0, i, 0, "canonical", "tool-loop") for i in range(10)])
    assert evaluate(maj, one_of_ten).verdict == Verdict.FAIL  # 1/10 [0.00, 0.45]: no majority

    acc = gate("acceptance_rate", {"min_rate": 0.7}, ["L"])
    good = drafts("L", [(100, 80), (120, 95), (90, 74), (110, 86)])
    result = evaluate(acc, good)
    assert result.verdict == Verdict.PASS  # one rate per server run, the CI over the four
    assert (
        result.reason.startswith("draft acceptance L 0.799 [0.772, 0.827] 95% CI, 4 runs")
        and "(335/420 drafted tokens)" in result.reason
    )
    assert evaluate(acc, drafts("L", [(100, 60), (120, 70), (90, 60), (110, 66)])).verdict == Verdict.FAIL
    one_run = evaluate(acc, drafts("L", [(100, 80)]))  # the old test's counters: one run
    assert one_run.verdict == Verdict.INCONCLUSIVE and "L has 1 run; needs 3" in one_run.reason
    flaky = evaluate(
        acc, pd.concat([good, rows(("L", "requests", 40), ("L", "requests_failed", 8)).assign(kind="summary")])
    )
    assert (
        flaky.verdict == Verdict.FAIL
        and "L failed 8/40 requests (0.20 [0.0905, 0.356] 95% CI) > 0.05: cannot pass" in flaky.reason
    )

    ceil = gate("holds_at_ceiling", {"context": 262144, "min_value": 12, "probe": None}, ["L", "T", "S"], ["V", "Y"])
    frame = n3(
        *[(a, "decode_tps", v, "", 262144) for a, v in (("L", 15.4), ("T", 14.1), ("S", 14.2), ("V", 6.1), ("Y", 8.7))]
    )
    result = evaluate(ceil, frame)
    run3 = ", 3 runs x 1 requests"
    assert result.verdict == Verdict.PASS and result.reason == (
        f"at 256K: L 15.4{run3} / T 14.1{run3} / S 14.2{run3} hold >= 12.0; V 6.10{run3} / Y 8.70{run3} collapse"
    )


def test_all_of_mtp_gate_and_validation() -> None:
    g = gate(
        "all_of",
        {
            "checks": [
                {
                    "predicate": "relative_improvement",
                    "params": {"metric": "e2e_s", "min_gain": 0.0, "higher_is_better": False},
                },
                {"predicate": "acceptance_rate", "params": {"min_rate": 0.7}, "baseline": []},
                {"predicate": "majority", "params": {}, "baseline": []},
            ]
        },
        ["L"],
        ["K"],
    )
    frame = pd.concat(
        [
            n3(("K", "e2e_s", 100), ("L", "e2e_s", 80)),
            drafts("L", [(100, 81), (100, 83), (100, 80)]),
            rows(
                *[
                    ("L", "tool_loop_pass", v, "", 0, i, 0, "canonical", "tool-loop")
                    for i, v in enumerate([1] * 9 + [0])
                ]
            ),
        ]
    )
    result = evaluate(g, frame)
    assert result.verdict == Verdict.PASS
    assert "draft acceptance L 0.813 [" in result.reason and "tool loop L 9/10 [0.555, 0.997] 95% CI" in result.reason
    # three trials decide nothing, and the whole gate says so
    short = frame[~((frame["metric"] == "tool_loop_pass") & (frame["trial"] >= 3))]
    assert evaluate(g, short).verdict == Verdict.INCONCLUSIVE
    from pydantic import ValidationError

    from gates.catalog import params_model

    with pytest.raises(ValidationError):
        params_model("all_of").model_validate({"checks": [{"predicate": "majority", "params": {"nope": 1}}]})


def test_greedy_only_rows_leave_every_predicate_pending() -> None:
    frame = rows(("T", "decode_tps", 30, "", 0, 0, 0, "greedy"), ("U", "decode_tps", 31, "", 0, 0, 0, "greedy"))
    for predicate, params in (
        ("control", {"metric": "decode_tps"}),
        ("best_of", {"metric": "decode_tps"}),
        ("relative_improvement", {"metric": "decode_tps", "min_gain": 0}),
    ):
        assert evaluate(gate(predicate, params, ["T"], ["U"]), frame).verdict == Verdict.PENDING


def test_threshold_partial_scenarios_reported() -> None:
    g = gate(
        "threshold",
        {
            "metric": "reuse",
            "value": 0.95,
            "scenarios": ["identical", "append", "tool_turn"],
            "partial_scenarios": ["middle_mutation"],
        },
        ["L", "T"],
    )
    frame = n3(
        *[
            (a, "reuse", v, s)
            for a in ("L", "T")
            for s, v in (("identical", 1.0), ("append", 0.97), ("tool_turn", 0.99))
        ],
        ("L", "reuse", 0.38, "middle_mutation"),
        ("T", "reuse", 0.49, "middle_mutation"),
    )
    result = evaluate(g, frame)
    assert result.verdict == Verdict.PASS and "middle_mutation partial (0.38-0.49)" in result.reason


def per_run(arm: str, metric: str, values: list[float]) -> list[tuple]:
    """One value per server run, in blocks 0, 1, ... (shared by arms measured alike)."""
    return [(arm, metric, v, "", 0, 0, block) for block, v in enumerate(values)]


def test_equivalence_by_two_one_sided_tests() -> None:
    """ "Within 5%": a pass needs the whole CI of the ratio inside 1 +- 5%; a CI that is
    merely wide never passes, and one wholly outside fails."""
    g = gate("equivalence", {"metric": "decode_tps", "margin": 0.05}, ["U"], ["T"])
    t = [30.0, 30.5, 29.5, 30.2, 29.8]

    def judged(ratios: list[float]) -> GateResult:
        return evaluate(
            g,
            rows(
                *per_run("T", "decode_tps", t),
                *per_run("U", "decode_tps", [round(a * r, 3) for a, r in zip(t, ratios)]),
            ),
        )

    close = judged([1.01, 0.99, 1.00, 1.02, 0.995])
    assert close.verdict == Verdict.PASS
    assert close.reason.endswith("vs T 30.0; needs within +-5.00% (two one-sided tests)")
    wide = judged([0.92, 1.08, 0.97, 1.06, 0.99])  # the mean ratio is 1.00, its CI is not within 5%
    assert wide.verdict == Verdict.INCONCLUSIVE and "U's CI reaches beyond +-5.00%" in wide.reason
    apart = judged([1.20, 1.21, 1.19, 1.20, 1.22])
    assert apart.verdict == Verdict.FAIL and "U differs from T by more than 5.00%" in apart.reason
    assert apart.evidence["margin"] == 0.05 and apart.evidence["comparisons"][0]["pairs"] == 5
    two = evaluate(g, rows(*per_run("T", "decode_tps", t[:2]), *per_run("U", "decode_tps", t[:2])))
    assert (
        two.verdict == Verdict.INCONCLUSIVE and "U has 2 runs, T has 2 runs; needs 3" in two.reason
    )  # identical, but two runs


def test_acceptance_from_a_trace_replays_random_text_is_no_verdict() -> None:
    """A trace replay's prompts are random words: draft counters from it alone leave the
    acceptance gate inconclusive saying so (not pass on however many runs), and beside
    counters from another probe they are left out of the rate."""
    acc = gate("acceptance_rate", {"min_rate": 0.7}, ["L"])
    replay = drafts("L", [(100, 80), (120, 95), (90, 74), (110, 86)]).assign(scenario="trace=agents", probe="load")
    result = evaluate(acc, replay)
    assert result.verdict == Verdict.INCONCLUSIVE and "random text says nothing about real text" in result.reason
    real = drafts("L", [(100, 60), (120, 70), (90, 60), (110, 66)])
    both = evaluate(acc, pd.concat([replay, real], ignore_index=True))
    assert (
        both.verdict == Verdict.FAIL and "(256/420 drafted tokens)" in both.reason
    )  # the replay's 335 accepted left out
