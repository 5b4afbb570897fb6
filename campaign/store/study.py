"""A search's Optuna study, kept in the campaign's own database (SQLite or PostgreSQL).

Why Optuna's RDB storage and not tables of our own: the study holds the sampler's whole
history (every trial's params, values, state), which is what lets a search continue
after Ctrl-C, kill -9 or on another host exactly where it stopped. Its tables sit beside
the campaign's (our schema's revision is in a table of its own, `campaign.store.migrate`).

What the search decided beyond Optuna's trials lives in the study's user attributes:
which arms were sent to confirmation and which fields were ablated, so that a resumed
run expands the campaign (`campaign.core.search.SearchPlan.expand`) to the same items.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from campaign.core.search import SearchPlan, SearchState, TrialArm
from campaign.store.store import Store

CONFIRMED, ABLATED, FINISHED = "confirmed", "ablated", "finished"
STOPPED, PICK = "stopped", "pick"
ARM, REASON, REUSED, CONSTRAINTS = "arm", "reason", "reused", "constraints"
RUNS, SECONDS, BASE_RUNS = "runs", "seconds", "base_runs"
BASE_REASON, BASE_SECONDS, BASE_CONSTRAINTS = "base_reason", "base_seconds", "base_constraints"


def storage(store: Store) -> Any:
    """Optuna's storage on the store's database (its credentials kept in this process)."""
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    kwargs: dict[str, Any] = {}
    if store.url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
    return optuna.storages.RDBStorage(store.url, engine_kwargs=kwargs)


def study_name(campaign: str) -> str:
    return f"{campaign}/search"


def find_study(store: Store, campaign: str) -> Any | None:
    """The campaign's study, or None before its search began (nothing is created)."""
    import optuna
    from sqlalchemy import inspect

    if not inspect(store.engine).has_table("studies"):
        return None
    st = storage(store)
    names = {s.study_name for s in st.get_all_studies()}
    if study_name(campaign) not in names:
        return None
    return optuna.load_study(study_name=study_name(campaign), storage=st)


def state_of(study: Any | None, plan: SearchPlan) -> SearchState:
    """The search's arms and decisions as plain data: every trial's arm in the order first
    proposed (params rebuilt through the plan, so the ids are today's), then what the
    study's attributes say was confirmed and ablated."""
    if study is None:
        return SearchState()
    arms: dict[str, TrialArm] = {}
    for trial in study.get_trials(deepcopy=False):
        if not trial.params:
            continue
        arm = plan.arm_for(trial.params)
        arms.setdefault(arm.arm_id, arm)
    attrs = study.user_attrs
    return SearchState(
        arms=tuple(arms.values()),
        confirmed=tuple(attrs.get(CONFIRMED, ())),
        ablated=tuple(attrs.get(ABLATED, ())),
        finished=bool(attrs.get(FINISHED, False)),
        notes={k: v for k, v in attrs.items() if k not in (CONFIRMED, ABLATED, FINISHED)},
    )


def search_finished(store: Store, spec: Any) -> bool:
    """Whether the campaign's search phase has ended (true without a search): then its
    confirmation items are in the expanded queue, and a run has only those left."""
    if spec.search is None:
        return True
    return state_of(find_study(store, spec.campaign.name), SearchPlan(spec)).finished


def expanded(store: Store, spec: Any) -> Any:
    """The campaign as its search has grown it so far (the file's own without a search)."""
    if spec.search is None:
        return spec
    plan = SearchPlan(spec)
    return plan.expand(state_of(find_study(store, spec.campaign.name), plan))


def starts(study: Any) -> int:
    """Server starts a search spent: the base's runs, and one per trial arm measured (a
    repeated proposal reuses runs and starts nothing). Counted over every run of the
    campaign, so a resumed search keeps its budget."""
    attrs = study.user_attrs
    base = len(attrs.get(BASE_RUNS, ())) or (2 if BASE_REASON in attrs else 0)
    return base + sum(
        1
        for t in study.get_trials(deepcopy=False)
        if ARM in t.user_attrs and not t.user_attrs.get(REUSED) and t.state.is_finished()
    )


