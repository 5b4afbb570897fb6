"""The search: its table checked with field paths, its arms derived from their settings,
the loop's rules (base first, repeats reuse, failures recorded, budget, resume), the
nomination against the noise of one run, and the confirmation as ordinary gates."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from campaign.core.schema import CampaignSpec
from campaign.core.search import BEATS_BASE, CONFIRM_ITEM, SearchPlan, SearchState, is_trial_item
from flows.search_loop import SearchLoop, TrialOutcome, open_study
from gates.search_pick import Measured, pareto_front, pick, run_sd, search_gain
from tests.campaigns import arm, campaign_file, problems, write_campaign

SPACE = {
    "slots": {"low": 1, "high": 6},
    "prefill_chunk": {"choices": [256, 512, 1024]},
    "prefix_cache": {"choices": ["off", "1G"]},
}


def search(**over: Any) -> dict[str, Any]:
    out = {
        "base": "A",
        "budget": {"starts": 10},
        "objective": {"metric": "decode_tps", "probe": "decode"},
        "space": SPACE,
    }
    out.update(over)
    return out


def text(**over: Any) -> str:
    return campaign_file(arms=[arm("A", recipe={"slots": 2, "prefill_chunk": 512})], search=search(**over))


def spec_of(tmp_path: Path, **over: Any) -> CampaignSpec:
    from flows.resolve import load_campaign

    return load_campaign(write_campaign(tmp_path, text(**over)))


# -- the table ------------------------------------------------------------------------


def test_a_search_only_campaign_loads_and_plans(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    assert spec.queue == [] and spec.search is not None
    assert spec.search.grid_size() == 6 * 3 * 2


def test_unknown_field_is_refused_with_its_path(tmp_path: Path) -> None:
    found = problems(tmp_path, text(space={"slotz": {"low": 1, "high": 4}}))
    assert any("search.space" in p and "slotz" in p and "slots" in p for p in found), found


def test_a_range_end_the_recipe_refuses_is_named(tmp_path: Path) -> None:
    found = problems(tmp_path, text(space={"draft_k": {"low": 1, "high": 100}}))
    assert any(p.startswith("search.space.draft_k.high: found 100") for p in found), found


def test_a_field_the_runtime_ignores_is_refused(tmp_path: Path) -> None:
    body = campaign_file(
        runtimes=[{"name": "sim", "adapter": "external", "options": {"url": "http://127.0.0.1:9"}}],
        arms=[arm("A")],
        search=search(space={"slots": {"low": 1, "high": 4}}),
    )
    found = problems(tmp_path, body)
    assert any(p.startswith("search.space.slots: runtime 'sim' (external)") for p in found), found


def test_an_objective_its_probe_does_not_store_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, text(objective={"metric": "goodput_rps", "probe": "decode"}))
    assert any(p.startswith("search.objectives[0].probe: probe 'decode' does not store 'goodput_rps'") for p in found)
    found = problems(tmp_path, text(objective={"metric": "decode_tpz", "probe": "decode"}))
    assert any(p.startswith("search.objectives[0].metric: found 'decode_tpz'") for p in found), found


def test_a_missing_base_and_a_bad_budget_are_named(tmp_path: Path) -> None:
    found = problems(tmp_path, text(base="Z"))
    assert any(p.startswith("search.base: arm 'Z' does not exist") for p in found), found
    found = problems(tmp_path, text(budget={}))
    assert any("search.budget" in p and "starts, minutes" in p for p in found), found


def test_search_overrides_are_checked_as_an_items_are(tmp_path: Path) -> None:
    found = problems(tmp_path, text(overrides={"max_tokenz": 8}))
    assert any(p.startswith("search.overrides (as each trial runs them)") and "max_tokenz" in p for p in found), found


# -- arms, items and gates --------------------------------------------------------------


def test_a_trial_arms_id_comes_from_the_settings_it_serves(tmp_path: Path) -> None:
    plan = SearchPlan(spec_of(tmp_path))
    a = plan.arm_for({"slots": 4, "prefill_chunk": 1024, "prefix_cache": "1G"})
    b = plan.arm_for({"prefix_cache": "1024M", "slots": 4, "prefill_chunk": 1024})
    c = plan.arm_for({"slots": 5, "prefill_chunk": 1024, "prefix_cache": "1G"})
    assert a.arm_id == b.arm_id != c.arm_id and a.arm_id.startswith("S-")
    assert plan.arm_for(plan.base_params()).arm_id == "A"  # the base's settings are the base arm


def test_expand_adds_trials_then_the_confirmation_and_is_idempotent(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    plan = SearchPlan(spec)
    a = plan.arm_for({"slots": 4, "prefill_chunk": 1024, "prefix_cache": "1G"})
    b = plan.arm_for({"slots": 3, "prefill_chunk": 1024, "prefix_cache": "1G"})
    grown = plan.expand(SearchState(arms=(a, b), confirmed=(a.arm_id, b.arm_id)))
    keys = [q.key for q in grown.queue]
    assert keys == ["search-A", f"search-{a.arm_id}", f"search-{b.arm_id}", CONFIRM_ITEM]
    assert grown.item("search-A").blocks == 2 and grown.item(f"search-{a.arm_id}").blocks == 1
    confirm = grown.item(CONFIRM_ITEM)
    assert confirm.arms == ["A", a.arm_id, b.arm_id] and confirm.gate == BEATS_BASE
    assert confirm.also_gates == [f"search-vs-{b.arm_id}"]
    assert [q.key for q in grown.feeding(f"search-vs-{b.arm_id}")] == [CONFIRM_ITEM]  # never the trials' blocks
    assert grown.gate(BEATS_BASE).subjects == [a.arm_id] and grown.gate(BEATS_BASE).baseline == ["A"]
    again = SearchPlan(grown).expand(SearchState(arms=(a, b), confirmed=(a.arm_id, b.arm_id)))
    assert again.model_dump() == grown.model_dump()
    assert is_trial_item(f"search-{a.arm_id}") and not is_trial_item(CONFIRM_ITEM)


def test_ablations_set_each_field_back_to_the_bases(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, confirm={"ablate": True})
    plan = SearchPlan(spec)
    w = plan.arm_for({"slots": 4, "prefill_chunk": 1024, "prefix_cache": "off"})
    grown = plan.expand(SearchState(arms=(w,), confirmed=(w.arm_id,), ablated=("slots", "prefill_chunk")))
    ablate = grown.item("search-ablate")
    back_slots = plan.arm_for({"slots": 2, "prefill_chunk": 1024, "prefix_cache": "off"}).arm_id
    assert ablate.arms[0] == w.arm_id and back_slots in ablate.arms
    assert grown.gate("search-credit-slots").baseline == [back_slots]


# -- the loop -----------------------------------------------------------------------------


class Measure:
    """A generated measurement: the value a function of the params, noise-free, or a
    failure for the params `fails` says; counts the starts it was asked for."""

    def __init__(self, plan: SearchPlan, fails: Any = None):
        self.plan, self.fails, self.calls = plan, fails, []

    def __call__(self, arm: Any) -> TrialOutcome:
        self.calls.append(arm.arm_id)
        if self.fails and self.fails(arm.params):
            return TrialOutcome(reason="server did not start: exit 3")
        value = 10.0 * min(arm.params.get("slots", 2), 4) + (arm.params.get("prefill_chunk", 512) / 1024)
        n = 2 if arm.arm_id == self.plan.base.id else 1
        return TrialOutcome(tuple((value,) for _ in range(n)), seconds=1.0)


def loop_for(spec: CampaignSpec, storage: Any, measure: Any = None) -> tuple[SearchLoop, Measure]:
    plan = SearchPlan(spec)
    m = measure or Measure(plan)
    return SearchLoop(plan, open_study(storage, "t/search", plan.search), m), m


def test_the_base_runs_first_repeats_reuse_and_the_budget_holds(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, budget={"starts": 8}, sampler="random")
    loop, m = loop_for(spec, optuna.storages.InMemoryStorage())
    why = loop.run()
    assert m.calls[0] == "A" and why.startswith("budget spent: 8 of 8")
    assert len(m.calls) == 7 == len(set(m.calls))  # the base (2 starts) and 6 arms, none measured twice
    assert loop.starts() == 8


def test_a_failed_start_is_a_failed_trial_with_its_reason_never_a_zero(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, budget={"starts": 12}, sampler="random")
    plan = SearchPlan(spec)
    m = Measure(plan, fails=lambda p: p.get("prefix_cache") == "1G")
    loop, _ = loop_for(spec, optuna.storages.InMemoryStorage(), m)
    loop.run()
    failed = [t for t in loop.study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed and all(t.values is None and "exit 3" in t.user_attrs["reason"] for t in failed)
    assert all(m.calls.count(a) == 1 for a in m.calls)  # a failed arm proposed again is not started again
    assert all(x.arm_id not in {t.user_attrs["arm"] for t in failed} for x in loop.measured())


def test_a_search_resumes_where_it_stopped_with_its_budget(tmp_path: Path, db_url: str) -> None:
    """On the campaign's own database (SQLite here, PostgreSQL in the integration lane),
    beside the store's tables."""
    from campaign.store.store import Store

    url = Store(db_url).url
    spec = spec_of(tmp_path, budget={"starts": 9}, sampler="tpe")
    plan = SearchPlan(spec)

    class Stop(Exception):
        pass

    seen: list[str] = []

    def dies_on_fourth(arm: Any) -> TrialOutcome:
        if len(seen) == 3:
            raise Stop  # as Ctrl-C or kill -9 leaves it: a trial asked, never told
        seen.append(arm.arm_id)
        return Measure(plan)(arm)

    loop, _ = loop_for(spec, optuna.storages.RDBStorage(url), dies_on_fourth)
    with pytest.raises(Stop):
        loop.run()
    running = [t for t in loop.study.trials if t.state == optuna.trial.TrialState.RUNNING]
    assert len(running) == 1
    again, m = loop_for(spec, optuna.storages.RDBStorage(url))
    again.run()
    assert again.starts() == 9
    assert not set(m.calls) & set(seen)  # nothing measured before is measured again
    assert all(t.state.is_finished() for t in again.study.trials)


