"""The search phase: Optuna proposes, a trial arm is measured, the value is told back.

Why apart from the flows: the loop knows nothing of servers, Prefect or the store. It is
handed a `measure` function (one block of an arm: the campaign flow's item run, or a
generated measurement in `benchmarks/search.py`), so the search a user runs and the one
the benchmark judges are the same code.

Rules kept here:
- the base arm is measured first (two runs, `SearchPlan.trial_item`), outside Optuna's
  proposals, and told to the sampler as a trial when the space contains it;
- a proposal of an arm measured before reuses its runs (no server start); a failed arm
  proposed again fails again, with its first reason;
- a failed measurement (a server that did not start, a probe without a value) is a FAIL
  trial with its reason: the samplers leave it out, and it is never a value of 0;
- the search ends on its budget (server starts or minutes, both counted over every run of
  the campaign), on `patience` trials without a new best, when the grid is done, or when
  the sampler only proposes arms already measured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from campaign.core.search import SearchPlan, SearchSpec, TrialArm
from campaign.store import study as study_store
from campaign.store.study import (
    ARM,
    BASE_CONSTRAINTS,
    BASE_REASON,
    BASE_RUNS,
    BASE_SECONDS,
    CONSTRAINTS,
    REASON,
    REUSED,
    RUNS,
    SECONDS,
)
from gates.search_pick import Measured, improved

MAX_REPEATS = 25  # proposals in a row of arms already measured: the sampler has nothing new


@dataclass(frozen=True)
class TrialOutcome:
    """One arm's measurement: per block, one value per objective; per constraint, its
    value (as the mean of the runs); or a failure with its reason."""

    runs: tuple[tuple[float, ...], ...] = ()
    constraint_values: tuple[float, ...] = ()
    reason: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.reason


def maximizing(search: SearchSpec) -> tuple[bool, ...]:
    return search.maximizing()


def distributions(search: SearchSpec) -> dict[str, Any]:
    import optuna

    out: dict[str, Any] = {}
    for name, dim in search.space.items():
        if dim.kind == "choice":
            out[name] = optuna.distributions.CategoricalDistribution(list(dim.choices or []))
        elif dim.kind == "int":
            out[name] = optuna.distributions.IntDistribution(
                int(dim.low or 0), int(dim.high or 0), log=dim.log, step=int(dim.step or 1)
            )
        else:
            out[name] = optuna.distributions.FloatDistribution(
                float(dim.low or 0), float(dim.high or 0), log=dim.log, step=dim.step
            )
    return out


def make_sampler(search: SearchSpec) -> Any:
    import optuna

    if search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=search.seed)
    if search.sampler == "grid":
        return _Grid({k: d.grid() for k, d in search.space.items()}, seed=search.seed)
    if search.sampler == "gp":
        return optuna.samplers.GPSampler(seed=search.seed, n_startup_trials=min(10, _starts(search) // 3 or 1))
    import warnings

    startup = max(3, min(10, _starts(search) // 3))
    with warnings.catch_warnings():  # multivariate/group: marked experimental, and the better TPE on joint fields
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=search.seed, n_startup_trials=startup, multivariate=True, group=True, constant_liar=True
        )


def _grid_sampler() -> Any:
    import optuna

    class Grid(optuna.samplers.GridSampler):
        """Optuna's grid, told trial by trial: its own stop (`Study.stop`) works only
        inside `Study.optimize`; the loop's stop rule ends the grid instead."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return Grid


def _Grid(space: dict[str, list[Any]], seed: int) -> Any:
    return _grid_sampler()(space, seed=seed)


def _starts(search: SearchSpec) -> int:
    return search.budget.starts or 30


def open_study(storage: Any, name: str, search: SearchSpec) -> Any:
    import logging

    import optuna

    optuna.logging.set_verbosity(logging.WARNING)

    return optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=make_sampler(search),
        directions=["maximize" if m else "minimize" for m in maximizing(search)],
        load_if_exists=True,
    )


