"""Launching: how an arm's recipe becomes a server's argv.

Why a table: the runtimes differ in *which* flag carries each recipe field, not in how a
launch is assembled. An adapter lists rows (`flag(names, value, when=..., unless=...)`)
and `apply_rows` turns any table into argv, letting a flag the user's argv template
already sets win. What is truly logic (llama.cpp's model assembly, speculative modes)
is a function a row references (`Rows`). The facts a row reads (`LaunchFacts`) are the
launch context, the template's values and the runtime's options validated once per
launch by the adapter's `options_model`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from campaign.core.schema import ArmEntry
from campaign.core.serving import ModelEntry, RuntimeEntry


class RuntimeOptions(BaseModel):
    """The base of every adapter's options model (the runtime entry's `options` table,
    typed), and the model of an adapter that reads no options: any key is refused.

    Strict because TOML already gives ints, floats, strings and bools: `threads = "4"` is
    a mistake to report when the file is loaded, not a value to convert (an integer is
    still taken where a number is expected). Frozen: a launch reads it, never changes it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LaunchSpec(BaseModel):
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/health"
    startup_timeout_s: float = 120.0
    # set when this launch makes the server report cached tokens in another field than
    # the adapter's own (the simulator's `cached_tokens_style`); None: the adapter's
    cached_tokens_field: str | None = None


@dataclass
class LaunchContext:
    arm: ArmEntry
    model: ModelEntry
    runtime: RuntimeEntry
    port: int
    host: str = "127.0.0.1"
    overrides: dict[str, Any] = field(default_factory=dict)
    workdir: Path = Path(".")
    seed: int = 0
    tools: bool = False
    # which start of this arm's server this is (set per start by the flow); the simulator
    # draws this start's rate factor from it (SimProfile.run_seed)
    run_seed: int = 0


# Error-level lines in logs without a format of their own: `ERROR ...` / `FATAL` / `CRITICAL`


class LaunchError(RuntimeError):
    """The adapter could not build a launch (options it cannot read, a model file its
    package failed to write); the message says what was tried. Raised from `launch()`, it ends the attempt `failed`
    with that message, before any process starts."""


class LaunchBlocked(LaunchError):
    """What the launch needs is missing from this machine (the server binary, a model
    file nothing here can write): the attempt ends `blocked` with the message, before any
    process starts, as a server that stops on a missing file does. A person fixes it and
    `campaign resume` re-checks it; `campaign check` says the same beforehand
    (`RuntimeAdapter.blockers`)."""


def missing_program(program: str, env: Mapping[str, str]) -> str:
    """Why `program`, the first word of an argv, cannot be started here ('' when it can):
    a bare name not on the PATH the start will search (the runtime's `env` PATH where it
    sets one), or a path that is not an executable file."""
    if os.sep not in program and "/" not in program:
        path = env.get("PATH", os.environ.get("PATH", ""))
        return "" if shutil.which(program, path=path) else f"{program!r} is not on PATH (searched: {path})"
    return "" if os.path.isfile(program) and os.access(program, os.X_OK) else f"{program!r} is not an executable file"


# -- flag tables -------------------------------------------------------------------------------


def has_flag(argv: Sequence[str], names: Iterable[str]) -> bool:
    """True when any of `names` is already in argv (alone or as `--flag=value`)."""
    wanted = tuple(names)
    return any(part in wanted or part.split("=", 1)[0] in wanted for part in argv)


def add_flag(argv: list[str], names: str | Sequence[str], *values: Any) -> None:
    """Append `names[0] values...` unless the user's argv template already sets it.

    Why: the runtime entry's argv template is the user's override; a flag written there
    wins over what the adapter derives from the recipe.
    """
    aliases = (names,) if isinstance(names, str) else tuple(names)
    if has_flag(argv, aliases):
        return
    argv.append(aliases[0])
    argv.extend(str(v) for v in values)


OptionsT = TypeVar("OptionsT", bound=RuntimeOptions)


