"""The adapter contract: what the orchestrator needs to know about a runtime.

Runtimes differ in how they start, where they report cached tokens, queue depth and
draft acceptance, and how their start failures read. An adapter turns an arm's recipe
into a launch, and says where each measured number comes from, so probes stay generic.

Why adapters are data: the runtimes differ in *which* flag carries each recipe field
and *which* name each counter has, not in how a launch is assembled. So an adapter is a
table (`flags`: recipe field -> flag, with its condition and transform; `metric_names`;
`cached_tokens_field`; health and identity shapes), and one `launch()` here turns any
table into argv. What is truly logic (llama.cpp's model assembly, speculative modes,
log parsing) stays a function, referenced from the table. Adapters are frozen: what is
learned at run time comes back as a new value (`recognise`, `LaunchSpec.cached_tokens_field`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from arms.runtimes import prometheus
from arms.runtimes.options import option_problems
from campaign.schema import ArmEntry, ModelEntry, RuntimeEntry


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
# level words, `error: ...`, and Python's final `SomeError: ...` line of a traceback.
_ERROR_LINE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b|^(?i:error|fatal)\b|^[\w.]*(?:Error|Exception):")
CAUSE_GAP = 2  # other lines allowed between two error lines of one cascade
CAUSE_WINDOW = 10  # the cause of exit ends within this many final lines
FINAL_LINES = 3  # the cause when no error-level line is near the end


class LaunchError(RuntimeError):
    """The adapter could not build a launch (no server binary, a model file it could not
    write); the message says what was tried. Raised from `launch()`, it ends the attempt
    `failed` with that message, before any process starts."""


@dataclass
class StartClassification:
    """`blocked` is an external reason (missing component, file, hardware), kept word for word."""

    blocked: bool
    message: str


# Logical counter names the probes use; adapters map each to a runtime's metric name.
COUNTERS = (
    "cache_lookups",
    "cache_hits",
    "prompt_tokens",
    "cached_prompt_tokens",
    "generation_tokens",
    "draft_tokens",
    "accepted_tokens",
)
GAUGES = ("queue_depth", "slots_busy", "memory_bytes")


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


def flag(names: str | tuple[str, ...], value: Source | None = None, *, when: Condition = None, unless: Condition = None) -> Flag:
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


# -- other shapes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthStatus:
    """A health answer of 200 is not "ready" on its own: the JSON body's `status` says.
    `ready` lists the statuses that mean ready (None: any but `waiting`); `unreadable` is
    the verdict for a body without a status (not JSON, not an object, no field)."""

    ready: tuple[str, ...] | None = None
    waiting: tuple[str, ...] = ()
    unreadable: bool = False
    casefold: bool = False


def dig(obj: Any, dotted: str) -> Any:
    """`a.b.c` lookup through nested mappings; None when any step is missing."""
    for part in dotted.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def json_metrics(text: str, paths: Mapping[str, str]) -> dict[str, float]:
    """Logical counters from a JSON metrics document, each read at its dotted path."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, float] = {}
    for logical, path in paths.items():
        value = dig(doc, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[logical] = float(value)
    return out


def numbers_in(block: Any, fields: Mapping[str, str]) -> dict[str, float]:
    """Logical name -> number, for each field of `fields` that `block` holds as a number."""
    if not isinstance(block, Mapping):
        return {}
    return {
        logical: float(block[key])
        for logical, key in fields.items()
        if isinstance(block.get(key), (int, float)) and not isinstance(block.get(key), bool)
    }


# -- the adapter ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeAdapter:
    """The base of every adapter, and its one `launch()`. Subclasses are frozen
    dataclasses that mostly set the class-level table below."""

    name: ClassVar[str] = ""
    simulated: ClassVar[bool] = False
    description: ClassVar[str] = ""
    # the runtime entry's `options` table, typed and described: a key it has no field for
    # or a value of the wrong type is refused when the campaign file is loaded
    # (`flows.resolve`), naming the runtime and the key, instead of being silently ignored
    # or crashing a launch; docs/runtimes.md's table is generated from its fields
    options_model: ClassVar[type[RuntimeOptions]] = RuntimeOptions
    # where this runtime reports cached prompt tokens (a field of metrics.CACHED_FIELDS)
    cached_tokens_field: str = "usage.prompt_tokens_details.cached_tokens"

    # -- launch: the argv template (the runtime entry's, else `default_argv`), then `flags`
    default_argv: ClassVar[tuple[str, ...]] = ()
    flags: ClassVar[tuple[Row, ...]] = ()
    launches: ClassVar[bool] = True  # False: only ever measures a server at a URL
    uses_runtime_argv: ClassVar[bool] = True  # False: the runtime entry's argv is ignored
    appends_extra_args: ClassVar[bool] = True  # the recipe's extra_args last, to override anything

    # -- counters
    # logical counter/gauge name -> runtime metric name (Prometheus) or dotted path (JSON)
    metric_names: ClassVar[Mapping[str, str]] = {}
    # more values read from the page beside the logical counters (not counters themselves)
    extra_metrics: ClassVar[Mapping[str, str]] = {}
    metrics_path: ClassVar[str | None] = "/metrics"
    metrics_format: ClassVar[str] = "prometheus"  # or "json"
    # logical counter -> a source other than `metrics_path:metric_name`
    counter_source_overrides: ClassVar[Mapping[str, str]] = {}
    # what one unit of a cache counter is: the runtimes differ (vLLM counts prefix-cache
    # queries and hits in tokens; llama.cpp's log lines and the simulator's admissions are
    # requests), so counts are stored with their unit and only compared within it
    cache_counter_unit: ClassVar[str] = "requests"
    # logical counters `log_counters()` finds in the server log; empty = the log is not read
    log_counter_names: ClassVar[tuple[str, ...]] = ()
    # (response block, logical name -> field) of per-request counters; None: none reported
    request_counter_fields: ClassVar[tuple[str, Mapping[str, str]] | None] = None
    # vendor names of sampling fields (request field -> the runtime's name)
    sampling_names: ClassVar[Mapping[str, str]] = {}
    # the `model` every request names, when the runtime has a name of its own for what it
    # loaded (mlx-lm: "default_model"; any other name it tries to load, and answers 404);
    # None: the campaign's served id
    request_model: ClassVar[str | None] = None
    # request fields beyond OpenAI's that this runtime may refuse (transformers serve answers
    # `ignore_eos` HTTP 422): never sent to it, so its replies end where the model ends them
    refused_fields: ClassVar[frozenset[str]] = frozenset()

    # the endpoint that empties the server's prefix cache (POSTed once; "{slot}" in it: once
    # per slot), so a server kept from one queue item to the next can serve a probe that
    # needs a cold cache; None: no such endpoint, and such a probe gets a server of its own
    cache_flush: ClassVar[str | None] = None

    # -- health and identity
    health_status: ClassVar[HealthStatus | None] = None  # None: 200 means ready
    identity_path: ClassVar[str | None] = None  # where the server says what it serves (beyond /v1/models)
    identity_keys: ClassVar[tuple[str, ...]] = ()  # the fields of that answer worth keeping

    # -- start failures
    # start-failure text that means an external blocker, not a broken measurement
    blocked_patterns: ClassVar[tuple[str, ...]] = (
        r"No such file or directory",
        r"failed to (?:open|load) model",
        r"is unavailable",
        r"not supported on this (?:hardware|device|platform)",
    )
    blocked_exit_codes: ClassVar[frozenset[int]] = frozenset()
    error_lines: ClassVar[tuple[re.Pattern[str], ...]] = (_ERROR_LINE,)

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        """The argv to start a server for this arm; None when the runtime is external.

        The template's placeholders are filled, then each row of `flags` appends its flag
        unless the template already has it, then the recipe's extra_args.
        """
        if ctx.runtime.url:
            return None
        if not self.launches:
            raise ValueError(
                f"runtime {ctx.runtime.name!r} uses the {self.name} adapter, which launches nothing: set its url"
            )
        template = (list(ctx.runtime.argv) if self.uses_runtime_argv else []) or list(self.default_argv)
        if not template:
            raise ValueError(f"runtime {ctx.runtime.name!r} has no argv and no url")
        opts = self.read_options(ctx.runtime)
        values = self.template_values(ctx)
        argv = [part.format(**values) for part in template]
        facts = LaunchFacts(ctx, values, opts)
        apply_rows(argv, self.flags, facts)
        if self.appends_extra_args:
            argv += list(ctx.arm.recipe.extra_args)
        return LaunchSpec(
            argv=argv,
            env=dict(ctx.runtime.env),
            health_path=ctx.runtime.health_path,
            startup_timeout_s=ctx.runtime.startup_timeout_s,
            cached_tokens_field=self.launch_cached_tokens_field(facts),
        )

    def read_options(self, runtime: RuntimeEntry) -> RuntimeOptions:
        """The runtime's options as this adapter's model. A file loaded through
        `flows.resolve` was checked already; a runtime entry built any other way gets the
        same words here, as a LaunchError, before anything starts."""
        try:
            return self.options_model.model_validate(runtime.options)
        except ValidationError:
            problems = option_problems(self.name, self.options_model, runtime.options)
            raise LaunchError(f"runtime {runtime.name!r}: " + "; ".join(f"options.{key}: {text}" for key, text in problems)) from None

    def template_values(self, ctx: LaunchContext) -> dict[str, Any]:
        recipe = ctx.arm.recipe
        return {
            "host": ctx.host,
            "port": ctx.port,
            "model": ctx.model.path or ctx.model.name,
            "model_name": ctx.model.served_id or ctx.model.name,
            "context": ctx.arm.context,
            "slots": recipe.slots,
            "prefill_chunk": recipe.prefill_chunk,
            "draft": recipe.draft or "",
        }

    def launch_cached_tokens_field(self, facts: LaunchFacts) -> str | None:
        """The cached-tokens field this launch makes the server use, when not the adapter's."""
        return None

    def recognise(self, metrics_text: str) -> RuntimeAdapter:
        """What a metrics page teaches the adapter, as a new adapter (adapters never change):
        the external adapter comes back bound to the runtime the page shows; others, as they are."""
        return self

    def base_url(self, ctx: LaunchContext) -> str:
        return (ctx.runtime.url or f"http://{ctx.host}:{ctx.port}").rstrip("/")

    def classify_start_failure(self, exit_code: int | None, log_tail: str) -> StartClassification:
        """Blocked only when the cause of exit (`exit_cause`) is an external one, quoted word
        for word (with the cascade's first error when that is another line: "failed to load
        model X" says which file, "failed to read key-value pairs" what is wrong with it); a
        blocked-looking warning earlier in the log (a missing optional file) says nothing
        about why the server stopped. Otherwise failed, quoting the first line of the cause
        (the root of the cascade, not its "exiting" epilogue)."""
        lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
        cause = self.exit_cause(lines)
        root = cause[0] if cause and self.is_error_line(cause[0]) else None
        for pattern in self.blocked_patterns:
            for line in cause:
                if re.search(pattern, line, re.IGNORECASE):
                    return StartClassification(True, line if root in (None, line) else f"{line} (first error: {root})")
        quoted = root or (cause[-1] if cause else f"exit code {exit_code}")
        if exit_code is not None and exit_code in self.blocked_exit_codes:
            return StartClassification(True, quoted)
        return StartClassification(False, quoted)

    def is_error_line(self, line: str) -> bool:
        """Whether a log line is error-level (any of `error_lines` matches)."""
        return any(pattern.search(line) for pattern in self.error_lines)

    def exit_cause(self, lines: list[str]) -> list[str]:
        """The lines that say why the server exited.

        The final cascade of error-level lines: the last error line and the error lines before
        it with at most CAUSE_GAP other lines between neighbours (a "cleaning up" line inside
        a cascade), provided it ends within the last CAUSE_WINDOW lines (usage text may
        follow an argument error). Without such a cascade, the last FINAL_LINES lines.
        """
        errors = [i for i, line in enumerate(lines) if self.is_error_line(line)]
        if not errors or len(lines) - 1 - errors[-1] >= CAUSE_WINDOW:
            return lines[-FINAL_LINES:]
        first = len(errors) - 1
        while first > 0 and errors[first] - errors[first - 1] - 1 <= CAUSE_GAP:
            first -= 1
        return [lines[i] for i in errors[first:]]

    def read_metrics(self, text: str) -> dict[str, float]:
        """Counters and gauges under their logical names (and `extra_metrics` under theirs)."""
        if self.metrics_format == "json":
            return json_metrics(text, {**self.metric_names, **self.extra_metrics})
        raw = prometheus.parse(text)
        names = {**self.metric_names, **self.extra_metrics}
        return {logical: raw[name] for logical, name in names.items() if name in raw}

    def counter_sources(self) -> dict[str, str]:
        """What each logical counter is read from, for the record (stored as `source`)."""
        sources = {logical: f"{self.metrics_path}:{name}" for logical, name in self.metric_names.items()}
        return {**sources, **self.counter_source_overrides}

    def counter_unit(self, name: str) -> str:
        """The unit a logical counter is stored in (see `cache_counter_unit`)."""
        if name in ("cache_lookups", "cache_hits"):
            return self.cache_counter_unit
        return "tokens" if "tokens" in name else "count"

    def is_ready(self, status_code: int, body: str) -> bool:
        """Whether a health answer means ready: 200, and the body's status where
        `health_status` says the runtime answers 200 while loading."""
        rule = self.health_status
        if status_code != 200 or rule is None:
            return status_code == 200
        try:
            doc = json.loads(body)
        except ValueError:
            return rule.unreadable
        if not isinstance(doc, Mapping) or "status" not in doc:
            return rule.unreadable
        status = str(doc["status"]).lower() if rule.casefold else doc["status"]
        return status in rule.ready if rule.ready is not None else status not in rule.waiting

    def identity_extras(self, base_url: str, timeout: float = 5.0) -> dict[str, Any]:
        """What the server says about its model beyond the served id; {} where nothing more."""
        return {}

    def parse_identity(self, doc: Any) -> dict[str, Any]:
        """The `identity_keys` of the runtime's own identity answer."""
        if not isinstance(doc, Mapping):
            return {}
        return {k: doc[k] for k in self.identity_keys if k in doc}

    def flush_cache(self, base_url: str, slots: int, timeout: float = 30.0) -> str:
        """Empty the server's prefix cache through `cache_flush`; what was asked and what
        the server answered, for the record ('POST /flush_cache: {"status": "ok", ...}').
        Raises when there is no endpoint or it refused."""
        if self.cache_flush is None:
            raise ValueError(f"the {self.name} adapter has no cache flush endpoint")
        paths = [self.cache_flush.format(slot=i) for i in range(slots)] if "{slot}" in self.cache_flush else [self.cache_flush]
        answers = []
        with httpx.Client(base_url=base_url, timeout=timeout) as http:
            for path in paths:
                response = http.post(path)
                if response.status_code >= 300:
                    raise RuntimeError(f"POST {path} answered HTTP {response.status_code}: {response.text[:200]}")
                answers.append(" ".join(response.text.split())[:200])
        asked = f"POST {self.cache_flush}" + (f" for slots 0..{slots - 1}" if len(paths) > 1 else "")
        return f"{asked}: {'; '.join(a for a in answers if a) or 'no body'}"

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        """Counters carried by one response (draft/accepted tokens) under logical names.

        Runtimes without a /metrics endpoint still report speculation per request; this
        is where a probe finds it. Empty where the runtime reports none.
        """
        if self.request_counter_fields is None:
            return {}
        block, fields = self.request_counter_fields
        return numbers_in(payload.get(block), fields)

    def log_counters(self, log_text: str) -> dict[str, float]:
        """Cumulative counters only the server log reveals (llama.cpp's prompt-cache hits)."""
        return {}

    def log_counters_enabled(self, argv: Sequence[str]) -> bool:
        """Whether a server started with `argv` writes the lines `log_counters` counts. When
        it does not, its log is not read, so a count of 0 is never reported for events the
        log could not have shown."""
        return bool(self.log_counter_names)

    def sampling(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Vendor sampling as request fields: None dropped, `refused_fields` dropped, fields
        renamed by `sampling_names`."""
        refused = self.refused_fields
        out = {k: v for k, v in params.items() if v is not None and k not in refused}
        for field_name, vendor in self.sampling_names.items():
            if field_name in out:
                out[vendor] = out.pop(field_name)
        return out
