"""Blocks through real flows and the CLI: stored on attempts, carried by the frame, grown
when a file asks for more, resumed with their overrides, and failed when every request failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.core.states import AttemptState, ItemState
from campaign.store.store import Store
from tests.campaigns import arm
from tests.campaigns import item as queue_item
from tests.paths import ROOT
from tests.unit.test_blocks import _campaign, _seed_with_varying_order, _spec  # noqa: F401 - helpers and fixtures


@pytest.mark.integration
def test_blocks_are_stored_on_attempts_and_carried_by_the_frame(tmp_path: Path, prefect_harness: None) -> None:
    from flows.blocks import block_order
    from flows.campaign_flow import campaign_flow

    seed = _seed_with_varying_order("k", ["A", "B"], 3)
    queue = [queue_item("k", ["A", "B"], ["decode"], contexts=[1024], repeats=3, overrides={"repeats": 2, "warmup": 0})]
    path, _ = _spec(_campaign("blocks", seed, "AB", queue), tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    assert result["items"] == {"k": "done"}
    camp = store.campaign("blocks")
    attempts = store.attempts(camp.id)
    expected = [(b, a) for b in range(3) for a in block_order(seed, "k", b, ["A", "B"])]
    assert [(a.repeat, a.arm_id) for a in attempts] == expected  # run block by block, in the drawn order
    assert len({tuple(a.arm_id for a in attempts if a.repeat == b) for b in range(3)}) > 1
    for att in attempts:
        assert att.state == AttemptState.DONE
        assert att.block_order == block_order(seed, "k", att.repeat, ["A", "B"]).index(att.arm_id)
        assert att.block_id.startswith(f"k/b{att.repeat}/") and att.block_id.endswith(att.settings_hash[:8])
    for b in range(3):
        assert len({a.block_id for a in attempts if a.repeat == b}) == 1  # shared by the arms of the block
    assert len({a.block_id for a in attempts}) == 3 and len({a.settings_hash for a in attempts}) == 1
    assert len({a.recipe_hash for a in attempts if a.arm_id == "A"}) == 1
    assert {a.recipe_hash for a in attempts if a.arm_id == "A"} != {a.recipe_hash for a in attempts if a.arm_id == "B"}

    # every server start has its own run seed (the simulator's per-start draw), from the start's identity
    from flows.launch import run_seed

    seeds = [json.loads(a.server_cmdline.split("--profile-json ", 1)[1])["run_seed"] for a in attempts]
    assert seeds == [run_seed("blocks", "k", a.arm_id, a.repeat, a.number) for a in attempts]
    assert len(set(seeds)) == len(attempts)
    assert run_seed("blocks", "k", "A", 0, 2) != run_seed("blocks", "k", "A", 0, 1)  # a rerun's start is another start

    # a row's settings are its probe run's: the decode parameters at its context, the same
    # for both arms and every block, and not the item's hash
    runs = {r.id: r for a in attempts for r in store.probe_runs(a.id)}
    assert len({r.settings_hash for r in runs.values()}) == 1 and "" not in {r.settings_hash for r in runs.values()}
    assert {r.settings_hash for r in runs.values()} != {a.settings_hash for a in attempts}
    by_id = {a.id: a for a in attempts}
    for categorical in (False, True):
        frame = store.measurements_frame(camp.id, categorical=categorical)
        assert {"block_id", "block_order", "settings_hash", "recipe_hash", "attempt_number"} <= set(frame.columns)
        assert not frame.empty
        for row in frame.itertuples():
            att = by_id[row.attempt_id]
            assert (row.block_id, row.block_order, row.settings_hash, row.recipe_hash, row.attempt_number) == (
                att.block_id,
                att.block_order,
                runs[row.probe_run_id].settings_hash,
                att.recipe_hash,
                att.number,
            )
        if categorical:
            assert all(str(frame[c].dtype) == "category" for c in ("block_id", "settings_hash", "recipe_hash"))
    # a chosen set of columns, old and new
    picked = store.measurements_frame(camp.id, columns=["value", "block_id"])
    assert list(picked.columns) == ["value", "block_id"] and len(picked) == len(frame)


@pytest.mark.integration
def test_asking_for_more_blocks_runs_only_the_blocks_missing(tmp_path: Path, prefect_harness: None) -> None:
    """A finished item whose file now says `repeats = 3` instead of 1 runs blocks 1 and 2
    on the next `campaign run`; block 0's attempts are kept, not measured again."""
    from flows.campaign_flow import campaign_flow

    def queue(n: int) -> list[dict]:
        return [
            queue_item("k", ["A", "B"], ["decode"], contexts=[1024], repeats=n, overrides={"repeats": 2, "warmup": 0})
        ]

    path, _ = _spec(_campaign("more", 3, "AB", queue(1)), tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    assert campaign_flow(str(path), store.url, str(tmp_path / "w"))["items"] == {"k": "done"}
    camp = store.campaign("more")
    first = {(a.arm_id, a.repeat): a.id for a in store.attempts(camp.id)}
    assert set(first) == {("A", 0), ("B", 0)}
    path.write_text(_campaign("more", 3, "AB", queue(3)))
    assert campaign_flow(str(path), store.url, str(tmp_path / "w"))["items"] == {"k": "done"}
    attempts = store.attempts(camp.id)
    assert sorted((a.arm_id, a.repeat) for a in attempts) == [
        ("A", 0),
        ("A", 1),
        ("A", 2),
        ("B", 0),
        ("B", 1),
        ("B", 2),
    ]
    assert {(a.arm_id, a.repeat): a.id for a in attempts if a.repeat == 0} == first  # kept, not run again
    assert all(a.state == AttemptState.DONE for a in attempts)


@pytest.mark.integration
def test_a_resumed_rerun_runs_with_its_stored_overrides(tmp_path: Path, prefect_harness: None) -> None:
    """A rerun with `--set max_tokens=9 --set recipe.slots=3` was interrupted; `campaign
    resume` continues that attempt. Before, it ran the file's settings (max_tokens 8,
    slots 1) under the rerun's label; now it runs what the attempt stores."""
    from campaign.store import queue
    from campaign.store.tables import AttemptRow
    from flows.campaign_flow import campaign_flow
    from flows.resolve import simulated_adapters

    body = _campaign(
        "resume-set",
        0,
        "A",
        [queue_item("d", ["A"], ["decode"], title="decode", contexts=[1024], overrides={"repeats": 2, "warmup": 0})],
    )
    path, spec = _spec(body, tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    camp = queue.register(store, spec, str(path), simulated_adapters())
    stored = {"repeats": 2, "warmup": 0, "max_tokens": 9, "recipe.slots": 3}
    how, att = store.claim_attempt(camp.id, "d", "A", stored, 0, fresh=True)  # as `campaign rerun` made it
    assert how == "new" and att is not None
    store.update(AttemptRow, att.id, state=AttemptState.INTERRUPTED, error="interrupted by the user")

    campaign_flow(str(path), store.url, str(tmp_path / "w"), recheck_blocked=True)
    (after,) = store.attempts(camp.id)  # continued, not a new attempt
    assert after.id == att.id and after.state == AttemptState.DONE
    assert json.loads(after.overrides_json) == stored
    assert '"slots": 3' in after.server_cmdline, after.server_cmdline  # the stored recipe.* key reached the launch
    frame = store.measurements_frame(camp.id)
    target = frame[frame["metric"] == "prompt_tokens_target"]["value"].tolist()
    assert target == [max(16, int(1024 * 0.8) - 9 - 16)], target  # decode sized its prompt for max_tokens 9
    tokens = [
        json.loads(r.raw_json).get("usage", {}).get("completion_tokens")
        for r in store.requests([p.id for p in store.probe_runs(att.id)])
    ]
    assert tokens and set(tokens) <= {9, None} and 9 in tokens


@pytest.mark.integration
def test_an_arm_whose_every_request_failed_fails_the_item_and_the_run_exits_1(tmp_path: Path) -> None:
    """Arm T's server takes 512 tokens a request (its simulator's ctx_size), the decode
    probe sends about 800: every request is refused with HTTP 400. Its attempt ends
    failed, its item failed with the count, the kind and the server's own words, the
    other item is done, and `campaign run` exits 1 naming the failed item."""
    body = _campaign(
        "all-failed",
        0,
        "A",
        [
            queue_item("tight", ["T"], ["decode"], contexts=[1024], overrides={"repeats": 3, "warmup": 0}),
            queue_item("fine", ["A"], ["decode"], contexts=[1024], overrides={"repeats": 2, "warmup": 0}),
        ],
        more_arms=[arm("T", context=4096, simulate={"ctx_size": 512})],
    )
    path = tmp_path / "c.toml"
    path.write_text(body)
    db = tmp_path / "c.db"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PYTHONPATH": str(ROOT),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--db", str(db), "--workdir", str(tmp_path / "w")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr

    store = Store(f"sqlite:///{db}")
    camp = store.campaign("all-failed")
    items = {i.key: i for i in store.items(camp.id)}
    assert items["fine"].state == ItemState.DONE
    assert items["tight"].state == ItemState.FAILED
    (att,) = store.attempts(camp.id, "tight", "T")
    assert att.state == AttemptState.FAILED
    assert att.error.startswith("3/3 requests failed, HTTP 400: the request needs "), att.error
    assert att.error.endswith("but the context size is 512") and "{" not in att.error, att.error
    assert items["tight"].reason == f"T: {att.error}"
    assert f"failed: tight: T: {att.error}" in " ".join(run.stderr.split())

    # nothing left to run: the next `campaign run` says so, and still exits 1
    again = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--db", str(db), "--workdir", str(tmp_path / "w")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1 and again.stdout.startswith("nothing to do"), again.stdout + again.stderr


def test_block_order_is_a_reproducible_permutation_drawn_per_block() -> None:
    from flows.blocks import block_order

    arms = ["A", "B", "C", "D"]
    orders = {(seed, block): block_order(seed, "k", block, arms) for seed in range(20) for block in range(5)}
    assert all(sorted(order) == arms for order in orders.values())  # every arm once
    assert all(block_order(seed, "k", block, arms) == order for (seed, block), order in orders.items())  # reproducible
    assert any(len({tuple(orders[(seed, b)]) for b in range(5)}) > 1 for seed in range(20))  # differs across blocks
    assert len({tuple(order) for order in orders.values()}) > 4  # not a fixed rotation
    assert any(orders[(0, b)] != orders[(1, b)] for b in range(5))  # another seed, another order
    assert any(block_order(0, "k", 0, arms) != block_order(0, other, 0, arms) for other in ("j", "l", "m"))  # per item
    # the string seed goes through SHA-512, not hash(): the same in a fresh process
    code = "from flows.blocks import block_order; print(block_order(7, 'k', 3, ['A', 'B', 'C', 'D']))"
    fresh = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": "123"},
        check=True,
    )
    assert fresh.stdout.strip() == str(block_order(7, "k", 3, arms))
