"""docs/campaign-file.md: the campaign file's reference, generated from `campaign.core.schema`.

Why generated: the schema is what a campaign file is checked against, so a page written
by hand would drift from it the first time a field is added or a default moves. Each
table's fields are read from its pydantic model (key, type, default, limits and
`description`); the sentences around them are the constants below. A test compares
docs/campaign-file.md with `markdown()`; regenerate it with
`python -m campaign.core.schema_doc > docs/campaign-file.md`.

Core-layer code (tests/unit/test_architecture.py): it imports `campaign.core.schema`, pydantic and
the standard library only.
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from campaign.core import schema, search, serving
from campaign.core.serving import NAME
from campaign.core.units import SIZE_FIELDS

# The first ```toml block of the page: a campaign that loads and runs on the simulator
# (a test loads it, and checks its overrides and sizes, as `campaign check` does).
EXAMPLE = """\
[campaign]
name = "first"

[[models]]
name = "m"
quant = "q4"
bits_per_weight = 4.5

[[runtimes]]
name = "sim"
adapter = "simulator"

[[arms]]
id = "A"
model = "m"
runtime = "sim"
context = 4096
recipe = { slots = 2 }

[[queue]]
title = "decode on A"
arms = ["A"]
probes = ["decode"]
"""

# A gate added to the example (the second block of the page).
EXAMPLE_GATE = """\
[[gates]]
id = "fast"
predicate = "threshold"
params = { metric = "decode_tps", probe = "decode", op = ">=", value = 20 }
subjects = ["A"]
"""

INTRO = """\
# The campaign file

A campaign is one TOML file. This page lists every table and key it may hold, generated
from the schema that checks it (`campaign/core/schema.py`; regenerate with
`python -m campaign.core.schema_doc > docs/campaign-file.md`). Gates are in [gates.md](gates.md),
their `params` in [predicates-compare.md](predicates-compare.md) and
[predicates-bounds.md](predicates-bounds.md), the metrics a gate can name in
[metrics.md](metrics.md), the runtime adapters in [runtimes.md](runtimes.md), and
measuring your own server in [own-server.md](own-server.md).

## A minimal campaign

One model on the embedded simulator, one arm, one queue item that runs the `decode` probe
on it:

```toml
{example}```

Save it as `first.toml`, then check it (nothing runs), run it, and look at the result:

```bash
campaign check first.toml
campaign run first.toml
campaign report
```

