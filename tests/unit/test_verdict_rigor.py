"""What a verdict is worth, on generated data: the server run is the unit, false verdicts
stay at their stated rate however many cells and gates, and like is compared with like.

The calibration tests draw whole campaigns from the server variation model
(`gates.calibration`) and run them through the real gate code: a change that makes the
intervals treat requests as independent again, or drops the Holm step over cells, makes
them fail (at a run spread of 3% and a request spread of 1%, a request-level interval
passes identical arms about a third of the time)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates import family
from gates.calibration import Design, VariationModel, block_frame, calibrate, gates_for
from gates.engine import evaluate
from gates.result import GateResult

MODEL = VariationModel(run_sd=0.03, drift_sd=0.005, request_sd=0.01)
CAMPAIGNS = 100
LIMIT = 0.06  # the goal is 5%; the true rate is ~2.5%. Fixed seeds: the draw is the same every run


@pytest.mark.parametrize(
    ("predicate", "cells"),
    [("relative_improvement(any gain)", 1), ("relative_improvement(any gain)", 8), ("best_of", 4)],
)
def test_false_verdicts_stay_within_five_percent(predicate: str, cells: int) -> None:
    tally = next(iter(calibrate(predicate, cells, MODEL, CAMPAIGNS, seed=cells * 17 + len(predicate)).values()))
    assert tally.pass_rate <= LIMIT, f"false pass {tally.pass_rate:.1%} over {tally.campaigns} campaigns"
    assert tally.fail_rate <= LIMIT, f"false fail {tally.fail_rate:.1%} over {tally.campaigns} campaigns"


def test_a_real_gain_is_found() -> None:
    """Calibration is not bought by never deciding: a true +30% passes a +10% gate."""
    tally = next(iter(calibrate("relative_improvement(+10%)", 1, MODEL, 30, seed=3, truth=[1.30]).values()))
    assert tally.pass_rate >= 0.8, tally


def _request_level_pass_rate(campaigns: int) -> float:
    """What the old rule did: all requests of the runs pooled, as if independent."""
    rng = np.random.default_rng(5)
    design = Design(blocks=5, cells=1)
    wins = 0
    for _ in range(campaigns):
        rows = block_frame(design, MODEL, rng)
        rows = rows[rows["kind"] == "sample"]
        a = np.log(rows.loc[rows["arm_id"] == "A", "value"].to_numpy())
        b = np.log(rows.loc[rows["arm_id"] == "B", "value"].to_numpy())
        se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        wins += (a.mean() - b.mean()) - 1.96 * se > 0
    return wins / campaigns


def test_the_model_really_fools_a_request_level_interval() -> None:
    """The generated data has the property that matters: run-to-run spread the requests do
    not show. Without it the calibration tests above would prove nothing."""
    assert _request_level_pass_rate(200) > 0.15


# -- like with like ------------------------------------------------------------------------


def _frame(**changes: object) -> pd.DataFrame:
    return block_frame(
        Design(blocks=4, gains={"A": 1.5}),
        VariationModel(run_sd=0.01, drift_sd=0.0, request_sd=0.01),
        np.random.default_rng(1),
    )


GATE = GateEntry(
    id="g",
    predicate="relative_improvement",
    params={"metric": "decode_tps", "probe": "decode", "min_gain": 0.1},
    subjects=["A"],
    baseline=["B"],
)


def test_a_clear_gain_over_shared_blocks_passes_paired() -> None:
    result = evaluate(GATE, _frame())
    assert result.verdict == Verdict.PASS, result.reason
    assert (
        "paired over 4 blocks" in result.reason
        and "95% CI" in result.reason
        and "4 runs x 30 requests" in result.reason
    )


def test_runs_at_other_settings_are_not_compared() -> None:
    """A rerun where B has no attempt at A's new settings: inconclusive, naming B."""
    rows = _frame()
    rows.loc[rows["arm_id"] == "A", "settings_hash"] = "new-settings"
    result = evaluate(GATE, rows)
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert "B has no run at the settings A ran" in result.reason


def test_a_ranking_over_arms_measured_at_other_settings_is_inconclusive_never_pending() -> None:
    """best_of reading every item (qwen38's gate 10): one arm's decode at 32K came from an
    item with another max_tokens. No later run makes that comparable, so the gate does not
    wait (pending) but says who ran what."""
    rows = _frame()
    rows.loc[rows["arm_id"] == "B", "settings_hash"] = "b-settings-0000"
    rows.loc[rows["arm_id"] == "A", "settings_hash"] = "a-settings-0000"
    gate = GateEntry(
        id="best",
        predicate="best_of",
        params={"metric": "decode_tps", "probe": "decode"},
        subjects=["A"],
        baseline=["B"],
    )
    result = evaluate(gate, rows)
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert "A at settings a-settin; B at settings b-settin" in result.reason, result.reason
    assert "runs at other settings are not compared" in result.reason


