"""Seed 004 replayed on simulated runtimes: every verdict computed from what was measured.

The campaign file writes no verdicts; this test checks that the predicates, fed by the
simulator's measurements, reach the seed's conclusions where the numbers can decide them,
and `inconclusive` where they cannot (one server run per arm, tool loops of 3 trials), and that status reads like
the seed's dashboard (blocked ANE, the confirmatory cap item, a pending item behind a
block). The simulator profiles were calibrated to reproduce seed 004's verdicts;
`test_seed_robustness.py` runs them over other seeds.
About six minutes on two busy cores: the decode probes run at the seed's decode rates, and
each cell a gate reads is measured at least three times.

The items no time is read from (`UNTIMED`) run here with the simulator's clock ten times
faster (`sim.time_scale`): the smoke item is greedy only, which no gate reads (the engine
strips greedy rows), and of the cache items from 65K up what is read is reuse -- the
server's cached-token counts, which no clock moves (ceiling-cache, and the confirmatory
item's `reuse 0.00 -> 1.00` against `cache-128k`, both sides at the same scale). Every
item whose times a gate reads (decode rates, cold TTFT, e2e) runs at wall-clock speed, as
written. That halved the test (about 12 minutes before, on the same busy cores).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from campaign.states import ItemState, Verdict
from campaign.store import Store

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


# items whose rows no gate or assertion reads a time from; their simulated waits shrink tenfold
UNTIMED = ("smoke", "cache-65k", "cache-128k", "native-262k-cache", "confirm-cap")


def untimed_items_faster(text: str) -> str:
    """qwen38.toml with `"sim.time_scale" = 10` added to the overrides of UNTIMED."""
    head, *items = text.split("\n[[queue]]\n")
    done = []
    for i, item in enumerate(items):
        key = re.search(r'^id = "([^"]+)"', item, re.MULTILINE)
        if key and key.group(1) in UNTIMED:
            assert item.count("\noverrides = { ") == 1 and "time_scale" not in item, item
            # what makes its times unread: greedy rows only, or cache-probe rows (read for reuse)
            assert 'modes = ["greedy"]' in item if key.group(1) == "smoke" else 'probes = ["cache-probe"]' in item, item
            items[i] = item.replace("\noverrides = { ", '\noverrides = { "sim.time_scale" = 10.0, ')
            done.append(key.group(1))
    assert sorted(done) == sorted(UNTIMED), "an item of the replay was renamed: update UNTIMED"
    return "\n[[queue]]\n".join([head, *items])


def test_seed_004_verdicts_come_from_measurements(tmp_path: Path, examples: Path, prefect_harness: None) -> None:
    from cli.status_view import render_status
    from campaign.summary import summarize
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "qwen38.toml"
    path.write_text(untimed_items_faster((examples / "qwen38.toml").read_text()))
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
    v = frame[(frame["arm_id"] == "V") & (frame["metric"] == "decode_tps") & (frame["context"] == 262144) & (frame["trial"] >= 0)]
    s = frame[(frame["arm_id"] == "S") & (frame["metric"] == "decode_tps") & (frame["context"] == 262144) & (frame["trial"] >= 0)]
    assert v["value"].median() < 12.0 <= s["value"].median()

    console = Console(record=True, width=300)  # wide enough that no item title folds onto two lines
    render_status(console, store, "qwen38")
    text = console.export_text()
    for title in ("Gate 6 — SpecPrefill", "Gate 7 — ANE", "cache 128K (L/T/V/Y/S)", "confirmatory tool_turn V@128K/cap 100G"):
        assert title in text
