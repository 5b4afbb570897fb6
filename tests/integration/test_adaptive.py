"""Items that add blocks until their gate is settled, through the real campaign flow on the
simulator: they stop at the first settled verdict, say how many blocks it took, spend
their budget when the gate stays open ("inconclusive at budget"), grow only when a spent
budget is raised, and resume after a stop inside a block to the decision an
uninterrupted run makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.core.states import BUDGET_SPENT, SETTLED, AttemptState, ItemState
from campaign.store.store import Store
from tests.campaigns import arm, campaign_file, gate, item, sim


def _file(path: Path, *, fast_a: bool, **fields: object) -> Path:
    """A (2x the decode rate of B when `fast_a`) against B, a +10% gate on decode_tps."""
    text = campaign_file(
        "adaptive",
        seed=1,
        default_max_tokens=24,
        runtimes=[sim(decode_tps=100.0, profile={"time_scale": 2.0})],  # 200-400 tok/s: a rate the client reads exactly
        arms=[
            arm("A", context=4096, **({"simulate": {"decode_tps": 200.0}} if fast_a else {})),
            arm("B", context=4096),
        ],
        gates=[
            gate(
                "faster",
                "relative_improvement",
                {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1},
                ["A"],
                ["B"],
            )
        ],
        queue=[
            item(
                "k",
                ["A", "B"],
                ["decode"],
                contexts=[1024],
                gate="faster",
                overrides={"repeats": 2, "warmup": 0},
                **fields,
            )
        ],
    )
    path.write_text(text)
    return path


def _blocks(store: Store, name: str) -> list[int]:
    camp = store.campaign(name)
    return sorted({a.repeat for a in store.attempts(camp.id) if a.state == AttemptState.DONE})


@pytest.mark.integration
def test_an_adaptive_item_stops_when_its_gate_is_settled_and_stays_done(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow

    path = _file(tmp_path / "c.toml", fast_a=True, max_blocks=8)
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    assert result["items"] == {"k": "done"} and result["verdicts"] == {"faster": "pass"}
    blocks = _blocks(store, "adaptive")
    assert 3 <= len(blocks) < 8 and blocks == list(range(len(blocks)))  # stopped early, block by block
    camp = store.campaign("adaptive")
    (row,) = store.items(camp.id)
    assert row.reason == f"{SETTLED} {len(blocks)} of at most 8 blocks (faster pass)"
    verdict = store.latest_verdicts(camp.id)["faster"]
    # looked at after each of blocks 3 to 8: each claim tested at alpha / 6 (Bonferroni over the planned looks)
    assert json.loads(verdict.evidence_json)["planned_looks"] == 6 and "6 planned looks" in verdict.reason
    # a second run, and a larger budget, add nothing to a settled item
    attempts = len(store.attempts(camp.id))
    _file(path, fast_a=True, max_blocks=12)
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    assert len(store.attempts(camp.id)) == attempts


@pytest.mark.integration
def test_a_gate_still_open_at_the_budget_says_so_and_a_raised_budget_adds_blocks(
    tmp_path: Path, prefect_harness: None
) -> None:
    """Two blocks are too few for a confidence sequence to exclude anything (and fewer
    than the gate's 3 runs): the budget is spent, the gate is inconclusive at budget; a
    budget of 8 keeps the two blocks and adds blocks until the gate is settled."""
    from flows.campaign_flow import campaign_flow

    path = _file(tmp_path / "c.toml", fast_a=True, max_blocks=2)
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    assert result["verdicts"] == {"faster": "inconclusive"}
    camp = store.campaign("adaptive")
    (row,) = store.items(camp.id)
    assert row.state == ItemState.DONE and row.reason.startswith(BUDGET_SPENT)
    assert store.latest_verdicts(camp.id)["faster"].reason.startswith("inconclusive at budget (budget spent: 2 blocks")
    first = {a.id for a in store.attempts(camp.id)}
    _file(path, fast_a=True, max_blocks=8)
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    blocks = _blocks(store, "adaptive")
    assert 3 <= len(blocks) < 8 and blocks == list(range(len(blocks)))
    assert first <= {a.id for a in store.attempts(camp.id)}  # the two blocks kept, not run again
    assert result["verdicts"] == {"faster": "pass"}


@pytest.mark.integration
def test_a_stop_inside_a_block_resumes_to_the_uninterrupted_decision(tmp_path: Path, prefect_harness: None) -> None:
    """Stopped after the first arm of block 1, resumed: the item stops at the first block at
    which its own stored blocks settle the gate, as a run that was never stopped does (the
    same file on another database), with no block lost, doubled or left half-run.

    The two runs' measured rates differ (they are timed on a busy machine), so the block
    at which each settles may differ too; what must hold is the rule: each run stops at
    the first settled prefix of its own data."""
    from flows import interrupt
    from flows.campaign_flow import campaign_flow
    from flows.progress import subscribe

    path = _file(tmp_path / "c.toml", fast_a=True, max_blocks=8)
    whole = Store(f"sqlite:///{tmp_path / 'whole.db'}")
    expected = campaign_flow(str(path), whole.url, str(tmp_path / "w1"))

    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    done_arms: list[str] = []

    def stop_in_block_1(kind: str, data: dict) -> None:
        if kind == "arm-done":
            done_arms.append(str(data.get("arm")))
            if len(done_arms) == 3:  # both arms of block 0, then the first of block 1
                interrupt.request()

    unsubscribe = subscribe(stop_in_block_1)
    try:
        stopped = campaign_flow(str(path), store.url, str(tmp_path / "w2"))
    finally:
        unsubscribe()
        interrupt.reset()
    assert "interrupted" in stopped
    camp = store.campaign("adaptive")
    assert len([a for a in store.attempts(camp.id) if a.state == AttemptState.DONE]) == 3
    resumed = campaign_flow(str(path), store.url, str(tmp_path / "w2"))
    assert resumed["verdicts"] == expected["verdicts"] == {"faster": "pass"}
    for db in (store, whole):
        _stopped_at_the_first_settled_block(db, path)


def _stopped_at_the_first_settled_block(store: Store, path: Path) -> None:
    """Each block run is whole (both arms done once), the blocks are 0..n-1, the gate read
    on blocks 0..k is open for every k < n-1 past the least and settled at n-1, and the
    item's reason says n."""
    from campaign.core.loader import read_campaign
    from flows.verdicts import settled

    spec = read_campaign(path)
    camp = store.campaign("adaptive")
    done = [a for a in store.attempts(camp.id) if a.state == AttemptState.DONE]
    blocks = _blocks(store, "adaptive")
    assert blocks == list(range(len(blocks))) and 3 <= len(blocks) < 8
    assert sorted((a.repeat, a.arm_id) for a in done) == [(b, x) for b in blocks for x in ("A", "B")]
    (item,) = spec.queue
    checks = [settled(store, spec, camp.id, item, k)[0] for k in range(spec.blocks(item).least - 1, len(blocks))]
    assert checks == [False] * (len(checks) - 1) + [True], checks
    (row,) = store.items(camp.id)
    assert row.reason == f"{SETTLED} {len(blocks)} of at most 8 blocks (faster pass)"
