"""Seed 004 replayed on simulated runtimes: every verdict computed from what was measured.

The campaign file writes no verdicts; this test checks that the predicates, fed by the
simulator's measurements, reach the seed's conclusions where the numbers can decide them,
and `inconclusive` where they cannot (one server run per arm, tool loops of 3 trials), and that status reads like
the seed's dashboard (blocked ANE, the confirmatory cap item, a pending item behind a
block). The simulator profiles were calibrated to reproduce seed 004's verdicts;
`test_seed_robustness.py` runs them over other seeds.
Every item runs with the simulator's clock ten times faster (`sim.time_scale`): the
server-reported decode rates are in model time, so they do not move; wall-clock times
(TTFT, e2e) shrink for every arm alike, and at one block per item no comparative
verdict can decide either way, which is what this test checks. At wall-clock speed the
replay took about eight minutes on two cores; the example itself runs as written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from campaign.core.states import ItemState, Verdict
from campaign.store.store import Store

pytestmark = pytest.mark.integration

# Seed 004 drew its conclusions from one server run per arm. Read as a statistician
# would, one run cannot carry a 95% claim: the server's own draw at start-up is part of
# every request it serves. So, at one block per item (two for oq8e), every comparative
# verdict and every bound reads `inconclusive`, "has 1 run; needs 3"; raising the items'
# `repeats` to 3 decides them at three times the time. What stays decided is what is not
# a statistic: the blocked ANE build and the control characterisation.
EXPECTED = {
    "gate-6": {Verdict.INCONCLUSIVE},  # SpecPrefill: cold TTFT down, warm cache zeroed -- in one run each
    "gate-7": {Verdict.BLOCKED},  # ANE compiler missing from the build
    "gate-8": {Verdict.INCONCLUSIVE},  # DSpark / DFlash2; and "tool loop 2/3" is 3 trials
    "gate-9": {Verdict.INCONCLUSIVE},  # T vs control U: two blocks, needs 3
    "gate-10": {Verdict.INCONCLUSIVE},  # MTPLX best decode at 32K; its tool loop is 3 trials
    "gate-11": {Verdict.INCONCLUSIVE},  # DFlash decode gain vs total time, one run each
    "mtp-gate": {Verdict.INCONCLUSIVE},  # L beats K on total time, acceptance ~0.8; one run, 3 trials
    "mtplx-quality": {Verdict.CONTROL},  # Quality profiles characterised against Speed
    "ceiling-decode": {Verdict.INCONCLUSIVE},  # oMLX / dspark hold at 262K, MTPLX collapses: one run each
    "ceiling-cache": {Verdict.INCONCLUSIVE},  # reuse holds at 262K: one run each
}
ONE_RUN = ("gate-6", "gate-9", "gate-11", "ceiling-decode", "ceiling-cache")


TIME_SCALE = 10.0  # the simulator's clock, ten times faster for every item


def items_faster(text: str) -> str:
    """qwen38.toml with `"sim.time_scale" = 10` added to every item's overrides, and the
    one absolute rate of its gates (ceiling-decode's 12 tok/s, measured by the client in
    wall seconds) scaled with it."""
    assert text.count("min_value = 12.0") == 1, "the ceiling gate changed: update items_faster"
    text = text.replace("min_value = 12.0", f"min_value = {12.0 * TIME_SCALE}")
    head, *items = text.split("\n[[queue]]\n")
    for i, item in enumerate(items):
        assert item.count("\noverrides = { ") == 1 and "time_scale" not in item, item
        items[i] = item.replace("\noverrides = { ", f'\noverrides = {{ "sim.time_scale" = {TIME_SCALE}, ')
    return "\n[[queue]]\n".join([head, *items])


def test_seed_004_verdicts_come_from_measurements(tmp_path: Path, examples: Path, prefect_harness: None) -> None:
    from campaign.store.summary import summarize
    from cli.status_view import render_status
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "qwen38.toml"
    path.write_text(items_faster((examples / "qwen38.toml").read_text()))
    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "work"))
    summary = summarize(store, "qwen38")
    verdicts = {g.id: g.verdict for g in summary.gates}
    reasons = {g.id: g.reason for g in summary.gates}
    wrong = {g: (verdicts[g], reasons[g]) for g in EXPECTED if verdicts.get(g) not in EXPECTED[g]}
    assert not wrong, wrong
    for gate in ("gate-8", "gate-10", "mtp-gate"):
        assert "3 trials cannot tell" in reasons[gate], reasons[gate]

    assert "Private ANE procedure-bank compiler is unavailable" in reasons["gate-7"]
    for gate in ONE_RUN:  # what a verdict needs, said in its reason
        assert "needs 3 (blocks, each its own server start)" in reasons[gate], reasons[gate]
    assert "1 run x" in reasons["gate-11"] and "95% CI" not in reasons["gate-11"].split(";")[0], reasons["gate-11"]
    items = {i.key: i for i in summary.items}
    assert items["ane"].state == ItemState.BLOCKED
    assert items["tool-loop-survivors"].state == ItemState.PENDING
    assert items["tool-loop-survivors"].reason == "waiting on 'ane' (blocked)"
    confirm = items["confirm-cap"]
    assert confirm.isolation.startswith("confirms 'cache-128k', changing only session_cache_cap (V: 48G -> 100G)")
    assert "reuse 0.00 -> 1.00" in confirm.isolation  # what moved: the session bank now holds the prompt

    # the verdict is the predicate's, recomputed now from the stored canonical rows
    frame = store.measurements_frame(summary.campaign_id)
    v = frame[
        (frame["arm_id"] == "V")
        & (frame["metric"] == "decode_tps")
        & (frame["context"] == 262144)
        & (frame["kind"] == "sample")
    ]
    s = frame[
        (frame["arm_id"] == "S")
        & (frame["metric"] == "decode_tps")
        & (frame["context"] == 262144)
        & (frame["kind"] == "sample")
    ]
    assert v["value"].median() < 12.0 * TIME_SCALE <= s["value"].median()  # wall-clock rates, ten times the model's

    console = Console(
        record=True, width=400
    )  # wide enough that no item title folds onto two lines (beside its item id)
    render_status(console, store, "qwen38", verbose=True)  # the gates' titles are in the verbose table
    text = console.export_text()
    for title in (
        "Gate 6 — SpecPrefill",
        "Gate 7 — ANE",
        "cache 128K (L/T/V/Y/S)",
        "confirmatory tool_turn V@128K/cap 100G",
    ):
        assert title in text
