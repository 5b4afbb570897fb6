"""The campaign file: a TOML document validated by pydantic.

Why so strict: a campaign runs for hours, and a typo found at arm 9 costs all the arms
before it. Unknown keys are refused, every reference is checked before anything starts,
and every error names the file, the field path (`arms[3].recipe.slots`), what was found
and what was expected -- never a traceback for a user's mistake. This module holds the
fields and their rules; reading a file and the checks across fields (references,
pooling, cycles) are `campaign.core.loader`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    field_validator,
    model_validator,
)

from campaign.core.search import SearchSpec
from campaign.core.serving import (
    HOST_PATTERN,
    ID_PATTERN,
    ModelEntry,
    Recipe,
    RuntimeEntry,
    Strict,
)
from campaign.core.states import Mode, ProbeName


class CampaignMeta(Strict):
    name: str = Field(pattern=ID_PATTERN, description="short name; keys the campaign in the store")
    title: str = Field(default="", description="a one-line title, the heading of the report")
    question: str = Field(
        default="",
        description="the question the campaign asks, one line: the head of the answer in `campaign status` and on the "
        "report's front page (without it, each gate's title says what it asks)",
    )
    description: str = Field(
        default="", description="what the campaign is about, in a few sentences: shown on the report's front page"
    )
    default_max_tokens: int = Field(
        default=64, ge=1, description="decode's max_tokens where a queue item's overrides do not set it"
    )
    seed: int = Field(
        default=0,
        ge=0,
        description="randomises the order of the arms within each block (server run); the order is stored on every attempt",
    )
    confidence: float = Field(
        default=0.95,
        gt=0.5,
        lt=1,
        description="the level of every interval and the family-wise level of the campaign's comparative verdicts",
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="modules or .py files (relative to the campaign file) that register custom predicates",
    )
    min_blocks: int = Field(
        default=3,
        ge=2,
        le=50,
        description="the blocks an item with a gate and no blocks runs (fewer cannot decide a comparison); with max_blocks, "
        "the blocks it runs before its gate is first looked at",
    )
    max_blocks: int | None = Field(
        default=None,
        ge=2,
        le=50,
        description="every item with a gate and no blocks adds blocks until that gate is settled, at most this many "
        "(its verdicts then use confidence sequences); unset: each item runs its blocks, min_blocks where it sets none",
    )
    keep_servers: bool = Field(
        default=True,
        description="consecutive items on the same arms, recipes and blocks, feeding different gates, run on one server "
        "start per arm and block (its prefix cache emptied before a probe that needs it cold); false: a server per item",
    )


class ArmEntry(Strict):
    id: str = Field(pattern=ID_PATTERN, description="the arm's id; gates and queue items name it")
    model: str = Field(description="a models[].name")
    quant: str | None = Field(default=None, description="which quant of that model; needed when it has several")
    runtime: str = Field(description="a runtimes[].name")
    context: int = Field(ge=256, description="the server's context size in tokens")
    klass: str = Field(
        default="default",
        alias="class",
        description="workload class (agent, batch, ...); a gate page whose arms span classes flags that end-to-end times do not compare across them",
    )
    group: str = Field(default="default", description="a label for arms that belong together, shown in the report")
    recipe: Recipe = Field(default_factory=Recipe, description="the serving recipe: slots, chunks, cache, speculation")
    simulate: dict[str, Any] = Field(
        default_factory=dict,
        description="simulator profile fields for this arm only (how a quant or build behaves); ignored by real runtimes",
    )
    host: str | None = Field(
        default=None,
        pattern=HOST_PATTERN,
        description="the host this arm runs on, when not its runtime's host ('' = where `campaign run` runs)",
    )
    description: str = Field(default="", description="free text, shown on the arm's page of the report")


class GateEntry(Strict):
    id: str = Field(pattern=ID_PATTERN, description="the gate's id; a queue item feeds it by `gate`")
    title: str = Field(default="", description="the claim in words, shown in status and the report")
    predicate: str = Field(description="what decides the verdict: a built-in predicate (docs/gates.md) or a plugin's")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the predicate's parameters (docs/predicates-compare.md, docs/predicates-bounds.md), checked when the file loads",
    )
    subjects: list[str] = Field(min_length=1, description="the arms the claim is about")
    baseline: list[str] = Field(default_factory=list, description="baseline or control arms")
    reads: Literal["own-items", "all"] = Field(
        default="own-items",
        description="own-items: only measurements of the queue items that feed this gate (all, if none does)",
    )
    exploratory: bool = Field(
        default=False,
        description="left out of the campaign's family of comparative verdicts (no multiplicity control; the reason says so)",
    )

    def arms_read(self) -> list[str]:
        """Every arm whose rows the verdict reads: subjects and baseline, and those an
        all_of check names of its own. The one place for that fact."""
        arms = [*self.subjects, *self.baseline]
        checks = self.params.get("checks") if self.predicate == "all_of" else None
        for check in checks if isinstance(checks, list) else []:
            if isinstance(check, dict):
                arms += [str(a) for a in [*(check.get("subjects") or []), *(check.get("baseline") or [])]]
        return list(dict.fromkeys(arms))


def read_items(gate: GateEntry, feeding: Sequence[str]) -> list[str] | None:
    """The queue items whose rows a gate reads, given the keys of the items feeding it;
    None for every item's. With `reads = "own-items"` (the default) a gate fed by items
    reads only theirs, so another item's runs of the same arms (other settings, another
    question) never enter its verdict; a gate nobody feeds, or `reads = "all"`, reads all.
    One definition for the verdicts (`gates.engine.gate_rows`) and the checks of what a
    gate pools (`campaign.core.pooling.pooled_pairs`)."""
    return list(feeding) if feeding and gate.reads == "own-items" else None


RECIPE_PREFIX, SIM_PREFIX = "recipe.", "sim."


@dataclass(frozen=True)
class OverrideKeys:
    """A queue item's (or a rerun's) flat `overrides`, parsed once into what each key sets:
    `recipe.<field>` the servers' recipe, `sim.<field>` the simulator's profile, any other
    key a probe parameter. Why one parser: the prefixes were split by hand in the schema's
    checks, the recipe an item runs, its settings hash, the pooling check, the override
    check and the simulator's launch, and each had to agree with the others."""

    recipe: Mapping[str, Any]  # recipe field -> value
    sim: Mapping[str, Any]  # simulator profile field -> value
    probe: Mapping[str, Any]  # key as written -> value (a probe parameter, or a mistake the checks name)

    @classmethod
    def of(cls, overrides: Mapping[str, Any]) -> OverrideKeys:
        recipe, sim, probe = {}, {}, {}
        for key, value in overrides.items():
            if key.startswith(RECIPE_PREFIX):
                recipe[key[len(RECIPE_PREFIX) :]] = value
            elif key.startswith(SIM_PREFIX):
                sim[key[len(SIM_PREFIX) :]] = value
            else:
                probe[key] = value
        return cls(recipe, sim, probe)

    def sim_keys(self) -> dict[str, Any]:
        """The `sim.*` overrides as written (what a settings hash reads)."""
        return {SIM_PREFIX + name: value for name, value in self.sim.items()}

    def without_recipe(self) -> dict[str, Any]:
        """Every override but the recipe's, as written (the servers' are in the recipe hash)."""
        return {**self.probe, **self.sim_keys()}


