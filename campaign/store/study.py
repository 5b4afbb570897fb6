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
from typing import Any

from campaign.core.search import SearchPlan, SearchState, TrialArm
from campaign.store.store import Store

CONFIRMED, ABLATED, FINISHED = "confirmed", "ablated", "finished"
ARM, REASON, REUSED, CONSTRAINTS = "arm", "reason", "reused", "constraints"


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


def expanded(store: Store, spec: Any) -> Any:
    """The campaign as its search has grown it so far (the file's own without a search)."""
    if spec.search is None:
        return spec
    plan = SearchPlan(spec)
    return plan.expand(state_of(find_study(store, spec.campaign.name), plan))
