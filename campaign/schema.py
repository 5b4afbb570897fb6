"""The campaign file: a TOML document validated by pydantic.

Why so strict: a campaign runs for hours, and a typo found at arm 9 costs all the arms
before it. Unknown keys are refused, every reference is checked before anything starts,
and every error names the file, the field path (`arms[3].recipe.slots`), what was found
and what was expected -- never a traceback for a user's mistake.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from campaign.states import Mode, ProbeName

# an id, a device or a host: what can also name a Prefect deployment, tag and limit
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_ID = rf"^{NAME}$"
_HOST = rf"^({NAME})?$"  # empty: where `campaign run` runs
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(value: int | str) -> int:
    """Byte sizes as people write them in serving recipes ("8G", "48GB", "512MiB")."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 8G or a number of bytes")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("expected a size >= 0")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 8G, 512M or a number of bytes, found {value!r}")
    number, unit, _ = match.groups()
    return int(float(number) * _UNITS[unit.upper()])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)


class CampaignMeta(_Strict):
    name: str = Field(pattern=_ID, description="short name; keys the campaign in the store")
    title: str = Field(default="", description="a one-line title, the heading of the report")
    description: str = Field(default="", description="the question the campaign asks, shown on the report's front page")
    default_max_tokens: int = Field(default=64, ge=1, description="decode's max_tokens where a queue item's overrides do not set it")
    seed: int = Field(
        default=0, ge=0,
        description="randomises the order of the arms within each block (server run); the order is stored on every attempt",
    )
    confidence: float = Field(
        default=0.95, gt=0.5, lt=1,
        description="the level of every interval and the family-wise level of the campaign's comparative verdicts",
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="modules or .py files (relative to the campaign file) that register custom predicates",
    )
    min_blocks: int = Field(
        default=3, ge=2, le=50,
        description="with max_blocks: the blocks an item runs before its gate is first looked at",
    )
    max_blocks: int | None = Field(
        default=None, ge=2, le=50,
        description="every item with a gate and no repeats above 1 adds blocks until that gate is settled, at most this many "
        "(its verdicts then use confidence sequences); unset: each item runs its repeats",
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
    repetition_penalty: float | None = Field(default=None, description="sent only when set, under the runtime's own name (llama.cpp: repeat_penalty)")
    ignore_eos: bool | None = Field(default=None, description="keep generating past end-of-sequence (llama.cpp, vLLM, SGLang)")
    min_tokens: int | None = Field(default=None, ge=0, description="no end-of-sequence before this many tokens (vLLM, SGLang)")


class ModelEntry(_Strict):
    name: str = Field(description="the model's name; an arm names it in `model`")
    quant: str = Field(description="the quantisation (q4_k_m, awq, ...); a name may have several entries, one per quant")
    bits_per_weight: float = Field(
        gt=0, le=32,
        description="shown in the report; on the simulator, decode speed scales with options.reference_bits / bits_per_weight",
    )
    served_id: str | None = Field(
        default=None, description="the id the server should report; identity is checked against it"
    )
    path: str | None = Field(default=None, description="model file or directory, for runtimes that load one")
    kv_bytes_per_token: int = Field(
        default=131072, ge=1, description="converts cache sizes in bytes to tokens"
    )
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
    startup_timeout_s: float = Field(default=120.0, gt=0, description="seconds the server gets to become healthy before the start fails")
    url: str | None = Field(default=None, description="external server: measure this URL, launch nothing")
    device: str = Field(default="local", pattern=_ID, description="arms on one device never run at once")
    host: str = Field(
        default="", pattern=_HOST,
        description="the host (a `campaign worker --host NAME`) its arms run on; empty: where `campaign run` runs",
    )
    seeks: str = Field(default="", description="what this runtime offers")
    how: str = Field(default="", description="how it serves (free text, shown in the report)")
    cost: str = Field(default="", description="what it costs")
    options: dict[str, Any] = Field(default_factory=dict, description="adapter-specific settings")


class Recipe(_Strict):
    """The serving recipe: the knobs a person tunes."""

    slots: int = Field(default=1, ge=1, le=1024, description="sequences the server runs at once (llama.cpp -np, vLLM --max-num-seqs)")
    prefill_chunk: int = Field(default=512, ge=1, description="prompt tokens per engine step (llama.cpp -b/-ub, vLLM --max-num-batched-tokens)")
    interleave_chunk: int | None = Field(
        default=None, ge=1,
        description="prompt tokens per step while another slot decodes; only the simulator has this knob (absent = prefill_chunk)",
    )
    prefix_cache: int | None = Field(default=None, description="prefix-cache size (bytes, or 8G); absent = off")
    session_cache_cap: int | None = Field(default=None, description="per-session cache cap (bytes, or 48G)")
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
    klass: str = Field(default="default", alias="class", description="workload class (agent, batch, ...); a gate page whose arms span classes flags that end-to-end times do not compare across them")
    group: str = Field(default="default", description="a label for arms that belong together, shown in the report")
    recipe: Recipe = Field(default_factory=Recipe, description="the serving recipe: slots, chunks, cache, speculation")
    simulate: dict[str, Any] = Field(
        default_factory=dict,
        description="simulator profile fields for this arm only (how a quant or build behaves); ignored by real runtimes",
    )
    host: str | None = Field(
        default=None, pattern=_HOST,
        description="the host this arm runs on, when not its runtime's host ('' = where `campaign run` runs)",
    )
    description: str = Field(default="", description="free text, shown on the arm's page of the report")


class GateEntry(_Strict):
    id: str = Field(pattern=_ID, description="the gate's id; a queue item feeds it by `gate`")
    title: str = Field(default="", description="the claim in words, shown in status and the report")
    predicate: str = Field(description="what decides the verdict: a built-in predicate (docs/gates.md) or a plugin's")
    params: dict[str, Any] = Field(default_factory=dict, description="the predicate's parameters (docs/gates.md), checked when the file loads")
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
                recipe[key[len(RECIPE_PREFIX):]] = value
            elif key.startswith(SIM_PREFIX):
                sim[key[len(SIM_PREFIX):]] = value
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
    id: str | None = Field(default=None, pattern=_ID, description="the item's key (absent: the title, lower-cased, non-alphanumerics as -)")
    title: str = Field(description="what the item measures, shown in status and the report")
    arms: list[str] = Field(min_length=1, description="the arms to run; each gets its own server start in every block")
    probes: list[str] = Field(
        min_length=1,
        description="the probes run on each arm, in order: a registered probe's name (built in: "
        + ", ".join(p.value for p in ProbeName) + "; a plugin may register more)",
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
    depends_on: list[str] = Field(default_factory=list, description="items that must be done first; while one is not, this one waits")
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="probe parameters (max_tokens, prompt_tokens, repeats, ...), recipe.<field>, and on the simulator "
        "sim.<field>; any other key is refused with the valid ones listed",
    )
    repeats: int = Field(
        default=1, ge=1, le=50,
        description="blocks: in each, every arm gets its own server start, in an order randomised from campaign.seed",
    )
    min_blocks: int | None = Field(
        default=None, ge=2, le=50, description="with max_blocks: the blocks run before the gate is first looked at (default campaign.min_blocks)",
    )
    max_blocks: int | None = Field(
        default=None, ge=2, le=50,
        description="adaptive: after each block the item's gate is evaluated, and the item stops once it is pass or fail, "
        "at most this many blocks (instead of repeats; its verdicts then use confidence sequences)",
    )
    retries: int = Field(default=0, ge=0, le=5, description="re-runs of an arm whose measurement crashed (not of a blocked one)")
    confirms: str | None = Field(default=None, description="an earlier item this one re-runs with one variable changed")
    change: dict[str, Any] = Field(default_factory=dict, description="the one recipe variable changed, e.g. {session_cache_cap = '100G'}")

    @model_validator(mode="after")
    def _blocks(self) -> QueueItem:
        if self.max_blocks is not None and self.repeats != 1:
            raise ValueError(
                f"repeats = {self.repeats} is a fixed number of blocks and max_blocks = {self.max_blocks} an adaptive budget: set one"
            )
        if self.max_blocks is not None and self.min_blocks is not None and self.min_blocks > self.max_blocks:
            raise ValueError(f"min_blocks = {self.min_blocks} is more than max_blocks = {self.max_blocks}")
        if self.max_blocks is not None and not self.gate:
            raise ValueError("max_blocks needs a gate: the item stops adding blocks when its gate is settled")
        if self.min_blocks is not None and self.max_blocks is None:
            raise ValueError("min_blocks needs max_blocks (the budget of an item that adds blocks until its gate is settled)")
        return self

    @model_validator(mode="after")
    def _one_variable(self) -> QueueItem:
        if self.confirms is not None and len(self.change) != 1:
            raise ValueError(f"a confirmatory item changes exactly one variable; found {len(self.change)} in change")
        if self.change and self.confirms is None:
            raise ValueError("change needs confirms = <the earlier item it re-runs>")
        unknown = set(self.change) - set(Recipe.model_fields)
        if unknown:
            raise ValueError(f"change names {sorted(unknown)}, expected recipe fields: {', '.join(sorted(Recipe.model_fields))}")
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
    gates: list[GateEntry] = Field(default_factory=list, description="claims over the measurements, each decided by a predicate")
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
        that has a gate and no repeats above 1). The one place for that fact."""
        budget = item.max_blocks
        if budget is None and self.campaign.max_blocks is not None and item.gate and item.repeats == 1:
            budget = self.campaign.max_blocks
        if budget is None:
            return BlockBudget(item.repeats, item.repeats, False)
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


# -- error formatting ---------------------------------------------------------------


def _loc_path(loc: tuple[Any, ...], data: Any) -> str:
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            label = f"[{part}]"
            if isinstance(node, list) and part < len(node):
                node = node[part]
                ident = node.get("id") if isinstance(node, dict) else None
                if ident is not None:
                    label += f" (id {ident!r})"
            else:
                node = None
            out += label
        else:
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(top level)"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = CampaignSpec
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            field = next((f for f in model.model_fields.values() if f.alias == part), None)
        if field is None:
            return None
        model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _describe(err: dict[str, Any], data: Any) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = ""
        if parent is not None:
            names = sorted(f.alias or n for n, f in parent.model_fields.items())
            allowed = f"; expected one of: {', '.join(names)}"
        return f"{_loc_path(loc[:-1], data)}: unknown key {loc[-1]!r}{allowed}"
    if kind == "missing":
        return f"{_loc_path(loc, data)}: missing required key {loc[-1]!r}"
    found = err.get("input")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    shown = repr(found)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{_loc_path(loc, data)}: found {shown}, expected: {msg[0].lower() + msg[1:]}"


# -- reference checks -----------------------------------------------------------------


def _check_references(spec: CampaignSpec, known_adapters: set[str] | None, known_predicates: set[str] | None,
                      known_probes: set[str] | None = None) -> list[str]:
    """Every name the file uses that another part of it (or a registry) must define: one
    problem per wrong name, each naming where it is and what was expected."""
    probes = known_probes if known_probes is not None else {p.value for p in ProbeName}  # the built-in ones, known to the core
    return [
        *_unknown_probes(spec, probes),
        *_duplicate_ids(spec),
        *_runtime_and_arm_references(spec, known_adapters),
        *_gate_references(spec, known_predicates),
        *_queue_references(spec),
        *_confirmations(spec),
    ]


def _unknown_probes(spec: CampaignSpec, probes: set[str]) -> list[str]:
    return [
        f"{item_label(i, item)}.probes[{j}]: found {probe!r}, expected one of: {', '.join(sorted(probes))}"
        for i, item in enumerate(spec.queue)
        for j, probe in enumerate(item.probes)
        if probe not in probes
    ]


def _duplicate_ids(spec: CampaignSpec) -> list[str]:
    problems: list[str] = []
    for kind, keys in (
        ("runtimes", [r.name for r in spec.runtimes]),
        ("arms", [a.id for a in spec.arms]),
        ("gates", [g.id for g in spec.gates]),
        ("queue", [q.key for q in spec.queue]),
        ("models", [m.key for m in spec.models]),
    ):
        seen: set[str] = set()
        for i, key in enumerate(keys):
            if key in seen:
                problems.append(f"{kind}[{i}]: duplicate id {key!r}")
            seen.add(key)
    return problems


def _runtime_and_arm_references(spec: CampaignSpec, known_adapters: set[str] | None) -> list[str]:
    """Each runtime's adapter, and each arm's runtime and model (one quant of it)."""
    problems: list[str] = []
    if known_adapters is not None:
        for i, rt in enumerate(spec.runtimes):
            if rt.adapter not in known_adapters:
                problems.append(
                    f"runtimes[{i}] (name {rt.name!r}).adapter: found {rt.adapter!r}, expected one of: {', '.join(sorted(known_adapters))}"
                )
    runtimes = {r.name for r in spec.runtimes}
    for i, arm in enumerate(spec.arms):
        where = f"arms[{i}] (id {arm.id!r})"
        if arm.runtime not in runtimes:
            problems.append(f"{where}.runtime: found {arm.runtime!r}, expected one of the runtimes: {', '.join(sorted(runtimes))}")
        matches = [m for m in spec.models if m.name == arm.model and (arm.quant is None or m.quant == arm.quant)]
        if not matches:
            offered = ", ".join(sorted(m.key for m in spec.models))
            wanted = f"{arm.model}/{arm.quant}" if arm.quant else arm.model
            problems.append(f"{where}.model: found {wanted!r}, expected one of the models (name/quant): {offered}")
        elif len(matches) > 1:
            problems.append(f"{where}.quant: model {arm.model!r} has several quants ({', '.join(m.quant for m in matches)}); name one")
    return problems


def _gate_references(spec: CampaignSpec, known_predicates: set[str] | None) -> list[str]:
    problems: list[str] = []
    arms = {a.id for a in spec.arms}
    for i, gate in enumerate(spec.gates):
        where = f"gates[{i}] (id {gate.id!r})"
        if known_predicates is not None and gate.predicate not in known_predicates:
            problems.append(f"{where}.predicate: found {gate.predicate!r}, expected one of: {', '.join(sorted(known_predicates))}")
        for field in ("subjects", "baseline"):
            for arm_id in getattr(gate, field):
                if arm_id not in arms:
                    problems.append(f"{where}.{field}: arm {arm_id!r} does not exist (arms: {', '.join(sorted(arms))})")
    return problems


def _queue_references(spec: CampaignSpec) -> list[str]:
    """Each item's arms (and its contexts within theirs), gate, dependencies (no cycle)
    and recipe overrides."""
    problems: list[str] = []
    arms = {a.id for a in spec.arms}
    gates = {g.id for g in spec.gates}
    items = {q.key for q in spec.queue}
    for i, item in enumerate(spec.queue):
        where = f"queue[{i}] ({item.title!r})"
        for arm_id in item.arms:
            if arm_id not in arms:
                problems.append(f"{where}.arms: arm {arm_id!r} does not exist (arms: {', '.join(sorted(arms))})")
            else:
                arm = spec.arm(arm_id)
                for ctx in item.contexts:
                    if ctx > arm.context:
                        problems.append(f"{where}.contexts: {ctx} exceeds arm {arm_id!r}'s context {arm.context}")
        if item.gate is not None and item.gate not in gates:
            problems.append(f"{where}.gate: found {item.gate!r}, expected one of the gates: {', '.join(sorted(gates)) or '(none defined)'}")
        for dep in item.depends_on:
            if dep not in items:
                problems.append(f"{where}.depends_on: found {dep!r}, expected one of the queue item ids: {', '.join(sorted(items))}")
    for i, item in enumerate(spec.queue):
        for name in OverrideKeys.of(item.overrides).recipe:
            if name not in Recipe.model_fields:
                problems.append(
                    f"queue[{i}] ({item.title!r}).overrides: {RECIPE_PREFIX + name!r} is not a recipe field "
                    f"(expected one of: {', '.join('recipe.' + f for f in sorted(Recipe.model_fields))})"
                )
    cycle = _find_cycle({q.key: [d for d in q.depends_on if d in items] for q in spec.queue})
    if cycle:
        problems.append(f"queue.depends_on: dependency cycle {' -> '.join(cycle)}")
    return problems


def _confirmations(spec: CampaignSpec) -> list[str]:
    """A confirmatory item names an earlier item and changes only one variable of it."""
    problems: list[str] = []
    order = {q.key: i for i, q in enumerate(spec.queue)}
    for i, item in enumerate(spec.queue):
        if item.confirms is None:
            continue
        where = f"queue[{i}] ({item.title!r}).confirms"
        if item.confirms not in order or order[item.confirms] >= i:
            problems.append(f"{where}: found {item.confirms!r}, expected an earlier queue item")
            continue
        base = spec.item(item.confirms)
        if not set(item.arms) <= set(base.arms) or not set(item.probes) <= set(base.probes):
            problems.append(f"{where}: a confirmatory run must use arms and probes of {base.key!r} (only one variable may change)")
        if item.contexts and base.contexts and item.contexts != base.contexts:
            problems.append(f"{where}: contexts {item.contexts} differ from {base.key!r}'s {base.contexts}; only {list(item.change)[0]!r} may change")
    return problems


# -- what one gate pools ----------------------------------------------------------------


@dataclass(frozen=True)
class BlockBudget:
    """An item's blocks: `least` before its gate is first looked at and `most` in all;
    `adaptive` means it stops as soon as its gate is settled (a fixed item runs `most`)."""

    least: int
    most: int
    adaptive: bool


def item_label(index: int, item: QueueItem) -> str:
    """A queue item as errors name it: `queue[3] (id 'cache-128k')`, or by title without an id."""
    return f"queue[{index}] (id {item.id!r})" if item.id is not None else f"queue[{index}] ({item.title!r})"


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


def _recipe_or_none(spec: CampaignSpec, arm_id: str, item: QueueItem) -> Recipe | None:
    try:
        return spec.recipe_for(arm_id, item)
    except ValidationError:
        return None  # a bad recipe.* value: flows.overrides reports it with the valid range


class PooledPair(NamedTuple):
    """Two queue items whose rows one gate's verdict pools, the earlier first."""

    gate: str
    first: QueueItem
    second: QueueItem
    first_label: str  # as errors name it (`item_label`)
    second_label: str


