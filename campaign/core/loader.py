"""Reading a campaign file: TOML to a checked `CampaignSpec`, every problem named.

Why apart from the schema: the schema says what a file may hold, field by field; this
module reads one and checks what no single field can (every reference resolves, no id
twice, a gate pools only comparable runs, a dependency has no cycle, each gate's
parameters fit its predicate), and words every problem with the file, the field path,
what was found and what was expected. It knows no registry: the layer that owns them
passes their names (`KnownNames`, from `flows.resolve.load_campaign`).
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from campaign.core.pooling import check_pooling, item_label
from campaign.core.schema import RECIPE_PREFIX, CampaignFileError, CampaignSpec, OverrideKeys
from campaign.core.search import CONTEXT, MODEL, OFF, SEARCH_ITEM_PREFIX
from campaign.core.serving import Recipe
from campaign.core.states import ProbeName
from campaign.core.units import SIZE_FIELDS, unitless_size

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


def _describe(err: ErrorDetails, data: Any) -> str:
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


# -- sizes written without a unit ---------------------------------------------------------


def _unitless_sizes(data: Mapping[str, Any]) -> list[str]:
    """Each recipe size written as a bare number (`unitless_size`), read from the file as
    written: the schema takes a number of bytes, as a stored spec holds it, so only the
    file can tell `256` from `"256B"`."""
    return [
        f"{where}: found {value!r}, expected: {unitless_size(value)}"
        for where, value in _written_sizes(data)
        if unitless_size(value)
    ]


def _written_sizes(data: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(where, value) of every size field the file sets: in an arm's recipe, a queue
    item's `recipe.*` overrides and a confirmatory item's `change`."""
    arms = data.get("arms")
    for i, arm in enumerate(arms if isinstance(arms, list) else []):
        recipe = arm.get("recipe") if isinstance(arm, dict) else None
        for name in SIZE_FIELDS:
            if isinstance(recipe, dict) and name in recipe:
                yield _loc_path(("arms", i, "recipe", name), data), recipe[name]
    queue = data.get("queue")
    for i, item in enumerate(queue if isinstance(queue, list) else []):
        if not isinstance(item, dict):
            continue
        label = f"queue[{i}] (id {item['id']!r})" if "id" in item else f"queue[{i}] ({item.get('title')!r})"
        overrides, change = item.get("overrides"), item.get("change")
        for name in SIZE_FIELDS:
            if isinstance(overrides, dict) and RECIPE_PREFIX + name in overrides:
                yield f'{label}.overrides."{RECIPE_PREFIX + name}"', overrides[RECIPE_PREFIX + name]
            if isinstance(change, dict) and name in change:
                yield f"{label}.change.{name}", change[name]


# -- reference checks -----------------------------------------------------------------


def _check_references(
    spec: CampaignSpec,
    known_adapters: set[str] | None,
    known_predicates: set[str] | None,
    known_probes: set[str] | None = None,
) -> list[str]:
    """Every name the file uses that another part of it (or a registry) must define: one
    problem per wrong name, each naming where it is and what was expected."""
    probes = (
        known_probes if known_probes is not None else {p.value for p in ProbeName}
    )  # the built-in ones, known to the core
    return [
        *_unknown_probes(spec, probes),
        *_duplicate_ids(spec),
        *_runtime_and_arm_references(spec, known_adapters),
        *_gate_references(spec, known_predicates),
        *_queue_references(spec),
        *_confirmations(spec),
        *_search_references(spec, probes),
    ]


