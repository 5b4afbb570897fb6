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
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from campaign.core.schema import (
    RECIPE_PREFIX,
    CampaignFileError,
    CampaignSpec,
    GateEntry,
    OverrideKeys,
    QueueItem,
    Recipe,
    read_items,
    recipe_differences,
    recipe_value_text,
    unitless_size,
)
from campaign.core.states import ProbeName
from campaign.core.units import SIZE_FIELDS

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


# -- what one gate pools ----------------------------------------------------------------


def item_label(index: int, item: QueueItem) -> str:
    """A queue item as errors name it: `queue[3] (id 'cache-128k')`, or by title without an id."""
    return f"queue[{index}] (id {item.id!r})" if item.id is not None else f"queue[{index}] ({item.title!r})"


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


def items_read(spec: CampaignSpec, gate: GateEntry) -> list[QueueItem]:
    """The queue items whose rows `gate` reads (`read_items`, as its verdict does), in queue order."""
    feeding = [q for q in spec.queue if q.gate == gate.id]
    return feeding if read_items(gate, [q.key for q in feeding]) is not None else list(spec.queue)


def pooled_pairs(spec: CampaignSpec) -> Iterator[PooledPair]:
    """Every two queue items that feed one gate, in queue order, with their labels: the
    pairs a gate pools by design, whatever cells they share.

    Why one walk: each check that such items run alike (the recipes, `_check_pooling`
    here; the probes' settings, `flows.resolve`) looks at the same pairs, so they are
    found in one place and the checks cannot disagree on which pairs pool. A gate that
    reads every item pools the others' rows only in the cells it reads (`_check_pooling`).
    """
    for gate in spec.gates:
        yield from _pairs(spec, gate.id, [q for q in spec.queue if q.gate == gate.id])


def _pairs(spec: CampaignSpec, gate: str, items: list[QueueItem]) -> Iterator[PooledPair]:
    position = {id(q): i for i, q in enumerate(spec.queue)}
    for n, first in enumerate(items):
        for second in items[n + 1 :]:
            yield PooledPair(
                gate, first, second, item_label(position[id(first)], first), item_label(position[id(second)], second)
            )


class _Reading(NamedTuple):
    """What one judgement of a gate reads: its probes (None: every probe) and its context (None: every one)."""

    probes: frozenset[str] | None
    context: int | None


def _readings(gate: GateEntry, models: Mapping[str, type[BaseModel]]) -> list[_Reading]:
    """What `gate`'s verdict reads, one entry per judgement (an all_of gate's checks each):
    its `probe` (and any `*_probe`, e.g. a guard's) and `context`, as written or the
    predicate's defaults (`models`: the parameter models, where the registry is known)."""
    checks = gate.params.get("checks") if gate.predicate == "all_of" else None
    parts = [(gate.predicate, gate.params)]
    if isinstance(checks, list):
        parts = [(str(c.get("predicate", "")), c.get("params") or {}) for c in checks if isinstance(c, dict)]
    out = []
    for predicate, params in parts:
        values: dict[str, Any] = {}
        model = models.get(predicate)
        if model is not None:
            for name, field in model.model_fields.items():
                if name == "probe" or name.endswith("_probe") or name == "context":
                    default = field.get_default(call_default_factory=True)
                    values[name] = None if default is PydanticUndefined else default
        values.update(params if isinstance(params, dict) else {})
        named = {str(v) for k, v in values.items() if (k == "probe" or k.endswith("_probe")) and v}
        context = values.get("context")
        out.append(
            _Reading(frozenset(named) if values.get("probe") else None, context if isinstance(context, int) else None)
        )
    return out


def _shares_a_cell(
    spec: CampaignSpec, arm_id: str, first: QueueItem, second: QueueItem, readings: list[_Reading]
) -> bool:
    """Whether both items can measure `arm_id` in a cell the gate reads: a probe they both
    run that it reads, at a context it reads. (Other probe settings are another cell; those
    are not known here, so this may say yes where the cells differ, never no where one is shared.)"""
    shared = set(first.probes) & set(second.probes)

    def runs(item: QueueItem, context: int) -> bool:
        return context in item.contexts if item.contexts else spec.arm(arm_id).context == context

    return any(
        (reading.probes is None or shared & reading.probes)
        and shared
        and (reading.context is None or (runs(first, reading.context) and runs(second, reading.context)))
        for reading in readings
    )


