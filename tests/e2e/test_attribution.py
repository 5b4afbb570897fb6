"""Seed 000's question on the simulator, slots or cache, decided by ablation:
`examples/slots-vs-cache.toml` through Prefect (its cache-probe item left out).

The 4-slot recipe (B) wins against the 2-slot one (A) with 0 cache hits. Before, that
alone credited the slots and failed the cache, by elimination -- though A and B also
differ in prefill chunks. Now B-nocache (B, cache off) and B-2slots (B, two slots) decide.

A verdict is decided over server runs, at least three; the example's load items run five
blocks (in each, every arm gets its own server start), so that a pass survives Holm over
its four gates (with three, a true -77% once missed the bar: adjusted p 0.041): B meets A in the load item's
blocks and its ablations in the ablation item's, and is paired with each within them.
The campaign runs once for the module; its gates are checked by the tests below.

The simulator's clock runs four times faster here (`sim.time_scale`): every duration is
divided alike, so the ratios the gates read keep their size, and the 25 server runs take
what 15 took before.

The agent-load probe's single-stream baseline (one conversation alone, after the load) is
switched off here: no gate reads it (they read the load's later-turn TTFT and the load's
cache counters), and it ran after the load, so it moved none of their numbers; it was
about a third of the test's time.
"""

from __future__ import annotations

from typing import Any

import pytest

from campaign.core.states import Verdict
from campaign.store.store import Store
from tests.paths import EXAMPLES

pytestmark = pytest.mark.integration

TIME_SCALE = 4


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory, prefect_harness: None) -> dict[str, Any]:
    from campaign.store.summary import summarize
    from flows.campaign_flow import campaign_flow

    tmp_path = tmp_path_factory.mktemp("svc")
    text = (EXAMPLES / "slots-vs-cache.toml").read_text()
    head, _, tail = text.rpartition("\n[[queue]]\n")
    assert 'id = "cache-probe"' in tail  # the last item is the cache-probe, which no gate reads
    shape = "overrides = { conversations = 3, turns = 10,"
    assert head.count(shape) == 2 and head.count("blocks = 5  #") == 2, "the load items changed: update this test"
    path = tmp_path / "svc.toml"
    # as shipped (5 blocks per load item), on a faster clock, without the single-conversation baseline no gate reads
    fast = f'overrides = {{ "sim.time_scale" = {TIME_SCALE}, baseline = false, conversations = 3, turns = 10,'
    path.write_text(head.replace(shape, fast) + "\n")
    store = Store(f"sqlite:///{tmp_path / 'svc.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    summary = summarize(store, "slots-vs-cache")
    return {
        "gates": {g.id: g for g in summary.gates},
        "frame": store.measurements_frame(summary.campaign_id),
        "store": store,
    }


def test_slots_vs_cache_by_ablation(campaign: dict[str, Any]) -> None:
    gates = campaign["gates"]
    win = gates["win"]
    assert win.verdict == Verdict.PASS, win.reason
    b = next(c for c in win.read("cells") if c["arm"] == "B")
    assert b["samples"] == "ttft_later_s"  # each run's value is the median of its later turns, not the stored median
    assert (
        b["runs"] == 5 and min(b["requests_per_run"]) >= 20
    )  # the load item's 5 blocks; 3 conversations x 9 later turns per run
    assert win.read("comparisons")[0]["pairs"] == 5  # paired with A within the load item's blocks
    # switching to two slots (chunks kept) loses it: the slots get the credit
    slots = gates["credit-slots"]
    assert slots.verdict == Verdict.PASS, slots.reason
    assert "switching the slots off costs the win: the win was the slots" in slots.reason
    assert "B vs B-2slots: B" in slots.reason and "paired over 5 blocks" in slots.reason.split("B vs B-2slots: ", 1)[1]
    # the counters alone only argue by elimination, and say so
    counters = gates["cache-counters"]
    assert counters.verdict == Verdict.INCONCLUSIVE and "by elimination only" in counters.reason
    assert "cache 0 hits in" in counters.reason and "(requests) on B" in counters.reason
    frame = campaign["frame"]
    assert set(frame.loc[frame["metric"].isin(["cache_hits", "cache_lookups"]), "unit"]) == {"requests"}
    assert not frame["metric"].str.startswith("baseline_").any()  # what the gates read was measured without it


def test_switching_the_cache_off_keeps_the_win(campaign: dict[str, Any]) -> None:
    cache = campaign["gates"]["credit-cache"]
    assert cache.verdict == Verdict.FAIL, cache.reason
    assert "switching the cache off keeps the win: the win was not the cache" in cache.reason


def test_the_first_screen_of_status_answers_the_question_at_80_columns(campaign: dict[str, Any]) -> None:
    """`campaign status` at 80 columns opens with the question and one answer per gate,
    each at most two lines and within 80 columns: the win with its interval, each credit
    with the ablation that decided it and the cache counters (0 hits on B), and what the
    first turn pays -- every number the gate's own (its stored comparison)."""
    from rich.console import Console

    from campaign.core.units import pct
    from cli.status_view import render_status

    console = Console(width=80, record=True, color_system=None)
    render_status(console, campaign["store"], "slots-vs-cache")
    lines = console.export_text().splitlines()
    screen = "\n".join(lines[:24])
    assert all(len(line) <= 80 for line in lines)
    assert "Question: Do 4 slots beat 2 on later turns" in screen
    gates = campaign["gates"]
    win = gates["win"].read("comparisons")[0]
    assert (
        f"PASS win: B vs A: ttft_later_median_s {pct(win['change'])} [{pct(win['change_low'])}, {pct(win['change_high'])}] over 5 blocks, needs <= -50%"
        in " ".join(screen.split())
    )
    assert "credit-slots: the win was the slots; B vs B-2slots -" in screen
    cache = " ".join(screen[screen.index("credit-cache:") :].split())
    assert cache.startswith("credit-cache: not the cache; B vs B-nocache ")
    assert "cache hits: B 0 of" in cache.split("cache-counters")[0]  # the seed's first question, answered on the line
    first = gates["first-turn"].read("comparisons")[0]
    b_first = next(c for c in gates["first-turn"].read("cells") if c["arm"] == "B")
    assert b_first["samples"] == "ttft_first_s"  # each run's value: the median of its conversations' first turns
    assert f"first-turn: B vs A: ttft_first_median_s {pct(first['change'])} [" in " ".join(screen.split())
    assert (
        "B vs A: ttft_later_median_s" not in screen[screen.index("credit-cache:") : screen.index("Campaign queue")]
    )  # never the win again
