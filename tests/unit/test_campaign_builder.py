"""The tests' campaign builder (`tests.campaigns`) writes files the loader takes as written."""

from __future__ import annotations

import tomllib
from pathlib import Path

from flows.resolve import load_campaign
from tests.campaigns import Raw, arm, campaign_file, gate, inline, item, sim, write


def test_a_built_file_reads_back_as_its_parts_and_loads() -> None:
    text = campaign_file(
        "b",
        default_max_tokens=16,
        runtimes=[sim(decode_tps=60.0, profile={"time_scale": 20.0}, device="gpu0")],
        arms=[arm("A", recipe={"slots": 2}), arm("B", context=4096, recipe={"slots": 4, "prefix_cache": "8G"})],
        gates=[gate("g", "relative_improvement", {"metric": "decode_tps", "min_gain": 0.1}, ["B"], ["A"])],
        queue=[
            item("q", ["A", "B"], ["decode"], gate="g", repeats=3, overrides={"sim.time_scale": 10, "max_tokens": 8})
        ],
    )
    data = tomllib.loads(text)
    assert data["campaign"] == {"name": "b", "default_max_tokens": 16}
    assert data["runtimes"][0]["options"]["profile"] == {"prefill_tps": 20000.0, "decode_tps": 60.0, "time_scale": 20.0}
    assert data["queue"][0]["overrides"] == {"sim.time_scale": 10, "max_tokens": 8}
    assert data["gates"][0]["baseline"] == ["A"] and data["arms"][1]["recipe"]["prefix_cache"] == "8G"


def test_raw_fragments_pass_through_as_written(tmp_path: Path) -> None:
    text = campaign_file(
        arms=[arm("A")], queue=[item("q", ["A"], ["decode"], overrides=inline('"sim.decode_tps" = 1.0, repeats = 1'))]
    )
    assert tomllib.loads(text)["queue"][0]["overrides"] == {"sim.decode_tps": 1.0, "repeats": 1}
    assert Raw("[1, 2]") in campaign_file(arms=[arm("A", tags=Raw("[1, 2]"))])
    spec = load_campaign(write(tmp_path / "c.toml", text))
    assert [q.key for q in spec.queue] == ["q"] and spec.arm("A").context == 8192
