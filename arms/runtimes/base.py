"""The adapter: what the orchestrator needs to know about a runtime, in four parts.

Runtimes differ in how they start, how they report what they did, how their start
failures read and how they want to be asked. Each of these is its own value, read by the
layer that needs it and by nothing else:

- launching (`arms.runtimes.launching`): the flag table `launch()` turns into argv;
- `telemetry` (`arms.runtimes.telemetry`): where counters, gauges and a response's cached
  tokens are, read by the probes;
- `start_failures` (`arms.runtimes.start_failures`): blocked or failed, read by the flow
  when a server does not come up;
- `dialect` (`arms.runtimes.dialect`): the request fields it takes, read by the probes.

Why adapters are data: the runtimes differ in *which* flag or counter name carries each
fact, not in how a launch is assembled or a page is read. What is truly logic
(llama.cpp's model assembly, its log counters) stays a function or a subclass of the
part it belongs to. Adapters are frozen and never replaced at run time: an external
server's family is recognised once, when the flow attaches to it (`recognise`), and the
probe target is built from what that returned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
from pydantic import ValidationError

from arms import tls
from arms.runtimes.dialect import Dialect
from arms.runtimes.launching import (
    LaunchContext,
    LaunchError,
    LaunchFacts,
    LaunchSpec,
    Row,
    RuntimeOptions,
    apply_rows,
    missing_program,
)
from arms.runtimes.options import option_problems
from arms.runtimes.start_failures import StartFailures
from arms.runtimes.telemetry import Telemetry
from campaign.core.serving import ModelEntry, RuntimeEntry


@dataclass(frozen=True)
class HealthStatus:
    """A health answer of 200 is not "ready" on its own: the JSON body's `status` says.
    `ready` lists the statuses that mean ready (None: any but `waiting`); `unreadable` is
    the verdict for a body without a status (not JSON, not an object, no field)."""

    ready: tuple[str, ...] | None = None
    waiting: tuple[str, ...] = ()
    unreadable: bool = False
    casefold: bool = False


# -- the adapter ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeAdapter:
    """The base of every adapter, and its one `launch()`. Subclasses are frozen
    dataclasses that set the class-level parts below."""

    name: ClassVar[str] = ""
    simulated: ClassVar[bool] = False
    description: ClassVar[str] = ""
    # the runtime entry's `options` table, typed and described: a key it has no field for
    # or a value of the wrong type is refused when the campaign file is loaded
    # (`flows.resolve`), naming the runtime and the key, instead of being silently ignored
    # or crashing a launch; docs/runtimes.md's table is generated from its fields
    options_model: ClassVar[type[RuntimeOptions]] = RuntimeOptions

    # the recipe fields a search may vary on this runtime (`[search].space`): a field that
    # does not change its server would spend starts on identical arms. interleave_chunk is
    # the simulator's alone; an adapter that never launches (`launches = False`) has none
    search_fields: ClassVar[frozenset[str]] = frozenset(
        {"slots", "prefill_chunk", "prefix_cache", "session_cache_cap", "speculative", "draft", "draft_k"}
    )

    # -- launching: the argv template (the runtime entry's, else `default_argv`), then `flags`
    default_argv: ClassVar[tuple[str, ...]] = ()
    flags: ClassVar[tuple[Row, ...]] = ()
    launches: ClassVar[bool] = True  # False: only ever measures a server at a URL
    uses_runtime_argv: ClassVar[bool] = True  # False: the runtime entry's argv is ignored
    appends_extra_args: ClassVar[bool] = True  # the recipe's extra_args last, to override anything

    # -- the other three parts
    telemetry: ClassVar[Telemetry] = Telemetry()
    start_failures: ClassVar[StartFailures] = StartFailures()
    dialect: ClassVar[Dialect] = Dialect()

    # the endpoint that empties the server's prefix cache (POSTed once; "{slot}" in it: once
    # per slot), so a server kept from one queue item to the next can serve a probe that
    # needs a cold cache; None: no such endpoint, and such a probe gets a server of its own
    cache_flush: ClassVar[str | None] = None

    # -- health and identity
    health_status: ClassVar[HealthStatus | None] = None  # None: 200 means ready
    identity_path: ClassVar[str | None] = None  # where the server says what it serves (beyond /v1/models)
    identity_keys: ClassVar[tuple[str, ...]] = ()  # the fields of that answer worth keeping
    distribution: ClassVar[str] = ""  # the installed package that is the runtime, for its version

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        """The argv to start a server for this arm; None when the runtime is external.

        The runtime's options are validated once, here; the template's placeholders are
        filled, then each row of `flags` appends its flag unless the template already has
        it, then the recipe's extra_args.
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
        values = self.template_values(ctx, opts)
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

    def blockers(self, runtime: RuntimeEntry, model: ModelEntry) -> list[str]:
        """What this machine lacks to launch `runtime` with `model`, one reason each ([]
        when nothing is known missing): here, the program the argv template starts, where
        it is named as is (a placeholder such as `{python}` is the adapter's to fill).
        `campaign check` says these as `blocked` before anything runs; a launch missing one
        ends its attempt `blocked` too (LaunchBlocked, or the start's "No such file")."""
        if runtime.url or not self.launches:
            return []
        template = (list(runtime.argv) if self.uses_runtime_argv else []) or list(self.default_argv)
        if not template or "{" in template[0]:
            return []
        missing = missing_program(template[0], runtime.env)
        return [missing] if missing else []

    def read_options(self, runtime: RuntimeEntry) -> RuntimeOptions:
        """The runtime's options as this adapter's model. A file loaded through
        `flows.resolve` was checked already; a runtime entry built any other way gets the
        same words here, as a LaunchError, before anything starts."""
        try:
            return self.options_model.model_validate(runtime.options)
        except ValidationError:
            problems = option_problems(self.name, self.options_model, runtime.options)
            raise LaunchError(
                f"runtime {runtime.name!r}: " + "; ".join(f"options.{key}: {text}" for key, text in problems)
            ) from None

    def template_values(self, ctx: LaunchContext, opts: RuntimeOptions) -> dict[str, Any]:
        """The argv template's placeholders; `opts` are the options `launch` validated."""
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
        """The cached-tokens field this launch makes the server use, when not its telemetry's."""
        return None

    def recognise(self, base_url: str) -> RuntimeAdapter:
        """The adapter whose telemetry and dialect fit the server at `base_url`: this one,
        except for an adapter that measures servers it did not start (`external`), which
        asks the server once, when the flow attaches to it."""
        return self

    def base_url(self, ctx: LaunchContext) -> str:
        return (ctx.runtime.url or f"http://{ctx.host}:{ctx.port}").rstrip("/")

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

    def version(self, identity: Mapping[str, Any]) -> str:
        """Which build of the runtime served, for comparing across builds (`campaign
        compare`): the server's own word where its identity answer gives one
        (`build_info`, `version`), else the installed package's version, else ""."""
        for key in ("build_info", "version"):
            if identity.get(key):
                return str(identity[key])
        if self.distribution:
            from importlib.metadata import PackageNotFoundError
            from importlib.metadata import version as installed

            try:
                return f"{self.distribution} {installed(self.distribution)}"
            except PackageNotFoundError:
                return ""
        return ""

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
        paths = (
            [self.cache_flush.format(slot=i) for i in range(slots)]
            if "{slot}" in self.cache_flush
            else [self.cache_flush]
        )
        answers = []
        with httpx.Client(base_url=base_url, timeout=timeout, verify=tls.verified()) as http:
            for path in paths:
                response = http.post(path)
                if response.status_code >= 300:
                    raise RuntimeError(f"POST {path} answered HTTP {response.status_code}: {response.text[:200]}")
                answers.append(" ".join(response.text.split())[:200])
        asked = f"POST {self.cache_flush}" + (f" for slots 0..{slots - 1}" if len(paths) > 1 else "")
        return f"{asked}: {'; '.join(a for a in answers if a) or 'no body'}"
