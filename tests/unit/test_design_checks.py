"""Design checks at load time: an ablation switches one mechanism and shares blocks with its
subject; the items feeding one gate never pool unlike settings."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from campaign.core.mechanisms import MECHANISMS
from campaign.core.schema import CampaignFileError
from campaign.core.serving import Recipe
from flows.resolve import load_campaign
from tests.campaigns import campaign_file, gate, item, problems, simulator, table, write_campaign

HEAD = campaign_file(runtimes=[simulator()])


def arm(arm_id: str, recipe: str, context: int = 8192, model: str = 'model = "m"') -> str:
    return f'\n[[arms]]\nid = "{arm_id}"\n{model}\nruntime = "sim"\ncontext = {context}\nrecipe = {{ {recipe} }}\n'


ARMS = (
    arm("A", "slots = 2")
    + arm("B", 'slots = 4, prefill_chunk = 2048, prefix_cache = "8G", session_cache_cap = "128M"')
    + arm("B-nocache", "slots = 4, prefill_chunk = 2048")
    + arm("B-2slots", 'slots = 2, prefill_chunk = 2048, prefix_cache = "8G", session_cache_cap = "128M"')
)

CREDIT = table(
    "gates", gate("credit", "attribution", {"claim": "cache", "ablation": "B-nocache"}, ["B"], ["A", "B-nocache"])
)

LOAD = table("queue", item("load", ["A", "B", "B-nocache", "B-2slots"], ["agent-load"], title="agent load"))


def campaign(*parts: str, arms: str = ARMS) -> str:
    return HEAD + arms + "".join(parts)


# -- the table ------------------------------------------------------------------------------------


def test_every_mechanism_names_recipe_fields_and_none_shares_one() -> None:
    fields = [f for names in MECHANISMS.values() for f in names]
    assert set(fields) <= set(Recipe.model_fields)
    assert len(fields) == len(set(fields))
    assert set(MECHANISMS) == {"cache", "slots", "speculation", "offloads"}


# -- ablations ------------------------------------------------------------------------------------


def test_a_correct_ablation_loads(tmp_path: Path) -> None:
    slots = CREDIT.replace('"credit"', '"credit-slots"').replace(
        'claim = "cache", ablation = "B-nocache"', 'claim = "slots", ablation = "B-2slots"'
    )
    slots = slots.replace('baseline = ["A", "B-nocache"]', 'baseline = ["A", "B-2slots"]')
    spec = load_campaign(write_campaign(tmp_path, campaign(CREDIT, slots, LOAD)))
    assert [g.id for g in spec.gates] == ["credit", "credit-slots"]


def test_an_ablation_may_be_the_baseline_itself(tmp_path: Path) -> None:
    """llama.cpp S3 vs S1: the subject differs from its only baseline by the slots."""
    gate = CREDIT.replace('claim = "cache", ablation = "B-nocache"', 'claim = "slots", ablation = "B-2slots"')
    gate = gate.replace('baseline = ["A", "B-nocache"]', 'baseline = ["B-2slots"]')
    load_campaign(write_campaign(tmp_path, campaign(gate, LOAD)))


def test_an_ablation_differing_in_slots_is_refused(tmp_path: Path) -> None:
    arms = ARMS.replace(
        'id = "B-nocache"\nmodel = "m"\nruntime = "sim"\ncontext = 8192\nrecipe = { slots = 4',
        'id = "B-nocache"\nmodel = "m"\nruntime = "sim"\ncontext = 8192\nrecipe = { slots = 1',
    )
    (msg,) = problems(tmp_path, campaign(CREDIT, LOAD, arms=arms))
    assert msg == (
        "gates[0] (id 'credit'): ablation arm 'B-nocache' differs from subject 'B' in slots (B: 4, B-nocache: 1), "
        "not only in the cache fields (prefix_cache, session_cache_cap)"
    )


def test_an_ablation_differing_in_context_and_quant_is_refused(tmp_path: Path) -> None:
    head = HEAD.replace("[[runtimes]]", '[[models]]\nname = "m"\nquant = "q8"\nbits_per_weight = 8.5\n\n[[runtimes]]')
    arms = (
        arm("A", "slots = 2", model='model = "m"\nquant = "q4"')
        + arm("B", 'slots = 4, prefix_cache = "8G"', model='model = "m"\nquant = "q4"')
        + arm("B-nocache", "slots = 4", context=4096, model='model = "m"\nquant = "q8"')
    )
    load = LOAD.replace('"B-nocache", "B-2slots"]', '"B-nocache"]')
    with pytest.raises(CampaignFileError) as info:
        load_campaign(write_campaign(tmp_path, head + arms + CREDIT + load))
    (msg,) = info.value.problems
    assert (
        "ablation arm 'B-nocache' differs from subject 'B' in quant (B: q4, B-nocache: q8); context (B: 8192, B-nocache: 4096)"
        in msg
    )


def test_an_ablation_that_switches_nothing_is_refused(tmp_path: Path) -> None:
    gate = CREDIT.replace('ablation = "B-nocache"', 'ablation = "B-2slots"').replace(
        '"A", "B-nocache"]', '"A", "B-2slots"]'
    )
    (msg,) = problems(tmp_path, campaign(gate, LOAD))
    # B-2slots keeps the cache and changes the slots: both halves of the rule are broken
    assert "ablation arm 'B-2slots' differs from subject 'B' in slots (B: 4, B-2slots: 2)" in msg
    same = ARMS + arm("B-same", 'slots = 4, prefill_chunk = 2048, prefix_cache = "8G", session_cache_cap = "128M"')
    gate = CREDIT.replace('ablation = "B-nocache"', 'ablation = "B-same"').replace(
        '"A", "B-nocache"]', '"A", "B-same"]'
    )
    (msg,) = problems(tmp_path, campaign(gate, LOAD.replace('"B-2slots"]', '"B-2slots", "B-same"]'), arms=same))
    assert msg == (
        "gates[0] (id 'credit'): ablation arm 'B-same' does not differ from subject 'B' in the cache fields "
        "(prefix_cache, session_cache_cap): it does not switch the cache off"
    )


def test_an_unknown_claim_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    (msg,) = problems(tmp_path, campaign(CREDIT.replace('claim = "cache"', 'claim = "kv"'), LOAD))
    assert msg == (
        "gates[0] (id 'credit').params.claim: found 'kv', expected one of the mechanisms a gate may credit: "
        "cache, offloads, slots, speculation"
    )


def test_checks_inside_all_of_are_read_too(tmp_path: Path) -> None:
    gate = textwrap.dedent(
        """
        [[gates]]
        id = "both"
        predicate = "all_of"
        subjects = ["B"]
        baseline = ["A", "B-nocache"]
        [gates.params]
        checks = [
          { predicate = "relative_improvement", params = { metric = "ttft_s", min_gain = 0.1, higher_is_better = false } },
          { predicate = "attribution", params = { claim = "kv", ablation = "B-nocache" } },
          { predicate = "attribution", params = { claim = "slots", ablation = "B-nocache" } },
        ]
        """
    )
    unknown, wrong = problems(tmp_path, campaign(gate, LOAD))
    assert unknown.startswith(
        "gates[0] (id 'both').params.checks[1].params.claim: found 'kv', expected one of the mechanisms"
    )
    assert wrong.startswith(
        "gates[0] (id 'both').params.checks[2]: ablation arm 'B-nocache' differs from subject 'B' in prefix_cache"
    )
    assert wrong.endswith("not only in the slots field (slots)")


def test_an_ablation_that_shares_no_item_with_its_subject_is_refused(tmp_path: Path) -> None:
    apart = table("queue", item("load", ["A", "B"], ["agent-load"], title="A and B")) + table(
        "queue", item("ablations", ["B-nocache", "B-2slots"], ["agent-load"], title="the ablations, later")
    )
    (msg,) = problems(tmp_path, campaign(CREDIT, apart))
    assert msg.startswith(
        "gates[0] (id 'credit'): ablation arm 'B-nocache' shares no block with subject 'B': no queue item lists both"
    )
    assert "load, ablations" in msg
    # fed by an item: only the items feeding it count, though another item lists both
    fed = LOAD + table("queue", item("credited", ["A", "B"], ["agent-load"], title="B alone", gate="credit"))
    (msg,) = problems(tmp_path, campaign(CREDIT, fed))
    assert "no queue item feeding gate 'credit' lists both (feeding it: credited)" in msg


def test_an_item_override_that_undoes_the_ablation_is_refused(tmp_path: Path) -> None:
    load = LOAD + 'overrides = { "recipe.prefix_cache" = "8G", "recipe.session_cache_cap" = "128M" }\n'
    (msg,) = problems(tmp_path, campaign(CREDIT, load))
    assert msg == (
        "gates[0] (id 'credit'): as queue[0] (id 'load') runs them, ablation arm 'B-nocache' does not differ from "
        "subject 'B' in the cache fields (prefix_cache, session_cache_cap): it does not switch the cache off"
    )


# -- what one gate pools --------------------------------------------------------------------------

WIN = table(
    "gates",
    gate("win", "relative_improvement", {"metric": "decode_tps", "probe": "decode", "min_gain": 0.1}, ["B"], ["A"]),
)


def items(first: str = "", second: str = "", probes: str = '["decode"]') -> str:
    """Two items feeding gate 'win', both running B; `first` and `second` add lines to each."""
    return (
        f'\n[[queue]]\nid = "first"\ntitle = "first"\narms = ["A", "B"]\nprobes = {probes}\ngate = "win"\n{first}\n'
        f'\n[[queue]]\nid = "second"\ntitle = "second"\narms = ["B"]\nprobes = {probes}\ngate = "win"\n{second}\n'
    )


def test_items_feeding_one_gate_with_the_same_settings_load(tmp_path: Path) -> None:
    same = "overrides = { repeats = 3, max_tokens = 16 }"
    load_campaign(write_campaign(tmp_path, campaign(WIN, items(same, same))))


def test_a_sample_size_is_not_a_setting(tmp_path: Path) -> None:
    """decode's `repeats` (its timed requests per run) sizes each run's sample; runs of 3
    and of 5 requests measure one cell, so items differing only in it may feed one gate."""
    load_campaign(
        write_campaign(tmp_path, campaign(WIN, items("overrides = { repeats = 3 }", "overrides = { repeats = 5 }")))
    )


def test_two_items_pooling_different_recipes_for_one_arm_are_refused(tmp_path: Path) -> None:
    (msg,) = problems(
        tmp_path, campaign(WIN, items("", 'overrides = { "recipe.slots" = 2, "recipe.prefix_cache" = "16G" }'))
    )
    assert msg == (
        "queue[1] (id 'second').gate: gate 'win' is also fed by queue[0] (id 'first'), which runs arm 'B' with another "
        "recipe: slots (first: 4, second: 2); prefix_cache (first: 8G, second: 16G); one verdict must not pool unlike "
        "settings (give that recipe its own arm, or feed another gate)"
    )


def test_two_items_with_different_overrides_for_a_shared_probe_are_refused(tmp_path: Path) -> None:
    (msg,) = problems(
        tmp_path, campaign(WIN, items("overrides = { repeats = 3, max_tokens = 16 }", "overrides = { repeats = 3 }"))
    )
    assert msg == (
        "queue[1] (id 'second').overrides: gate 'win' is also fed by queue[0] (id 'first'), and both run probe decode "
        "but with other settings: max_tokens (first: 16, second: unset (the probe's default)); one verdict must not "
        "pool unlike settings (make them equal, or feed another gate)"
    )


def test_a_setting_of_another_probe_of_the_item_does_not_count(tmp_path: Path) -> None:
    first = table(
        "queue", item("first", ["A", "B"], ["decode", "tool-loop"], gate="win", overrides={"repeats": 3, "trials": 5})
    ) + table("queue", item("second", ["A", "B"], ["decode"], gate="win", overrides={"repeats": 3}))
    load_campaign(write_campaign(tmp_path, campaign(WIN, first)))


def test_a_confirmatory_item_must_not_feed_the_gate_of_the_item_it_confirms(tmp_path: Path) -> None:
    confirm = items("", 'confirms = "first"\nchange = { prefix_cache = "16G" }')
    (msg,) = problems(tmp_path, campaign(WIN, confirm))
    assert msg == (
        "queue[1] (id 'second').gate: found 'win', but this item confirms queue[0] (id 'first') (changing prefix_cache) "
        "and that item feeds 'win' too with the same arm B; a confirmatory run is compared with the item it confirms, "
        "never pooled with it in one verdict (feed another gate, or none)"
    )
    # fed to no gate (as examples/qwen38.toml's confirm-cap is), it loads
    load_campaign(write_campaign(tmp_path, campaign(WIN, confirm.replace('gate = "win"\nconfirms', "confirms"))))


def test_every_example_loads(examples: Path) -> None:
    paths = sorted(examples.glob("*.toml"))
    assert paths
    for path in paths:
        load_campaign(path)


# -- power: can the planned blocks pass at all? ---------------------------------------------------


def _comparisons(n_gates: int, repeats: int) -> str:
    gates = "".join(
        f'\n[[gates]]\nid = "g{i}"\npredicate = "relative_improvement"\n'
        f'params = {{ metric = "ttft_later_median_s", min_gain = 0.5 }}\nsubjects = ["B"]\nbaseline = ["A"]\n'
        for i in range(n_gates)
    )
    return (
        gates
        + LOAD.replace('arms = ["A", "B", "B-nocache", "B-2slots"]', 'arms = ["A", "B"]')
        + (f'gate = "g0"\nrepeats = {repeats}\n')
    )


def test_the_pass_bar_is_the_edge_of_the_gates_own_test() -> None:
    """Paired block log ratios whose mean clears the threshold by exactly `pass_bar` spreads
    give the paired test's one-sided p exactly alpha / family: the warning's number is the
    test's, not a rule of thumb."""
    import math
    import statistics

    from gates import blockstats
    from gates.rigor import alpha_of

    for blocks, family in ((3, 4), (5, 4), (3, 1), (8, 9)):
        bar = blockstats.pass_bar(blocks, family, 0.95)
        spread = 0.2
        noise = [(-1) ** k * (k + 1) for k in range(blocks)]
        mean, sd = statistics.fmean(noise), statistics.stdev(noise)
        threshold = math.log(0.5)
        logs = [threshold + bar * spread + (e - mean) / sd * spread for e in noise]
        est = blockstats.paired([math.exp(v) for v in logs], [1.0] * blocks)
        assert math.isclose(est.p_above(threshold), alpha_of(0.95) / family, rel_tol=1e-6), (blocks, family)
    assert round(blockstats.pass_bar(3, 4, 0.95), 1) == 5.1 and round(blockstats.pass_bar(5, 4, 0.95), 1) == 1.9
    assert blockstats.pass_bar(1, 4, 0.95) == math.inf


