"""What a design can detect (`gates.power`): the gain it names is passed 80% of the time,
and `campaign check` says it before anything runs."""

from __future__ import annotations

import math
import tomllib

import numpy as np

from gates import blockstats
from gates.power import detectable_gain, detectable_margin


def _pass_rate(blocks: int, margin: float, run_sd: float, campaigns: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    bound = math.log(1.10)
    passed = 0
    for _ in range(campaigns):
        a = np.exp(bound + margin + rng.normal(0, run_sd, blocks))
        b = np.exp(rng.normal(0, run_sd, blocks))
        passed += blockstats.paired(list(a), list(b)).p_above(bound) <= 0.025
    return passed / campaigns


def test_the_detectable_gain_is_passed_eighty_percent_of_the_time() -> None:
    for blocks in (3, 5):
        margin = detectable_margin(blocks, 1, 0.95, 0.03)
        rate = _pass_rate(blocks, margin, 0.03, 3000, blocks)
        assert abs(rate - 0.8) < 0.03, (blocks, rate)
    assert detectable_margin(1, 1, 0.95, 0.03) == math.inf
    assert detectable_margin(3, 1, 0.95, 0.03, sequential=True) > detectable_margin(3, 1, 0.95, 0.03)


def test_three_blocks_cannot_settle_a_ten_percent_gate_on_fifteen() -> None:
    gain = detectable_gain(0.10, detectable_margin(3, 1, 0.95, 0.03))
    assert gain > 0.20  # a true +15% is far from what three blocks detect
    assert detectable_gain(0.10, detectable_margin(8, 1, 0.95, 0.03)) < 0.16
    assert math.isclose(detectable_gain(0.10, 0.0, higher_is_better=False), -0.10)


def test_campaign_check_prints_what_the_design_detects() -> None:
    from campaign.core.loader import parse_campaign
    from cli.plan import plan_lines
    from tests.campaigns import arm, campaign_file, gate
    from tests.campaigns import item as queue_item

    text = campaign_file(
        "p",
        arms=[arm("A"), arm("B")],
        gates=[
            gate(
                "g", "relative_improvement", {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1}, ["A"], ["B"]
            )
        ],
        queue=[queue_item("k", ["A", "B"], ["decode"], gate="g")],
    )
    spec = parse_campaign(tomllib.loads(text))
    line = next(ln for ln in plan_lines(spec) if ln.startswith("g: "))
    assert "over 3 blocks detects a true +26% or more (needs +10%)" in line, line
