"""A search over recipe fields: the `[search]` table, and the arms, items and gates it becomes.

Why the search becomes ordinary arms: a trial is then a server start like any other (its
attempt, its block, its flow run, its rows), and the confirmation is an ordinary item with
ordinary gates, so every rule the campaign already keeps (blocks, intervals over server
runs, Holm, adaptive stops, resume) applies to the search's answer unchanged. What is the
search's own is which arms exist and which are confirmed; `expand` turns that (read from
the study by the store layer) into the campaign the flows run.

A trial arm's id is derived from the settings it serves (`S-` and a hash), so a proposal
that repeats an arm already measured is the same arm and reuses its blocks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from campaign.core.serving import Recipe, Strict

OFF = "off"  # a choice of an optional recipe field (prefix_cache = "off"): the field unset
MODEL, CONTEXT = "model", "context"  # space keys that are not recipe fields
# recipe fields a search may vary: lists are not a dimension
SEARCHABLE_RECIPE = tuple(f for f in Recipe.model_fields if f not in ("offloads", "extra_args"))
SEARCH_ITEM_PREFIX = "search-"
CONFIRM_ITEM, ABLATE_ITEM = "search-confirm", "search-ablate"
BEATS_BASE = "search-beats-base"


def is_trial_item(key: str) -> bool:
    """A search trial's item: its failure is a failed trial, recorded, not a failed campaign."""
    return key.startswith(SEARCH_ITEM_PREFIX) and key not in (CONFIRM_ITEM, ABLATE_ITEM)


class Dimension(Strict):
    """One field's values: `choices`, or a range `low`..`high` (integers if both ends
    are, with an optional `step`; `log` samples the range on a log scale)."""

    choices: list[int | float | str | bool] | None = Field(
        default=None, min_length=1, description="the values to try (a recipe size as text, '8G'; 'off' unsets it)"
    )
    low: int | float | None = Field(default=None, description="a range's least value")
    high: int | float | None = Field(default=None, description="a range's greatest value")
    step: int | float | None = Field(default=None, gt=0, description="a range's step (integers: default 1)")
    log: bool = Field(default=False, description="sample the range on a log scale (sizes, chunk lengths)")

    @model_validator(mode="after")
    def _one_kind(self) -> Dimension:
        ranged = self.low is not None or self.high is not None
        if self.choices is not None and ranged:
            raise ValueError("set choices or low/high, not both")
        if self.choices is None and (self.low is None or self.high is None):
            raise ValueError("a dimension needs choices, or both low and high")
        if ranged and self.low is not None and self.high is not None:
            if self.low >= self.high:
                raise ValueError(f"low = {self.low} is not below high = {self.high}")
            if self.log and self.low <= 0:
                raise ValueError(f"log = true needs low > 0, found {self.low}")
            if self.log and self.step is not None:
                raise ValueError("log = true and step: a log-scale range has no step")
        if self.choices is not None and len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(f"choices has a value twice: {self.choices}")
        return self

    @property
    def kind(self) -> Literal["choice", "int", "float"]:
        if self.choices is not None:
            return "choice"
        ints = isinstance(self.low, int) and isinstance(self.high, int) and not isinstance(self.step, float)
        return "int" if ints else "float"

    def ends(self) -> list[Any]:
        """The values a check tries: every choice, or a range's two ends."""
        return list(self.choices) if self.choices is not None else [self.low, self.high]

    def grid(self, points: int = 5) -> list[Any]:
        """The values a full grid runs: every choice, every step of an integer range (or
        `points` spread over a wide or float one)."""
        if self.choices is not None:
            return list(self.choices)
        low, high = float(self.low or 0), float(self.high or 0)
        if self.kind == "int":
            step = int(self.step or 1)
            values = list(range(int(low), int(high) + 1, step))
            if len(values) <= 2 * points:
                return values
        if self.log:
            ratio = (high / low) ** (1 / (points - 1))
            spread = [low * ratio**i for i in range(points)]
        else:
            spread = [low + (high - low) * i / (points - 1) for i in range(points)]
        return sorted({int(round(v)) for v in spread}) if self.kind == "int" else spread


class Objective(Strict):
    metric: str = Field(description="a metric of the catalogue (docs/metrics.md)")
    probe: str = Field(description="the probe that produces it; each trial runs this probe")
    scenario: str | None = Field(default=None, description="the probe's scenario the value is read from")
    context: int | None = Field(default=None, ge=1, description="the context the value is read at")
    direction: Literal["maximize", "minimize"] | None = Field(
        default=None, description="unset: the catalogue's direction for the metric"
    )


