"""Seed 004 replayed on simulated runtimes: every verdict computed from what was measured.

The campaign file writes no verdicts; this test checks that the predicates, fed by the
simulator's measurements, reach the seed's conclusions, and that status reads like the
seed's dashboard (blocked ANE, the confirmatory cap item, a pending item behind a block).
About five minutes on two cores: the decode probes run at the seed's decode rates.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from campaign.states import ItemState, Verdict
from campaign.store import Store

pytestmark = pytest.mark.integration

EXPECTED = {
    "gate-6": Verdict.FAIL,  # SpecPrefill: cold TTFT down, warm cache zeroed
    "gate-7": Verdict.BLOCKED,  # ANE compiler missing from the build
    "gate-8": Verdict.PASS,  # DSpark / DFlash2 deliver decode and total time
    "gate-9": Verdict.PASS,  # T promoted, U a control
    "gate-10": Verdict.PASS,  # MTPLX best decode at 32K
    "gate-11": Verdict.FAIL,  # DFlash decode gain, but not 10% of total time with cache off
    "mtp-gate": Verdict.PASS,  # L beats K on total time, acceptance ~0.8, tool loop majority
    "mtplx-quality": Verdict.CONTROL,  # Quality profiles characterised against Speed
    "ceiling-decode": Verdict.PASS,  # oMLX / dspark hold at 262K, MTPLX collapses
    "ceiling-cache": Verdict.PASS,  # reuse holds at 262K
}


def test_seed_004_verdicts_come_from_measurements(tmp_path: Path, examples: Path, prefect_harness: None) -> None:
    from campaign.status_view import render_status
    from campaign.summary import summarize
    from flows.campaign_flow import campaign_flow

    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    campaign_flow(str(examples / "qwen38.toml"), store.url, str(tmp_path / "work"))
    summary = summarize(store, "qwen38")
    verdicts = {g.id: g.verdict for g in summary.gates}
    reasons = {g.id: g.reason for g in summary.gates}
    wrong = {g: (verdicts[g], reasons[g]) for g in EXPECTED if verdicts.get(g) != EXPECTED[g]}
    assert not wrong, wrong

    assert "Private ANE procedure-bank compiler is unavailable" in reasons["gate-7"]
    assert "but M reuse 0.00, N reuse 0.00" in reasons["gate-6"]
    assert "collapse" in reasons["ceiling-decode"]
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

    console = Console(record=True, width=200)
    render_status(console, store, "qwen38")
    text = console.export_text()
    for title in ("Gate 6 — SpecPrefill", "Gate 7 — ANE", "cache 128K (L/T/V/Y/S)", "confirmatory tool_turn V@128K/cap 100G"):
        assert title in text