def seconds(study: Any) -> float:
    """Wall seconds the search's measurements took, over every run of the campaign."""
    return float(study.user_attrs.get(BASE_SECONDS, 0.0)) + sum(
        float(t.user_attrs.get(SECONDS, 0.0)) for t in study.get_trials(deepcopy=False)
    )


@dataclass(frozen=True)
class TrialView:
    """One trial as status and the report show it."""

    number: int
    arm_id: str
    params: Mapping[str, Any]
    state: str  # complete, failed, running, or repeat (a proposal of an arm measured before)
    values: tuple[float, ...]
    reason: str = ""
    feasible: bool = True


@dataclass(frozen=True)
class SearchSummary:
    """Where a search stands: its trials in order, what it spent and why it stopped, and
    what it nominated for confirmation (the verdicts are the confirmation gates')."""

    objectives: tuple[str, ...]
    maximize: tuple[bool, ...]
    base_id: str
    base_runs: tuple[tuple[float, ...], ...]
    trials: tuple[TrialView, ...]
    starts: int
    seconds: float
    budget: str
    stopped: str
    finished: bool
    confirmed: tuple[str, ...]
    ablated: tuple[str, ...]
    pick: Mapping[str, Any]

    @property
    def measured(self) -> list[TrialView]:
        return [t for t in self.trials if t.state == "complete"]

    @property
    def failed(self) -> list[TrialView]:
        return [t for t in self.trials if t.state == "failed"]

    def best(self) -> TrialView | None:
        """The best feasible trial arm so far on the first objective (the base left out)."""
        pool = [t for t in self.measured if t.feasible and t.arm_id != self.base_id]
        if not pool:
            return None
        return (max if self.maximize[0] else min)(pool, key=lambda t: t.values[0])

    def base_value(self, i: int = 0) -> float | None:
        if not self.base_runs:
            return None
        return math.exp(sum(math.log(r[i]) for r in self.base_runs) / len(self.base_runs))


def summary(store: Store, spec: Any) -> SearchSummary | None:
    """The campaign's search as `SearchSummary`; None when it has no `[search]`."""
    if spec.search is None:
        return None
    import optuna

    search = spec.search
    study = find_study(store, spec.campaign.name)
    budget = " or ".join(
        x
        for x in (
            f"{search.budget.starts} server starts" if search.budget.starts else "",
            f"{search.budget.minutes:g} minutes" if search.budget.minutes else "",
        )
        if x
    )
    objectives, maximize = tuple(o.metric for o in search.objectives), search.maximizing()
    if study is None:
        return SearchSummary(objectives, maximize, search.base, (), (), 0, 0.0, budget, "", False, (), (), {})
    plan = SearchPlan(spec)
    constraints = search.constraints
    trials = []
    seen: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        arm = str(t.user_attrs.get(ARM) or (plan.arm_for(t.params).arm_id if t.params else "?"))
        values: tuple[float, ...] = tuple(t.values or ())
        if t.state == optuna.trial.TrialState.RUNNING:
            state = "running"
        elif t.state == optuna.trial.TrialState.FAIL:
            state = "failed" if arm not in seen else "repeat"
        elif arm in seen or (t.user_attrs.get(REUSED) and arm != plan.base.id):
            state = "repeat"
        else:
            state = "complete"
        seen.add(arm)
        given = t.user_attrs.get(CONSTRAINTS, ())
        feasible = all(c.violation(v) <= 0 for c, v in zip(constraints, given, strict=False))
        trials.append(
            TrialView(t.number, arm, dict(t.params), state, values, str(t.user_attrs.get(REASON, "")), feasible)
        )
    attrs = study.user_attrs
    return SearchSummary(
        objectives,
        maximize,
        plan.base.id,
        tuple(tuple(r) for r in attrs.get(BASE_RUNS, ())),
        tuple(trials),
        starts(study),
        seconds(study),
        budget,
        str(attrs.get(STOPPED, "")),
        bool(attrs.get(FINISHED, False)),
        tuple(attrs.get(CONFIRMED, ())),
        tuple(attrs.get(ABLATED, ())),
        dict(attrs.get(PICK, {})),
    )
