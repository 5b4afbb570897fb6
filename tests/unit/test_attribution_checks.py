"""Attribution refuses a credit its own evidence does not support: a mechanism whose counters
say it never engaged (speculation whose drafts were never accepted), and an ablation that
ran somewhere else than its subject (another host, machine or device) or served another
model. Frames are built here, run values drawn from a seeded generator: B wins against A
by about +100% decode_tps; its ablation B-nospec loses that win."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from campaign.core.schema import GateEntry
from campaign.core.states import AttemptState, ProbeRunState, Verdict
from campaign.store.store import Store
from campaign.store.tables import AttemptRow, CampaignRow, MeasurementRow, ProbeRunRow
from gates.engine import evaluate

BLOCKS = 5
PLACED = {
    "host": "host-a",
    "machine": "m1",
    "device_lease": "device-host-a-gpu0/7f1c",
    "served_model": "qwen3-8b",
    "fingerprint": "5e0c2a91d4b7f3aa",
}


def tps(rng: np.random.Generator, centre: float) -> list[float]:
    """One decode_tps per server run (block): lognormal around `centre`, 3% between restarts."""
    return [round(float(v), 3) for v in centre * np.exp(rng.normal(0.0, 0.03, BLOCKS))]


def arm_rows(
    arm: str, values: list[float], drafted: int | None = None, accepted: int = 0, **attempt: Any
) -> list[dict[str, Any]]:
    """The arm's decode runs, block i its i-th value, and its draft counters split over the
    blocks (none without `drafted`); each attempt column (host, served_model, ...) is one
    value or one per block."""
    rows = []
    for i, value in enumerate(values):
        placed = {k: (v[i] if isinstance(v, list) else v) for k, v in {**PLACED, **attempt}.items()}
        where = {
            "arm_id": arm,
            "probe": "decode",
            "scenario": "decode",
            "context": 4096,
            "kind": "sample",
            "trial": 0,
            "repeat": i,
            "mode": "canonical",
            "item_key": "item",
            **placed,
        }
        rows.append({**where, "metric": "decode_tps", "value": value, "unit": "tok/s"})
        if drafted is None:
            continue

        def share(total: int, i: int = i) -> int:
            return total // BLOCKS + (1 if i < total % BLOCKS else 0)

        rows.append({**where, "metric": "draft_tokens", "value": float(share(drafted)), "unit": "tokens"})
        rows.append({**where, "metric": "accepted_tokens", "value": float(share(accepted)), "unit": "tokens"})
    return rows


def spec_gate(ablation: str = "B-nospec", baseline: tuple[str, ...] = ("A", "B-nospec")) -> GateEntry:
    params = {
        "claim": "speculation",
        "ablation": ablation,
        "metric": "decode_tps",
        "probe": "decode",
        "scenario": "decode",
        "lower_is_better": False,
        "min_gain": 0.5,
        "counter_scenario": "decode",
    }
    return GateEntry(id="credit-spec", predicate="attribution", params=params, subjects=["B"], baseline=list(baseline))


def campaign(
    seed: int,
    *,
    drafted: int = 1860,
    accepted: int = 1512,
    ablation: dict[str, Any] | None = None,
    subject: dict[str, Any] | None = None,
    ablation_drafts: tuple[int, int] = (0, 0),
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        [
            *arm_rows("B", tps(rng, 60.0), drafted, accepted, **(subject or {})),
            *arm_rows(
                "A",
                tps(rng, 30.0),
                host="host-c",
                machine="m3",
                served_model="llama-3-8b",
                fingerprint="0badc0de00000000",
            ),
            *arm_rows(
                "B-nospec",
                tps(rng, 30.5),
                *ablation_drafts,
                **{"device_lease": "device-host-a-gpu0/91ab", **(ablation or {})},
            ),
        ]
    )


def test_the_same_everything_keeps_the_credit_and_says_the_drafts_were_accepted() -> None:
    """The ablation shares B's host, machine, device (another lease of it) and model: the
    credit stands, with the draft counters that allowed it."""
    result = evaluate(spec_gate(), campaign(11))
    assert result.verdict == Verdict.PASS, result.reason
    assert "switching the speculation off costs the win: the win was the speculation" in result.reason
    assert "draft tokens accepted: B 1,512 of 1,860, B-nospec 0 of 0" in result.reason
    assert result.evidence["drafts"]["B"] == {"drafted": 1860.0, "accepted": 1512.0}
    # rows that leave placement empty (older rows, the simulator) are not a difference
    blank = {"host": "", "machine": "", "device_lease": "", "served_model": "", "fingerprint": ""}
    assert evaluate(spec_gate(), campaign(11, ablation=blank)).verdict == Verdict.PASS
    missing = campaign(11)
    missing.loc[missing["arm_id"] == "B-nospec", ["host", "machine"]] = None  # a frame joined from rows without them
    assert evaluate(spec_gate(), missing).verdict == Verdict.PASS
    # the sole case: the ablation is the only baseline arm, the win is what switching off costs
    sole = evaluate(spec_gate(baseline=("B-nospec",)), campaign(11))
    assert sole.verdict == Verdict.PASS and "the win was the speculation" in sole.reason


@pytest.mark.parametrize("baseline", [("A", "B-nospec"), ("B-nospec",)])
def test_speculation_whose_drafts_were_never_accepted_is_not_credited(baseline: tuple[str, ...]) -> None:
    """The audit: speculation credited although B accepted 0 of 1,860 drafted tokens. The
    win is real and the ablation loses it, but the mechanism did no work: the difference
    came from elsewhere."""
    result = evaluate(spec_gate(baseline=baseline), campaign(12, accepted=0))
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert "B accepted 0 of 1,860 drafted tokens: speculation never engaged" in result.reason
    # no counters at all is no evidence that it engaged either
    silent = evaluate(spec_gate(baseline=baseline), campaign(12, drafted=0, accepted=0).query("metric == 'decode_tps'"))
    assert silent.verdict == Verdict.INCONCLUSIVE and "B reports no draft counters (decode/decode)" in silent.reason
    # without an ablation the counters argue by elimination, and say what they show
    alone = GateEntry(
        id="spec",
        predicate="attribution",
        params={k: v for k, v in spec_gate().params.items() if k != "ablation"},
        subjects=["B"],
        baseline=["A"],
    )
    eliminated = evaluate(alone, campaign(12, accepted=0))
    assert eliminated.verdict == Verdict.INCONCLUSIVE
    assert "speculation accepted 0 of 1,860 drafted tokens, so it did no work on B" in eliminated.reason


def test_an_ablation_that_still_accepted_drafts_did_not_switch_speculation_off() -> None:
    result = evaluate(spec_gate(), campaign(13, ablation_drafts=(1700, 1100)))
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert "B-nospec accepted 1,100 of 1,700 drafted tokens: speculation was not off in the ablation" in result.reason


def test_an_ablation_on_another_host_is_refused() -> None:
    """The audit: the ablation ran on a host 2.7x slower, so it "lost the win" by its host."""
    result = evaluate(
        spec_gate(), campaign(14, ablation={"host": "host-b", "machine": "m2", "device_lease": "device-host-b-gpu0/33"})
    )
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert (
        "B ran on host-a, its ablation B-nospec on host-b; B ran on machine m1, its ablation B-nospec on machine m2; "
        "B held device device-host-a-gpu0, its ablation B-nospec device device-host-b-gpu0: "
        "an ablation must share the subject's placement"
    ) in result.reason
    assert result.evidence["placement"]["host"] == {"B": ["host-a"], "B-nospec": ["host-b"]}
    # the same host, another device on it
    other_gpu = evaluate(spec_gate(), campaign(14, ablation={"device_lease": "device-host-a-gpu1/34"}))
    assert other_gpu.verdict == Verdict.INCONCLUSIVE
    assert "B held device device-host-a-gpu0, its ablation B-nospec device device-host-a-gpu1" in other_gpu.reason


def test_an_ablation_serving_another_model_is_refused() -> None:
    result = evaluate(spec_gate(), campaign(15, ablation={"served_model": "qwen3-8b-awq"}))
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert (
        "B served qwen3-8b, its ablation B-nospec qwen3-8b-awq: an ablation must serve the subject's model"
        in result.reason
    )
    # the same name, other weights (its greedy fingerprint differs); the sole case too
    result = evaluate(spec_gate(baseline=("B-nospec",)), campaign(15, ablation={"fingerprint": "aaaaaaaaaaaaaaaa"}))
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert "B answered with fingerprint 5e0c2a91d4b7f3aa, its ablation B-nospec with aaaaaaaaaaaaaaaa" in result.reason


def test_hosts_swapped_within_blocks_are_refused() -> None:
    """Both arms ran on host-a and host-b, but never on the same one in a block: the paired
    ratio of each block is a host ratio too."""
    hosts = ["host-a", "host-b", "host-a", "host-b", "host-a"]
    swapped = ["host-b", "host-a", "host-b", "host-a", "host-b"]
    result = evaluate(spec_gate(), campaign(16, subject={"host": hosts}, ablation={"host": swapped}))
    assert result.verdict == Verdict.INCONCLUSIVE, result.reason
    assert "in block item/b0 B ran on host-a, its ablation B-nospec on host-b" in result.reason
    # both on both hosts, block by block together: nothing differs
    assert (
        evaluate(spec_gate(), campaign(16, subject={"host": hosts}, ablation={"host": hosts})).verdict == Verdict.PASS
    )


def test_the_measurement_frame_carries_the_attempts_placement_and_model(db_url: str) -> None:
    """Store.measurements_frame joins each row's attempt: host, machine, device lease, served
    model and fingerprint, '' where the attempt left them empty; and a gate reading the
    frame refuses an ablation that ran on another host."""
    store = Store(db_url)
    cid = store.add(CampaignRow(name="c")).id
    rng = np.random.default_rng(17)
    placed = {
        "B": {**PLACED},
        "B-2slots": {**PLACED, "host": "host-b", "device_lease": "device-host-b-gpu0/1"},
        "C": {"host": "", "machine": "", "device_lease": "", "served_model": "", "fingerprint": ""},
    }
    for arm, centre in (("B", 0.4), ("B-2slots", 1.3), ("C", 1.0)):
        for block, value in enumerate(centre * np.exp(rng.normal(0.0, 0.03, 3))):
            att = store.new_attempt(cid, "load", arm, {}, block, block={"block_order": 0, "block_id": f"load/b{block}"})
            run = store.add(ProbeRunRow(attempt_id=att.id, probe="agent-load", context=0, state=ProbeRunState.DONE))
            store.add(
                MeasurementRow(
                    campaign_id=cid,
                    attempt_id=att.id,
                    probe_run_id=run.id,
                    item_key="load",
                    arm_id=arm,
                    repeat=block,
                    probe="agent-load",
                    scenario="summary",
                    mode="canonical",
                    metric="ttft_later_median_s",
                    value=float(value),
                )
            )
            store.update(AttemptRow, att.id, state=AttemptState.DONE, **placed[arm])
    for categorical in (False, True):
        frame = store.measurements_frame(cid, categorical=categorical)
        for column in ("host", "machine", "device_lease", "served_model", "fingerprint"):
            assert column in frame.columns
            assert set(frame.loc[frame["arm_id"] == "C", column].astype(str)) == {""}
        assert set(frame.loc[frame["arm_id"] == "B-2slots", "host"].astype(str)) == {"host-b"}
        gate = GateEntry(
            id="credit-slots",
            predicate="attribution",
            params={"claim": "slots", "ablation": "B-2slots"},
            subjects=["B"],
            baseline=["B-2slots"],
        )
        result = evaluate(gate, frame)
        assert result.verdict == Verdict.INCONCLUSIVE, result.reason
        assert "B ran on host-a, its ablation B-2slots on host-b" in result.reason