class Constraint(Strict):
    metric: str = Field(description="a metric of the catalogue, read as the objective's is")
    probe: str | None = Field(default=None, description="its probe (default: the first objective's)")
    scenario: str | None = Field(default=None, description="its scenario (default: the first objective's)")
    max: float | None = Field(default=None, description="feasible when the value is at most this")
    min: float | None = Field(default=None, description="feasible when the value is at least this")

    @model_validator(mode="after")
    def _a_bound(self) -> Constraint:
        if (self.max is None) == (self.min is None):
            raise ValueError("a constraint needs exactly one of max or min")
        return self

    def text(self) -> str:
        return (
            f"{self.metric} {'<=' if self.max is not None else '>='} {self.max if self.max is not None else self.min}"
        )

    def violation(self, value: float) -> float:
        """Optuna's constraint value: at most 0 when feasible, the excess otherwise."""
        return value - self.max if self.max is not None else float(self.min or 0) - value


class Budget(Strict):
    starts: int | None = Field(default=None, ge=2, le=2000, description="server starts the search may make")
    minutes: float | None = Field(default=None, gt=0, description="wall time the search may take")

    @model_validator(mode="after")
    def _some(self) -> Budget:
        if self.starts is None and self.minutes is None:
            raise ValueError("a budget needs starts, minutes, or both (whichever is spent first ends the search)")
        return self


class Confirm(Strict):
    top: int = Field(default=2, ge=1, le=6, description="the best trial arms confirmed on fresh server runs")
    max_candidates: int = Field(
        default=4, ge=1, le=8, description="at most this many arms confirmed, however many overlap the best"
    )
    blocks: int | None = Field(default=None, ge=2, le=50, description="fresh blocks (default campaign.min_blocks + 2)")
    max_blocks: int | None = Field(
        default=None,
        ge=2,
        le=50,
        description="adaptive: add blocks until the winner's gate is settled, at most this many",
    )
    min_gain: float = Field(default=0.0, ge=0, description="the gain over the base arm the winner must establish")
    ablate: bool = Field(
        default=False, description="measure the winner with each field set back to the base's: which field won"
    )

    @model_validator(mode="after")
    def _one_design(self) -> Confirm:
        if self.blocks is not None and self.max_blocks is not None:
            raise ValueError("set blocks (fixed) or max_blocks (adaptive), not both")
        return self


class SearchSpec(Strict):
    base: str = Field(description="the arm the search starts from; the winner is confirmed against it")
    space: dict[str, Dimension] = Field(
        min_length=1, description="recipe fields (and model, context) with the values to search"
    )
    objectives: list[Objective] = Field(
        min_length=1,
        max_length=2,
        validation_alias=AliasChoices("objectives", "objective"),
        description="what to optimise: one metric, or two (a Pareto front)",
    )
    constraints: list[Constraint] = Field(default_factory=list, description="bounds a trial must meet to count")
    budget: Budget = Field(description="server starts or wall time")
    sampler: Literal["tpe", "gp", "random", "grid"] = Field(
        default="tpe", description="Optuna's sampler: tpe, gp, random, or the full grid of the space"
    )
    seed: int = Field(default=0, ge=0, description="the sampler's seed")
    patience: int | None = Field(
        default=None, ge=2, description="stop when this many trials in a row did not improve on the best"
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="probe parameters of every trial and confirmation run"
    )
    confirm: Confirm = Field(default_factory=Confirm, description="how the winner is confirmed")

    @field_validator("objectives", mode="before")
    @classmethod
    def _table_or_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, Mapping) else value

    @field_validator("space")
    @classmethod
    def _known_fields(cls, value: dict[str, Dimension]) -> dict[str, Dimension]:
        known = (*SEARCHABLE_RECIPE, MODEL, CONTEXT)
        for name, dim in value.items():
            if name not in known:
                raise ValueError(f"unknown field {name!r}; expected one of: {', '.join(known)}")
            if name == MODEL and dim.choices is None:
                raise ValueError("model takes choices (name/quant of the models)")
        return value

    def maximizing(self) -> tuple[bool, ...]:
        """Each objective's direction: its own, else the catalogue's."""
        from campaign.core.metrics import direction

        return tuple(
            o.direction == "maximize" if o.direction is not None else bool(direction(o.metric)) for o in self.objectives
        )

    def probes(self) -> list[str]:
        return list(dict.fromkeys([o.probe for o in self.objectives] + [c.probe for c in self.constraints if c.probe]))

    def grid_size(self) -> int:
        size = 1
        for dim in self.space.values():
            size *= len(dim.grid())
        return size


# -- trial arms -------------------------------------------------------------------------


def _recipe_value(name: str, value: Any) -> Any:
    return None if value == OFF and name in Recipe.model_fields else value


