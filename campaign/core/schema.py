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
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from campaign.core.states import Mode, ProbeName

# an id, a device or a host: what can also name a Prefect deployment, tag and limit
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_ID = rf"^{NAME}$"
_HOST = rf"^({NAME})?$"  # empty: where `campaign run` runs
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(value: int | str) -> int:
    """Byte sizes as people write them in serving recipes ("8G", "48GB", "512MiB")."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 8G or 512M")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("expected a size >= 0")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 8G, 512M or 4096B, found {value!r}")
    number, unit, _ = match.groups()
    return int(float(number) * _UNITS[unit.upper()])


def unitless_size(value: Any) -> str:
    """What a size written as a bare number should have said ('' when `value` is not one).

    Why refused in a campaign file: llama.cpp's --cache-ram and the habits of serving
    recipes count in MiB, so `prefix_cache = 256` means 256 MiB to whoever wrote it, and
    read as bytes it is a cache too small to hold one prompt, with nothing said. 0 is 0 in
    every unit."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value == 0:
        return ""
    shown = int(value) if float(value).is_integer() else value
    return f'a size with its unit: write "{shown}M" or "{shown}MiB" ("{shown}G" for GiB, "{shown}B" for bytes)'


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)


class CampaignMeta(_Strict):
    name: str = Field(pattern=_ID, description="short name; keys the campaign in the store")
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
        description="the blocks an item with a gate and no repeats runs (fewer cannot decide a comparison); with max_blocks, "
        "the blocks it runs before its gate is first looked at",
    )
    max_blocks: int | None = Field(
        default=None,
        ge=2,
        le=50,
        description="every item with a gate and no repeats adds blocks until that gate is settled, at most this many "
        "(its verdicts then use confidence sequences); unset: each item runs its repeats, min_blocks where it sets none",
    )
    keep_servers: bool = Field(
        default=True,
        description="consecutive items on the same arms, recipes and blocks, feeding different gates, run on one server "
        "start per arm and block (its prefix cache emptied before a probe that needs it cold); false: a server per item",
    )


class Sampling(_Strict):
    """The model vendor's sampling parameters: what `canonical` mode sends.

    `ignore_eos` and `min_tokens` set how long replies are, not how tokens are drawn, so
    greedy requests send them too; a probe's own values win (decode sends both by default,
    so that every trial generates exactly max_tokens).
    """

    temperature: float = Field(default=1.0, ge=0, description="sampling temperature of canonical requests")
    top_p: float | None = Field(default=None, gt=0, le=1, description="nucleus sampling; sent only when set")
    top_k: int | None = Field(default=None, ge=0, description="top-k sampling; sent only when set")
    min_p: float | None = Field(default=None, ge=0, le=1, description="min-p sampling; sent only when set")
    presence_penalty: float | None = Field(default=None, description="sent only when set")
    repetition_penalty: float | None = Field(
        default=None, description="sent only when set, under the runtime's own name (llama.cpp: repeat_penalty)"
    )
    ignore_eos: bool | None = Field(
        default=None, description="keep generating past end-of-sequence (llama.cpp, vLLM, SGLang)"
    )
    min_tokens: int | None = Field(
        default=None, ge=0, description="no end-of-sequence before this many tokens (vLLM, SGLang)"
    )


class ModelEntry(_Strict):
    name: str = Field(description="the model's name; an arm names it in `model`")
    quant: str = Field(
        description="the quantisation (q4_k_m, awq, ...); a name may have several entries, one per quant"
    )
    bits_per_weight: float = Field(
        gt=0,
        le=32,
        description="shown in the report; on the simulator, decode speed scales with options.reference_bits / bits_per_weight",
    )
    served_id: str | None = Field(
        default=None, description="the id the server should report; identity is checked against it"
    )
    path: str | None = Field(default=None, description="model file or directory, for runtimes that load one")
    kv_bytes_per_token: int = Field(default=131072, ge=1, description="converts cache sizes in bytes to tokens")
    sampling: Sampling = Field(default_factory=Sampling, description="the vendor's sampling, sent in canonical mode")
    description: str = Field(default="", description="free text, shown in the report")

    @property
    def key(self) -> str:
        return f"{self.name}/{self.quant}"

    @property
    def request_id(self) -> str:
        """The model id requests name: `served_id`, else name-quant (what a runtime that
        takes a served name is launched with, so the two agree)."""
        return self.served_id or f"{self.name}-{self.quant}"


