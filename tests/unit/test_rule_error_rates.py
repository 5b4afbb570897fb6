"""Every rule a gate decides by is a test with an error rate, measured on generated data.

Each test here draws its numbers from a numpy generator with a fixed seed and runs them
through the real gate code: ties that carry no evidence, the family adjusting what each
gate claims, `control` testing every subject, `goodput` over server runs, bounds joining
the family, and the arm error limit decided by its exact interval."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm as stats_norm

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates import blockstats
from gates.calibration import VariationModel
from gates.cells import ArmErrors, Cell, CellStat, Run, stat_from_runs
from gates.engine import evaluate
from gates.rigor import Rigor


def per_block(
    arm: str,
    metric: str,
    values: list[float],
    *,
    probe: str = "cache-probe",
    scenario: str = "identical",
    context: int = 4096,
    settings: str = "s0",
) -> list[dict[str, Any]]:
    """One server run per value, in blocks 0, 1, ... (shared by every arm measured alike)."""
    return [
        {
            "arm_id": arm,
            "metric": metric,
            "value": float(v),
            "probe": probe,
            "scenario": scenario,
            "context": context,
            "kind": "sample",
            "trial": 0,
            "repeat": block,
            "mode": "canonical",
            "item_key": "item",
            "settings_hash": settings,
        }
        for block, v in enumerate(values)
    ]


def frame(*parts: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([row for part in parts for row in part])


def gate(
    predicate: str, params: dict[str, Any], subjects: list[str], baseline: list[str] | None = None, gid: str = "g"
) -> GateEntry:
    return GateEntry(id=gid, predicate=predicate, params=params, subjects=subjects, baseline=baseline or [])


# -- 1. no evidence, no claim ----------------------------------------------------------------------


def _identical(rng: np.random.Generator, blocks: int = 4) -> pd.DataFrame:
    """Two arms on a deterministic metric: every block gives both the same value (reuse)."""
    value = float(rng.choice([1.0, 0.5, 0.875]))
    return frame(per_block("X", "reuse", [value] * blocks), per_block("Y", "reuse", [value] * blocks))


def test_a_tie_in_every_block_is_no_evidence_either_way() -> None:
    """Zero spread: a centre beyond the bound decides by itself (p 0 for that side); a
    centre on the bound decides nothing (p 1 both ways), never a p of 0 for a tie."""
    same = blockstats.paired([1.0] * 4, [1.0] * 4)
    assert (same.p_above(0.0), same.p_below(0.0)) == (1.0, 1.0)
    ahead = blockstats.paired([2.0] * 4, [1.0] * 4)
    assert (ahead.p_above(0.0), ahead.p_below(0.0)) == (0.0, 1.0)
    behind = blockstats.paired([1.0] * 4, [2.0] * 4)
    assert (behind.p_above(0.0), behind.p_below(0.0)) == (1.0, 0.0)
    for seq in (False, True):
        flat = blockstats.one_arm([0.5] * 5, sequential=seq)
        assert (flat.p_above(flat.center), flat.p_below(flat.center)) == (1.0, 1.0)


@pytest.mark.parametrize("hib", [True, False])
def test_identical_arms_do_not_pass_any_gain_nor_its_mirror(hib: bool) -> None:
    rows = _identical(np.random.default_rng(1))
    params = {"metric": "reuse", "probe": "cache-probe", "min_gain": 0.0, "higher_is_better": hib}
    for subjects, baseline in ((["X"], ["Y"]), (["Y"], ["X"])):
        result = evaluate(gate("relative_improvement", params, subjects, baseline), rows)
        assert result.verdict == Verdict.INCONCLUSIVE, result.reason
        assert "identical values in every block" in result.reason and "no gain to claim" in result.reason, result.reason
        assert result.evidence["p_pass"] == 1.0 and result.evidence["p_fail"] == 1.0


def test_identical_arms_are_no_best_and_no_control_advantage() -> None:
    rows = _identical(np.random.default_rng(2))
    best = evaluate(gate("best_of", {"metric": "reuse", "probe": "cache-probe"}, ["X"], ["Y"]), rows)
    assert best.verdict == Verdict.INCONCLUSIVE and "identical values in every block" in best.reason, best.reason
    ctl = evaluate(
        gate("control", {"metric": "reuse", "probe": "cache-probe", "max_advantage": 0.0}, ["X"], ["Y"]), rows
    )
    assert ctl.verdict == Verdict.INCONCLUSIVE and "identical values in every block" in ctl.reason, ctl.reason
    assert ctl.evidence["p_pass"] == 1.0 and ctl.evidence["p_fail"] == 1.0


def test_a_ratio_exactly_on_the_threshold_decides_nothing_but_identical_arms_are_equivalent() -> None:
    rng = np.random.default_rng(3)
    base = float(rng.choice([40.0, 50.0, 64.0]))
    rows = frame(per_block("X", "decode_tps", [base * 1.25] * 4), per_block("Y", "decode_tps", [base] * 4))
    edge = evaluate(gate("relative_improvement", {"metric": "decode_tps", "min_gain": 0.25}, ["X"], ["Y"]), rows)
    assert edge.verdict == Verdict.INCONCLUSIVE and "exactly +25% in every block" in edge.reason, edge.reason
    within = evaluate(
        gate("equivalence", {"metric": "reuse", "probe": "cache-probe", "margin": 0.05}, ["X"], ["Y"]), _identical(rng)
    )
    assert within.verdict == Verdict.PASS, (
        within.reason
    )  # identical values are within 5%: beyond both bounds by themselves


# -- 2. the family adjusts what each gate claims ------------------------------------------------------


def _guard_campaign(rng: np.random.Generator, blocks: int = 4) -> pd.DataFrame:
    """B decodes +91% faster than A, but its cache reuses next to nothing (0.0006 against a
    0.5 floor); a third arm C is about as fast as A."""
    run = lambda: rng.normal(0, 0.03, blocks)  # noqa: E731  (one restart effect per server run)
    a = 50 * np.exp(run())
    return frame(
        per_block("A", "decode_tps", list(a), probe="decode", scenario="decode"),
        per_block("B", "decode_tps", list(a * 1.91 * np.exp(run())), probe="decode", scenario="decode"),
        per_block("C", "decode_tps", list(a * np.exp(run())), probe="decode", scenario="decode"),
        per_block("B", "reuse", list(0.0006 * np.exp(run()))),
    )


GUARD = {
    "metric": "decode_tps",
    "probe": "decode",
    "min_gain": 0.1,
    "higher_is_better": True,
    "guard_metric": "reuse",
    "guard_probe": "cache-probe",
    "guard_min": 0.5,
}


def test_a_broken_guard_fails_its_gate_over_the_family() -> None:
    """The guard's fail is its own one-arm test ("surely below the floor"), not the gain's:
    beside another comparative gate, Holm over the family keeps it."""
    from gates import family

    rows = _guard_campaign(np.random.default_rng(21))
    gates = [
        gate("regression_guard", GUARD, ["B"], ["A"], gid="guard"),
        gate(
            "relative_improvement",
            {"metric": "decode_tps", "probe": "decode", "min_gain": 0.0},
            ["C"],
            ["A"],
            gid="other",
        ),
    ]
    results = {g.id: evaluate(g, rows) for g in gates}
    assert results["guard"].verdict == Verdict.FAIL, results["guard"].reason
    assert results["guard"].evidence["p_fail"] < 1e-4, results["guard"].evidence["p_fail"]
    adjusted = family.adjust(results, gates, 0.95)
    assert adjusted["guard"].verdict == Verdict.FAIL, adjusted["guard"].reason


def test_a_gain_short_on_its_also_metric_fails_over_the_family() -> None:
    """relative_improvement with also_metric fails when either metric falls short: its
    p_fail is the also-metric's test when that is the one that failed it."""
    from gates import family

    rng = np.random.default_rng(23)
    rows = _guard_campaign(rng)
    e2e = 10 * np.exp(rng.normal(0, 0.03, 4))
    rows = pd.concat(
        [
            rows,
            frame(
                per_block("A", "e2e_s", list(e2e), probe="decode", scenario="decode"),
                per_block(
                    "B", "e2e_s", list(e2e * 1.5 * np.exp(rng.normal(0, 0.03, 4))), probe="decode", scenario="decode"
                ),
            ),
        ]
    )
    params = {
        "metric": "decode_tps",
        "probe": "decode",
        "min_gain": 0.1,
        "also_metric": "e2e_s",
        "also_probe": "decode",
        "also_min_gain": 0.0,
        "also_higher_is_better": False,
    }
    gates = [
        gate("relative_improvement", params, ["B"], ["A"], gid="both"),
        gate(
            "relative_improvement",
            {"metric": "decode_tps", "probe": "decode", "min_gain": 0.0},
            ["C"],
            ["A"],
            gid="other",
        ),
    ]
    results = {g.id: evaluate(g, rows) for g in gates}
    assert results["both"].verdict == Verdict.FAIL, results["both"].reason
    adjusted = family.adjust(results, gates, 0.95)
    assert adjusted["both"].verdict == Verdict.FAIL, adjusted["both"].reason


