"""`context_change`: one arm against itself at another context ("8K decodes within 10% of
4K"), over runs, paired by block. Generated runs: each block one server start that
measured both contexts (each its own probe settings hash, as stored); the start's own
speed moves both alike (8% between restarts), so pairing cancels it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates.engine import evaluate

BLOCKS = 5


def runs(seed: int, slowdown: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for block in range(BLOCKS):
        start = 30.0 * float(np.exp(rng.normal(0.0, 0.08)))  # this server start's speed, both contexts
        for context, factor in ((4096, 1.0), (8192, 1.0 - slowdown)):
            for trial in range(3):
                value = start * factor * float(np.exp(rng.normal(0.0, 0.01)))
                rows.append(
                    {
                        "arm_id": "A",
                        "probe": "decode",
                        "scenario": "decode",
                        "context": context,
                        "kind": "sample",
                        "trial": trial,
                        "repeat": block,
                        "block_id": f"b{block}",
                        "settings_hash": f"probe-settings-{context}",
                        "mode": "canonical",
                        "item_key": "ctx",
                        "metric": "decode_tps",
                        "value": value,
                        "unit": "tok/s",
                    }
                )
    return pd.DataFrame(rows)


def gate(min_gain: float) -> GateEntry:
    return GateEntry(
        id="ctx",
        predicate="context_change",
        subjects=["A"],
        params={
            "metric": "decode_tps",
            "probe": "decode",
            "context": 8192,
            "baseline_context": 4096,
            "min_gain": min_gain,
        },
    )


@pytest.mark.parametrize(("slowdown", "expected"), [(0.03, Verdict.PASS), (0.25, Verdict.FAIL)])
def test_8k_within_10_percent_of_4k_is_decided_over_runs_paired_by_block(slowdown: float, expected: Verdict) -> None:
    result = evaluate(gate(-0.10), runs(1, slowdown))
    assert result.verdict == expected, result.reason
    (c,) = result.evidence["comparisons"]
    assert c["subject"] == "A@8K" and c["baseline"] == "A@4K" and c["pairs"] == BLOCKS  # each start its own pair
    assert c["change_low"] < -slowdown < c["change_high"]  # the interval holds the true change
    assert "paired over 5 blocks" in result.reason


def test_the_same_context_twice_or_a_baseline_arm_is_refused() -> None:
    same = GateEntry(
        id="ctx",
        predicate="context_change",
        subjects=["A"],
        params={"metric": "decode_tps", "context": 4096, "baseline_context": 4096, "min_gain": 0.0},
    )
    assert evaluate(same, runs(2, 0.0)).verdict == Verdict.PENDING
    with_base = GateEntry(
        id="ctx",
        predicate="context_change",
        subjects=["A"],
        baseline=["B"],
        params={"metric": "decode_tps", "context": 8192, "baseline_context": 4096, "min_gain": 0.0},
    )
    assert "leave baseline empty" in evaluate(with_base, runs(2, 0.0)).reason
    missing = evaluate(
        GateEntry(
            id="ctx",
            predicate="context_change",
            subjects=["A"],
            params={"metric": "decode_tps", "context": 16384, "baseline_context": 4096, "min_gain": 0.0},
        ),
        runs(2, 0.0),
    )
    assert missing.verdict == Verdict.PENDING