def pooled_pairs(spec: CampaignSpec) -> Iterator[PooledPair]:
    """Every two queue items that feed one gate, in queue order, with their labels.

    Why one walk: each check that a gate does not pool unlike settings (the recipes,
    `_check_pooling` here; the probes' settings, `flows.resolve`) looks at the same pairs,
    so they are found in one place and the checks cannot disagree on which pairs pool.
    """
    position = {id(q): i for i, q in enumerate(spec.queue)}
    for gate in spec.gates:
        feeding = [q for q in spec.queue if q.gate == gate.id]
        for n, first in enumerate(feeding):
            for second in feeding[n + 1 :]:
                yield PooledPair(gate.id, first, second, item_label(position[id(first)], first), item_label(position[id(second)], second))


def _check_pooling(spec: CampaignSpec) -> list[str]:
    """The queue items that feed one gate must not pool unlike settings in its verdict.

    A gate's verdict pools every measurement of an arm from the items that feed it, so two
    items that run the same arm with different recipes (a `recipe.*` override, a
    confirmatory `change`) would make one cell out of two settings, and the difference
    would read as noise. A confirmatory item changes one variable on purpose: it is
    compared with the item it confirms, so it must not feed the same gate with the same
    arm even when its change happens to leave the recipe as it was. (The overrides of
    the probes themselves are checked where the probes are known, in `flows.resolve`.)
    """
    problems: list[str] = []
    for gate, first, second, one, two in pooled_pairs(spec):
        shared = [a for a in second.arms if a in first.arms]
        if not shared:
            continue
        if second.confirms == first.key:  # confirms names an earlier item: the first
            problems.append(
                f"{two}.gate: found {gate!r}, but this item confirms {one} (changing "
                f"{', '.join(second.change)}) and that item feeds {gate!r} too with the same "
                f"arm{'s' if len(shared) > 1 else ''} {', '.join(shared)}; a confirmatory run is compared "
                f"with the item it confirms, never pooled with it in one verdict (feed another gate, or none)"
            )
            continue
        for arm_id in shared:
            a, b = _recipe_or_none(spec, arm_id, first), _recipe_or_none(spec, arm_id, second)
            if a is None or b is None:
                continue
            fields = recipe_differences(a, b)
            if not fields:
                continue
            shown = "; ".join(
                f"{f} ({first.key}: {recipe_value_text(f, getattr(a, f))}, {second.key}: {recipe_value_text(f, getattr(b, f))})"
                for f in fields
            )
            problems.append(
                f"{two}.gate: gate {gate!r} is also fed by {one}, which runs arm {arm_id!r} with another "
                f"recipe: {shown}; one verdict must not pool unlike settings (give that recipe its own arm, "
                f"or feed another gate)"
            )
    return problems