class QueueItem(Strict):
    id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="the item's key (absent: the title, lower-cased, non-alphanumerics as -)",
    )
    title: str = Field(description="what the item measures, shown in status and the report")
    arms: list[str] = Field(min_length=1, description="the arms to run; each gets its own server start in every block")
    probes: list[str] = Field(
        min_length=1,
        description="the probes run on each arm, in order: a registered probe's name (built in: "
        + ", ".join(p.value for p in ProbeName)
        + "; a plugin may register more)",
    )
    contexts: list[int] = Field(
        default_factory=list,
        description="contexts at which cache-probe and decode run, each at most the arm's context; empty = the arm's own",
    )
    modes: list[Mode] = Field(
        default_factory=lambda: [Mode.CANONICAL],
        description="canonical (the model's sampling, the only mode gates read) and/or greedy (temperature 0, diagnostic)",
    )
    gate: str | None = Field(default=None, description="the gate this item's measurements feed")
    also_gates: list[str] = Field(
        default_factory=list,
        description="more gates that read this item's measurements (only `gate` decides when an adaptive item stops)",
    )
    depends_on: list[str] = Field(
        default_factory=list, description="items that must be done first; while one is not, this one waits"
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="probe parameters (max_tokens, prompt_tokens, repeats, ...), recipe.<field>, and on the simulator "
        "sim.<field>; any other key is refused with the valid ones listed",
    )
    blocks: int | None = Field(
        default=None,
        ge=1,
        le=50,
        # `repeats`: the key's earlier name, still read; a probe's own `repeats` (decode's
        # timed requests) lives in `overrides` and is another thing
        validation_alias=AliasChoices("blocks", "repeats"),
        description="blocks: in each, every arm gets its own server start, in an order randomised from campaign.seed "
        "(unset: campaign.min_blocks for an item with a gate, else 1; `repeats` is read as this key)",
    )
    min_blocks: int | None = Field(
        default=None,
        ge=2,
        le=50,
        description="with max_blocks: the blocks run before the gate is first looked at (default campaign.min_blocks)",
    )
    max_blocks: int | None = Field(
        default=None,
        ge=2,
        le=50,
        description="adaptive: after each block the item's gate is evaluated, and the item stops once it is pass or fail, "
        "at most this many blocks (instead of a fixed number in `blocks`; its verdicts then use confidence sequences)",
    )
    retries: int = Field(
        default=0, ge=0, le=5, description="re-runs of an arm whose measurement crashed (not of a blocked one)"
    )
    confirms: str | None = Field(default=None, description="an earlier item this one re-runs with one variable changed")
    change: dict[str, Any] = Field(
        default_factory=dict, description="the one recipe variable changed, e.g. {session_cache_cap = '100G'}"
    )

    @model_validator(mode="before")
    @classmethod
    def _one_name_for_blocks(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "blocks" in data and "repeats" in data:
            raise ValueError("blocks and repeats name the same number (repeats is its earlier name): set blocks only")
        return data

    @model_validator(mode="after")
    def _blocks(self) -> QueueItem:
        if self.max_blocks is not None and self.blocks is not None:
            raise ValueError(
                f"blocks = {self.blocks} is a fixed number of blocks and max_blocks = {self.max_blocks} an adaptive budget: set one"
            )
        if self.max_blocks is not None and self.min_blocks is not None and self.min_blocks > self.max_blocks:
            raise ValueError(f"min_blocks = {self.min_blocks} is more than max_blocks = {self.max_blocks}")
        if self.max_blocks is not None and not self.gate:
            raise ValueError("max_blocks needs a gate: the item stops adding blocks when its gate is settled")
        if self.min_blocks is not None and self.max_blocks is None:
            raise ValueError(
                "min_blocks needs max_blocks (the budget of an item that adds blocks until its gate is settled)"
            )
        return self

    @model_validator(mode="after")
    def _one_variable(self) -> QueueItem:
        if self.confirms is not None and len(self.change) != 1:
            raise ValueError(f"a confirmatory item changes exactly one variable; found {len(self.change)} in change")
        if self.change and self.confirms is None:
            raise ValueError("change needs confirms = <the earlier item it re-runs>")
        unknown = set(self.change) - set(Recipe.model_fields)
        if unknown:
            raise ValueError(
                f"change names {sorted(unknown)}, expected recipe fields: {', '.join(sorted(Recipe.model_fields))}"
            )
        return self

    @field_validator("contexts")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        for ctx in value:
            if ctx < 1:
                raise ValueError(f"contexts must be positive token counts, found {ctx}")
        return value

    @property
    def key(self) -> str:
        return self.id or slugify(self.title)


class CampaignSpec(Strict):
    campaign: CampaignMeta = Field(description="the campaign's name and settings")
    models: list[ModelEntry] = Field(min_length=1, description="the models the arms serve")
    runtimes: list[RuntimeEntry] = Field(min_length=1, description="the serving runtimes the arms start")
    arms: list[ArmEntry] = Field(min_length=1, description="model x quant x runtime x context, plus a serving recipe")
    gates: list[GateEntry] = Field(
        default_factory=list, description="claims over the measurements, each decided by a predicate"
    )
    queue: list[QueueItem] = Field(
        default_factory=list, description="what to measure, in order: probes on arms, feeding gates"
    )
    search: SearchSpec | None = Field(
        default=None,
        description="a search over recipe fields, run after the queue; its winner confirmed on fresh runs (docs/search.md)",
    )

    @model_validator(mode="after")
    def _something_to_run(self) -> CampaignSpec:
        if not self.queue and self.search is None:
            raise ValueError("queue: the campaign has nothing to run; add a [[queue]] item or a [search]")
        return self

    # -- lookups used everywhere downstream ---------------------------------------

    def arm(self, arm_id: str) -> ArmEntry:
        return next(a for a in self.arms if a.id == arm_id)

    def runtime(self, name: str) -> RuntimeEntry:
        return next(r for r in self.runtimes if r.name == name)

    def gate(self, gate_id: str) -> GateEntry:
        return next(g for g in self.gates if g.id == gate_id)

    def item(self, key: str) -> QueueItem:
        return next(q for q in self.queue if q.key == key)

    def feeding(self, gate_id: str) -> list[QueueItem]:
        """The items whose measurements a gate reads as its own: those naming it in `gate`
        or `also_gates`. The one place for that fact."""
        return [q for q in self.queue if q.gate == gate_id or gate_id in q.also_gates]

    def blocks(self, item: QueueItem) -> BlockBudget:
        """How many blocks an item runs: its `blocks` (fixed), or, adaptive, from min to max
        blocks (its own or the campaign's `max_blocks`; the campaign's applies to an item
        that has a gate and no `blocks`). An item with a gate and neither runs
        `campaign.min_blocks` blocks: one block cannot decide a comparison, so the default
        design is one that can. The one place for that fact."""
        budget = item.max_blocks
        if budget is None and self.campaign.max_blocks is not None and item.gate and item.blocks is None:
            budget = self.campaign.max_blocks
        if budget is None:
            fixed = item.blocks if item.blocks is not None else (self.campaign.min_blocks if item.gate else 1)
            return BlockBudget(fixed, fixed, False)
        least = item.min_blocks if item.min_blocks is not None else min(self.campaign.min_blocks, budget)
        return BlockBudget(least, budget, True)

    def adaptive_gates(self) -> set[str]:
        """Gates fed by an item that adds blocks until they are settled. Their intervals are
        confidence sequences (`gates.blockstats`), since that item looks after every block."""
        return {g for q in self.queue if q.gate and self.blocks(q).adaptive for g in (q.gate, *q.also_gates)}

    def recipe_for(self, arm_id: str, item: QueueItem | None = None) -> Recipe:
        """The arm's recipe as this item runs it: `recipe.*` overrides of the item, then
        the one field a confirmatory item changes."""
        recipe = self.arm(arm_id).recipe
        if item is None:
            return recipe
        changes = dict(OverrideKeys.of(item.overrides).recipe)
        changes.update(item.change)
        if changes:
            recipe = Recipe.model_validate({**recipe.model_dump(), **changes})
        return recipe

    def host_of(self, arm_id: str) -> str:
        """Where an arm runs: its own `host`, else its runtime's ('' = where `campaign run` runs)."""
        arm = self.arm(arm_id)
        return self.runtime(arm.runtime).host if arm.host is None else arm.host

    def device_of(self, arm_id: str) -> str:
        """An arm's device named per host (`h1/gpu0`): one host's `local` never serialises
        another's. Without a host, the bare device name."""
        host = self.host_of(arm_id)
        device = self.runtime(self.arm(arm_id).runtime).device
        return f"{host}/{device}" if host else device

    def model_for(self, arm: ArmEntry) -> ModelEntry:
        return next(m for m in self.models if m.name == arm.model and (arm.quant is None or m.quant == arm.quant))


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "item"


class CampaignFileError(Exception):
    """A user's mistake in a campaign file: printed as a paragraph, exit code 2."""

    def __init__(self, path: str | Path, problems: list[str]):
        self.path = str(path)
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.path}: the campaign file is not valid ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''})."
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])


@dataclass(frozen=True)
class BlockBudget:
    """An item's blocks: `least` before its gate is first looked at and `most` in all;
    `adaptive` means it stops as soon as its gate is settled (a fixed item runs `most`)."""

    least: int
    most: int
    adaptive: bool
