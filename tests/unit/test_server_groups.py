"""Kept servers: which consecutive queue items run on one server start per arm and block
(`flows.groups.planned_groups`, the rule `server_group` applies during a run).

Each rule is the reason a kept server could be told apart from a fresh one by a verdict:
two items feeding one gate would count one server run twice; another recipe or another
set of arms is another server; a probe that needs a cold cache may only follow on a
runtime that can empty it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.campaigns import arm, campaign_file, gate, item, sim

DECODE_GATE = gate(
    "speed", "relative_improvement", {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1}, ["B"], ["A"]
)
REUSE_GATE = gate(
    "reuse", "threshold", {"metric": "reuse", "probe": "cache-probe", "op": ">=", "value": 0.5}, ["A", "B"]
)
TTFT_GATE = gate("ttft", "relative_improvement", {"metric": "ttft_s", "probe": "decode", "min_gain": 0.1}, ["B"], ["A"])


def _groups(
    tmp_path: Path, queue: list[dict[str, Any]], gates: list[dict[str, Any]] | None = None, **kw: Any
) -> list[list[str]]:
    from flows.groups import planned_groups
    from flows.resolve import load_campaign

    runtimes = kw.pop("runtimes", None)
    arms = kw.pop("arms", [arm("A", context=4096, recipe={"slots": 1}), arm("B", context=4096, recipe={"slots": 2})])
    path = tmp_path / "c.toml"
    fed = {q.get("gate") for q in queue}  # a gate no item feeds is refused (its metric is produced by none)
    gates = gates or [g for g in (DECODE_GATE, REUSE_GATE, TTFT_GATE) if g["id"] in fed]
    path.write_text(campaign_file("groups", runtimes=runtimes, arms=arms, gates=gates, queue=queue, **kw))
    return [[q.key for q in group] for group in planned_groups(load_campaign(path))]


DECODE = item("decode", ["A", "B"], ["decode"], contexts=[1024], gate="speed", repeats=3)
CACHE = item("cache", ["A", "B"], ["cache-probe"], gate="reuse", repeats=3, overrides={"prompt_tokens": 512})


def test_consecutive_items_on_the_same_arms_recipes_and_blocks_share_servers(tmp_path: Path) -> None:
    assert _groups(tmp_path, [DECODE, CACHE]) == [["decode", "cache"]]


def test_keep_servers_false_gives_each_item_its_own(tmp_path: Path) -> None:
    assert _groups(tmp_path, [DECODE, CACHE], keep_servers=False) == [["decode"], ["cache"]]


@pytest.mark.parametrize(
    ("second", "why"),
    [
        (item("cache", ["A"], ["cache-probe"], gate="reuse", repeats=3), "another set of arms"),
        (item("cache", ["A", "B"], ["cache-probe"], gate="reuse", repeats=2), "another number of blocks"),
        (
            item("cache", ["A", "B"], ["cache-probe"], gate="reuse", repeats=3, overrides={"recipe.slots": 4}),
            "another recipe",
        ),
        (
            item("cache", ["A", "B"], ["cache-probe"], gate="reuse", repeats=3, depends_on=["decode"]),
            "it waits on the first",
        ),
        (
            item("more", ["A", "B"], ["decode"], contexts=[2048], gate="speed", repeats=3),
            "the same gate: one server run counted twice",
        ),
        (item("cache", ["A", "B"], ["tool-loop"], repeats=3), "another launch (tool flags)"),
        (item("cache", ["A", "B"], ["decode"], repeats=3, retries=1), "retries"),
        (item("cache", ["A", "B"], ["cache-probe"], gate="reuse", max_blocks=6), "an adaptive item"),
    ],
)
def test_what_keeps_an_item_off_a_kept_server(tmp_path: Path, second: dict[str, Any], why: str) -> None:
    assert _groups(tmp_path, [DECODE, second]) == [["decode"], [second["id"]]], why


def test_a_cold_cache_probe_follows_only_where_the_runtime_can_empty_the_cache(tmp_path: Path) -> None:
    """llama.cpp has no flush that works without --slot-save-path (it answers 501), so an
    item with a cache probe gets servers of its own there; a decode item still follows."""
    llama = [{"name": "ll", "adapter": "llamacpp", "argv": ["/opt/llama-server"]}]
    arms = [
        arm("A", runtime="ll", context=4096, recipe={"slots": 1}),
        arm("B", runtime="ll", context=4096, recipe={"slots": 2}),
    ]
    ttft = item("ttft", ["A", "B"], ["decode"], contexts=[2048], gate="ttft", repeats=3)
    assert _groups(tmp_path, [DECODE, CACHE], runtimes=llama, arms=arms) == [["decode"], ["cache"]]
    assert _groups(tmp_path, [DECODE, ttft], runtimes=llama, arms=arms) == [["decode", "ttft"]]


def test_a_group_runs_on_past_finished_items_and_stops_at_the_first_that_cannot_join(tmp_path: Path) -> None:
    third = item("third", ["A", "B"], ["decode"], contexts=[2048], gate="ttft", repeats=3)
    lone = item("lone", ["A"], ["decode"], repeats=3)
    assert _groups(tmp_path, [DECODE, CACHE, third]) == [["decode", "cache", "third"]]
    assert _groups(tmp_path, [DECODE, lone, CACHE]) == [["decode"], ["lone"], ["cache"]]


def test_the_plan_counts_one_start_per_arm_and_block_for_a_group(tmp_path: Path) -> None:
    from cli.plan import plan_lines
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(
        campaign_file(
            "groups",
            arms=[arm("A", context=4096), arm("B", context=4096, recipe={"slots": 2})],
            gates=[DECODE_GATE, REUSE_GATE],
            queue=[DECODE, CACHE],
            runtimes=[sim()],
        )
    )
    lines = plan_lines(load_campaign(path))
    assert "on decode's servers (kept: no start of its own)" in lines[1]
    assert lines[-1].endswith("6 server starts in all")
