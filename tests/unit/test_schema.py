"""Campaign-file validation: every error names the file, the field path, found and expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.core.schema import BlockBudget, CampaignFileError
from campaign.core.units import parse_size
from flows.resolve import load_campaign
from tests.campaigns import arm, campaign_file, gate, item, problems, simulator, write_campaign

GOOD = campaign_file(
    runtimes=[simulator()],
    arms=[arm("A", context=4096, recipe={"slots": 2}), arm("B", context=4096)],
    gates=[gate("g", "threshold", {"metric": "decode_tps", "value": 0.9}, ["A"])],
    queue=[item("one", ["A"], ["decode"], gate="g"), item("two", ["B"], ["cache-probe"], depends_on=["one"])],
)


def test_good_file_loads(tmp_path: Path) -> None:
    spec = load_campaign(write_campaign(tmp_path, GOOD))
    assert [a.id for a in spec.arms] == ["A", "B"]
    assert spec.arm("A").recipe.slots == 2
    assert spec.item("two").depends_on == ["one"]


def test_model_sampling_takes_length_controls_sent_in_both_modes(tmp_path: Path) -> None:
    from arms.probes.base import ProbeTarget
    from arms.runtimes import catalog as registry
    from campaign.core.states import Mode

    text = GOOD.replace(
        "bits_per_weight = 4.5",
        "bits_per_weight = 4.5\nsampling = { temperature = 0.7, ignore_eos = true, min_tokens = 32 }",
    )
    model = load_campaign(write_campaign(tmp_path, text)).models[0]
    target = ProbeTarget.speaking(
        registry.get("simulator"), base_url="http://x", model="m", sampling=model.sampling.model_dump(exclude_none=True)
    )
    assert target.sampling_for(Mode.CANONICAL) == {"temperature": 0.7, "ignore_eos": True, "min_tokens": 32}
    assert target.sampling_for(Mode.GREEDY) == {"temperature": 0.0, "ignore_eos": True, "min_tokens": 32}
    (msg,) = problems(tmp_path, text.replace("min_tokens = 32", "min_tokens = -1"))
    assert msg.startswith("models[0]") and "sampling.min_tokens" in msg


def test_bad_slot_type_names_path_found_and_expected(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, GOOD.replace("recipe = { slots = 2 }", 'recipe = { slots = "four" }'))
    assert msg.startswith("arms[0] (id 'A').recipe.slots: found 'four', expected")
    assert "integer" in msg


def test_unknown_key_is_refused_with_the_allowed_keys(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, GOOD.replace("recipe = { slots = 2 }", "recipe = { slotz = 2 }"))
    assert "arms[0] (id 'A').recipe: unknown key 'slotz'" in msg
    assert "slots" in msg and "prefill_chunk" in msg


def test_missing_runtime_reference(tmp_path: Path) -> None:
    (msg,) = problems(
        tmp_path, GOOD.replace('runtime = "sim"\ncontext = 4096\nrecipe', 'runtime = "vllm"\ncontext = 4096\nrecipe')
    )
    assert msg == "arms[0] (id 'A').runtime: found 'vllm', expected one of the runtimes: sim"


def test_queue_item_naming_a_missing_gate(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, GOOD.replace('gate = "g"', 'gate = "nope"'))
    assert msg == "queue[0] ('one').gate: found 'nope', expected one of the gates: g"


def test_dependency_cycle(tmp_path: Path) -> None:
    text = GOOD.replace('probes = ["decode"]\ngate = "g"', 'probes = ["decode"]\ngate = "g"\ndepends_on = ["two"]')
    (msg,) = problems(tmp_path, text)
    assert msg.startswith("queue.depends_on: dependency cycle")
    assert "one -> two -> one" in msg or "two -> one -> two" in msg


def test_unknown_predicate_and_bad_params(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, GOOD.replace('predicate = "threshold"', 'predicate = "thresh"'))
    assert "gates[0] (id 'g').predicate: found 'thresh', expected one of:" in msg
    missing, unknown = problems(tmp_path, GOOD.replace("value = 0.9", "valu = 0.9"))
    assert missing == "gates[0] (id 'g').params.value: missing required key 'value'"
    assert unknown.startswith(
        "gates[0] (id 'g').params: unknown parameter 'valu' for predicate 'threshold'; expected one of:"
    )


def test_unknown_probe_and_adapter(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, GOOD.replace('probes = ["decode"]', 'probes = ["decod"]'))
    assert msg.startswith("queue[0] (id 'one').probes[0]: found 'decod', expected")
    (msg,) = problems(tmp_path, GOOD.replace('adapter = "simulator"', 'adapter = "vllmm"'))
    assert "runtimes[0] (name 'sim').adapter: found 'vllmm'" in msg


def test_toml_syntax_error_and_missing_file(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, GOOD + "\n[[arms]\n")
    assert msg.startswith("TOML syntax error")
    with pytest.raises(CampaignFileError, match="file not found"):
        load_campaign(tmp_path / "absent.toml")


def test_sizes() -> None:
    assert parse_size("8G") == 8 * 1024**3
    assert parse_size("48GB") == 48 * 1024**3
    assert parse_size("512MiB") == 512 * 1024**2
    assert parse_size(1000) == 1000
    with pytest.raises(ValueError):
        parse_size("lots")


def test_a_size_written_as_a_bare_number_is_refused_with_its_units(tmp_path: Path) -> None:
    """`prefix_cache = 256` means 256 MiB to someone used to llama.cpp (its cache is in MiB)
    and would be read as 256 bytes: a bare size is refused in the recipe, in `recipe.*`
    overrides and in a confirmatory `change`, naming the file, the field and the units; 0
    and strings load, and a stored spec's bytes still read back."""
    (msg,) = problems(tmp_path, GOOD.replace("recipe = { slots = 2 }", "recipe = { slots = 2, prefix_cache = 256 }"))
    assert (
        msg
        == """arms[0] (id 'A').recipe.prefix_cache: found 256, expected: a size with its unit: write "256M" or "256MiB" ("256G" for GiB, "256B" for bytes)"""
    )
    text = GOOD.replace(
        'probes = ["decode"]\ngate = "g"',
        'probes = ["decode"]\ngate = "g"\noverrides = { "recipe.session_cache_cap" = 48 }',
    )
    (msg,) = problems(tmp_path, text)
    assert msg.startswith(
        """queue[0] (id 'one').overrides."recipe.session_cache_cap": found 48, expected: a size with its unit: write "48M\""""
    )
    for written, read in (('"256M"', 256 * 1024**2), ('"4096B"', 4096), ("0", 0)):
        spec = load_campaign(
            write_campaign(
                tmp_path, GOOD.replace("recipe = { slots = 2 }", f"recipe = {{ slots = 2, prefix_cache = {written} }}")
            )
        )
        assert spec.arm("A").recipe.prefix_cache == read
    stored = spec.model_dump_json(by_alias=True).replace('"prefix_cache":0', '"prefix_cache":268435456')
    assert (
        type(spec).model_validate_json(stored).arm("A").recipe.prefix_cache == 256 * 1024**2
    )  # a stored spec holds bytes


