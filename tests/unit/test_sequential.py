"""Adding blocks until a verdict is settled: the confidence sequence holds its error rate
however often it is looked at, where re-testing a fixed-design interval after every block
does not; items say their budget in the file, and the budget reaches the plan.

The error-rate tests draw thousands of campaigns of per-block log ratios sitting exactly
on a gate's boundary (where a pass and a fail are both false), look after every block
from 3 to 10 and stop at the first decision, through `gates.blockstats` (what every
comparative gate decides by). They fail when the sequential method is replaced by the
fixed one: on the same draws, naive re-testing is wrong several times as often."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from campaign.core.schema import CampaignFileError
from gates import blockstats
from gates.calibration import Design, VariationModel, gates_for, run_adaptive
from tests.campaigns import arm, campaign_file, gate, item, sim

ALPHA = 0.025  # each side of a 95% interval
BOUND = math.log(1.10)  # a +10% gate, on the log ratio
SD = 0.05  # between-block spread of the log ratio (the calibration model's run_sd 0.03, both arms, and drift)


def _stop(diffs: np.ndarray, sequential: bool, least: int = 3) -> str:
    """Look after every block from `least` on; the first decision, or 'open'."""
    for n in range(least, len(diffs) + 1):
        est = blockstats.paired(list(np.exp(diffs[:n])), [1.0] * n, sequential)
        if est.p_above(BOUND) <= ALPHA:
            return "pass"
        if est.p_below(BOUND) <= ALPHA:
            return "fail"
    return "open"


def _rates(sequential: bool, campaigns: int = 2000, most: int = 10, truth: float = BOUND) -> tuple[float, float]:
    rng = np.random.default_rng(11)
    draws = rng.normal(truth, SD, (campaigns, most))
    outcomes = [_stop(d, sequential) for d in draws]
    return outcomes.count("pass") / campaigns, outcomes.count("fail") / campaigns


def test_the_confidence_sequence_holds_its_error_rate_under_stopping_at_the_first_verdict() -> None:
    false_pass, false_fail = _rates(sequential=True)
    assert false_pass <= ALPHA and false_fail <= ALPHA, (false_pass, false_fail)


def test_re_testing_the_fixed_interval_after_every_block_does_not() -> None:
    """The same looks with the fixed-design t interval: what the sequence is there to
    prevent. If this stops failing, the test above proves nothing."""
    naive_pass, naive_fail = _rates(sequential=False)
    seq_pass, seq_fail = _rates(sequential=True)
    assert naive_pass > 2 * ALPHA and naive_fail > 2 * ALPHA, (naive_pass, naive_fail)
    assert naive_pass > 3 * seq_pass and naive_fail > 3 * seq_fail


def test_a_large_gain_stops_within_a_few_blocks() -> None:
    """+50% against a +10% gate passes every time, and long before a budget of 10."""
    rng = np.random.default_rng(5)
    used = []
    for d in rng.normal(math.log(1.5), SD, (300, 10)):
        for n in range(3, 11):
            if blockstats.paired(list(np.exp(d[:n])), [1.0] * n, True).p_above(BOUND) <= ALPHA:
                used.append(n)
                break
    assert len(used) == 300 and np.mean(used) <= 5


def test_the_sequence_and_its_p_values_decide_alike() -> None:
    """A mean on the edge of the 95% sequence has p = alpha, as a fixed interval's edge
    has; the sequence is wider than the fixed interval at every block count; and with too
    few blocks no spread, however small, decides anything."""
    for n in (4, 5, 8, 12, 20):
        half = blockstats.sequential_t(n, n - 1, ALPHA)
        assert math.isclose(blockstats.one_sided_factor(half, n, n - 1), 1 / ALPHA, rel_tol=1e-6)
        diffs = [BOUND + half * 0.01 / math.sqrt(n) + 0.01 * z for z in _unit_spread(n)]
        est = blockstats.paired([math.exp(x) for x in diffs], [1.0] * n, sequential=True)
        assert math.isclose(est.p_above(BOUND), ALPHA, rel_tol=1e-5)
        lo, _ = est.interval(0.95)
        assert math.isclose(lo, BOUND, abs_tol=1e-9)
        fixed = blockstats.paired([math.exp(x) for x in diffs], [1.0] * n)
        assert fixed.interval(0.95)[0] > lo
    tight = blockstats.paired([1.5, 1.5001], [1.0, 1.0], sequential=True)
    assert tight.interval(0.95) == (-math.inf, math.inf) and tight.p_above(BOUND) > ALPHA
    assert "confidence sequence" in tight.method


def _unit_spread(n: int) -> list[float]:
    """n values of mean 0 and sample standard deviation 1."""
    xs = np.arange(n, dtype=float)
    xs -= xs.mean()
    return list(xs / xs.std(ddof=1))


def test_the_two_sample_sequence_pools_the_spread() -> None:
    est = blockstats.unpaired([10.0, 11.0, 12.0, 10.5], [9.0, 9.5, 10.0], sequential=True)
    assert est.sequential and est.df == 5 and math.isclose(est.n_eff, 12 / 7)
    assert "pooled" in est.method and "confidence sequence" in est.method


def test_gates_read_sequences_when_asked_and_stop_early_through_the_real_gate_code() -> None:
    """Through `gates.engine.evaluate`, as the flow's stopping check does: a true +50%
    passes a +10% gate in a few blocks of a budget of 8."""
    gate_entry, _ = gates_for(Design())["relative_improvement(+10%)"]
    tally = run_adaptive(
        gate_entry, Design(blocks=8, gains={"A": 1.5}), VariationModel(), 6, seed=1, least=3, sequential=True
    )
    assert tally.passed == 6 and tally.mean_blocks < 8


# -- the file: budgets, their checks and their plan --------------------------------------------


def _file(tmp_path: Path, queue: list[dict], **head: object) -> Path:
    text = campaign_file(
        "seq",
        runtimes=[sim()],
        arms=[arm("A"), arm("B")],
        queue=queue,
        gates=[
            gate(
                "g", "relative_improvement", {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1}, ["A"], ["B"]
            )
        ],
        **head,
    )
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def _load(path: Path):  # type: ignore[no-untyped-def]
    from flows.resolve import load_campaign

    return load_campaign(path)


def test_an_item_sets_its_budget_and_the_campaign_a_default(tmp_path: Path) -> None:
    spec = _load(_file(tmp_path, [item("q", ["A", "B"], ["decode"], gate="g", max_blocks=8)]))
    budget = spec.blocks(spec.queue[0])
    assert (budget.least, budget.most, budget.adaptive) == (3, 8, True)
    assert spec.adaptive_gates() == {"g"}
    spec = _load(
        _file(
            tmp_path,
            [item("q", ["A", "B"], ["decode"], gate="g"), item("r", ["A", "B"], ["decode"], repeats=4)],
            max_blocks=12,
            min_blocks=4,
        )
    )
    first, second = spec.blocks(spec.queue[0]), spec.blocks(spec.queue[1])
    assert (first.least, first.most, first.adaptive) == (4, 12, True)
    assert (second.least, second.most, second.adaptive) == (4, 4, False)  # no gate, its own repeats: fixed


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"gate": "g", "max_blocks": 8, "repeats": 4}, "set one"),
        ({"max_blocks": 8}, "max_blocks needs a gate"),
        ({"gate": "g", "max_blocks": 4, "min_blocks": 5}, "more than max_blocks"),
        ({"gate": "g", "min_blocks": 4}, "min_blocks needs max_blocks"),
    ],
)
def test_a_budget_that_cannot_work_is_refused_naming_the_field(tmp_path: Path, fields: dict, said: str) -> None:
    with pytest.raises(CampaignFileError) as err:
        _load(_file(tmp_path, [item("q", ["A", "B"], ["decode"], **fields)]))
    assert "queue[0]" in str(err.value) and said in str(err.value)


def test_the_plan_and_the_design_warning_speak_of_the_budget(tmp_path: Path) -> None:
    from cli.plan import plan_lines
    from flows.design_warnings import power_warnings

    spec = _load(_file(tmp_path, [item("q", ["A", "B"], ["decode"], gate="g", max_blocks=8)]))
    lines = plan_lines(spec)
    assert "3 to 8 blocks (until g is settled), 6-16 server starts" in lines[0]
    assert "6 to 16 server starts in all" in lines[-1]
    assert power_warnings(spec) == []  # 8 blocks: the sequence's bar is under 3 spreads
    # four blocks: two planned looks, each at alpha / 2, a bar of 2.1 spreads (the sequence's was past 3)
    assert power_warnings(_load(_file(tmp_path, [item("q", ["A", "B"], ["decode"], gate="g", max_blocks=4)]))) == []
    few = _load(_file(tmp_path, [item("q", ["A", "B"], ["decode"], gate="g", max_blocks=3)]))
    (warning,) = power_warnings(few)
    assert "at most 3 blocks (max_blocks)" in warning and "max_blocks" in warning.split(";")[-1]


@pytest.mark.parametrize("sequential", [False, True])
def test_the_blocks_a_gate_would_need_are_the_blocks_that_decide_at_this_gain_and_spread(sequential: bool) -> None:
    """An open comparison says how many blocks would decide it if the gain and the spread
    stayed: data with that gain and spread decide at that many blocks and not one fewer."""
    gain, spread = BOUND + 0.03, 0.04

    def est(n: int) -> blockstats.Estimate:
        diffs = [gain + spread * z for z in _unit_spread(n)]
        return blockstats.paired([math.exp(x) for x in diffs], [1.0] * n, sequential)

    need = blockstats.blocks_to_decide(est(4), BOUND, ALPHA)
    assert need is not None and 4 < need <= blockstats.MOST_BLOCKS
    assert est(need).p_above(BOUND) <= ALPHA < est(need - 1).p_above(BOUND)
    assert blockstats.blocks_to_decide(est(4), gain, ALPHA) is None  # on the bound: no number of blocks decides
