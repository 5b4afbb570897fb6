"""What one gate pools: the pairs of queue items whose rows a gate's verdict puts in one
cell, and the check that they run alike.

Why a module of its own: a gate's verdict pools every measurement of an arm from the items
it reads, so this is the one walk over those pairs (`pooled_pairs`) that the loader's
recipe check here and the probes' settings check (`flows.resolve`) both use; two walks
could disagree on which pairs pool.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from campaign.core.schema import CampaignSpec, GateEntry, QueueItem, read_items
from campaign.core.serving import Recipe, recipe_differences
from campaign.core.units import recipe_value_text


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
    feeding = spec.feeding(gate.id)
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
        yield from _pairs(spec, gate.id, spec.feeding(gate.id))


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


def check_pooling(spec: CampaignSpec, models: Mapping[str, type[BaseModel]] | None = None) -> list[str]:
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
        fed = [q for q in read if q in spec.feeding(entry.id)]
        if read == fed:
            continue  # it reads the items feeding it, checked above
        why = "its reads = 'all'" if fed else "no item feeds it"
        readings, compared = _readings(entry, models or {}), set(entry.arms_read())
        for gate, first, second, one, two in _pairs(spec, entry.id, read):
            if first in fed and second in fed:
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