def test_all_of_with_a_failing_bound_fails_over_the_family() -> None:
    from gates import family

    rows = _guard_campaign(np.random.default_rng(22))
    checks = [
        {"predicate": "relative_improvement", "params": {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1}},
        {"predicate": "threshold", "params": {"metric": "reuse", "probe": "cache-probe", "value": 0.5}, "baseline": []},
    ]
    gates = [
        gate("all_of", {"checks": checks}, ["B"], ["A"], gid="both"),
        gate(
            "relative_improvement",
            {"metric": "decode_tps", "probe": "decode", "min_gain": 0.0},
            ["C"],
            ["A"],
            gid="other",
        ),
    ]
    results = {g.id: evaluate(g, rows) for g in gates}
    assert results["both"].verdict == Verdict.FAIL, results["both"].reason
    adjusted = family.adjust(results, gates, 0.95)
    assert adjusted["both"].verdict == Verdict.FAIL, adjusted["both"].reason


# -- 3. control tests every subject ----------------------------------------------------------------------

CAMPAIGNS = 2000
MODEL = VariationModel(run_sd=0.03, drift_sd=0.005, request_sd=0.01)


def _run_values(
    arms: int, blocks: int, campaigns: int, rng: np.random.Generator, model: VariationModel = MODEL
) -> np.ndarray:
    """Log run values (campaigns x blocks x arms) of identical arms, drawn as
    `gates.calibration.block_frame` draws them (its module doc), in arrays: in each block
    the arms start in a random order, each start draws its own effect, and drift walks
    along the order of the starts. One request per run, so the run's value is its request."""
    order = rng.random((campaigns, blocks, arms)).argsort(axis=-1)  # the arm at each position of a block
    position = order.argsort(axis=-1)  # each arm's position in its block
    drift = rng.normal(0, model.drift_sd, (campaigns, blocks * arms)).cumsum(axis=-1).reshape(campaigns, blocks, arms)
    at = np.take_along_axis(drift, position, axis=-1)
    return (
        at
        + rng.normal(0, model.run_sd, (campaigns, blocks, arms))
        + rng.normal(0, model.request_sd, (campaigns, blocks, arms))
    )


