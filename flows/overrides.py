"""Queue-item overrides: what each key means, checked before anything runs.

An override is one of three kinds of key:

- a parameter of one of the item's probes (`max_tokens`, `repeats`, `prompt_tokens`, ...,
  from the probe's parameter model in `arms.probes`);
- `recipe.<field>`: a serving-recipe field, so the servers are launched with it;
- `sim.<field>`: a simulator profile field, for arms on the simulator.

Why here and not in `campaign.core.schema`: the probes' parameter models live in `arms`, and
the core schema must not import `arms`. This module sits where both registries are known
and is called by the command line before a campaign starts (exit 2 with the valid keys
listed) and by the flows, so a misspelled key (`repeat`, `max_token`) is never stored and
silently ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from arms.probes import registry as probes
from arms.probes.base import read_unchanged
from arms.probes.registry import ITEM_FIELDS
from campaign.core.pooling import item_label
from campaign.core.schema import CampaignSpec, OverrideKeys, QueueItem
from campaign.core.serving import Recipe
from campaign.core.units import SIZE_FIELDS, unitless_size


def probe_params(
    spec: CampaignSpec,
    item: QueueItem,
    probe: str,
    context: int,
    overrides: dict[str, Any],
    arm_context: int = 0,
    block: int | None = None,
) -> Any:
    """A probe's parameters: defaults, then what the item and its overrides say. With the
    `block` a run belongs to, each field that picks a random draw (`ProbeSpec.draw_fields`,
    the load probe's arrival seed) is derived from the campaign's seed, the item, the block
    and the value given: every arm of a block gets the same draw (their comparison is not
    one of draws) and every block a new one (a verdict does not hang on one draw)."""
    pspec = probes.get(probe)
    fields = pspec.params.model_fields
    keys = pspec.keys
    values: dict[str, Any] = {}
    if "modes" in fields:
        values["modes"] = list(item.modes)
    if "context" in fields:
        values["context"] = context or arm_context
    if pspec.item_values is not None:
        values.update(pspec.item_values(spec, item, context))
    values.update({k: v for k, v in overrides.items() if k in keys})
    if block is not None:
        for name in pspec.draw_fields:
            given = values.get(name, fields[name].default)
            key = {"campaign": spec.campaign.seed, "item": item.key, "block": block, "given": given}
            values[name] = int(digest(key), 16) % 2**31
    return pspec.params.model_validate(values)


def with_overrides(item: QueueItem, overrides: Mapping[str, Any] | None) -> QueueItem:
    """`item` as it runs: its own overrides, then `overrides` over them (a rerun's). The
    one place overrides are merged, so that `recipe.*` keys reach the server's launch
    (`CampaignSpec.recipe_for`), the probes and the stored attempt exactly as when
    written in the campaign file."""
    if not overrides:
        return item
    return item.model_copy(update={"overrides": {**item.overrides, **overrides}})


def with_item_overrides(spec: CampaignSpec, item_key: str, overrides: Mapping[str, Any]) -> CampaignSpec:
    """The campaign as a rerun runs it: item `item_key` `with_overrides`."""
    if not overrides:
        return spec
    return spec.model_copy(
        update={"queue": [with_overrides(q, overrides) if q.key == item_key else q for q in spec.queue]}
    )


def digest(value: Any) -> str:
    """A sha256 prefix (16 hex digits) of `value` as canonical JSON (sorted keys), the
    same on every machine and in every process."""
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# overrides that name a file a probe reads (the load probe's trace and dataset, agent-load's sessions)
FILE_OVERRIDES = ("trace", "dataset", "sessions")


def _content_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:16]


def file_identity(value: Any) -> Any:
    """A file a probe reads, as what it holds: its name and a digest of its content
    (read once while the file is unchanged, `read_unchanged`), so a trace edited in place
    is a new setting and the same trace at another path, or on another host, is the same
    one. A value that is not a readable file is kept as written."""
    if not isinstance(value, str) or not value:
        return value
    try:
        return f"{os.path.basename(value)}#{read_unchanged(_content_digest, value)}"
    except OSError:
        return value


def probe_settings_hash(probe: str, params: Any, overrides: dict[str, Any]) -> str:
    """The settings one probe run measures under, as a hash: its resolved parameters at
    its context and the `sim.*` profile overrides its server was given.

    Why per probe run and not per item: a cell is (probe, scenario, context, mode,
    settings), and two items that run decode at 32K with the same parameters measured the
    same thing even when one of them also runs a cache probe, other contexts or more
    blocks. Left out: the item's mode list (the mode is the cell's own key), the fields
    that only size a run's sample (`ProbeSpec.sample_fields`: 3 or 5 timed requests are
    one run, its median, either way), the fields that pick a random draw
    (`ProbeSpec.draw_fields`, set per block) and everything of the server's own (`recipe.*`, in
    the attempt's `recipe_hash`)."""
    values = params.model_dump(mode="json")
    for name in ("modes", *probes.get(probe).unsettled):
        values.pop(name, None)
    for name in FILE_OVERRIDES:
        if name in values:
            values[name] = file_identity(values[name])
    return digest({"params": values, "sim": OverrideKeys.of(overrides).sim_keys()})


