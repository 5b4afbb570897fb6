"""The docs pages: every generated page (docs/campaign-file.md, the gate and predicate
pages, the probe pages) is current byte for byte and names every field, predicate and
probe; the campaigns they (and docs/own-server.md) show load as `campaign check` loads
them; every page is at most 25,000 bytes and listed in docs/index.md; and every link or
quoted section between pages lands on a page and heading that exist."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from campaign.core import schema, schema_doc
from campaign.core.states import Verdict
from flows.overrides import check_campaign
from flows.resolve import load_campaign
from gates import catalog
from gates import doc as gates_doc
from tests.paths import DOCS, ROOT

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
        "docs/campaign-file.md is stale: python -m campaign.core.schema_doc > docs/campaign-file.md"
    )


def test_the_gate_and_predicate_pages_are_the_registry() -> None:
    generated = gates_doc.pages()
    assert set(generated) == {"gates.md", "predicates-compare.md", "predicates-bounds.md"}
    for name, text in generated.items():
        assert page(name) == text, f"docs/{name} is stale: python -m gates.doc --page {name} > docs/{name}"


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
    missing = [
        m.__name__ for m in nested_models(schema.CampaignSpec) if m is not schema.CampaignSpec and m not in documented
    ]
    assert missing == []


def test_every_schema_field_is_in_campaign_file_md_with_its_description() -> None:
    by_header = sections(page("campaign-file.md"), "##")
    missing = []
    for section in schema_doc.SECTIONS:
        body = by_header.get(section.header, "")
        for name, info in section.model.model_fields.items():
            row = next(
                (line for line in body.splitlines() if line.startswith(f"| `{schema_doc.key_of(name, info)}` |")), None
            )
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


def test_every_predicate_has_a_section_with_its_params_that_gates_md_links() -> None:
    """gates.md's table links each built-in to its section on one predicate page, and that
    section tables every param."""
    index = page("gates.md")
    builtin = gates_doc.builtins()
    assert {"relative_improvement", "threshold", "attribution", "all_of"} <= set(builtin)
    missing = []
    for name in builtin:
        holders = [p for p in gates_doc.PREDICATE_PAGES if name in sections(page(p), "##")]
        if len(holders) != 1 or f"[`{name}`]({holders[0]}#{name})" not in index:
            missing.append(f"{name} on {holders}")
            continue
        body = sections(page(holders[0]), "##")[name]
        missing += [f"{name}.{p}" for p in catalog.params_model(name).model_fields if f"| `{p}` |" not in body]
    assert missing == []
    assert [v.value for v in Verdict if f"| `{v.value}` |" not in index] == []


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
    gated = first.replace('name = "first"', 'name = "first-gated"') + 'blocks = 3\ngate = "fast"\n\n' + gate
    loads_and_checks(tmp_path, "gated.toml", gated)
    assert load_campaign(tmp_path / "gated.toml").queue[0].gate == "fast"


@pytest.mark.parametrize("index", range(3))
def test_the_campaigns_of_own_server_md_load_and_check(tmp_path: Path, index: int) -> None:
    blocks = toml_blocks(page("own-server.md"))
    assert len(blocks) == 3
    loads_and_checks(tmp_path, f"own-{index}.toml", blocks[index])


def test_the_probe_pages_are_the_probe_registry_and_every_parameter_says_what_it_does() -> None:
    from arms.probes import doc

    generated = doc.pages()
    assert set(generated) == {"probes.md", "probes-agent-load.md", "probes-load.md"}
    for name, text in generated.items():
        assert page(name) == text, f"docs/{name} is stale: python -m arms.probes.doc --page {name} > docs/{name}"
        assert "|  |\n" not in text, "a probe parameter without a description: add Field(description=...)"
    index = generated["probes.md"]
    for probe in ("decode", "cache-probe", "agent-load", "load", "tool-loop", "cache-ceiling"):
        holders = [name for name, text in generated.items() if f"\n## {probe}\n" in text]
        assert len(holders) == 1, probe
        link = f"#{probe}" if holders == ["probes.md"] else f"{holders[0]}#{probe}"
        assert f"[`{probe}`]({link})" in index, probe
    assert (
        "| `decode_tps` | tok/s | higher is better |" in generated["probes.md"]
    )  # the catalogue's units and directions


# -- pages: size, index, links -------------------------------------------------------------------

MAX_PAGE_BYTES = 25_000
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
# `page.md, "Heading"`, `[page.md](page.md), "Heading"`, `` `page.md` ("Heading") ``: a section named by its words
QUOTED = re.compile(r"""([\w-]+\.md)`?(?:\]\([^)\s]*\))?`?,?\s+\(?\\?"([^"\\]+)\\?\"""")
NAMED_PAGE = re.compile(r"docs/([\w-]+\.md)")
SOURCE_DIRS = ("gates", "campaign", "cli", "flows", "arms", "reports", "examples", "tests", "benchmarks")


def pages() -> list[str]:
    return sorted(p.name for p in DOCS.glob("*.md"))


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (fenced code left out)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", text), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n, unique = 0, slug
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found


def source_texts() -> dict[str, str]:
    """Every file that may name a docs page: the pages, the README and the code."""
    texts = {f"docs/{name}": page(name) for name in pages()}
    texts["README.md"] = (ROOT / "README.md").read_text(encoding="utf-8")
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".toml", ".md", ".j2", ".html") and "__pycache__" not in path.parts:
                texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8", errors="replace")
    return texts


def test_every_page_is_at_most_25000_bytes() -> None:
    sizes = {name: len((DOCS / name).read_bytes()) for name in pages()}
    assert {name: size for name, size in sizes.items() if size > MAX_PAGE_BYTES} == {}


def test_the_index_lists_every_page_with_the_question_it_answers() -> None:
    lines = page("index.md").splitlines()
    listed = {target.partition("#")[0] for line in lines if " -> " in line for target in LINK.findall(line)}
    assert sorted(set(pages()) - {"index.md"} - listed) == []
    questions = [line for line in lines if line.startswith("- ")]
    assert questions and all("? -> [" in line for line in questions), "each line: 'question? -> [page.md](page.md)'"
    assert "(docs/index.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_link_between_pages_lands_on_a_page_and_heading() -> None:
    broken = []
    for where, base in [*((f"docs/{n}", DOCS) for n in pages()), ("README.md", ROOT)]:
        text = (ROOT / where).read_text(encoding="utf-8")
        for target in LINK.findall(FENCE.sub("", text)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            path = (base / file).resolve() if file else ROOT / where
            if not path.is_file():
                broken.append(f"{where}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
                broken.append(f"{where}: {target} (no such heading)")
    assert broken == []


def test_every_page_a_file_names_exists_and_holds_the_section_it_quotes() -> None:
    """A page a file names under docs/ exists, and one named with a section's words (`page.md,
    "Heading"`) still holds those words."""
    wrong = []
    for where, text in source_texts().items():
        wrong += [f"{where}: docs/{name}" for name in NAMED_PAGE.findall(text) if not (DOCS / name).is_file()]
        for name, quoted in QUOTED.findall(text):
            if (DOCS / name).is_file() and quoted not in page(name):
                wrong.append(f'{where}: {name}, "{quoted}"')
    assert wrong == []
