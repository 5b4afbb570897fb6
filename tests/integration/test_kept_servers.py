"""Kept servers through real flows: two consecutive items on the same arms, recipes and
blocks, feeding different gates, run on one simulator start per arm and block; the second
item's cache is emptied through the simulator's /flush_cache before its cache probe, and
each attempt records the server it ran on (and its start's block, `server_block`). A chained
attempt left unfinished runs again on a server of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.core.states import AttemptState, ItemState, Verdict
from campaign.store.store import Store
from campaign.store.tables import AttemptRow
from tests.campaigns import arm, campaign_file, gate, item, sim

BLOCKS = 3


def _file(keep: bool = True) -> str:
    return campaign_file(
        "kept",
        default_max_tokens=16,
        keep_servers=keep,
        runtimes=[sim(profile={"time_scale": 5.0})],
        arms=[
            arm("A", context=4096, recipe={"slots": 1, "prefix_cache": "1G"}),
            arm("B", context=4096, recipe={"slots": 2, "prefix_cache": "1G"}),
        ],
        gates=[
            gate(
                "speed", "threshold", {"metric": "decode_tps", "probe": "decode", "op": ">=", "value": 50}, ["A", "B"]
            ),
            gate(
                "reuse",
                "threshold",
                {"metric": "reuse", "probe": "cache-probe", "op": ">=", "value": 0.9, "scenario": "identical"},
                ["A", "B"],
            ),
        ],
        queue=[
            item(
                "decode",
                ["A", "B"],
                ["decode"],
                contexts=[1024],
                gate="speed",
                repeats=BLOCKS,
                overrides={"repeats": 3, "warmup": 0},
            ),
            item(
                "cache",
                ["A", "B"],
                ["cache-probe"],
                gate="reuse",
                repeats=BLOCKS,
                overrides={"prompt_tokens": 256, "scenarios": ["identical"]},
            ),
        ],
    )


@pytest.mark.integration
def test_consecutive_items_run_on_one_start_per_arm_and_block(tmp_path: Path, prefect_harness: None) -> None:
    from campaign.store.summary import run_cost
    from flows.arm_flow import CACHE_FLUSHED, SERVER_KEPT
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "kept.toml"
    path.write_text(_file())
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    assert result["items"] == {"decode": ItemState.DONE, "cache": ItemState.DONE}
    assert result["verdicts"] == {"speed": Verdict.PASS, "reuse": Verdict.PASS}
    camp = store.campaign("kept")
    assert camp is not None and camp.id is not None
    attempts = store.attempts(camp.id)
    assert len(attempts) == 2 * 2 * BLOCKS and all(a.state == AttemptState.DONE for a in attempts)

    # one server per arm and block: the cache item's attempt ran on the decode item's
    first = {(a.arm_id, a.repeat): a for a in attempts if a.item_key == "decode"}
    for att in (a for a in attempts if a.item_key == "cache"):
        lead = first[(att.arm_id, att.repeat)]
        assert (att.server_log, att.server_pgid, att.server_cmdline) == (
            lead.server_log,
            lead.server_pgid,
            lead.server_cmdline,
        )
        assert att.started_at >= lead.ended_at  # after it, on the same server
        assert att.block_order == lead.block_order  # its place in the block is the one it ran at
        assert att.block_id.startswith(f"cache/b{att.repeat}/") and att.block_id != lead.block_id
        assert (att.server_block, lead.server_block) == (
            lead.block_id,
            "",
        )  # the start it ran on: one run with the lead's
    assert len({a.server_log for a in attempts}) == 2 * BLOCKS
    assert run_cost(store, "kept", attempts[0].started_at).server_starts == 2 * BLOCKS

    events = [e for e in store.events(camp.id) if e.kind in (SERVER_KEPT, CACHE_FLUSHED)]
    assert sorted((e.kind, e.item_key) for e in events) == sorted(
        [(SERVER_KEPT, "cache"), (CACHE_FLUSHED, "cache")] * 2 * BLOCKS
    )
    for event in (e for e in events if e.kind == CACHE_FLUSHED):
        # what the server said it dropped: the decode item's prompts were there to drop
        assert event.message.startswith("POST /flush_cache: ")
        dropped = json.loads(event.message.split(": ", 1)[1].removesuffix(", before its probes"))["dropped"]
        assert dropped["cache_entries"] + dropped["slot_tokens"] > 0, event.message

    # and the cache still serves what the cache probe sends after it
    frame = store.measurements_frame(camp.id)
    reuse = frame[(frame["item_key"] == "cache") & (frame["metric"] == "reuse") & (frame["scenario"] == "identical")]
    assert len(reuse) == 2 * BLOCKS and reuse["value"].min() >= 0.9
    assert {str(b).split("/")[0] for b in frame["server_block"]} == {
        "decode"
    }  # every row names its start, the decode item's

    # the arm page says which attempts ran on a kept server, and whose
    from reports.site import write_site

    index = write_site(store, "kept", tmp_path / "site")
    page = (index.parent / "arms" / "b.html").read_text()
    assert page.count("kept server of decode, block") == BLOCKS

    # a chained attempt left unfinished (its probe run undone) is run again, alone, on a
    # server of its own; nothing else runs
    chained = next(a for a in attempts if a.item_key == "cache" and a.arm_id == "B" and a.repeat == 1)
    store.update(AttemptRow, chained.id, state=AttemptState.INTERRUPTED)
    for run in store.probe_runs(chained.id):
        store.update(type(run), run.id, state="interrupted")
    store.set_item_state(camp.id, "cache", ItemState.PENDING, "interrupted")
    again = campaign_flow(str(path), store.url, str(tmp_path / "w"), recheck_blocked=True)
    assert again["items"] == {"decode": ItemState.DONE, "cache": ItemState.DONE}
    after = store.attempts(camp.id)
    assert len(after) == len(attempts)  # the same attempt, continued
    resumed = next(a for a in after if a.id == chained.id)
    assert resumed.state == AttemptState.DONE
    assert resumed.server_log != first[("B", 1)].server_log and "decode-B" not in resumed.server_log
    assert resumed.server_block == ""  # nothing of it was measured on the kept server: its rows are its own start's


@pytest.mark.integration
def test_keep_servers_false_starts_a_server_per_item(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow

    path = tmp_path / "apart.toml"
    path.write_text(_file(keep=False).replace('name = "kept"', 'name = "apart"'))
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign("apart")
    assert camp is not None and camp.id is not None
    attempts = store.attempts(camp.id)
    assert len({a.server_log for a in attempts}) == len(attempts) == 2 * 2 * BLOCKS
