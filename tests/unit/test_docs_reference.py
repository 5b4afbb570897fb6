"""The reference pages a new user writes a campaign from: docs/campaign-file.md and
docs/gates.md are generated and current, name every field and predicate, and the
campaigns they (and docs/own-server.md) show load as `campaign check` loads them."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from campaign import schema, schema_doc
from campaign.states import Verdict
from flows.overrides import check_campaign
from flows.resolve import load_campaign
from gates import catalog
from gates import doc as gates_doc
from tests.paths import DOCS

TOML_BLOCK = re.compile(r"^```toml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def sections(text: str, level: str) -> dict[str, str]:
    """Each `level` heading's text (up to the next heading of that level), by heading."""
    parts = re.split(rf"^{level} (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def toml_blocks(text: str) -> list[str]:
    return TOML_BLOCK.findall(text)


def loads_and_checks(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    spec = load_campaign(path)
    assert check_campaign(spec) == []


# -- generated and current --------------------------------------------------------------------


def test_campaign_file_md_is_the_schema() -> None:
    assert page("campaign-file.md") == schema_doc.markdown(), (
        "docs/campaign-file.md is stale: python -m campaign.schema_doc > docs/campaign-file.md"
    )


def test_gates_md_is_the_registry() -> None:
    assert page("gates.md") == gates_doc.markdown(), "docs/gates.md is stale: python -m gates.doc > docs/gates.md"


# -- complete ---------------------------------------------------------------------------------


def nested_models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """`model` and every model its fields hold (lists and optionals included)."""
    found: list[type[BaseModel]] = []

    def visit(annotation: object) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.append(annotation)
                for info in annotation.model_fields.values():
                    visit(info.annotation)
            return
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(model)
    return found


def test_every_table_of_the_file_has_a_section() -> None:
    documented = {s.model for s in schema_doc.SECTIONS}
    missing = [m.__name__ for m in nested_models(schema.CampaignSpec) if m is not schema.CampaignSpec and m not in documented]
    assert missing == []


def test_every_schema_field_is_in_campaign_file_md_with_its_description() -> None:
    by_header = sections(page("campaign-file.md"), "##")
    missing = []
    for section in schema_doc.SECTIONS:
        body = by_header.get(section.header, "")
        for name, info in section.model.model_fields.items():
            row = next((line for line in body.splitlines() if line.startswith(f"| `{schema_doc.key_of(name, info)}` |")), None)
            if row is None or not info.description or schema_doc.cell(info.description) not in row:
                missing.append(f"{section.header} {name}")
    top = by_header.get("The tables", "")
    missing += [f"table {name}" for name in schema.CampaignSpec.model_fields if f"[{name}]" not in top]
    assert missing == []


def test_every_runtime_adapter_is_named_in_campaign_file_md() -> None:
    from arms.runtimes import catalog as runtimes

    text = page("campaign-file.md")
    builtin = [n for n in runtimes.names() if runtimes.ADAPTERS.get(n).__module__.startswith("arms.runtimes.")]
    assert [n for n in builtin if n not in text] == []


def test_every_predicate_and_param_is_in_gates_md() -> None:
    text = page("gates.md")
    by_name = sections(text, "###")
    builtin = gates_doc.builtins()
    assert {"relative_improvement", "threshold", "attribution", "all_of"} <= set(builtin)
    missing = []
    for name in builtin:
        body = by_name.get(name)
        if body is None or f"[`{name}`](#{name})" not in text:
            missing.append(name)
            continue
        missing += [f"{name}.{p}" for p in catalog.params_model(name).model_fields if f"| `{p}` |" not in body]
    assert missing == []
    assert [v.value for v in Verdict if f"| `{v.value}` |" not in text] == []


def test_the_gates_page_holds_what_the_brief_promised() -> None:
    """Direction from the catalogue, the interval over blocks, paired and Welch, Holm's family."""
    text = page("gates.md")
    for phrase in ("metrics.md", "higher_is_better", "paired", "Welch", "Holm", "exploratory", "min_runs", "blocks"):
        assert phrase in text, phrase


# -- the examples load and check ----------------------------------------------------------------


def test_the_minimal_example_loads_and_checks(tmp_path: Path) -> None:
    first = toml_blocks(page("campaign-file.md"))[0]
    assert 15 <= len(first.splitlines()) <= 25
    loads_and_checks(tmp_path, "first.toml", first)
    spec = load_campaign(tmp_path / "first.toml")
    assert [rt.adapter for rt in spec.runtimes] == ["simulator"]


def test_the_minimal_example_with_its_gate_loads_and_checks(tmp_path: Path) -> None:
    """The page's second block, added as it says: the item feeds the gate over 3 blocks."""
    first, gate = toml_blocks(page("campaign-file.md"))[:2]
    gated = first.replace('name = "first"', 'name = "first-gated"') + 'repeats = 3\ngate = "fast"\n\n' + gate
    loads_and_checks(tmp_path, "gated.toml", gated)
    assert load_campaign(tmp_path / "gated.toml").queue[0].gate == "fast"


@pytest.mark.parametrize("index", range(3))
def test_the_campaigns_of_own_server_md_load_and_check(tmp_path: Path, index: int) -> None:
    blocks = toml_blocks(page("own-server.md"))
    assert len(blocks) == 3
    loads_and_checks(tmp_path, f"own-{index}.toml", blocks[index])


def test_docs_probes_md_is_the_probe_registry_and_every_parameter_says_what_it_does() -> None:
    from arms.probes import doc

    text = doc.markdown()
    assert (DOCS / "probes.md").read_text() == text, "docs/probes.md is stale: python -m arms.probes.doc > docs/probes.md"
    assert "|  |\n" not in text, "a probe parameter without a description: add Field(description=...)"
    for probe in ("decode", "cache-probe", "agent-load", "load", "tool-loop", "cache-ceiling"):
        assert f"\n## {probe}\n" in text
    assert "| `decode_tps` | tok/s | higher is better |" in text  # the catalogue's units and directions