def _drawn_stats(
    names: list[str], blocks: int, campaigns: int, rng: np.random.Generator
) -> list[dict[str, dict[Cell, CellStat]]]:
    """Each drawn campaign as the per-arm cell stats a predicate reads (`stat_from_runs`)."""
    values = 50.0 * np.exp(_run_values(len(names), blocks, campaigns, rng))
    cell = Cell("decode", "decode", 4096, "canonical", "s0")
    out = []
    for campaign in values:
        stats = {}
        for a, arm in enumerate(names):
            runs = [
                Run(block=f"b{b}", item="item", attempt=0, value=float(v), requests=1)
                for b, v in enumerate(campaign[:, a])
            ]
            stats[arm] = {
                cell: stat_from_runs(arm, cell, "decode_tps", "decode_tps", "samples", runs, campaign[:, a], 0.95)
            }
        out.append(stats)
    return out


def _verdicts(
    predicate: Any,
    params: Any,
    g: GateEntry,
    drawn: list[dict[str, dict[Cell, CellStat]]],
    monkeypatch: pytest.MonkeyPatch,
) -> list[Verdict]:
    """The predicate's verdict on each drawn campaign, its stats read as they were drawn."""
    from gates import shared_cells

    verdicts = []
    for stats in drawn:
        monkeypatch.setattr(shared_cells, "arm_stats", lambda *_a, _s=stats, **_k: (_s, None))
        verdicts.append(predicate(pd.DataFrame(), g, params).verdict)
    return verdicts