def test_patience_stops_a_search_that_stopped_improving(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, budget={"starts": 200}, sampler="random", patience=3)
    plan = SearchPlan(spec)

    def same(arm: Any) -> TrialOutcome:
        return TrialOutcome(tuple((5.0,) for _ in range(2 if arm.arm_id == "A" else 1)))

    loop, _ = loop_for(spec, optuna.storages.InMemoryStorage(), same)
    assert "patience 3" in loop.run()
    assert loop.starts() < 10
    del plan


# -- the nomination -------------------------------------------------------------------------


def test_the_nomination_takes_the_best_and_those_within_one_runs_noise() -> None:
    measured = [
        Measured("A", ((10.0,), (10.6,))),  # the base: its two runs give the spread
        Measured("S1", ((20.0,),)),
        Measured("S2", ((19.5,),)),
        Measured("S3", ((19.0,),)),
        Measured("S4", ((12.0,),)),
        Measured("S5", ((30.0,),), feasible=False),
    ]
    chosen = pick(measured, (True,), "A", top=1, most=4)
    assert chosen.winner == "S1" and chosen.candidates == ("S1", "S2", "S3")
    assert "S5" not in chosen.candidates  # infeasible
    assert math.isclose(run_sd(measured), abs(math.log(10.6 / 10.0)) / math.sqrt(2))
    assert math.isclose(search_gain(measured, "S1", "A") or 0, 20.0 / math.sqrt(10.0 * 10.6) - 1)