def test_three_blocks_under_holm_over_four_gates_are_warned_of_and_five_are_not(tmp_path: Path) -> None:
    from flows.design_warnings import design_warnings

    few = design_warnings(load_campaign(write_campaign(tmp_path, campaign(_comparisons(4, 3)))))
    assert len(few) == 4 and few[0] == (
        "gates[0] (id 'g0'): B meets A in 3 blocks; to pass Holm over up to 4 comparative gates, its gain must "
        "clear the threshold by 5.1 times the spread of the per-block log ratios between server runs; with 5 blocks "
        "(the items' repeats) a pass needs 1.9 spreads"
    ), few
    assert design_warnings(load_campaign(write_campaign(tmp_path, campaign(_comparisons(4, 5))))) == []
    # one gate alone: its own one-sided test at 3 blocks needs 2.5 spreads, no warning
    assert design_warnings(load_campaign(write_campaign(tmp_path, campaign(_comparisons(1, 3))))) == []


def test_fewer_blocks_than_a_gate_decides_on_are_warned_of_as_never_deciding(tmp_path: Path) -> None:
    from flows.design_warnings import design_warnings

    (one,) = design_warnings(load_campaign(write_campaign(tmp_path, campaign(_comparisons(1, 1)))))
    assert one.startswith(
        "gates[0] (id 'g0'): B meets A in 1 block, fewer than the 3 server runs a gate decides on: "
        "it can only be inconclusive; with 4 blocks (the items' repeats) a pass needs 1.6 spreads (its one-sided test)"
    ), one


def test_an_exploratory_gate_stays_out_of_the_family_it_is_warned_about(tmp_path: Path) -> None:
    from flows.design_warnings import design_warnings

    text = campaign(_comparisons(4, 3)).replace('id = "g3"\n', 'id = "g3"\nexploratory = true\n')
    warned = design_warnings(load_campaign(write_campaign(tmp_path, text)))
    assert "Holm over up to 3 comparative gates" in warned[0], warned