def test_an_arm_that_ran_two_recipes_is_not_pooled() -> None:
    rows = _frame()
    a = rows.index[(rows["arm_id"] == "A") & (rows["repeat"] >= 2)]
    rows.loc[a, "recipe_hash"] = "r-A-speculative"
    rows.loc[a, "item_key"] = "other-item"
    result = evaluate(GATE, rows)
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert "ran 2 recipes" in result.reason


def test_the_campaign_confidence_reaches_the_interval() -> None:
    wide = evaluate(GATE, _frame(), confidence=0.99).evidence["comparisons"][0]
    narrow = evaluate(GATE, _frame(), confidence=0.80).evidence["comparisons"][0]
    assert narrow["change_high"] - narrow["change_low"] < wide["change_high"] - wide["change_low"]


# -- the family --------------------------------------------------------------------------------


def _result(verdict: Verdict, p_pass: float, p_fail: float = 1.0) -> GateResult:
    return GateResult(
        verdict=verdict, reason="r", evidence={"p_pass": p_pass, "p_fail": p_fail, "statistical_fail": True}
    )


def _gates(*ids: str, exploratory: tuple[str, ...] = ()) -> list[GateEntry]:
    return [
        GateEntry(
            id=i,
            predicate="relative_improvement",
            params={},
            subjects=["A"],
            baseline=["B"],
            exploratory=i in exploratory,
        )
        for i in ids
    ]


def test_holm_over_the_family_keeps_only_what_survives() -> None:
    """Three gates passing alone at p = 0.02, 0.015, 0.001 (alpha 0.025): Holm keeps the
    smallest (0.001 * 3 <= 0.025), then stops at 0.015 * 2 > 0.025, and 0.02 after it."""
    results = {
        "g1": _result(Verdict.PASS, 0.02),
        "g2": _result(Verdict.PASS, 0.015),
        "g3": _result(Verdict.PASS, 0.001),
    }
    out = family.adjust(results, _gates("g1", "g2", "g3"), 0.95)
    assert out["g3"].verdict == Verdict.PASS
    assert out["g2"].verdict == Verdict.INCONCLUSIVE and out["g1"].verdict == Verdict.INCONCLUSIVE
    assert "family of 3 gates" in out["g1"].reason and "family of 3" in out["g3"].reason


def test_an_exploratory_gate_is_outside_the_family() -> None:
    results = {"g1": _result(Verdict.PASS, 0.02), "g2": _result(Verdict.PASS, 0.02)}
    out = family.adjust(results, _gates("g1", "g2", exploratory=("g2",)), 0.95)
    assert out["g1"].verdict == Verdict.PASS and out["g2"].verdict == Verdict.PASS
    assert "exploratory" in out["g2"].reason and out["g1"].evidence["family_size"] == 1


def test_a_rule_made_fail_is_not_adjusted_away() -> None:
    """A subject over the error limit fails whatever the family: it is a rule, not a test."""
    results = {
        "g1": GateResult(
            verdict=Verdict.FAIL, reason="r", evidence={"p_pass": 1.0, "p_fail": 0.0, "statistical_fail": False}
        ),
        "g2": _result(Verdict.INCONCLUSIVE, 0.5, 0.5),
    }
    assert family.adjust(results, _gates("g1", "g2"), 0.95)["g1"].verdict == Verdict.FAIL


def test_identical_arms_rarely_pass_any_of_ten_gates() -> None:
    """Ten any-gain gates on identical arms: without family control one of them passes
    about 22% of the time (1 - 0.975^10); with Holm, about 2.5%."""
    rng = np.random.default_rng(11)
    gate, _ = gates_for(Design())["relative_improvement(any gain)"]
    gates = [gate.model_copy(update={"id": f"g{i}"}) for i in range(10)]
    any_pass = 0
    trials = 20
    for _ in range(trials):
        frames = {g.id: block_frame(Design(), MODEL, rng) for g in gates}
        results = {g.id: evaluate(g, frames[g.id]) for g in gates}
        adjusted = family.adjust(results, gates, 0.95)
        any_pass += any(r.verdict == Verdict.PASS for r in adjusted.values())
    assert any_pass / trials <= 0.10, any_pass  # 20 trials: 2 or fewer; without Holm ~4-5
