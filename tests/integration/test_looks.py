"""A question asked again through the real flows: a rerun with unchanged settings adds
blocks to it and its gate reads the confidence sequence; raising `repeats` after a look
does the same; a rerun with other settings is a new question, judged by its own blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.store.store import Store
from flows.overrides import check_rerun
from tests.campaigns import arm, campaign_file, gate, sim
from tests.campaigns import item as queue_item


def _file(repeats: int) -> str:
    # time scale 5, not faster: at 20 a busy machine read a run's few tokens in one burst,
    # its decode rate undefined, and the block had no decode_tps to pair
    return campaign_file(
        "looks",
        seed=3,
        default_max_tokens=8,
        runtimes=[sim(profile={"time_scale": 5.0})],
        arms=[arm("A", context=4096, recipe={"slots": 1}), arm("B", context=4096, recipe={"slots": 1})],
        gates=[
            gate(
                "faster",
                "relative_improvement",
                {"metric": "decode_tps", "probe": "decode", "min_gain": 0.0},
                ["A"],
                ["B"],
            )
        ],
        queue=[
            queue_item(
                "k",
                ["A", "B"],
                ["decode"],
                contexts=[1024],
                repeats=repeats,
                gate="faster",
                overrides={"repeats": 2, "warmup": 0},
            )
        ],
    )


def _look(store: Store, campaign_id: int) -> tuple[dict, str]:
    row = store.latest_verdicts(campaign_id)["faster"]
    return json.loads(row.evidence_json)["look"], row.reason


@pytest.mark.integration
def test_a_question_asked_again_keeps_its_blocks_and_reads_the_sequence(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow, rerun_flow
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(_file(3))
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign("looks")
    first, _ = _look(store, camp.id)
    assert first["blocks"] == 3 and first["complete"] and not first["sequential"]

    # `campaign rerun k`, nothing changed: three more blocks of the same question
    rerun_flow(str(path), store.url, "k", {}, str(tmp_path / "w"))
    repeats = sorted({a.repeat for a in store.attempts(camp.id, "k")})
    assert repeats == [0, 1, 2, 3, 4, 5]
    second, reason = _look(store, camp.id)
    assert second["question"] == first["question"] and second["blocks"] == 6 and second["sequential"]
    assert "blocks added after a look (3 blocks" in reason and "95% CS" in reason

    # repeats raised after that look: the next run adds block 6, still the sequence
    path.write_text(_file(7))
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    third, _ = _look(store, camp.id)
    assert third["blocks"] == 7 and third["sequential"]

    # a rerun with other settings is a new question: its own blocks, a fixed design
    spec = load_campaign(path)
    checked = check_rerun(spec, spec.queue[0], {"max_tokens": 6})
    assert not checked.problems
    rerun_flow(str(path), store.url, "k", checked.overrides, str(tmp_path / "w"))
    fourth, _ = _look(store, camp.id)
    assert fourth["question"] != first["question"] and fourth["blocks"] == 7 and not fourth["sequential"]
    history = [v for v in store.verdicts(camp.id) if v.gate_id == "faster"]
    assert len(history) >= 4  # every look is kept
