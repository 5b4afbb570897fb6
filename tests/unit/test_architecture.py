"""The layers import in one direction, and no module imports itself back through others.

Read with `ast` from the source tree: imports at module level, inside functions and under
TYPE_CHECKING all count (a layer that needs a type from above is still coupled to it).
The picture and the reasons are in docs/architecture.md; this test is what keeps it true.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.paths import ROOT

PACKAGES = ("campaign", "arms", "gates", "flows", "reports", "cli")

# who may import whom: a layer is a folder (campaign/core, campaign/store, arms, gates,
# flows, reports, cli), and each may read the layers below it
LAYERS = {"core": 0, "store": 1, "arms": 2, "gates": 2, "flows": 3, "reports": 4, "cli": 5}
# pairs kept apart although the lower one sits below: pages read what flows wrote
APART = {("reports", "flows")}


def layer(module: str) -> str:
    """A module's layer is the folder it sits in: `campaign.core.*` and `campaign.store.*`
    are the bottom two, every other top-level package is its own."""
    parts = module.split(".")
    if parts[0] == "campaign":
        if len(parts) == 1:
            return "core"
        assert parts[1] in ("core", "store"), f"{module}: campaign/ holds only the core/ and store/ folders"
        return parts[1]
    return parts[0]


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def import_edges() -> dict[str, set[str]]:
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in mods.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                found = resolve(target)
                if found and found != module:
                    edges[module].add(found)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    nodes = sorted(set(edges) | {b for bs in edges.values() for b in bs})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_module_cycles() -> None:
    assert cycles(import_edges()) == []


def test_no_package_cycles() -> None:
    packages: dict[str, set[str]] = defaultdict(set)
    for a, targets in import_edges().items():
        for b in targets:
            if a.split(".")[0] != b.split(".")[0]:
                packages[a.split(".")[0]].add(b.split(".")[0])
    assert cycles(packages) == []


def test_imports_run_down_the_layers() -> None:
    """Each import goes to a lower layer or stays in its own package: arms and gates share
    a layer but do not import each other, and the core imports nothing of the project."""
    wrong = []
    for a, targets in import_edges().items():
        for b in sorted(targets):
            la, lb = layer(a), layer(b)
            if la == lb:
                continue
            if LAYERS[lb] >= LAYERS[la] or (la, lb) in APART:
                wrong.append(f"{a} ({la}) imports {b} ({lb})")
    assert wrong == []


def test_the_checker_sees_a_cycle() -> None:
    """The test above can fail: a two-module loop and a self-contained chain are told apart."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []
    assert (
        layer("campaign.core.schema") == "core"
        and layer("campaign.store.store") == "store"
        and layer("cli.main") == "cli"
    )


def test_every_import_inside_functions_is_read() -> None:
    """A lazy import is still a dependency: `cli.commands` imports flows inside its commands."""
    assert "flows.campaign_flow" in import_edges()["cli.commands"]


def test_every_module_sits_in_a_layer_folder() -> None:
    """No module lies loose beside the layer folders: `campaign/` holds core/ and store/
    only, so a new module's layer is the folder it is put in."""
    loose = [m for m in modules() if m.startswith("campaign.") and m.split(".")[1] not in ("core", "store")]
    assert loose == []