def trial_settings(base: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """An arm's settings (`recipe`, `model`, `quant`, `context`) with a trial's params put
    in; the recipe validated, so '8G' and 8589934592 are one setting."""
    recipe = dict(base["recipe"])
    out = {k: v for k, v in base.items() if k != "recipe"}
    for name, value in params.items():
        if name == MODEL:
            model, _, quant = str(value).partition("/")
            out["model"], out["quant"] = model, quant or None
        elif name == CONTEXT:
            out["context"] = int(value)
        else:
            recipe[name] = _recipe_value(name, value)
    out["recipe"] = Recipe.model_validate(recipe).model_dump(mode="json")
    return out


def settings_id(settings: Mapping[str, Any]) -> str:
    text = json.dumps(settings, sort_keys=True, default=str)
    return "S-" + hashlib.sha256(text.encode()).hexdigest()[:6]


def describe(params: Mapping[str, Any]) -> str:
    """A trial's params in words: 'slots 4, prefill_chunk 2048'."""
    return ", ".join(f"{k} {v}" for k, v in sorted(params.items())) or "the base's settings"


@dataclass(frozen=True)
class TrialArm:
    """A trial's arm: its id (the base's own id when it serves the base's settings), the
    params that made it, and the settings it serves."""

    arm_id: str
    params: Mapping[str, Any]
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class SearchState:
    """What a search has decided so far, as plain data (read from its study by
    `campaign.store.study`): the trial arms in the order first proposed, and, once the
    search phase ended, the arms confirmed (winner first) and the fields ablated."""

    arms: tuple[TrialArm, ...] = ()
    confirmed: tuple[str, ...] = ()
    ablated: tuple[str, ...] = ()
    finished: bool = False
    notes: Mapping[str, Any] = field(default_factory=dict)


class SearchPlan:
    """The campaign a search becomes. Built from the file's spec (with its `[search]`)."""

    def __init__(self, spec: Any):
        self.spec = spec
        self.search: SearchSpec = spec.search
        base = spec.arm(self.search.base)
        self.base = base
        self.base_settings = {
            "model": base.model,
            "quant": spec.model_for(base).quant,
            "context": base.context,
            "recipe": base.recipe.model_dump(mode="json"),
        }

    def arm_for(self, params: Mapping[str, Any]) -> TrialArm:
        settings = trial_settings(self.base_settings, params)
        if settings.get("quant") is None:  # a model named without its quant: its only one
            settings["quant"] = next((m.quant for m in self.spec.models if m.name == settings["model"]), None)
        same = settings == trial_settings(self.base_settings, {})
        return TrialArm(self.base.id if same else settings_id(settings), dict(params), settings)

    def base_params(self) -> dict[str, Any]:
        """The base arm's own value of each searched field (where the space offers it)."""
        out: dict[str, Any] = {}
        recipe = self.base.recipe
        for name in self.search.space:
            if name == MODEL:
                out[name] = f"{self.base.model}/{self.spec.model_for(self.base).quant}"
            elif name == CONTEXT:
                out[name] = self.base.context
            else:
                value = getattr(recipe, name)
                out[name] = OFF if value is None else value
        return out

    def item_key(self, arm_id: str) -> str:
        return SEARCH_ITEM_PREFIX + arm_id

    def trial_item(self, arm: TrialArm) -> dict[str, Any]:
        """One block per trial arm; two for the base, whose two runs measure the run-to-run
        spread the search's nominations are read against (`gates.search_pick`)."""
        blocks = 2 if arm.arm_id == self.base.id else 1
        return self._item(
            self.item_key(arm.arm_id), f"search trial {arm.arm_id}: {describe(arm.params)}", [arm.arm_id], blocks=blocks
        )

    def _item(self, key: str, title: str, arms: list[str], **more: Any) -> dict[str, Any]:
        contexts = sorted({o.context for o in self.search.objectives if o.context})
        item: dict[str, Any] = {
            "id": key,
            "title": title,
            "arms": arms,
            "probes": self.search.probes(),
            "overrides": dict(self.search.overrides),
            **({"contexts": contexts} if contexts else {}),
            **more,
        }
        return item

    def confirm_blocks(self) -> dict[str, Any]:
        c = self.search.confirm
        if c.max_blocks is not None:
            return {"max_blocks": c.max_blocks}
        return {"blocks": c.blocks if c.blocks is not None else self.spec.campaign.min_blocks + 2}

    def expand(self, state: SearchState) -> Any:
        """The file's campaign with the search's arms, items and gates added."""
        data = self.spec.model_dump(by_alias=True, exclude_none=True)
        known = {a["id"] for a in data["arms"]}
        base = self.arm_for(self.base_params())
        for arm in (base, *state.arms):
            if arm.arm_id not in known:
                known.add(arm.arm_id)
                data["arms"].append(self._arm_entry(arm))
            key = self.item_key(arm.arm_id)
            if key not in {q.get("id") for q in data["queue"]}:
                data["queue"].append(self.trial_item(arm))
        if state.confirmed:
            gates = self.confirm_gates(state.confirmed)
            arms = [self.base.id, *[a for a in state.confirmed if a != self.base.id]]
            _add(
                data,
                gates,
                self._item(
                    CONFIRM_ITEM,
                    f"search confirmation: {', '.join(arms)} on fresh server runs",
                    arms,
                    gate=gates[0]["id"],
                    also_gates=[g["id"] for g in gates[1:]],
                    **self.confirm_blocks(),
                ),
            )
        if state.ablated and state.confirmed:
            winner = self._by_id(state, state.confirmed[0])
            arms, gates = [winner.arm_id], []
            for name in state.ablated:
                back = self.arm_for({**winner.params, name: self.base_params()[name]})
                if back.arm_id not in known:
                    known.add(back.arm_id)
                    data["arms"].append(self._arm_entry(back, f"ablation: {winner.arm_id} with {name} as the base's"))
                arms.append(back.arm_id)
                gates.append(
                    self._gate(
                        f"search-credit-{name}",
                        winner.arm_id,
                        back.arm_id,
                        0.0,
                        f"{name} earns {winner.arm_id}'s gain (set back to the base's, the gain is lost)",
                    )
                )
            _add(
                data,
                gates,
                self._item(
                    ABLATE_ITEM,
                    f"search ablations: {winner.arm_id} with each field set back",
                    arms,
                    gate=gates[0]["id"],
                    also_gates=[g["id"] for g in gates[1:]],
                    depends_on=[CONFIRM_ITEM],
                    **self.confirm_blocks(),
                ),
            )
        return type(self.spec).model_validate(data)

    def _by_id(self, state: SearchState, arm_id: str) -> TrialArm:
        return next((a for a in state.arms if a.arm_id == arm_id), self.arm_for({}))

    def confirm_gates(self, confirmed: Sequence[str]) -> list[dict[str, Any]]:
        """The winner against the base (by at least `confirm.min_gain`), and against each
        other candidate (any gain), on every objective: one Holm family with the rest."""
        winner, others = confirmed[0], [a for a in confirmed[1:] if a != self.base.id]
        gates = []
        for i, obj in enumerate(self.search.objectives):
            tag = "" if i == 0 else f"-{obj.metric}"
            gates.append(
                self._gate(
                    BEATS_BASE + tag,
                    winner,
                    self.base.id,
                    self.search.confirm.min_gain,
                    f"{winner} beats the base {self.base.id} on {obj.metric}",
                    obj,
                )
            )
            for other in others:
                gates.append(
                    self._gate(
                        f"search-vs-{other}{tag}", winner, other, 0.0, f"{winner} beats {other} on {obj.metric}", obj
                    )
                )
        return gates

    def _gate(
        self, gate_id: str, subject: str, baseline: str, min_gain: float, title: str, obj: Objective | None = None
    ) -> dict[str, Any]:
        obj = obj or self.search.objectives[0]
        params: dict[str, Any] = {"metric": obj.metric, "probe": obj.probe, "min_gain": min_gain}
        if obj.scenario:
            params["scenario"] = obj.scenario
        if obj.context:
            params["context"] = obj.context
        if obj.direction:
            params["higher_is_better"] = obj.direction == "maximize"
        return {
            "id": gate_id,
            "title": title,
            "predicate": "relative_improvement",
            "params": params,
            "subjects": [subject],
            "baseline": [baseline],
        }

    def _arm_entry(self, arm: TrialArm, description: str = "") -> dict[str, Any]:
        s = arm.settings
        out = self.base.model_dump(by_alias=True, exclude_none=True)
        out.update(
            id=arm.arm_id,
            model=s["model"],
            context=s["context"],
            recipe={k: v for k, v in s["recipe"].items() if v is not None},
            group="search trial",
            description=description or f"search trial: {describe(arm.params)}",
        )
        if s.get("quant"):
            out["quant"] = s["quant"]
        else:
            out.pop("quant", None)
        return out


def _add(data: dict[str, Any], gates: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """Add gates and an item not there yet: expanding an expanded campaign changes nothing."""
    have = {g["id"] for g in data["gates"]}
    data["gates"] += [g for g in gates if g["id"] not in have]
    if item["id"] not in {q.get("id") for q in data["queue"]}:
        data["queue"].append(item)
