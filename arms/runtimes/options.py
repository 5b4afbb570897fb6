"""What an adapter's options model says, in the words of a campaign file.

Why: the `options` table of a runtime entry is free-form in the file
(`RuntimeEntry.options`), and each adapter types it with its `options_model`
(`arms.runtimes.base.RuntimeOptions`, strict: TOML already gives ints, floats, strings and
bools, so `"4"` for an integer is a mistake to report, not a value to convert; an integer
is taken where a number is expected). A pydantic error speaks of "input should be a valid
integer"; here each problem says which key, what the adapter expects (`an integer >= 1`)
and what the file gave, for the load-time check (`flows.resolve`) and a launch alike, and
the same words describe each field in docs/runtimes.md's table (`arms.runtimes.catalog`).
A nested model keeps its own rules: the simulator's `profile` is read as `SimProfile` is
everywhere else (an arm's `simulate` table, `python -m arms.simulator`).
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo


def _bare(annotation: Any) -> Any:
    """The type without `| None`: TOML has no null, so None only ever means "unset"."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def expectation(info: FieldInfo) -> str:
    """What a field takes, in the words of a campaign file (`an integer >= 1`)."""
    kind = _bare(info.annotation)
    if get_origin(kind) is Literal:
        return "one of: " + ", ".join(repr(v) for v in get_args(kind))
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        text = f"a table of {kind.__name__} fields"
    else:
        words = {
            bool: "true or false",
            int: "an integer",
            float: "a number",
            str: "a string",
            dict: "a table",
            list: "an array",
        }
        text = words.get(get_origin(kind) or kind, "a value")
    bounds: dict[str, Any] = {}
    for rule in info.metadata:  # pydantic's constraints: annotated_types' Ge, Gt, MinLen, ...
        if kind is str and getattr(rule, "min_length", None) == 1:
            text = "a non-empty string"
        bounds.update(
            {attr: getattr(rule, attr) for attr in ("ge", "gt", "le", "lt") if getattr(rule, attr, None) is not None}
        )
    if "ge" in bounds and "le" in bounds:
        return f"{text} from {bounds['ge']} to {bounds['le']}"
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return " ".join([text, *(f"{signs[attr]} {value}" for attr, value in bounds.items())])


def default_text(info: FieldInfo) -> str:
    """A field's default as it would be written in the file; `unset` when absence is the default."""
    if info.default_factory is not None:
        return "`{}`"
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f'`"{value}"`' if isinstance(value, str) else f"`{value}`"


def _given(value: Any) -> str:
    """A value as the file wrote it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping):
        return "a table"
    return repr(value)


def _model_at(model: type[BaseModel], path: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model a nested location belongs to (`profile.decode_tps` -> SimProfile)."""
    for part in path:
        info = model.model_fields.get(str(part))
        kind = _bare(info.annotation) if info else None
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            return None
        model = kind
    return model


def option_problems(adapter: str, model: type[BaseModel], options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dotted key, what is wrong) for every problem of `options` against `model`, each
    saying what was expected and what was given; an unknown key gets the nearest known one
    and the list of keys the adapter reads. Empty when the table is valid."""
    try:
        model.model_validate(options)
    except ValidationError as exc:
        errors = exc.errors()
    else:
        return []
    problems = []
    for err in errors:
        loc = tuple(err["loc"])
        key = ".".join(str(part) for part in loc)
        owner = _model_at(model, loc[:-1])
        if err["type"] == "extra_forbidden" and owner is not None:
            known = list(owner.model_fields)
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            reads = ", ".join(sorted(known)) if known else "no options at all"
            what = "option" if len(loc) == 1 else ".".join(str(part) for part in loc[:-1]) + " field"
            problems.append((key, f"adapter {adapter!r} reads no such {what}; {hint}it reads: {reads}"))
            continue
        info = owner.model_fields.get(str(loc[-1])) if owner is not None and loc else None
        expected = expectation(info) if info is not None else f"a valid value ({err['msg']})"
        problems.append((key, f"adapter {adapter!r} expects {expected}, got {_given(err['input'])}"))
    return sorted(problems, key=lambda problem: problem[0])