def _find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# -- loading --------------------------------------------------------------------------


def parse_campaign(
    data: dict[str, Any],
    path: str | Path = "<campaign>",
    *,
    known_adapters: set[str] | None = None,
    known_predicates: set[str] | None = None,
    predicate_params: dict[str, type[BaseModel]] | None = None,
    known_probes: set[str] | None = None,
) -> CampaignSpec:
    try:
        spec = CampaignSpec.model_validate(data)
    except ValidationError as exc:
        raise CampaignFileError(path, [_describe(e, data) for e in exc.errors()]) from None
    problems = _check_references(spec, known_adapters, known_predicates, known_probes)
    if not problems:  # pooling is read through the references, so only once they hold
        problems = _check_pooling(spec)
    for i, gate in enumerate(spec.gates):
        model = (predicate_params or {}).get(gate.predicate)
        if model is None:
            continue
        try:
            model.model_validate(gate.params)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ("gates", i, "params", *err["loc"])
                text = _describe({**err, "loc": loc}, data)
                if err["type"] == "extra_forbidden":
                    names = ", ".join(sorted(model.model_fields))
                    text = f"{_loc_path(loc[:-1], data)}: unknown parameter {err['loc'][-1]!r} for predicate {gate.predicate!r}; expected one of: {names}"
                problems.append(text)
    if problems:
        raise CampaignFileError(path, problems)
    return spec