def _recipe_problem(spec: CampaignSpec, arm_id: str, first: QueueItem, second: QueueItem) -> str:
    """'slots (first: 4, second: 2)': the recipe fields in which two items run an arm apart ('' for none)."""
    a, b = _recipe_or_none(spec, arm_id, first), _recipe_or_none(spec, arm_id, second)
    if a is None or b is None:
        return ""
    return "; ".join(
        f"{f} ({first.key}: {recipe_value_text(f, getattr(a, f))}, {second.key}: {recipe_value_text(f, getattr(b, f))})"
        for f in recipe_differences(a, b)
    )


def _unlike(
    spec: CampaignSpec, first: QueueItem, second: QueueItem, arms: list[str]
) -> tuple[bool, list[tuple[str, str]]]:
    """How two items whose rows one gate pools differ on `arms` (those they share that the
    gate reads): whether the second confirms the first (a confirmatory run is compared with
    the item it confirms, never pooled with it), else each arm that runs another recipe in
    each, with the fields. The caller words them: it knows how the gate came to pool them."""
    if not arms:
        return False, []
    if second.confirms == first.key:  # confirms names an earlier item: the first
        return True, []
    return False, [(arm_id, shown) for arm_id in arms if (shown := _recipe_problem(spec, arm_id, first, second))]


def _check_pooling(spec: CampaignSpec, models: Mapping[str, type[BaseModel]] | None = None) -> list[str]:
    """The queue items whose rows a gate reads (`items_read`) must not pool unlike recipes
    of one arm in its verdict.

    A gate's verdict pools every measurement of an arm from the items it reads, so two
    items that run the same arm with different recipes (a `recipe.*` override, a
    confirmatory `change`) would make one cell out of two servers, and the difference
    would read as noise. Items that feed one gate are one question: any arm they share
    must run alike. A gate that reads every item (no item feeds it, or reads = "all")
    pools another item's rows only in the cells it reads: refused where both items run an
    arm it compares with a probe, and at a context, it reads. A confirmatory item changes
    one variable on purpose: it is compared with the item it confirms, so it must not be
    read by the same gate with the same arm even when its change happens to leave the
    recipe as it was. (The probes' own settings are part of a cell; for the items feeding
    one gate they are checked where the probes are known, in `flows.resolve`.)
    """
    problems: list[str] = []
    for gate, first, second, one, two in pooled_pairs(spec):
        shared = [a for a in second.arms if a in first.arms]
        confirms, unlike = _unlike(spec, first, second, shared)
        if confirms:
            problems.append(
                f"{two}.gate: found {gate!r}, but this item confirms {one} (changing "
                f"{', '.join(second.change)}) and that item feeds {gate!r} too with the same "
                f"arm{'s' if len(shared) > 1 else ''} {', '.join(shared)}; a confirmatory run is compared "
                f"with the item it confirms, never pooled with it in one verdict (feed another gate, or none)"
            )
            continue
        problems += [
            f"{two}.gate: gate {gate!r} is also fed by {one}, which runs arm {arm_id!r} with another "
            f"recipe: {shown}; one verdict must not pool unlike settings (give that recipe its own arm, "
            f"or feed another gate)"
            for arm_id, shown in unlike
        ]
    for entry in spec.gates:
        read = items_read(spec, entry)
        fed = [q for q in read if q.gate == entry.id]
        if read == fed:
            continue  # it reads the items feeding it, checked above
        why = "its reads = 'all'" if fed else "no item feeds it"
        readings, compared = _readings(entry, models or {}), set(entry.arms_read())
        for gate, first, second, one, two in _pairs(spec, entry.id, read):
            if first.gate == second.gate == gate:
                continue  # both feed it, checked above
            arms = [
                a
                for a in second.arms
                if a in first.arms and a in compared and _shares_a_cell(spec, a, first, second, readings)
            ]
            reads = f"gate {gate!r} reads every item ({why}), {one} included,"
            confirms, unlike = _unlike(spec, first, second, arms)
            if confirms:
                problems.append(
                    f"{two}.confirms: {reads} and this item confirms it (changing {', '.join(second.change)}) with the same "
                    f"arm{'s' if len(arms) > 1 else ''} {', '.join(arms)}; a confirmatory run is compared with the item it "
                    f"confirms, never pooled with it in one verdict (feed {gate!r} from the items it compares)"
                )
                continue
            problems += [
                f"{two}.{'change' if second.change else 'overrides'}: {reads} which runs arm {arm_id!r} with another "
                f"recipe: {shown}; one verdict must not pool unlike settings (give that recipe its own arm, or feed "
                f"{gate!r} from the items it compares)"
                for arm_id, shown in unlike
            ]
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
        problems = _check_pooling(spec, predicate_params)
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