def _search_references(spec: CampaignSpec, probes: set[str]) -> list[str]:
    """The search's base arm, each searched value as the base's recipe takes it (a range's
    two ends, every choice), its models and contexts, and its probes."""
    search = spec.search
    if search is None:
        return []
    arms = {a.id for a in spec.arms}
    if search.base not in arms:
        return [f"search.base: arm {search.base!r} does not exist (arms: {', '.join(sorted(arms))})"]
    base = spec.arm(search.base)
    problems: list[str] = []
    models = {m.key: m for m in spec.models} | {m.name: m for m in spec.models}
    for name, dim in search.space.items():
        for k, value in enumerate(dim.ends()):
            where = (
                f"search.space.{name}.{'choices[' + str(k) + ']' if dim.choices is not None else ('low', 'high')[k]}"
            )
            if name == MODEL:
                if str(value) not in models:
                    problems.append(
                        f"{where}: found {value!r}, expected one of the models (name/quant): {', '.join(sorted(m.key for m in spec.models))}"
                    )
            elif name == CONTEXT:
                if not isinstance(value, int) or value < 256:
                    problems.append(f"{where}: found {value!r}, expected a context of at least 256 tokens")
            else:
                try:
                    Recipe.model_validate({**base.recipe.model_dump(), name: None if value == OFF else value})
                except ValidationError as exc:
                    why = "; ".join(e["msg"] for e in exc.errors())
                    problems.append(f"{where}: found {value!r}, which the recipe refuses ({why})")
    for i, obj in enumerate(search.objectives):
        if obj.probe not in probes:
            problems.append(
                f"search.objectives[{i}].probe: found {obj.probe!r}, expected one of: {', '.join(sorted(probes))}"
            )
    for i, c in enumerate(search.constraints):
        if c.probe is not None and c.probe not in probes:
            problems.append(
                f"search.constraints[{i}].probe: found {c.probe!r}, expected one of: {', '.join(sorted(probes))}"
            )
    keys = {q.key for q in spec.queue} | {g.id for g in spec.gates}
    taken = sorted(k for k in keys if k.startswith(SEARCH_ITEM_PREFIX))
    if taken:
        problems.append(
            f"search: the ids {', '.join(taken)} start with {SEARCH_ITEM_PREFIX!r}, which the search's own items and gates use"
        )
    return problems


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
            problems.append(
                f"{where}.runtime: found {arm.runtime!r}, expected one of the runtimes: {', '.join(sorted(runtimes))}"
            )
        matches = [m for m in spec.models if m.name == arm.model and (arm.quant is None or m.quant == arm.quant)]
        if not matches:
            offered = ", ".join(sorted(m.key for m in spec.models))
            wanted = f"{arm.model}/{arm.quant}" if arm.quant else arm.model
            problems.append(f"{where}.model: found {wanted!r}, expected one of the models (name/quant): {offered}")
        elif len(matches) > 1:
            problems.append(
                f"{where}.quant: model {arm.model!r} has several quants ({', '.join(m.quant for m in matches)}); name one"
            )
    return problems


def _gate_references(spec: CampaignSpec, known_predicates: set[str] | None) -> list[str]:
    problems: list[str] = []
    arms = {a.id for a in spec.arms}
    for i, gate in enumerate(spec.gates):
        where = f"gates[{i}] (id {gate.id!r})"
        if known_predicates is not None and gate.predicate not in known_predicates:
            problems.append(
                f"{where}.predicate: found {gate.predicate!r}, expected one of: {', '.join(sorted(known_predicates))}"
            )
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
            problems.append(
                f"{where}.gate: found {item.gate!r}, expected one of the gates: {', '.join(sorted(gates)) or '(none defined)'}"
            )
        for j, extra in enumerate(item.also_gates):
            if extra not in gates:
                problems.append(
                    f"{where}.also_gates[{j}]: found {extra!r}, expected one of the gates: {', '.join(sorted(gates)) or '(none defined)'}"
                )
        for dep in item.depends_on:
            if dep not in items:
                problems.append(
                    f"{where}.depends_on: found {dep!r}, expected one of the queue item ids: {', '.join(sorted(items))}"
                )
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
            problems.append(
                f"{where}: a confirmatory run must use arms and probes of {base.key!r} (only one variable may change)"
            )
        if item.contexts and base.contexts and item.contexts != base.contexts:
            problems.append(
                f"{where}: contexts {item.contexts} differ from {base.key!r}'s {base.contexts}; only {list(item.change)[0]!r} may change"
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
    unitless = _unitless_sizes(data)
    try:
        spec = CampaignSpec.model_validate(data)
    except ValidationError as exc:
        raise CampaignFileError(path, unitless + [_describe(e, data) for e in exc.errors()]) from None
    problems = unitless + _check_references(spec, known_adapters, known_predicates, known_probes)
    if not problems:  # pooling is read through the references, so only once they hold
        problems = check_pooling(spec, predicate_params)
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