class RuntimeEntry(_Strict):
    name: str = Field(pattern=_ID, description="the runtime's name; an arm names it in `runtime`")
    adapter: str = Field(
        description="what launches and reads the server: simulator, llamacpp, vllm, sglang, mlx-lm, omlx, mtplx, "
        "mlx-dspark, or external (a server at `url`, never launched); see docs/runtimes.md",
    )
    argv: list[str] = Field(default_factory=list, description="launch argv template; {placeholders} filled per arm")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables added to the server's own")
    health_path: str = Field(default="/health", description="polled after the start; probes begin once it answers 200")
    startup_timeout_s: float = Field(
        default=120.0, gt=0, description="seconds the server gets to become healthy before the start fails"
    )
    url: str | None = Field(default=None, description="external server: measure this URL, launch nothing")
    device: str = Field(default="local", pattern=_ID, description="arms on one device never run at once")
    host: str = Field(
        default="",
        pattern=_HOST,
        description="the host (a `campaign worker --host NAME`) its arms run on; empty: where `campaign run` runs",
    )
    seeks: str = Field(default="", description="what this runtime offers")
    how: str = Field(default="", description="how it serves (free text, shown in the report)")
    cost: str = Field(default="", description="what it costs")
    options: dict[str, Any] = Field(default_factory=dict, description="adapter-specific settings")


class Recipe(_Strict):
    """The serving recipe: the knobs a person tunes."""

    slots: int = Field(
        default=1, ge=1, le=1024, description="sequences the server runs at once (llama.cpp -np, vLLM --max-num-seqs)"
    )
    prefill_chunk: int = Field(
        default=512, ge=1, description="prompt tokens per engine step (llama.cpp -b/-ub, vLLM --max-num-batched-tokens)"
    )
    interleave_chunk: int | None = Field(
        default=None,
        ge=1,
        description="prompt tokens per step while another slot decodes; only the simulator has this knob (absent = prefill_chunk)",
    )
    prefix_cache: int | None = Field(
        default=None, description="prefix-cache size with its unit (8G, 256M, 512MiB); absent = off"
    )
    session_cache_cap: int | None = Field(default=None, description="per-session cache cap with its unit (48G, 512M)")
    speculative: bool = Field(default=False, description="speculative decoding on")
    draft: str | None = Field(default=None, description="draft model or speculative method")
    draft_k: int = Field(default=4, ge=1, le=64, description="tokens drafted per step when speculative")
    offloads: list[str] = Field(
        default_factory=list,
        description="names of work moved off the main path ('specprefill'); part of the recipe and of the 'offloads' "
        "mechanism an attribution gate may credit; no adapter turns them into flags (use extra_args)",
    )
    extra_args: list[str] = Field(default_factory=list, description="appended to the runtime argv")

    @field_validator("prefix_cache", "session_cache_cap", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_size(value)

    @model_validator(mode="after")
    def _draft_needs_spec(self) -> Recipe:
        if self.draft and not self.speculative:
            raise ValueError("draft is set but speculative = false; set speculative = true or remove draft")
        return self


class ArmEntry(_Strict):
    id: str = Field(pattern=_ID, description="the arm's id; gates and queue items name it")
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
        pattern=_HOST,
        description="the host this arm runs on, when not its runtime's host ('' = where `campaign run` runs)",
    )
    description: str = Field(default="", description="free text, shown on the arm's page of the report")