def read_campaign(path: str | Path, known: KnownNames | None = None) -> CampaignSpec:
    """Read and validate a campaign file's structure and references.

    The core knows no registry: `known` carries the adapter, predicate and predicate
    parameter names to check against, supplied by the layer that owns the registries
    (`flows.resolve.load_campaign`). Without it only the structure is checked.
    """
    path = Path(path)
    data = read_toml(path)
    if known is None:
        return parse_campaign(data, path)
    return parse_campaign(
        data,
        path,
        known_adapters=set(known.adapters),
        known_predicates=set(known.predicates),
        predicate_params=dict(known.predicate_params),
        known_probes=set(known.probes) if known.probes is not None else None,
    )


def read_toml(path: Path) -> dict[str, Any]:
    """A campaign file's TOML as a table; every failure a CampaignFileError naming the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CampaignFileError(path, ["file not found"]) from None
    except OSError as exc:
        raise CampaignFileError(path, [f"cannot be read: {exc.strerror}"]) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CampaignFileError(path, ["not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise CampaignFileError(path, [f"TOML syntax error: {exc}"]) from None


@dataclass(frozen=True)
class KnownNames:
    """What the registries hold, as a value the core can check a file against."""

    adapters: frozenset[str]
    predicates: frozenset[str]
    predicate_params: Mapping[str, type[BaseModel]]
    probes: frozenset[str] | None = None  # None: only the built-in ones


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