def probe_keys(item: QueueItem) -> dict[str, list[str]]:
    """Override keys the item's probes accept -> which probes take each."""
    out: dict[str, list[str]] = {}
    for probe in item.probes:
        for name in probes.get(probe).keys:
            if name not in ITEM_FIELDS:
                out.setdefault(name, []).append(str(probe))
    return out


def _sim_fields() -> set[str]:
    from arms.simulator.profile import SimProfile

    return set(SimProfile.model_fields)


def _uses_simulator(spec: CampaignSpec, item: QueueItem) -> bool:
    return any(spec.runtime(spec.arm(a).runtime).adapter == "simulator" for a in item.arms)


def valid_keys_text(spec: CampaignSpec, item: QueueItem) -> str:
    keys = sorted(probe_keys(item))
    text = f"probe parameters of {', '.join(str(p) for p in item.probes)}: {', '.join(keys)}"
    text += f"; recipe fields as recipe.<field>: {', '.join(sorted(Recipe.model_fields))}"
    if _uses_simulator(spec, item):
        text += "; simulator profile fields as sim.<field>"
    return text


def check(spec: CampaignSpec, item: QueueItem, overrides: dict[str, Any], where: str) -> list[str]:
    """Problems with `overrides` for `item`, one line each, naming the valid keys."""
    problems: list[str] = []
    accepted = probe_keys(item)
    recipe_changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in accepted:
            continue
        if key.startswith("recipe."):
            name = key[len("recipe.") :]
            if name not in Recipe.model_fields:
                problems.append(
                    f"{where}: {key!r} is not a recipe field; expected recipe.<one of: {', '.join(sorted(Recipe.model_fields))}>"
                )
            elif name in SIZE_FIELDS and unitless_size(value):
                problems.append(f"{where}: {key!r}: found {value!r}, expected: {unitless_size(value)}")
            else:
                recipe_changes[name] = value
            continue
        if key.startswith("sim."):
            name = key[len("sim.") :]
            if not _uses_simulator(spec, item):
                problems.append(
                    f"{where}: {key!r} sets a simulator profile field, but no arm of this item runs on the simulator"
                )
            elif name not in _sim_fields():
                problems.append(
                    f"{where}: {key!r} is not a simulator profile field; expected sim.<one of: {', '.join(sorted(_sim_fields()))}>"
                )
            continue
        if key in ITEM_FIELDS:
            problems.append(f"{where}: {key!r} is set by the queue item's {ITEM_FIELDS[key]!r}, not by an override")
            continue
        problems.append(f"{where}: unknown key {key!r}; valid keys: {valid_keys_text(spec, item)}")
    if problems:
        return problems
    for arm_id in item.arms:  # the values, through the same models the arms will use
        arm = spec.arm(arm_id)
        if recipe_changes:
            try:
                Recipe.model_validate({**spec.recipe_for(arm_id, item).model_dump(), **recipe_changes})
            except ValidationError as exc:
                problems.extend(f"{where}: recipe of arm {arm_id!r}: {_first_line(e)}" for e in exc.errors())
        for probe in item.probes:
            context = (item.contexts or [arm.context])[0]
            try:
                probe_params(spec, item, probe, context, overrides, arm.context)
            except ValidationError as exc:
                problems.extend(f"{where}: {probe}: {_first_line(e)}" for e in exc.errors())
        if problems:
            break  # one arm's worth says it
    return problems


def _first_line(err: Any) -> str:
    loc = ".".join(str(x) for x in err.get("loc", ()))
    found = repr(err.get("input"))
    if len(found) > 40:
        found = found[:37] + "..."
    return f"{loc or 'value'}: found {found}, expected: {err.get('msg', '')}"


def check_campaign(spec: CampaignSpec) -> list[str]:
    """Problems with every queue item's overrides in a campaign file, requests that cannot
    fit their arm's context, and comparisons between arms that share no context."""
    problems: list[str] = []
    for i, item in enumerate(spec.queue):
        found = check(spec, item, item.overrides, f"queue[{i}] ({item.title!r}).overrides")
        problems += found or context_fit_problems(spec, i, item)
    return problems + unshared_context_problems(spec)