def test_examples_are_valid(examples: Path) -> None:
    for path in sorted(examples.glob("*.toml")):
        load_campaign(path)


def test_unknown_keys_list_seed_confidence_and_exploratory(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, GOOD.replace('name = "t"', 'name = "t"\nsede = 3'))
    assert msg.startswith("campaign: unknown key 'sede'; expected one of:") and "seed" in msg and "confidence" in msg
    (msg,) = problems(tmp_path, GOOD.replace('subjects = ["A"]', 'subjects = ["A"]\nexploratry = true'))
    assert msg.startswith("gates[0] (id 'g'): unknown key 'exploratry'; expected one of:") and "exploratory" in msg
    spec = load_campaign(
        write_campaign(
            tmp_path,
            GOOD.replace('name = "t"', 'name = "t"\nseed = 7\nconfidence = 0.9').replace(
                'subjects = ["A"]', 'subjects = ["A"]\nexploratory = true'
            ),
        )
    )
    assert (spec.campaign.seed, spec.campaign.confidence, spec.gates[0].exploratory) == (7, 0.9, True)


def test_an_items_blocks_are_read_under_their_earlier_name_too(tmp_path: Path) -> None:
    """`blocks = 3` and `repeats = 3` (the key's earlier name) plan the same three blocks;
    naming both is refused with the field's path, since they are one number."""
    with_blocks = campaign_file(
        runtimes=[simulator()],
        arms=[arm("A", context=4096), arm("B", context=4096)],
        gates=[gate("g", "threshold", {"metric": "decode_tps", "value": 0.9}, ["A"])],
        queue=[item("one", ["A"], ["decode"], gate="g", blocks=3)],
    )
    old_name = with_blocks.replace("blocks = 3", "repeats = 3")
    assert "repeats = 3" in old_name
    for name, text in (("new", with_blocks), ("old", old_name)):
        (tmp_path / name).mkdir()
        spec = load_campaign(write_campaign(tmp_path / name, text))
        assert spec.blocks(spec.item("one")) == BlockBudget(least=3, most=3, adaptive=False), name
    both = with_blocks.replace("blocks = 3", "blocks = 3\nrepeats = 3")
    (tmp_path / "both").mkdir()
    with pytest.raises(CampaignFileError) as err:
        load_campaign(write_campaign(tmp_path / "both", both))
    assert "queue" in str(err.value) and "set blocks only" in str(err.value)