`check` prints the plan (`decode-on-a: A x decode at each arm's own; 1 block, 1 server
start`) and `first.toml: ok`; `run` starts the simulated server, runs the probe, stores the
measurements in `.campaign/campaign.db` and prints the gate verdicts and the queue;
`report` writes `reports/site/first/index.html`, whose arm page (`arms/a.html`) lists
every metric measured (`decode_tps` 54.5 tok/s in one run here). A queue item without a
gate only measures. `campaign new --runtime simulator` (or `llamacpp`, `vllm`, `external`)
writes a commented two-arm campaign with a gate and three blocks to start from instead
(llama.cpp's gets `threads` from the cores this machine gives it, less one for the
campaign's own process, and says so).

To make a claim, add a gate, and in the `[[queue]]` table feed it (`gate = "fast"`) and
ask for three blocks (`repeats = 3`): a verdict needs at least 3 server runs per arm.

```toml
{gate}```

Give the campaign a new `name` too before running it again: a queue item that is done is
not run again when the file changes, so under the old name the gate reads the one run
there is and stays `inconclusive` ("A has 1 run; needs 3"). One run of the new file
here: `fast` pass, "decode_tps >= 20.0 holds: A decode_tps 53.0 [51.7, 54.3] 95% CI, 3
runs x 3 requests". The README has a two-arm campaign with a comparative gate
(`relative_improvement`).

## Rules for every table

- Unknown keys are refused, with the keys that are allowed; so are values of the wrong
  type or out of range. Every problem names its place in the file
  (`arms[0] (id 'A').recipe.slots`), what was found and what was expected, and
  `campaign check` and `campaign run` exit 2 before anything starts.
- Names are checked across tables: an arm's `model`/`quant` and `runtime`, a gate's
  arms, a queue item's arms, `gate`, `depends_on` and `confirms`, each gate's metric
  against the probes of the items that feed it. Ids within a table are unique.
- What loads but cannot decide much is warned of, not refused: a comparative gate whose
  items' `repeats` give too few blocks to pass over the campaign's family of gates (the
  warning says how far past its threshold a gain must be, and which number of blocks
  brings that down; see [gates.md](gates.md), "Enough blocks to pass").
- A "name" below is letters, digits, `_`, `.` and `-`, starting with a letter or digit
  (it also names Prefect tags and limits).
- A size is a string with its unit, such as `"8G"`, `"512M"`, `"48GB"`, `"512MiB"` or
  `"4096B"` (K, M, G, T are powers of 1024). A bare number other than 0 is refused
  (`prefix_cache = 256` names its place and asks for `"256M"` or `"256MiB"`): other tools
  count such sizes in MiB, and it would be read as bytes.
- A nested table can be written inline (`recipe = {{ slots = 2 }}`) or as its own header
  after the entry it belongs to (`[arms.recipe]`).
"""


@dataclass(frozen=True)
class Section:
    """One table of the file: its header, its model, and what the field table cannot say."""

    header: str
    model: type[BaseModel]
    intro: str
    notes: tuple[str, ...] = ()


SECTIONS: tuple[Section, ...] = (
    Section("[campaign]", schema.CampaignMeta, "The campaign itself. Exactly one, required."),
    Section(
        "[[models]]",
        serving.ModelEntry,
        "One entry per model and quant; at least one.",
        ("An arm picks its model by `model`, and by `quant` when one name has several entries.",),
    ),
    Section(
        "[models.sampling]",
        serving.Sampling,
        "The model vendor's sampling, sent with every canonical request (greedy requests send "
        "temperature 0). A key left unset is not sent, so the server's default applies.",
        (
            "`ignore_eos` and `min_tokens` set how long replies are, not how tokens are drawn: greedy "
            "requests send them too, and a probe's own values win (decode sends both, so that every "
            "timed request generates exactly `max_tokens`).",
        ),
    ),
    Section(
        "[[runtimes]]",
        serving.RuntimeEntry,
        "How a server is started (or, with `url`, found); at least one.",
        (
            "`argv` is a template: `{model}`, `{model_cache}`, `{host}`, `{port}`, `{context}`, `{slots}`, "
            "`{prefill_chunk}`, `{draft}`, `{workdir}` (and `{llama_server}` for llamacpp) are filled per arm. "
            "The adapter appends the flags it derives from the recipe, skipping any flag the template "
            "already sets, and the recipe's `extra_args` come last (docs/runtimes.md has the flag each "
            "recipe field becomes).",
            "`options` depend on the adapter: [runtimes.md](runtimes.md) lists every key each adapter "
            "reads, with its type, bounds and default. A key the adapter does not read, or a value of "
            'the wrong type (`threads = "4"` for an integer), is refused when the file is loaded, '
            "naming the runtime and the key. For llamacpp and vllm see also [own-server.md](own-server.md).",
            "`seeks`, `how` and `cost` are free text for the report.",
        ),
    ),
    Section(
        "[[arms]]",
        schema.ArmEntry,
        "What is compared: model x quant x runtime x context, plus a serving recipe; at least one.",
        ("`simulate` is checked against the simulator's profile fields on simulated runtimes and ignored elsewhere.",),
    ),
    Section(
        "[arms.recipe]",
        serving.Recipe,
        "The serving recipe: the knobs a person tunes. Each adapter turns the fields into its "
        "runtime's flags; a field a runtime has no knob for is not passed (docs/runtimes.md).",
        (
            "`draft` needs `speculative = true`.",
            "A queue item may change recipe fields for its run (`overrides`, `recipe.<field>`), and a "
            "confirmatory item changes exactly one (`change`).",
        ),
    ),
    Section(
        "[[gates]]",
        schema.GateEntry,
        "A claim over the measurements, decided by a predicate; optional. Predicates, "
        "directions, intervals and verdicts are in [gates.md](gates.md), each predicate's "
        "params in [predicates-compare.md](predicates-compare.md) and "
        "[predicates-bounds.md](predicates-bounds.md).",
        (
            "`subjects` and `baseline` name arms; a comparative predicate compares every subject with "
            "every baseline arm.",
        ),
    ),
    Section(
        "[[queue]]",
        schema.QueueItem,
        "What to measure, in order; at least one item unless the file has a `[search]`. Each item runs its probes on its arms, "
        "`blocks` times over, and feeds its gate.",
        (
            "`blocks` counts server starts per arm (its earlier name `repeats` is still read); "
            "`overrides.repeats` is a probe's own parameter (decode: timed requests per context and mode).",
            "`max_blocks` instead of `blocks` adds blocks until the item's gate is settled: "
            "`min_blocks` first, then one at a time, each followed by the gate's verdict, whose "
            "intervals are then confidence sequences "
            '([gates.md](gates.md), "Adding blocks until settled"). '
            "A settled item stays done when the budget is raised later; one that spent "
            "its budget goes on.",
            "A key in `overrides` that is not valid for the item's probes is refused with the valid "
            "ones listed (`campaign check` shows them).",
            "`confirms` and `change` go together: the item re-runs an earlier one, with its arms and "
            "probes (and contexts), changing exactly one recipe field.",
            "Items that feed one gate must run a shared arm with one recipe, and a shared probe with "
            "one setting; otherwise the file is refused, naming both items.",
            "`depends_on` and `confirms` name items by key: `id`, else the title lower-cased with "
            "each run of other characters as `-` (`decode on A` is `decode-on-a`).",
            "`also_gates` lets one item's blocks feed several gates (a search's confirmation does: the "
            "winner against the base and against each runner-up, on the same fresh blocks).",
        ),
    ),
    Section(
        "[search]",
        search.SearchSpec,
        "A search over recipe fields, run after the queue (docs/search.md); optional. Each trial is an "
        "arm with an id from its settings, measured on one server start (the base on two); the best are "
        "then confirmed on fresh blocks by ordinary gates.",
        (
            "`space` keys: " + ", ".join(f"`{f}`" for f in search.SEARCHABLE_RECIPE) + ", `model` "
            "(choices `name/quant`) and `context`; `objective` is one table, or `objectives` a list of two.",
        ),
    ),
    Section("[search.space.FIELD]", search.Dimension, "One field's values: `choices`, or `low` and `high`."),
    Section("[search.objective]", search.Objective, "What a trial is scored on."),
    Section("[[search.constraints]]", search.Constraint, "A bound a trial must meet to count."),
    Section("[search.budget]", search.Budget, "The search's budget; whichever is spent first ends it."),
    Section("[search.confirm]", search.Confirm, "How the nominated arms are confirmed on fresh blocks."),
)

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}
_PLURALS = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


def _section_of(model: type[BaseModel]) -> Section | None:
    return next((s for s in SECTIONS if s.model is model), None)


def _link(header: str) -> str:
    """A header as the anchor GitHub gives it: `[[arms]]` -> `arms`, `[arms.recipe]` -> `armsrecipe`."""
    return "#" + "".join(c for c in header.lower() if c.isalnum() or c in "-_")


def type_words(annotation: Any, plural: bool = False) -> str:
    """A type in plain words: integer, list of strings, table (see ...), one of ..."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return " or ".join(type_words(a, plural) for a in kept)
    if origin is typing.Literal:
        return "one of " + ", ".join(f'`"{v}"`' for v in args)
    if origin is list:
        inner = args[0] if args else Any
        if isinstance(inner, type) and issubclass(inner, enum.Enum):
            return "list of strings, each one of " + ", ".join(f'`"{m.value}"`' for m in inner)
        return "list of " + type_words(inner, plural=True)
    if origin is dict:
        value = args[1] if len(args) > 1 else Any
        return "table" if value is Any else f"table of {type_words(value, plural=True)}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f'`"{m.value}"`' for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        section = _section_of(annotation)
        word = "tables" if plural else "table"
        return f"{word} ([`{section.header}`]({_link(section.header)}))" if section else word
    if annotation in _SCALARS:
        return (_PLURALS if plural else _SCALARS)[annotation]
    return "any value"


def limits(info: FieldInfo) -> list[str]:
    """The limits pydantic enforces on a field (>= 1, at least 1 entry, a name), in words."""
    out = []
    for meta in info.metadata:
        for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                out.append(f"{op} {getattr(meta, attr)}")
        count = getattr(meta, "min_length", None)
        if count is not None:
            out.append(f"at least {count} {'entry' if count == 1 else 'entries'}")
        if getattr(meta, "pattern", None):
            out.append(_pattern_words(meta.pattern))
    return out


def _pattern_words(pattern: str) -> str:
    if pattern == rf"^{NAME}$":
        return "a name"
    if pattern == rf"^({NAME})?$":
        return "a name, or empty"
    return f"matching `{pattern}`"


def type_text(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    """The type column: the type in words, then its limits."""
    if model is serving.Recipe and name in SIZE_FIELDS:  # parsed by units.parse_size
        words = "size"
    else:
        words = type_words(info.annotation)
    return ", ".join([words, *limits(info)])


def toml_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, enum.Enum):
        return toml_value(value.value)
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float):
        return f"`{value!r}`"
    if isinstance(value, int):
        return f"`{value}`"
    if isinstance(value, list):
        return "`[" + ", ".join(toml_value(v).strip("`") for v in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    if isinstance(value, BaseModel):
        return "its defaults"
    return f"`{value}`"


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    return toml_value(info.get_default(call_default_factory=True))


def key_of(name: str, info: FieldInfo) -> str:
    """The key as a campaign file spells it (`class` for the field `klass`)."""
    return info.alias or name


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def field_rows(model: type[BaseModel]) -> list[str]:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        rows.append(
            f"| `{key_of(name, info)}` | {cell(type_text(model, name, info))} | {cell(default_text(info))} "
            f"| {cell(info.description or '')} |"
        )
    return rows


def _top_level() -> list[str]:
    """The file's tables, from CampaignSpec."""
    rows = ["| table | how many | holds |", "| --- | --- | --- |"]
    for name, info in schema.CampaignSpec.model_fields.items():
        origin = typing.get_origin(info.annotation)
        if origin is list:
            header = f"[[{name}]]"
            count = "at least one" if any(getattr(m, "min_length", None) for m in info.metadata) else "any number"
        else:
            header, count = f"[{name}]", "exactly one" if info.is_required() else "optional"
        rows.append(f"| [`{header}`]({_link(header)}) | {count} | {cell(info.description or '')} |")
    return rows


def markdown() -> str:
    """docs/campaign-file.md (a test keeps the file current)."""
    lines = [INTRO.format(example=EXAMPLE, gate=EXAMPLE_GATE).rstrip("\n"), "", "## The tables", "", *_top_level()]
    for section in SECTIONS:
        lines += ["", f"## {section.header}", "", section.intro, "", *field_rows(section.model)]
        if section.notes:
            lines.append("")
            lines += [f"- {note}" for note in section.notes]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
