"""Gates on energy (per block, like every metric) and the rules that guard them
(`gates.energy_validity`): arms on other devices are refused; a verdict resting on
throttled blocks, or on blocks shared with another process, says so."""

from __future__ import annotations

import numpy as np
import pandas as pd

from campaign.core.schema import GateEntry
from campaign.core.states import Verdict
from gates.engine import evaluate

GATE = GateEntry(
    id="energy",
    predicate="relative_improvement",
    params={"metric": "energy_per_output_token_j", "min_gain": 0.10, "probe": "decode"},
    subjects=["B"],
    baseline=["A"],
)
H200 = "NVIDIA H200 (nvml, 700 W limit)"


def telemetry(
    arm: str,
    per_token: list[float],
    device: str = H200,
    throttled: dict[int, float] | None = None,
    others: dict[int, int] | None = None,
) -> list[dict]:
    """An arm's telemetry rows, one set per block, as the probe task stores them."""
    out = []
    for block, value in enumerate(per_token):
        for metric, v, source in (
            ("energy_per_output_token_j", value, "counter"),
            ("accel_power_limit_w", 700.0, device),
            (
                "clock_throttled_share",
                (throttled or {}).get(block, 0.0),
                "sw_power_cap" if (throttled or {}).get(block) else "",
            ),
            ("accel_other_processes", float((others or {}).get(block, 0)), ""),
        ):
            out.append(
                {
                    "arm_id": arm,
                    "mode": "canonical",
                    "metric": metric,
                    "scenario": "telemetry",
                    "value": v,
                    "source": source,
                    "kind": "summary",
                    "probe": "decode",
                    "context": 0,
                    "trial": 0,
                    "repeat": block,
                    "item_key": "item",
                }
            )
    return out


def test_four_slots_cut_energy_per_token_with_an_interval_over_blocks() -> None:
    rng = np.random.default_rng(1)
    a = list(1.0 * np.exp(rng.normal(0, 0.03, 5)))
    b = list(0.59 * np.exp(rng.normal(0, 0.03, 5)))
    out = evaluate(GATE, pd.DataFrame(telemetry("A", a) + telemetry("B", b)))
    assert out.verdict == Verdict.PASS, out.reason
    assert out.reason.startswith("energy_per_output_token_j: B ") and "95% CI, paired over 5 blocks" in out.reason
    assert "-4" in out.reason  # about -41%: lower is better, the gain is a cut


def test_arms_on_different_devices_are_refused_saying_which() -> None:
    a = telemetry("A", [1.0, 1.02, 0.98, 1.01])
    b = telemetry("B", [0.5, 0.51, 0.49, 0.5], device="NVIDIA H100 (nvml, 700 W limit)")
    out = evaluate(GATE, pd.DataFrame(a + b))
    assert out.verdict == Verdict.INCONCLUSIVE
    assert "different devices" in out.reason and "H100" in out.reason and "H200" in out.reason
    same = evaluate(GATE, pd.DataFrame(a + telemetry("B", [0.5, 0.51, 0.49, 0.5])))
    assert same.verdict == Verdict.PASS and "different devices" not in same.reason


def test_a_verdict_resting_on_throttled_or_shared_blocks_says_so() -> None:
    a = telemetry("A", [1.0, 1.02, 0.98, 1.01], others={2: 1})
    b = telemetry("B", [0.5, 0.51, 0.49, 0.5], throttled={1: 0.4, 3: 0.1})
    out = evaluate(GATE, pd.DataFrame(a + b))
    assert out.verdict == Verdict.PASS
    assert "B ran with a clock held down (sw_power_cap) in 2 of 4 blocks" in out.reason, out.reason
    assert "A ran beside another process on the device in 1 of 4 blocks" in out.reason
    clean = evaluate(
        GATE, pd.DataFrame(telemetry("A", [1.0, 1.02, 0.98, 1.01]) + telemetry("B", [0.5, 0.51, 0.49, 0.5]))
    )
    assert "clock held down" not in clean.reason and "another process" not in clean.reason
