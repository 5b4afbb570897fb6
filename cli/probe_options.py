"""`campaign probe`'s options for a probe's parameters, made from the probes' own parameter
models (each `ProbeSpec.params` of `arms.probes.registry`), so a parameter is stated once:
a field `max_tokens` is the option `--max-tokens`, of the field's type, its help the
field's description with the probe's default. The help groups the options by the probes
that read them (typer's `rich_help_panel`); an option every probe reads sits with the
command's own options. A field added to a model is an option of the next run.
"""

from __future__ import annotations

import enum
import inspect
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from pydantic_core import PydanticUndefined

# Flags spelled otherwise than their key, as they were first published
FLAGS = {"contexts": "--context", "modes": "--mode", "duration_s": "--duration", "targets": "--target"}
# Keys with no generated option: `context` is the one context a probe run fills, which
# the arm flow sets from the queue item (decode's `contexts` is `--context`); `targets`
# is a table, given as `--target NAME=SECONDS` by `cli.probe` itself.
NOT_OPTIONS = frozenset({"context", "targets"})
# Titles of the panels of options that several probes read, where a word says more than
# the list of probes (which is the title otherwise)
PANELS: dict[tuple[str, ...], str] = {("agent-load", "load"): "agent workload (agent-load, load)"}
SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class ProbeOption:
    """One command-line option that sets the probe parameter `key` (a campaign-file key:
    a field's alias, else its name) of the probes that read it."""

    key: str
    flag: str
    kind: Any  # the option's type as typer reads it: a scalar, an enum, a Literal, or a list of one
    help: str
    panel: str | None  # None: every probe reads it
    metavar: str | None = None

    @property
    def name(self) -> str:
        """The command function's parameter for it (apart from the command's own)."""
        return f"param_{self.key}"

    def parameter(self) -> inspect.Parameter:
        """The option as a keyword-only parameter typer reads (unset: None)."""
        decls = f"{self.flag}/--no-{self.flag[2:]}" if self.kind is bool else self.flag
        option = typer.Option(
            decls, help=self.help, rich_help_panel=self.panel, metavar=self.metavar, show_default=False
        )
        return inspect.Parameter(
            self.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[self.kind | None, option]
        )


def flag(key: str) -> str:
    """The command-line flag that sets a probe parameter."""
    return FLAGS.get(key, "--" + key.replace("_", "-"))


def probe_options(specs: Sequence[Any]) -> list[ProbeOption]:
    """One option per parameter key of `specs` (the registry's `ProbeSpec`s), in the order
    the probes and their fields first name them."""
    readers: dict[str, list[tuple[str, Any, Any]]] = {}  # key -> (probe, field, default shown)
    for spec in specs:
        for key, field_name in spec.keys.items():
            if key in NOT_OPTIONS:
                continue
            info = spec.params.model_fields[field_name]
            default = spec.cli_defaults.get(key, spec.cli_defaults.get(field_name, _default(info)))
            readers.setdefault(key, []).append((str(spec.name), info, default))
    everyone = len(specs)
    options = []
    for key, read in readers.items():
        probes = tuple(probe for probe, _, _ in read)
        kinds = {_kind(info.annotation) for _, info, _ in read}
        kind = kinds.pop() if len(kinds) == 1 else _loosest(kinds)
        repeatable = get_origin(kind) is list
        panel = None if len(probes) == everyone else probes[0] if len(probes) == 1 else _panel(probes)
        options.append(
            ProbeOption(
                key,
                flag(key),
                kind,
                _help(key, read, repeatable),
                panel,
                "SECONDS" if key.endswith("_s") and not repeatable else None,
            )
        )
    return options


def given_values(options: Iterable[ProbeOption], values: dict[str, Any]) -> dict[str, Any]:
    """The command's values of `options` by probe key (None: not given), enums as their
    values, as a campaign file gives them."""
    return {option.key: _plain(values.get(option.name)) for option in options}


def _panel(probes: tuple[str, ...]) -> str:
    return PANELS.get(tuple(sorted(probes)), ", ".join(probes))


def _kind(annotation: Any) -> Any:
    """A field's type as an option's: Optional and pydantic's Annotated constraints
    dropped; a list of a scalar stays a list (a repeatable option)."""
    base = _strip(annotation)
    if get_origin(base) is list:
        return types.GenericAlias(list, (_scalar(get_args(base)[0]),))
    return _scalar(base)


def _strip(annotation: Any) -> Any:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return _strip(rest[0])
    return annotation


def _scalar(annotation: Any) -> Any:
    base = _strip(annotation)
    if base in SCALARS or get_origin(base) is Literal or (isinstance(base, type) and issubclass(base, enum.Enum)):
        return base
    return str  # anything else is typed as text and read by the model (which says what it expects)


def _loosest(kinds: set[Any]) -> Any:
    """Probes that type one key differently: text (or a list of it), which each model
    reads as its own type."""
    return list[str] if all(get_origin(k) is list for k in kinds) else str


def _help(key: str, read: list[tuple[str, Any, Any]], repeatable: bool) -> str:
    """The fields' descriptions with their defaults; where probes say different things,
    each probe's, named."""
    said: dict[str, list[str]] = {}
    for probe, info, default in read:
        text = (info.description or "").strip() or key.replace("_", " ")  # a field with no description: its name
        shown = _shown(default)
        if shown is not None:
            text = f"{text} (default {shown})"
        said.setdefault(text, []).append(probe)
    if len(said) == 1:
        text = next(iter(said))
    else:
        text = "; ".join(f"{', '.join(probes)}: {words}" for words, probes in said.items())
    return f"{text} (repeatable)" if repeatable else text


def _default(info: Any) -> Any:
    if info.default_factory is not None:
        return info.default_factory()
    return None if info.default is PydanticUndefined else info.default


def _shown(value: Any) -> str | None:
    """A default as a campaign file writes it, as the probe pages show it; None for none."""
    from campaign.core.schema_doc import toml_value

    if value is None or (isinstance(value, list | dict) and not value):
        return None
    return toml_value(value)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