class GateEntry(_Strict):
    id: str = Field(pattern=_ID, description="the gate's id; a queue item feeds it by `gate`")
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
    gate pools (`campaign.core.loader.pooled_pairs`)."""
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


class QueueItem(_Strict):
    id: str | None = Field(
        default=None, pattern=_ID, description="the item's key (absent: the title, lower-cased, non-alphanumerics as -)"
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
    depends_on: list[str] = Field(
        default_factory=list, description="items that must be done first; while one is not, this one waits"
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="probe parameters (max_tokens, prompt_tokens, repeats, ...), recipe.<field>, and on the simulator "
        "sim.<field>; any other key is refused with the valid ones listed",
    )
    repeats: int | None = Field(
        default=None,
        ge=1,
        le=50,
        description="blocks: in each, every arm gets its own server start, in an order randomised from campaign.seed "
        "(unset: campaign.min_blocks for an item with a gate, else 1)",
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
        "at most this many blocks (instead of repeats; its verdicts then use confidence sequences)",
    )
    retries: int = Field(
        default=0, ge=0, le=5, description="re-runs of an arm whose measurement crashed (not of a blocked one)"
    )
    confirms: str | None = Field(default=None, description="an earlier item this one re-runs with one variable changed")
    change: dict[str, Any] = Field(
        default_factory=dict, description="the one recipe variable changed, e.g. {session_cache_cap = '100G'}"
    )

    @model_validator(mode="after")
    def _blocks(self) -> QueueItem:
        if self.max_blocks is not None and self.repeats is not None:
            raise ValueError(
                f"repeats = {self.repeats} is a fixed number of blocks and max_blocks = {self.max_blocks} an adaptive budget: set one"
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


class CampaignSpec(_Strict):
    campaign: CampaignMeta = Field(description="the campaign's name and settings")
    models: list[ModelEntry] = Field(min_length=1, description="the models the arms serve")
    runtimes: list[RuntimeEntry] = Field(min_length=1, description="the serving runtimes the arms start")
    arms: list[ArmEntry] = Field(min_length=1, description="model x quant x runtime x context, plus a serving recipe")
    gates: list[GateEntry] = Field(
        default_factory=list, description="claims over the measurements, each decided by a predicate"
    )
    queue: list[QueueItem] = Field(min_length=1, description="what to measure, in order: probes on arms, feeding gates")

    # -- lookups used everywhere downstream ---------------------------------------

    def arm(self, arm_id: str) -> ArmEntry:
        return next(a for a in self.arms if a.id == arm_id)

    def runtime(self, name: str) -> RuntimeEntry:
        return next(r for r in self.runtimes if r.name == name)

    def gate(self, gate_id: str) -> GateEntry:
        return next(g for g in self.gates if g.id == gate_id)

    def item(self, key: str) -> QueueItem:
        return next(q for q in self.queue if q.key == key)

    def blocks(self, item: QueueItem) -> BlockBudget:
        """How many blocks an item runs: its repeats (fixed), or, adaptive, from min to max
        blocks (its own or the campaign's `max_blocks`; the campaign's applies to an item
        that has a gate and no repeats). An item with a gate and neither runs
        `campaign.min_blocks` blocks: one block cannot decide a comparison, so the default
        design is one that can. The one place for that fact."""
        budget = item.max_blocks
        if budget is None and self.campaign.max_blocks is not None and item.gate and item.repeats is None:
            budget = self.campaign.max_blocks
        if budget is None:
            fixed = item.repeats if item.repeats is not None else (self.campaign.min_blocks if item.gate else 1)
            return BlockBudget(fixed, fixed, False)
        least = item.min_blocks if item.min_blocks is not None else min(self.campaign.min_blocks, budget)
        return BlockBudget(least, budget, True)

    def adaptive_gates(self) -> set[str]:
        """Gates fed by an item that adds blocks until they are settled. Their intervals are
        confidence sequences (`gates.blockstats`), since that item looks after every block."""
        return {q.gate for q in self.queue if q.gate and self.blocks(q).adaptive}

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


def recipe_differences(a: Recipe, b: Recipe) -> list[str]:
    """The recipe fields in which two recipes differ, in the order Recipe declares them."""
    return [name for name in Recipe.model_fields if getattr(a, name) != getattr(b, name)]


_SIZE_FIELDS = ("prefix_cache", "session_cache_cap")


def recipe_value_text(field: str, value: Any) -> str:
    """A recipe value as a person wrote it: sizes as 48G, booleans as TOML, absent as unset."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if field in _SIZE_FIELDS and isinstance(value, int):
        for unit in ("T", "G", "M", "K"):
            if value and value % _UNITS[unit] == 0:
                return f"{value // _UNITS[unit]}{unit}"
        return str(value)
    if isinstance(value, str):
        return repr(value)
    return str(value)


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
