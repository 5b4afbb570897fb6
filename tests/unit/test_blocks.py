"""Blocks: each repeat of a queue item is a block in which every arm gets its own server
start, in an order drawn from the campaign's seed; the order, the block's id and the
hashes of the settings and recipes are stored on every attempt and carried by every row
of the measurement frame. A resumed attempt runs with its own stored overrides, and an
arm whose every request failed fails its item (and `campaign run` exits 1)."""

from __future__ import annotations

from pathlib import Path

from tests.campaigns import arm, campaign_file, sim
from tests.campaigns import item as queue_item


def _campaign(name: str, seed: int, arms: str, queue: list[dict], more_arms: list[dict] | None = None) -> str:
    """Arms `arms` (one letter each, slots 1, 2, ...) on a simulator twenty times faster."""
    return campaign_file(
        name,
        seed=seed,
        default_max_tokens=8,
        runtimes=[sim(profile={"time_scale": 20.0})],
        arms=_arms(arms) + (more_arms or []),
        queue=queue,
    )


def _spec(text: str, tmp_path: Path, name: str = "c.toml"):  # type: ignore[no-untyped-def]
    from flows.resolve import load_campaign

    path = tmp_path / name
    path.write_text(text)
    return path, load_campaign(path)


def _arms(ids: str) -> list[dict]:
    return [arm(a, context=4096, recipe={"slots": i + 1}) for i, a in enumerate(ids)]


def _seed_with_varying_order(item_key: str, arms: list[str], blocks: int) -> int:
    """The first campaign seed whose blocks do not all run in one order."""
    from flows.blocks import block_order

    return next(s for s in range(100) if len({tuple(block_order(s, item_key, b, arms)) for b in range(blocks)}) > 1)


# -- the order: a permutation per block, reproducible from the seed -----------------------------


def test_block_plan_runs_block_by_block_with_one_id_per_block(tmp_path: Path) -> None:
    from flows.blocks import block_order, block_plan
    from flows.overrides import with_item_overrides

    queue = [queue_item("k", ["A", "B", "C"], ["decode"], contexts=[1024], repeats=3, overrides={"repeats": 2})]
    _, spec = _spec(_campaign("plan", 5, "ABC", queue), tmp_path)
    item = spec.item("k")
    plan = block_plan(spec, item)
    order = {b: block_order(5, "k", b, ["A", "B", "C"]) for b in range(3)}
    assert [(s.block.index, s.arm_id) for s in plan] == [(b, a) for b in range(3) for a in order[b]]
    for s in plan:
        assert s.block.order == order[s.block.index].index(s.arm_id)
    settings = {s.block.settings_hash for s in plan}
    assert len(settings) == 1 and len(next(iter(settings))) == 16  # common to all arms
    ids = {b: {s.block.id for s in plan if s.block.index == b} for b in range(3)}
    assert all(len(v) == 1 for v in ids.values()) and len({next(iter(v)) for v in ids.values()}) == 3
    assert ids[0] == {f"k/b0/{next(iter(settings))[:8]}"}
    recipes = {s.arm_id: s.block.recipe_hash for s in plan}
    assert len(set(recipes.values())) == 3  # three recipes (slots 1, 2, 3)

    # other settings (a rerun's --set): new settings hash, new block ids, same recipes
    rerun = with_item_overrides(spec, "k", {"max_tokens": 12})
    again = block_plan(rerun, rerun.item("k"))
    assert {s.block.settings_hash for s in again} != settings
    assert not {s.block.id for s in again} & {s.block.id for s in plan}
    assert {s.arm_id: s.block.recipe_hash for s in again} == recipes
    # a recipe.* rerun moves the recipes, not the settings
    slots = with_item_overrides(spec, "k", {"recipe.slots": 8})
    moved = block_plan(slots, slots.item("k"))
    assert {s.block.settings_hash for s in moved} == settings
    assert all(s.block.recipe_hash != recipes[s.arm_id] for s in moved)


def test_a_probe_runs_settings_are_its_parameters_not_the_items(tmp_path: Path) -> None:
    """Two items feeding one gate that run decode at 32K with the same parameters give
    the same cell settings even when one also runs the cache probe, more contexts, more
    blocks, other modes or more timed requests per run; another max_tokens or another simulator profile is another cell."""
    from flows.overrides import probe_params, probe_settings_hash

    queue = [
        queue_item("a", ["A"], ["decode"], contexts=[2048]),
        queue_item(
            "b",
            ["B"],
            ["cache-probe", "decode"],
            contexts=[1024, 2048],
            modes=["canonical", "greedy"],
            repeats=3,
            overrides={"repeats": 2},
        ),
    ]
    _, spec = _spec(_campaign("cells", 1, "AB", queue), tmp_path)
    a, b = spec.item("a"), spec.item("b")

    def cell(item, overrides, context=2048):  # type: ignore[no-untyped-def]
        merged = {**item.overrides, **overrides}
        return probe_settings_hash("decode", probe_params(spec, item, "decode", context, merged, 4096), merged)

    assert cell(a, {}) == cell(b, {})  # b's `repeats = 2` override is decode's trials: a sample size
    assert cell(a, {"max_tokens": 12}) != cell(b, {})
    assert cell(a, {"sim.decode_tps": 300.0}) != cell(a, {})
    assert cell(b, {}, 1024) != cell(b, {}, 2048)


def test_a_file_a_probe_reads_is_its_content_in_the_settings(tmp_path: Path) -> None:
    """A trace is a setting by what it holds: the same trace at another path (or on
    another host) is one cell, the trace edited in place is another."""
    import shutil

    from arms.probes.load_params import LoadParams
    from flows.overrides import probe_settings_hash

    trace = tmp_path / "agents.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n')
    elsewhere = tmp_path / "copy" / "agents.jsonl"
    elsewhere.parent.mkdir()
    shutil.copy(trace, elsewhere)

    def cell(path: Path) -> str:
        return probe_settings_hash("load", LoadParams(profile="trace", trace=str(path)), {})

    before = cell(trace)
    assert cell(elsewhere) == before
    trace.write_text('{"timestamp": 0, "input_length": 1000, "output_length": 8, "hash_ids": [0, 1]}\n')
    assert cell(trace) != before


# -- through a real campaign: stored on the attempts, carried by the frame ------------------------


# -- a resumed attempt runs with its own overrides ---------------------------------------------------


# -- an arm whose every request failed fails its item; `campaign run` exits 1 -----------------------