def test_two_objectives_nominate_the_pareto_front() -> None:
    measured = [
        Measured("A", ((10.0, 5.0), (10.0, 5.0))),
        Measured("S1", ((20.0, 9.0),)),  # fast, big
        Measured("S2", ((15.0, 4.0),)),  # slower, small
        Measured("S3", ((14.0, 6.0),)),  # dominated by S2
    ]
    front = pareto_front(measured, (True, False))
    assert [m.arm_id for m in front] == ["S1", "S2"]
    assert pick(measured, (True, False), "A", top=2, most=4).candidates == ("S1", "S2")


def test_a_model_dimension_sets_the_trial_arms_model_and_quant(tmp_path: Path) -> None:
    body = campaign_file(
        models=[
            {"name": "m", "quant": "q4", "bits_per_weight": 4.5},
            {"name": "m", "quant": "q8", "bits_per_weight": 8.5},
        ],
        arms=[arm("A", quant="q4", recipe={"slots": 2})],
        search=search(space={"model": {"choices": ["m/q4", "m/q8"]}, "slots": {"low": 1, "high": 4}}),
    )
    from flows.resolve import load_campaign

    plan = SearchPlan(load_campaign(write_campaign(tmp_path, body)))
    assert plan.arm_for({"model": "m/q4", "slots": 2}).arm_id == "A"
    q8 = plan.arm_for({"model": "m/q8", "slots": 2})
    grown = plan.expand(SearchState(arms=(q8,)))
    assert grown.arm(q8.arm_id).quant == "q8" and grown.arm(q8.arm_id).recipe.slots == 2
    found = problems(tmp_path, body.replace('"m/q8"]', '"m/q9"]'))
    assert any(p.startswith("search.space.model.choices[1]: found 'm/q9'") for p in found), found