def test_control_against_identical_subjects_passes_falsely_at_most_five_percent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3 to 5 identical subjects and a control just like them, max_advantage 0: "no control
    beats the best subject" is false at the boundary. Comparing the control with the
    subject whose observed median is best (chosen from the data) passed it 6-8% of the
    time; testing every subject, with Bonferroni over them, holds it under 5%."""
    from gates import control

    rng = np.random.default_rng(31)
    verdicts: list[Verdict] = []
    for n in (3, 4, 5):
        subjects = [f"S{i}" for i in range(n)]
        g = gate("control", {"metric": "decode_tps", "probe": "decode", "max_advantage": 0.0}, subjects, ["K"])
        params = control.ControlParams(metric="decode_tps", probe="decode", max_advantage=0.0)
        drawn = _drawn_stats([*subjects, "K"], 5, CAMPAIGNS // 3 + (n == 3) * (CAMPAIGNS % 3), rng)
        verdicts += _verdicts(control.control, params, g, drawn, monkeypatch)
    assert len(verdicts) == CAMPAIGNS
    false_pass = sum(v == Verdict.PASS for v in verdicts) / len(verdicts)
    false_fail = sum(v == Verdict.FAIL for v in verdicts) / len(verdicts)
    assert false_pass <= 0.05, f"false pass {false_pass:.1%} over {len(verdicts)} campaigns"
    assert false_fail <= 0.05, f"false fail {false_fail:.1%} over {len(verdicts)} campaigns"


def test_best_of_among_identical_arms_is_decided_by_its_fixed_candidate_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """best_of's candidate is the first subject, named before the runs: among 3 to 5
    identical arms it passes (beats every other) and fails (surely beaten by one) each at
    most 5% of the time, however the observed ranking falls."""
    from gates import best_of

    rng = np.random.default_rng(32)
    verdicts: list[Verdict] = []
    for n in (3, 4, 5):
        arms = [f"A{i}" for i in range(n)]
        g = gate("best_of", {"metric": "decode_tps", "probe": "decode"}, arms[:1], arms[1:])
        params = best_of.BestOfParams(metric="decode_tps", probe="decode")
        verdicts += _verdicts(
            best_of.best_of,
            params,
            g,
            _drawn_stats(arms, 5, CAMPAIGNS // 3 + (n == 3) * (CAMPAIGNS % 3), rng),
            monkeypatch,
        )
    false_pass = sum(v == Verdict.PASS for v in verdicts) / len(verdicts)
    false_fail = sum(v == Verdict.FAIL for v in verdicts) / len(verdicts)
    assert false_pass <= 0.05, f"false pass {false_pass:.1%} over {len(verdicts)} campaigns"
    assert false_fail <= 0.05, f"false fail {false_fail:.1%} over {len(verdicts)} campaigns"


# -- 4. goodput over server runs ---------------------------------------------------------------------------

GOODPUT_CAMPAIGNS = 250
SHARE = 0.9  # the gate's min_share, and the true share of requests meeting the target in a typical run


def _goodput_rows(
    rng: np.random.Generator, run_sd: float, request_sd: float, runs: int = 5, requests: int = 30
) -> pd.DataFrame:
    """One arm's ttft_s requests over `runs` server runs: each run shifts every request's
    log latency by a draw from N(0, run_sd) (its start's speed), each request adds
    N(0, request_sd); a run with no shift (the typical run) meets the 1.0 s target with
    exactly SHARE of its requests."""
    mu = -float(stats_norm.ppf(SHARE)) * request_sd  # P(mu + N(0, request_sd) <= log 1.0) = SHARE
    latency = np.exp(mu + rng.normal(0, run_sd, (runs, 1)) + rng.normal(0, request_sd, (runs, requests)))
    n = latency.size
    return pd.DataFrame(
        {
            "arm_id": ["B"] * n,
            "metric": ["ttft_s"] * n,
            "value": latency.ravel(),
            "probe": ["agent-load"] * n,
            "scenario": [f"c{i}-t1" for _ in range(runs) for i in range(requests)],
            "context": [0] * n,
            "kind": ["sample"] * n,
            "trial": [1] * n,
            "repeat": np.repeat(np.arange(runs), requests),
            "mode": ["canonical"] * n,
            "item_key": ["item"] * n,
            "settings_hash": ["s0"] * n,
        }
    )


GOODPUT = {
    "metric": "ttft_s",
    "probe": "agent-load",
    "scenario_pattern": r"c\d+-t[1-9]\d*",
    "target": 1.0,
    "min_share": SHARE,
}


@pytest.mark.parametrize(("run_sd", "request_sd"), [(0.15, 0.4), (0.3, 0.2)])
def test_goodput_at_its_boundary_is_wrong_at_most_five_percent_either_way(run_sd: float, request_sd: float) -> None:
    """Server runs vary (a start's speed shifts all its requests): the requests of all
    runs pooled as independent trials failed a typical-run share of exactly min_share
    15-70% of the time. One share per run, a t interval over them (probit scale, at least
    the exact interval of the pooled requests), is wrong within 5% each way."""
    from gates import goodput

    rng = np.random.default_rng(41 + int(run_sd * 100))
    g = gate("goodput", GOODPUT, ["B"])
    params = goodput.GoodputParams.model_validate(GOODPUT)
    verdicts = [
        goodput.goodput(_goodput_rows(rng, run_sd, request_sd), g, params).verdict for _ in range(GOODPUT_CAMPAIGNS)
    ]
    false_pass = sum(v == Verdict.PASS for v in verdicts) / len(verdicts)
    false_fail = sum(v == Verdict.FAIL for v in verdicts) / len(verdicts)
    assert false_pass <= 0.05, f"false pass {false_pass:.1%} over {len(verdicts)} campaigns"
    assert false_fail <= 0.05, f"false fail {false_fail:.1%} over {len(verdicts)} campaigns"


# -- 5. never pool rows measured under other settings ------------------------------------------------------


def _trials(arm: str, outcomes: np.ndarray, settings: str, first: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "arm_id": arm,
            "metric": "tool_loop_pass",
            "value": float(v),
            "probe": "tool-loop",
            "scenario": "user:u1",
            "context": 0,
            "kind": "sample",
            "trial": first + i,
            "repeat": 0,
            "mode": "canonical",
            "item_key": "item",
            "settings_hash": settings,
        }
        for i, v in enumerate(outcomes)
    ]


def test_majority_judges_each_setting_on_its_own() -> None:
    """A tool loop right 20% of the time under one setting and always under another: the
    pooled trials would pass the majority; each setting is its own cell, and one fails."""
    rng = np.random.default_rng(51)
    rows = frame(
        _trials("R", (rng.random(20) < 0.2).astype(float), "short-ctx"),
        _trials("R", (rng.random(40) < 1.0).astype(float), "long-ctx", first=20),
    )
    result = evaluate(gate("majority", {}, ["R"]), rows)
    assert result.verdict == Verdict.FAIL, result.reason
    assert len(result.evidence["passes"]) == 2, result.evidence["passes"]


def _counters(arm: str, per_run: list[tuple[float, float]], settings: str) -> list[dict[str, Any]]:
    """The server's speculation counters, (drafted, accepted) tokens per run (block)."""
    return [
        {
            "arm_id": arm,
            "metric": metric,
            "value": value,
            "probe": "decode",
            "scenario": "decode",
            "context": 4096,
            "kind": "summary",
            "trial": 0,
            "repeat": block,
            "mode": "canonical",
            "item_key": "item",
            "settings_hash": settings,
        }
        for block, (drafted, accepted) in enumerate(per_run)
        for metric, value in (("draft_tokens", drafted), ("accepted_tokens", accepted))
    ]


def test_acceptance_judges_each_setting_on_its_own() -> None:
    """Draft acceptance 0.3 under one setting and 0.9 under another, in the same server
    runs: pooled per run it reads 0.75 and passes 0.6; each setting is its own cell."""
    rng = np.random.default_rng(52)
    low = [(100.0, float(rng.binomial(100, 0.3))) for _ in range(4)]
    high = [(300.0, float(rng.binomial(300, 0.9))) for _ in range(4)]
    result = evaluate(
        gate("acceptance_rate", {"min_rate": 0.6}, ["L"]), frame(_counters("L", low, "k2"), _counters("L", high, "k8"))
    )
    assert result.verdict == Verdict.FAIL, result.reason
    assert len(result.evidence["cells"]) == 2, result.evidence["cells"]


# -- 6. bounds join the family -------------------------------------------------------------------------------


def test_bounds_at_their_value_rarely_pass_any_of_ten_gates() -> None:
    """Ten threshold gates whose arm's true value sits exactly on the bound: alone each
    passes about 2.5% of the time, so one of ten about 22% of the time; as members of the
    campaign's family (Holm), about 2.5%."""
    from gates import family

    rng = np.random.default_rng(61)
    gates = [
        gate("threshold", {"metric": "reuse", "probe": "cache-probe", "op": ">=", "value": 0.5}, [f"A{i}"], gid=f"g{i}")
        for i in range(10)
    ]
    any_pass = 0
    trials = 20
    for _ in range(trials):
        results = {
            g.id: evaluate(g, frame(per_block(g.subjects[0], "reuse", list(0.5 * np.exp(rng.normal(0, 0.05, 5))))))
            for g in gates
        }
        any_pass += any(r.verdict == Verdict.PASS for r in family.adjust(results, gates, 0.95).values())
    assert any_pass / trials <= 0.10, any_pass


@pytest.mark.parametrize(
    ("predicate", "params", "rows"),
    [
        (
            "threshold",
            {"metric": "reuse", "probe": "cache-probe", "value": 0.5},
            lambda: per_block("B", "reuse", [0.9, 0.92, 0.91]),
        ),
        (
            "holds_at_ceiling",
            {"metric": "reuse", "probe": "cache-probe", "context": 4096, "min_value": 0.5},
            lambda: per_block("B", "reuse", [0.9, 0.92, 0.91]),
        ),
        ("majority", {}, lambda: _trials("B", np.ones(20), "s0")),
        (
            "acceptance_rate",
            {"min_rate": 0.6},
            lambda: _counters("B", [(100.0, 90.0), (100.0, 92.0), (100.0, 91.0)], "s0"),
        ),
        (
            "goodput",
            GOODPUT,
            lambda: _goodput_rows(np.random.default_rng(62), 0.05, 0.1).assign(value=0.5).to_dict("records"),
        ),
    ],
)
def test_each_bound_carries_the_p_values_of_its_own_test(predicate: str, params: dict[str, Any], rows: Any) -> None:
    """A bound that passes carries a p_pass within alpha and a p_fail of 1 or near it, so
    that Holm over the family reads it as it reads a comparison."""
    result = evaluate(gate(predicate, params, ["B"]), frame(rows()))
    assert result.verdict == Verdict.PASS, result.reason
    assert result.evidence["p_pass"] <= 0.025 and result.evidence["p_fail"] > 0.5, result.evidence


def test_the_planned_family_counts_the_bounds_that_will_join_it() -> None:
    """An item that stops once its gate is settled needs its p within alpha / (the planned
    family): a bound that will join the family counts, a characterising control does not."""
    from gates import family

    gates = [
        gate("relative_improvement", {"metric": "decode_tps", "min_gain": 0.1}, ["B"], ["A"], gid="gain"),
        gate("threshold", {"metric": "reuse", "value": 0.5}, ["B"], gid="bound"),
        gate("majority", {}, ["B"], gid="tools"),
        gate("control", {"metric": "decode_tps", "role": "control"}, ["B"], ["A"], gid="shown"),
    ]
    assert [g.id for g in family.planned_members(gates)] == ["gain", "bound", "tools"]
    # a gate without a baseline outside the built-in bounds (best_of among its subjects, a
    # plugin's claim) may carry p-values too: the upper bound counts it
    ranked = gate("best_of", {"metric": "decode_tps"}, ["B", "A"], gid="ranked")
    assert [g.id for g in family.planned_members([*gates, ranked])] == ["gain", "bound", "tools", "ranked"]


# -- 7. the error limit decided by the exact interval ---------------------------------------------------------


def _subject_at(failed: int, requests: int) -> tuple[CellStat, CellStat]:
    """A subject far ahead of its baseline (+50% in every block, with spread), whose arm
    failed `failed` of `requests` requests; the baseline made none fail."""
    cell = Cell("decode", "decode", 4096, "canonical", "s0")

    def runs(values: list[float]) -> list[Run]:
        return [Run(block=f"b{i}", item="item", attempt=0, value=v, requests=10) for i, v in enumerate(values)]

    base = [50.0, 51.0, 49.0, 50.5, 49.5]
    subject = stat_from_runs(
        "S",
        cell,
        "decode_tps",
        "decode_tps",
        "samples",
        runs([b * r for b, r in zip(base, [1.5, 1.52, 1.49, 1.51, 1.5])]),
        [],
        0.95,
    )
    baseline = stat_from_runs("B", cell, "decode_tps", "decode_tps", "samples", runs(base), [], 0.95)
    subject.arm_errors = ArmErrors("S", requests, failed, {"http_503": failed} if failed else {})
    baseline.arm_errors = ArmErrors("B", requests, 0, {})
    return subject, baseline


def _error_verdicts(rate: float, requests: int, draws: int, rng: np.random.Generator) -> list[Verdict]:
    from gates import compare

    rigor = Rigor()
    return [
        compare.compare_cells(*_subject_at(int(k), requests), True, 0.1, rigor).verdict
        for k in rng.binomial(requests, rate, draws)
    ]


def test_a_subject_within_the_error_limit_is_rarely_failed_by_it() -> None:
    """At 30 requests a subject failing 4% of them (limit 5%) was failed by its point rate
    34% of the time (2 failures are 6.7%). It fails only when the exact interval shows the
    rate surely over the limit: at most 2.5% at the limit itself, less below it."""
    rng = np.random.default_rng(71)
    for rate in (0.04, 0.05):
        verdicts = _error_verdicts(rate, 30, 2000, rng)
        false_fail = sum(v == Verdict.FAIL for v in verdicts) / len(verdicts)
        assert false_fail <= 0.05 if rate == 0.05 else false_fail <= 0.025, f"{rate:.0%}: false fail {false_fail:.1%}"


def test_a_subject_surely_over_the_error_limit_fails_and_one_not_surely_over_is_undecided() -> None:
    """A subject failing 25% of 30 requests is failed 9 times in 10 (5 failures leave no
    doubt); 2 failures in 30 are over 5% at the point, not surely: inconclusive, never a fail."""
    rng = np.random.default_rng(72)
    verdicts = _error_verdicts(0.25, 30, 500, rng)
    assert sum(v == Verdict.FAIL for v in verdicts) / len(verdicts) >= 0.85
    from gates import compare

    cmp = compare.compare_cells(*_subject_at(2, 30), True, 0.1, Rigor())
    assert cmp.verdict == Verdict.INCONCLUSIVE, cmp.notes
    assert (
        "S failed 2/30 requests (0.0667 [0.00818, 0.221] 95% CI): http_503 2: over 0.05, but not surely: cannot decide"
        in cmp.notes
    ), cmp.notes
    surely = compare.compare_cells(*_subject_at(8, 30), True, 0.1, Rigor())
    assert surely.verdict == Verdict.FAIL and not surely.statistical, surely.notes
    assert "S failed 8/30 requests (0.267 [0.123, 0.459] 95% CI): http_503 8 > 0.05: cannot pass" in surely.notes, (
        surely.notes
    )