class SearchLoop:
    def __init__(
        self,
        plan: SearchPlan,
        study: Any,
        measure: Callable[[TrialArm], TrialOutcome],
        progress: Callable[[str, dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.plan, self.study, self.measure = plan, study, measure
        self.search = plan.search
        self.progress = progress or (lambda kind, fields: None)
        self.clock = clock
        self.dists = distributions(self.search)
        self.maximize = maximizing(self.search)

    # -- what the study holds --------------------------------------------------------

    def _trials(self) -> list[Any]:
        return self.study.get_trials(deepcopy=False)

    def outcome_of(self, arm_id: str) -> TrialOutcome | None:
        """The first finished measurement of an arm (what a repeated proposal reuses)."""
        import optuna

        if arm_id == self.plan.base.id and BASE_RUNS in self.study.user_attrs:
            return self._base_outcome()
        for t in self._trials():
            if t.user_attrs.get(ARM) != arm_id or t.user_attrs.get(REUSED):
                continue
            if t.state == optuna.trial.TrialState.COMPLETE:
                runs = tuple(tuple(r) for r in t.user_attrs.get(RUNS, [t.values]))
                return TrialOutcome(runs, tuple(t.user_attrs.get(CONSTRAINTS, ())), "", 0.0)
            if t.state == optuna.trial.TrialState.FAIL:
                return TrialOutcome(reason=str(t.user_attrs.get(REASON, "failed")))
        return None

    def _base_outcome(self) -> TrialOutcome:
        attrs = self.study.user_attrs
        return TrialOutcome(
            tuple(tuple(r) for r in attrs[BASE_RUNS]),
            tuple(attrs.get(BASE_CONSTRAINTS, ())),
            str(attrs.get(BASE_REASON, "")),
        )

    def feasible(self, got: TrialOutcome) -> bool:
        """Whether every constraint held (Optuna's own rule: each violation at most 0)."""
        return all(c.violation(v) <= 0 for c, v in zip(self.search.constraints, got.constraint_values, strict=False))

    def starts(self) -> int:
        return study_store.starts(self.study)

    def seconds(self) -> float:
        return study_store.seconds(self.study)

    def measured(self) -> list[Measured]:
        """Every arm with runs, the base included, for the nomination (`gates.search_pick`)."""
        out: dict[str, Measured] = {}
        base = self.outcome_of(self.plan.base.id)
        if base is not None and base.ok:
            out[self.plan.base.id] = Measured(self.plan.base.id, base.runs, self.feasible(base))
        for t in self._trials():
            arm = t.user_attrs.get(ARM)
            if arm is None or arm in out:
                continue
            got = self.outcome_of(arm)
            if got is not None and got.ok:
                out[arm] = Measured(arm, got.runs, self.feasible(got))
        return list(out.values())

    # -- when to stop -------------------------------------------------------------------

    def stop_reason(self, repeats: int = 0) -> str | None:
        budget = self.search.budget
        if budget.starts is not None and self.starts() >= budget.starts:
            return f"budget spent: {self.starts()} of {budget.starts} server starts"
        if budget.minutes is not None and self.seconds() >= budget.minutes * 60:
            return f"budget spent: {self.seconds() / 60:.1f} of {budget.minutes:g} minutes"
        if self.search.sampler == "grid" and len(self._measured_arms()) >= self.search.grid_size():
            return f"the grid is done: {self.search.grid_size()} arms"
        if repeats >= MAX_REPEATS:
            return f"the sampler proposed only arms already measured ({repeats} in a row)"
        if self.search.patience is not None:
            firsts = self._first_values()
            if len(firsts) > self.search.patience:
                flags = improved(firsts, self.maximize[0])
                since = len(flags) - 1 - max(i for i, f in enumerate(flags) if f)
                if since >= self.search.patience:
                    return f"no better arm in the last {since} trials (patience {self.search.patience})"
        return None

    def _measured_arms(self) -> set[str]:
        return {str(t.user_attrs[ARM]) for t in self._trials() if ARM in t.user_attrs and t.state.is_finished()}

    def _first_values(self) -> list[float]:
        """The first objective of each new arm measured, in order (repeats left out)."""
        import optuna

        return [
            float(t.values[0])
            for t in self._trials()
            if t.state == optuna.trial.TrialState.COMPLETE and not t.user_attrs.get(REUSED)
        ]

    # -- the loop -----------------------------------------------------------------------

    def run(self) -> str:
        """Measure until a stop rule holds; returns which one, in words."""
        self._measure_base()
        for trial_id in self._left_running():
            self._finish(trial_id)
        repeats = 0
        while True:
            why = self.stop_reason(repeats)
            if why:
                return why
            trial = self.study.ask(self.dists)
            arm = self.plan.arm_for(trial.params)
            trial.set_user_attr(ARM, arm.arm_id)
            prior = self.outcome_of(arm.arm_id)
            if prior is not None:
                repeats += 1
                trial.set_user_attr(REUSED, True)
                self._tell(trial, prior)
                continue
            repeats = 0
            self._tell(trial, self._timed(arm))

    def _measure_base(self) -> None:
        attrs = self.study.user_attrs
        if BASE_RUNS in attrs or BASE_REASON in attrs:
            return
        base = self.plan.arm_for(self.plan.base_params())
        got = self._timed(base)
        self.study.set_user_attr(BASE_SECONDS, got.seconds)
        if not got.ok:
            self.study.set_user_attr(BASE_REASON, got.reason)
            self.progress("search-trial-done", {"arm": base.arm_id, "failed": got.reason})
            raise BaseFailed(f"the base arm {base.arm_id} could not be measured: {got.reason}")
        self.study.set_user_attr(BASE_RUNS, [list(r) for r in got.runs])
        self.progress("search-trial-done", {"arm": base.arm_id, "values": list(self._values(got))})
        self.study.set_user_attr(BASE_CONSTRAINTS, list(got.constraint_values))
        if all(self.dists[k]._contains(self.dists[k].to_internal_repr(v)) for k, v in base.params.items()):
            import optuna

            trial = optuna.trial.create_trial(
                params=dict(base.params),
                distributions=self.dists,
                values=list(self._values(got)),
                user_attrs={ARM: base.arm_id, REUSED: True, RUNS: [list(r) for r in got.runs]},
                system_attrs=self._constraint_attrs(got),
            )
            self.study.add_trial(trial)

    def _left_running(self) -> list[int]:
        import optuna

        return [t.number for t in self._trials() if t.state == optuna.trial.TrialState.RUNNING]

    def _finish(self, number: int) -> None:
        """A trial a crash left running: its arm's item resumes where it stopped."""
        import optuna

        frozen = next(t for t in self._trials() if t.number == number)
        arm = self.plan.arm_for(frozen.params)
        trial = optuna.trial.Trial(self.study, frozen._trial_id)
        trial.set_user_attr(ARM, arm.arm_id)
        prior = self.outcome_of(arm.arm_id)
        if prior is not None:
            trial.set_user_attr(REUSED, True)
            self._tell(trial, prior)
        else:
            self._tell(trial, self._timed(arm))

    def _timed(self, arm: TrialArm) -> TrialOutcome:
        began = self.clock()
        self.progress("search-trial-start", {"arm": arm.arm_id, "params": dict(arm.params)})
        got = self.measure(arm)
        seconds = got.seconds or self.clock() - began
        return TrialOutcome(got.runs, got.constraint_values, got.reason, seconds)

    def _values(self, got: TrialOutcome) -> tuple[float, ...]:
        n = len(got.runs)
        return tuple(math.exp(sum(math.log(r[i]) for r in got.runs) / n) for i in range(len(got.runs[0])))

    def _constraint_attrs(self, got: TrialOutcome) -> dict[str, float]:
        from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

        return {
            f"{_CONSTRAINTS_KEY}:{c.text()}": c.violation(v)
            for c, v in zip(self.search.constraints, got.constraint_values, strict=False)
        }

    def _tell(self, trial: Any, got: TrialOutcome) -> None:
        import optuna

        trial.set_user_attr(SECONDS, 0.0 if trial.user_attrs.get(REUSED) else got.seconds)
        if not got.ok:
            trial.set_user_attr(REASON, got.reason or "no value")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.progress("search-trial-done", {"arm": trial.user_attrs.get(ARM), "failed": got.reason})
            return
        trial.set_user_attr(RUNS, [list(r) for r in got.runs])
        trial.set_user_attr(CONSTRAINTS, list(got.constraint_values))
        for c, v in zip(self.search.constraints, got.constraint_values, strict=False):
            trial.set_constraint(c.text(), c.violation(v))
        values = self._values(got)
        self.study.tell(trial, list(values))
        self.progress(
            "search-trial-done",
            {"arm": trial.user_attrs.get(ARM), "values": list(values), "reused": bool(trial.user_attrs.get(REUSED))},
        )


class BaseFailed(RuntimeError):
    """The base arm gave no value: nothing can be compared with it."""
