"""Resolve a campaign file against what this installation knows: the resolve step after parsing.

The core schema (`campaign.schema`) checks a file's structure and its internal references,
and imports nothing above it. Whether an adapter, a predicate or a predicate parameter
exists is a fact of the registries (arms and gates), and whether an arm's `simulate` table
names real simulator knobs is a fact of the simulator; this layer sits above both, so it
owns the check. Plugins (a campaign's own predicates) are imported first so they are
registered before names are checked.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from arms.runtimes import catalog as runtime_registry
from arms.simulator.profile import SimProfile
from campaign.schema import CampaignFileError, CampaignSpec, KnownNames, read_campaign, read_toml
from gates import catalog as gate_predicates


def known_names() -> KnownNames:
    """The registries' names now (after any plugin import)."""
    predicates = frozenset(gate_predicates.names())
    return KnownNames(
        adapters=frozenset(runtime_registry.names()),
        predicates=predicates,
        predicate_params={name: gate_predicates.params_model(name) for name in predicates},
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
    problems = simulate_problems(spec)
    if problems:
        raise CampaignFileError(path, problems)
    return spec


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
