"""Resolve a campaign file against what this installation knows: the resolve step after parsing.

The core schema (`campaign.core.schema`) checks a file's structure and its internal references,
and imports nothing above it. Whether an adapter, a predicate or a predicate parameter
exists is a fact of the registries (arms and gates), and whether an arm's `simulate` table
names real simulator knobs is a fact of the simulator; this layer sits above both, so it
owns the check. Plugins (a campaign's own predicates) are imported first so they are
registered before names are checked. The checks of the gates that need the registries
too (metrics, attribution claims, pooled settings) are `flows.gate_checks`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from arms.probes import registry as probe_registry
from arms.runtimes import catalog as runtime_registry
from arms.simulator.profile import SimProfile
from campaign.core.loader import KnownNames, read_campaign, read_toml
from campaign.core.schema import (
    CampaignFileError,
    CampaignSpec,
)
from flows.gate_checks import ablation_problems, metric_problems, probe_pooling_problems
from flows.overrides import FILE_OVERRIDES
from flows.search_checks import search_problems
from gates import catalog as gate_predicates


def known_names() -> KnownNames:
    """The registries' names now (after any plugin import)."""
    predicates = frozenset(gate_predicates.names())
    return KnownNames(
        adapters=frozenset(runtime_registry.names()),
        predicates=predicates,
        predicate_params={name: gate_predicates.params_model(name) for name in predicates},
        probes=frozenset(probe_registry.names()),
    )


def simulated_adapters() -> frozenset[str]:
    """Adapters whose rows are simulated (stored on each arm, shown on every page)."""
    return frozenset(name for name in runtime_registry.names() if runtime_registry.get(name).simulated)


def load_campaign(path: str | Path) -> CampaignSpec:
    """Read a campaign file, import its plugins, and check every name it uses.

    Raises CampaignFileError naming the file and each problem (path in the file, what was
    found, what was expected).
    """
    path = Path(path)
    data = read_toml(path)
    meta = data.get("campaign")
    plugin_problems = load_plugins(meta.get("plugins", []) if isinstance(meta, dict) else [], path.parent)
    if plugin_problems:
        raise CampaignFileError(path, plugin_problems)
    spec = read_campaign(path, known_names())
    anchor_paths(spec, path.parent)
    problems = (
        options_problems(spec)
        + simulate_problems(spec)
        + metric_problems(spec)
        + ablation_problems(spec)
        + probe_pooling_problems(spec)
        + search_problems(spec)
    )
    if problems:
        raise CampaignFileError(path, problems)
    return spec


def anchor_paths(spec: CampaignSpec, folder: Path) -> None:
    """A relative file a queue item's overrides name is the campaign file's neighbour,
    as its plugins are: `trace = "traces/agents.jsonl"` beside the file, wherever the
    command runs. A path that is not there is left as written (the probe's check then
    names it)."""
    for item in spec.queue:
        for key in FILE_OVERRIDES:
            value = item.overrides.get(key)
            if isinstance(value, str) and value and not Path(value).is_absolute() and (folder / value).is_file():
                item.overrides[key] = str((folder / value).resolve())


def options_problems(spec: CampaignSpec) -> list[str]:
    """Each runtime's `options` against its adapter's `options_model`: a misspelt key would
    otherwise be ignored, and the server started without the setting the user asked for;
    a value of the wrong type (`threads = "four"`) would pass the load and crash the launch."""
    from arms.runtimes.options import option_problems

    problems = []
    for i, runtime in enumerate(spec.runtimes):
        try:
            adapter = runtime_registry.get(runtime.adapter)
        except KeyError:
            continue  # the schema already named the unknown adapter
        for key, text in option_problems(runtime.adapter, adapter.options_model, runtime.options):
            problems.append(f"runtimes[{i}] (name {runtime.name!r}).options.{key}: {text}")
    return problems


def launch_blockers(spec: CampaignSpec) -> list[str]:
    """What this machine lacks to start the servers of the arms the queue runs here
    (`RuntimeAdapter.blockers`: a server binary, a model file nothing writes), one line
    per reason with the arms it blocks. Why before the run: each of their attempts would
    end `blocked` with the same words, after the Prefect server and the items before it.
    An arm placed on another host is that host's to check, when it launches."""
    found: dict[str, list[str]] = {}
    for arm_id in dict.fromkeys(a for item in spec.queue for a in item.arms):
        if spec.host_of(arm_id):
            continue
        arm = spec.arm(arm_id)
        runtime = spec.runtime(arm.runtime)
        for reason in runtime_registry.get(runtime.adapter).blockers(runtime, spec.model_for(arm)):
            found.setdefault(reason, []).append(arm_id)
    return [f"arm{'s' if len(arms) > 1 else ''} {', '.join(arms)}: {reason}" for reason, arms in found.items()]


def simulate_problems(spec: CampaignSpec) -> list[str]:
    """Each arm's `simulate` table, checked as simulator profile fields.

    Only arms on a simulated runtime are checked: on a real runtime the table is ignored,
    as the schema documents.
    """
    simulated = simulated_adapters()
    problems: list[str] = []
    for i, arm in enumerate(spec.arms):
        if not arm.simulate or spec.runtime(arm.runtime).adapter not in simulated:
            continue
        try:
            SimProfile.model_validate(arm.simulate)
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(part) for part in err["loc"])
                if err["type"] == "extra_forbidden":
                    problems.append(
                        f"arms[{i}] (id {arm.id!r}).simulate.{where}: not a simulator profile field;"
                        f" expected one of: {', '.join(sorted(SimProfile.model_fields))}"
                    )
                else:
                    problems.append(
                        f"arms[{i}] (id {arm.id!r}).simulate.{where}: {err['msg']} (found {err.get('input')!r})"
                    )
    return problems


# -- metrics: every gate reads one its items' probes store ------------------------------------


def load_plugins(plugins: Any, base: Path) -> list[str]:
    """Import the modules that register custom predicates; problems are returned, not raised."""
    problems = []
    if not isinstance(plugins, list):
        return []
    for i, name in enumerate(plugins):
        try:
            if str(name).endswith(".py"):
                file = (base / name).resolve()
                module_name = f"campaign_plugin_{file.stem}"
                if module_name in sys.modules:
                    continue
                spec = importlib.util.spec_from_file_location(module_name, file)
                if spec is None or spec.loader is None:
                    raise ImportError(f"no such file {file}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_name] = module
                spec.loader.exec_module(module)
            else:
                importlib.import_module(str(name))
        except Exception as exc:  # a user's plugin may fail in any way; say which and why
            problems.append(f"campaign.plugins[{i}]: cannot import {name!r}: {type(exc).__name__}: {exc}")
    return problems