def unshared_context_problems(spec: CampaignSpec) -> list[str]:
    """A gate comparing a subject with a baseline arm that is measured at no context the
    subject is: a gate compares cell by cell, a cell is one context, so it would stay
    pending for good ("no common cell"). A user asking "does 8K decode as fast as 4K" wrote
    two arms at 4096 and 8192; one arm at both contexts, judged by `context_change`, is
    the comparison that exists. Gates that name their `context` read only that one."""
    problems = []
    for g, gate in enumerate(spec.gates):
        if not gate.baseline or gate.params.get("context") is not None:
            continue
        feeding = spec.feeding(gate.id)
        items = feeding if feeding and gate.reads == "own-items" else list(spec.queue)
        probe = gate.params.get("probe")

        def contexts(arm_id: str, items: list[QueueItem] = items, probe: Any = probe) -> set[int]:
            out: set[int] = set()
            arm = spec.arm(arm_id)
            for item in (q for q in items if arm_id in q.arms):
                for name in (p for p in item.probes if not probe or p == probe):
                    out |= set(item.contexts or [arm.context]) if probes.get(name).per_context else {arm.context}
            return out

        for subject in gate.subjects:
            mine = contexts(subject)
            for base in gate.baseline:
                theirs = contexts(base)
                if mine and theirs and not mine & theirs:
                    shown = lambda cs: ", ".join(str(c) for c in sorted(cs))  # noqa: E731
                    problems.append(
                        f"gates[{g}] (id {gate.id!r}): {subject} is measured at context {shown(mine)} and {base} at "
                        f"{shown(theirs)}: they share no cell, so the gate would stay pending; to compare one arm "
                        f"across contexts, run it at both (the item's `contexts`) and use predicate context_change"
                    )
    return problems


def context_fit_problems(spec: CampaignSpec, index: int, item: QueueItem) -> list[str]:
    """Each probe's largest request, by its stated sizes (`request_tokens` of its
    parameters), fits the context of every arm that runs it.

    Why: agent-load's default conversation grows past 20K tokens; on an arm of 4096 every
    request came back HTTP 400 and the campaign looked done. The sizes are the probe's
    targets in the server's tokens, so this is an estimate that a real tokenizer may move
    by a few per cent; a request over the context is certain to fail, so it is refused."""
    problems = []
    for arm_id in item.arms:
        arm = spec.arm(arm_id)
        for probe in item.probes:
            pspec = probes.get(probe)
            for context in (item.contexts or [arm.context]) if pspec.per_context else [0]:
                try:
                    params = probe_params(spec, item, probe, context, item.overrides, arm.context)
                except (ValueError, ValidationError):
                    continue  # reported by `check`
                size = getattr(params, "request_tokens", None)
                if size is None:
                    continue
                need = size()
                if need > arm.context:
                    at = f" at context {context}" if pspec.per_context and item.contexts else ""
                    problems.append(
                        f"{item_label(index, item)}: probe {probe}{at} sends requests of up to {need} tokens "
                        f"(prompt and reply, by its sizes), but arm {arm_id!r} has a context of {arm.context}; "
                        f"shrink the probe's sizes in the item's overrides or give the arm a larger context"
                    )
    return problems


@dataclass
class RerunOverrides:
    """`campaign rerun --set ...` made explicit: the overrides to store and run with, and
    one line per recipe change saying what the servers will be launched with."""

    overrides: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def check_rerun(spec: CampaignSpec, item: QueueItem, sets: dict[str, Any]) -> RerunOverrides:
    """A bare recipe field (`--set slots=8`) means `recipe.slots`: applied, and shown. A
    recipe change on a confirmatory item is refused (it may change only its one variable),
    and so is a key both a probe and the recipe know (none today) without its prefix."""
    out = RerunOverrides()
    accepted = probe_keys(item)
    for key, value in sets.items():
        name = key[len("recipe.") :] if key.startswith("recipe.") else key
        is_recipe = key.startswith("recipe.") or (key not in accepted and key in Recipe.model_fields)
        if is_recipe and name in Recipe.model_fields:
            if item.confirms is not None:
                changed = next(iter(item.change))
                out.problems.append(
                    f"--set {key}: refused: {item.key!r} is a confirmatory item that changes only {changed!r}; "
                    f"rerun {item.confirms!r} with --set recipe.{name}=... instead"
                )
                continue
            out.overrides[f"recipe.{name}"] = value
            continue
        out.overrides[key] = value
    out.problems += check(spec, item, out.overrides, "--set")
    if not out.problems:
        for key, value in out.overrides.items():
            if not key.startswith("recipe."):
                continue
            name = key[len("recipe.") :]
            before = {a: getattr(spec.recipe_for(a, item), name) for a in item.arms}
            shown = ", ".join(f"{a}: {v!r} -> {value!r}" for a, v in before.items())
            out.notes.append(f"recipe {name}: {shown} (the servers are launched with it)")
    return out