@dataclass(frozen=True)
class LaunchFacts:
    """What a flag table reads: the launch context, the argv template's values and the
    runtime's options as the adapter's `options_model` validated them (once per launch).

    `facts["slots"]` looks a name up: `options.NAME` in those options (the field's default
    when the file leaves it out: None for an option whose absence matters), then the
    template values (`host`, `port`, `model`, `context`, ...), then `served_id`, `tools`
    and `arm_id`, then the recipe's fields (`prefix_cache`, ...).
    """

    ctx: LaunchContext
    values: Mapping[str, Any]
    opts: RuntimeOptions

    @property
    def recipe(self) -> Any:
        return self.ctx.arm.recipe

    def opts_as(self, model: type[OptionsT]) -> OptionsT:
        """The options as `model` (the adapter's own, or a shared part of it such as a
        model-folder mixin), so a function reads typed fields; a TypeError when the
        adapter's options are not that model, which is a wiring mistake, not a user's."""
        if not isinstance(self.opts, model):
            raise TypeError(f"the options are {type(self.opts).__name__}, not {model.__name__}")
        return self.opts

    def __getitem__(self, name: str) -> Any:
        if name.startswith("options."):
            key = name.removeprefix("options.")
            if key not in type(self.opts).model_fields:
                raise KeyError(f"{name}: not a field of {type(self.opts).__name__}")
            return getattr(self.opts, key)
        if name in self.values:
            return self.values[name]
        if name == "served_id":
            return self.ctx.model.served_id
        if name == "tools":
            return self.ctx.tools
        if name == "arm_id":
            return self.ctx.arm.id
        return getattr(self.recipe, name)

    def resolve(self, source: Source) -> Any:
        if isinstance(source, Const):
            return source.value
        if isinstance(source, str):
            return self[source]
        return source(self)

    def holds(self, condition: Condition) -> bool:
        """A fact name holds when truthy; a tuple of names when all do; a function when it says so."""
        if condition is None:
            return True
        if isinstance(condition, str):
            return bool(self[condition])
        if isinstance(condition, tuple):
            return all(self[name] for name in condition)
        return bool(condition(self))


@dataclass(frozen=True)
class Const:
    """A flag value written as is (a plain string in a table names a fact instead)."""

    value: Any


OMIT = object()
"""Returned by a value function when the row writes nothing after all (no template file)."""

Source = str | Const | Callable[[LaunchFacts], Any]
Condition = str | tuple[str, ...] | Callable[[LaunchFacts], Any] | None


@dataclass(frozen=True)
class Flag:
    """One row of a flag table: `names[0] value` when `when` holds and `unless` does not,
    unless the argv template already has any of `names`. No value: a bare switch. The
    value is computed whenever the row applies, whether or not the template wins."""

    names: tuple[str, ...]
    value: Source | None = None
    when: Condition = None
    unless: Condition = None


@dataclass(frozen=True)
class Rows:
    """Rows a function derives from the facts: logic a table cannot say (speculative
    modes, a flag named by an option), referenced from the table at its place."""

    build: Callable[[LaunchFacts], Iterable[Row]]
    when: Condition = None
    unless: Condition = None


Row = Flag | Rows


def flag(
    names: str | tuple[str, ...], value: Source | None = None, *, when: Condition = None, unless: Condition = None
) -> Flag:
    return Flag((names,) if isinstance(names, str) else names, value, when, unless)


def fixed(names: str | tuple[str, ...], value: Any = None) -> Flag:
    """A row with a value computed already (for `Rows` functions)."""
    return flag(names, None if value is None else Const(value))


def switch(fact: str, on: str, off: str) -> tuple[Flag, Flag]:
    """A bool as a pair of flags: `on` when the fact holds, `off` when not; either one in
    the template wins over both."""
    return flag((on, off), when=fact), flag((off, on), unless=fact)


def whole(fact: str, unit: int) -> Callable[[LaunchFacts], int]:
    """Bytes in whole `unit`s (GiB, MiB), at least 1."""
    return lambda facts: max(1, facts[fact] // unit)


def workdir_path(subdir: str) -> Callable[[LaunchFacts], str]:
    """A directory of this arm's own under the work directory."""
    return lambda facts: str(Path(facts.ctx.workdir) / subdir / facts.ctx.arm.id)


HOST_PORT = (flag("--host", "host"), flag("--port", "port"))


def apply_rows(argv: list[str], rows: Iterable[Row], facts: LaunchFacts) -> None:
    """Append what each applicable row says, in table order."""
    for row in rows:
        if not facts.holds(row.when) or (row.unless is not None and facts.holds(row.unless)):
            continue
        if isinstance(row, Rows):
            apply_rows(argv, row.build(facts), facts)
        elif row.value is None:
            add_flag(argv, row.names)
        else:
            value = facts.resolve(row.value)
            if value is not OMIT:
                add_flag(argv, row.names, value)
