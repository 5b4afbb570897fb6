"""Queue-item overrides are checked, not stored and ignored: a misspelled key in a campaign
file or in `campaign rerun --set` exits 2 with the valid keys listed, and a recipe field
given with --set reaches the server's launch (and is shown) or is refused with a reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flows.overrides import check_campaign, check_rerun
from flows.resolve import load_campaign
from tests.campaigns import arm, campaign_file, inline, item
from tests.paths import ROOT


def _campaign(overrides: str) -> str:
    return campaign_file(
        "ovr",
        default_max_tokens=16,
        arms=[arm("B", context=4096, recipe={"slots": 2})],
        queue=[
            item("decode", ["B"], ["decode"], title="decode 1K", contexts=[1024], overrides=inline(overrides)),
            item(
                "again",
                ["B"],
                ["decode"],
                title="decode 1K, 4 slots",
                contexts=[1024],
                confirms="decode",
                change={"slots": 4},
                overrides={"repeats": 1},
            ),
        ],
    )


def _spec(tmp_path: Path, overrides: str = "repeats = 1, max_tokens = 8") -> tuple[Path, object]:
    path = tmp_path / "ovr.toml"
    path.write_text(_campaign(overrides))
    return path, load_campaign(path)


def test_a_misspelled_override_in_a_campaign_file_names_the_valid_keys(tmp_path: Path) -> None:
    _, spec = _spec(tmp_path, "repeat = 3")
    (problem,) = check_campaign(spec)
    assert problem.startswith(
        "queue[0] ('decode 1K').overrides: unknown key 'repeat'; valid keys: probe parameters of decode: "
    )
    assert "repeats" in problem and "max_tokens" in problem and "recipe.<field>" in problem and "sim.<field>" in problem
    _, spec = _spec(tmp_path, '"sim.decode_tpz" = 1.0, contexts = [1]')  # (recipe.* keys: campaign.core.schema)
    problems = check_campaign(spec)
    assert len(problems) == 2
    assert "'sim.decode_tpz' is not a simulator profile field" in problems[0]
    assert "'contexts' is set by the queue item's 'contexts'" in problems[1]
    _, spec = _spec(tmp_path, 'max_tokens = "many"')
    (problem,) = check_campaign(spec)
    assert "decode: max_tokens: found 'many'" in problem
    _, spec = _spec(tmp_path, 'repeats = 2, "recipe.slots" = 3, "sim.decode_tps" = 90.0')
    assert check_campaign(spec) == []


def test_rerun_sets_are_checked_and_recipe_fields_applied_or_refused(tmp_path: Path) -> None:
    _, spec = _spec(tmp_path)
    item, confirm = spec.queue  # type: ignore[attr-defined]
    checked = check_rerun(spec, item, {"max_token": 96})
    assert checked.problems and "unknown key 'max_token'" in checked.problems[0] and "max_tokens" in checked.problems[0]
    checked = check_rerun(spec, item, {"slots": 8, "max_tokens": 12})
    assert checked.problems == []
    assert checked.overrides == {"recipe.slots": 8, "max_tokens": 12}
    assert checked.notes == ["recipe slots: B: 2 -> 8 (the servers are launched with it)"]
    checked = check_rerun(spec, item, {"slots": 0})
    assert checked.problems and "recipe of arm 'B': slots: found 0" in checked.problems[0]
    checked = check_rerun(spec, item, {"prefix_cache": 256})  # MiB elsewhere: a bare number is no size here
    assert checked.problems == [
        """--set: 'recipe.prefix_cache': found 256, expected: a size with its unit: write "256M" or "256MiB" ("256G" for GiB, "256B" for bytes)"""
    ]
    assert check_rerun(spec, item, {"prefix_cache": "256M"}).problems == []
    checked = check_rerun(spec, confirm, {"recipe.prefill_chunk": 256})
    assert checked.problems == [
        "--set recipe.prefill_chunk: refused: 'again' is a confirmatory item that changes only 'slots'; "
        "rerun 'decode' with --set recipe.prefill_chunk=... instead"
    ]


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect")}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_decode_trials_keep_their_file_key_and_never_take_another_probes_trials(tmp_path: Path) -> None:
    """decode counts its timed requests in `trials` (code) under the file key `repeats`: an
    item's `overrides = { repeats = 3, trials = 5 }` gives decode 3 and tool-loop 5, as it
    always has, and the parameters survive the trip to the probe task (dumped, re-read)."""
    from arms.probes import registry as probes
    from campaign.core.states import ProbeName
    from flows.overrides import probe_params

    _, spec = _spec(tmp_path, "repeats = 3, trials = 5")
    item = spec.queue[0].model_copy(update={"probes": [ProbeName.DECODE, ProbeName.TOOL_LOOP]})
    decode = probe_params(spec, item, ProbeName.DECODE, 1024, dict(item.overrides))
    tools = probe_params(spec, item, ProbeName.TOOL_LOOP, 1024, dict(item.overrides))
    assert decode.trials == 3 and tools.trials == 5
    params = probes.get(ProbeName.DECODE).params
    assert params.model_validate_json(decode.model_dump_json()).trials == 3
    assert (
        probes.get(ProbeName.DECODE).keys["repeats"] == "trials" and "trials" not in probes.get(ProbeName.DECODE).keys
    )


def test_override_keys_are_parsed_once_into_recipe_simulator_and_probe() -> None:
    """`recipe.*` sets the servers' recipe, `sim.*` the simulator's profile, anything else
    a probe parameter; the settings hash reads the non-recipe keys as written."""
    from campaign.core.schema import OverrideKeys

    parts = OverrideKeys.of({"recipe.slots": 4, "sim.decode_tps": 90.0, "max_tokens": 64, "recipes": 1})
    assert dict(parts.recipe) == {"slots": 4} and dict(parts.sim) == {"decode_tps": 90.0}
    assert dict(parts.probe) == {"max_tokens": 64, "recipes": 1}  # no prefix: a probe's key (or a mistake)
    assert parts.without_recipe() == {"max_tokens": 64, "recipes": 1, "sim.decode_tps": 90.0}
    assert parts.sim_keys() == {"sim.decode_tps": 90.0}