def test_trial_runs_are_tagged_and_folded_in_the_queue_table(tmp_path: Path) -> None:
    from campaign.store.summary import ItemView
    from cli.status_view import collapsed_items
    from flows.placement import arm_tags

    plan = SearchPlan(spec_of(tmp_path))
    a = plan.arm_for({"slots": 4, "prefill_chunk": 1024, "prefix_cache": "1G"})
    grown = plan.expand(SearchState(arms=(a,), confirmed=(a.arm_id,)))
    assert "search:trial" in arm_tags(grown, f"search-{a.arm_id}", a.arm_id, "local")
    assert "search:confirm" in arm_tags(grown, CONFIRM_ITEM, a.arm_id, "local")
    views = [
        ItemView(
            key=q.key, title=q.title, state="done", reason="", gate=q.gate, arms=q.arms, probes=q.probes, attempts=1
        )
        for q in grown.queue
    ]
    folded = collapsed_items(views)
    assert [v.key for v in folded] == ["search trials", CONFIRM_ITEM] and folded[0].attempts == 2


def test_two_objectives_run_as_a_multi_objective_study(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        sampler="tpe",
        budget={"starts": 10},
        objective=[
            {"metric": "decode_tps", "probe": "decode"},
            {"metric": "ttft_s", "probe": "decode", "direction": "minimize"},
        ],
    )
    plan = SearchPlan(spec)

    def two(arm: Any) -> TrialOutcome:
        slots = arm.params.get("slots", 2)
        n = 2 if arm.arm_id == "A" else 1
        return TrialOutcome(tuple((10.0 * slots, 0.1 * slots) for _ in range(n)))

    loop, _ = loop_for(spec, optuna.storages.InMemoryStorage(), two)
    loop.run()
    assert [d.name for d in loop.study.directions] == ["MAXIMIZE", "MINIMIZE"]
    chosen = pick(loop.measured(), spec.search.maximizing(), "A", 2, 4)
    assert chosen.why.startswith("the Pareto front") and chosen.winner is not None
    grown = plan.expand(SearchState(arms=(), confirmed=chosen.candidates))
    assert {BEATS_BASE, f"{BEATS_BASE}-ttft_s"} <= {g.id for g in grown.gates}


def test_an_adaptive_confirmation_reads_every_gate_as_a_sequence(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, confirm={"max_blocks": 8})
    plan = SearchPlan(spec)
    a, b = plan.arm_for({"slots": 4}), plan.arm_for({"slots": 3})
    grown = plan.expand(SearchState(arms=(a, b), confirmed=(a.arm_id, b.arm_id)))
    assert grown.blocks(grown.item(CONFIRM_ITEM)).adaptive
    assert {BEATS_BASE, f"search-vs-{b.arm_id}"} <= grown.adaptive_gates()


def test_check_plans_the_search_and_what_its_budget_buys(tmp_path: Path) -> None:
    from cli.plan import plan_lines

    lines = plan_lines(spec_of(tmp_path, budget={"starts": 12}))
    text = "\n".join(lines)
    assert "a grid of 36 arms" in text and "up to 10 trial arms" in text
    assert "up to 25 server starts" in text  # (the base + 4 candidates at most) x 5 fresh blocks
    assert lines[-1].endswith("and the search's 12 + up to 25 (confirmation) in all")
