"""The generic OpenAI-compatible adapter, and the base the real-runtime adapters share.

Why one base: every real runtime here speaks the same chat API and differs only in its
launch flags and in *where* it reports the numbers a probe needs (cached tokens, queue
depth, draft acceptance). The base holds what they share -- model-path placeholders,
"add this flag unless the template already has it", JSON metrics read by dotted path,
identity from /v1/models -- so each runtime module states only its differences.

`external` itself launches nothing: it measures a server someone else started (a URL in
the runtime entry). It reads /metrics when there is one and recognises the counter
families of the runtimes it knows (llama.cpp, vLLM, SGLang, the simulator).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx

from arms.runtimes import prometheus
from arms.runtimes.base import LaunchContext, LaunchSpec, RuntimeAdapter
from arms.runtimes.registry import register

MODEL_CACHE_ENV = "LLM_CAMPAIGN_MODEL_CACHE"
_PLACEHOLDER = re.compile(r"\{model_cache\}")


def model_cache_dir() -> Path:
    """Where campaign files find model files written for them: `$LLM_CAMPAIGN_MODEL_CACHE`,
    else `~/.cache/llm-campaign`. One directory, so a test session and a campaign run
    share one assembled copy instead of writing a 250 MB file each."""
    override = os.environ.get(MODEL_CACHE_ENV)
    return Path(override).expanduser() if override else Path.home() / ".cache" / "llm-campaign"


def expand_path(text: str) -> str:
    """A model path as written in a campaign file, made concrete.

    `{model_cache}` becomes `model_cache_dir()`, then `$VARS` and `~` expand, so a
    campaign file names a model without naming anybody's home directory.
    """
    text = _PLACEHOLDER.sub(lambda _m: str(model_cache_dir()), text)
    return os.path.expanduser(os.path.expandvars(text))


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


def size_string(n_bytes: int) -> str:
    """Bytes as the `8GB` / `512MB` strings MLX-based servers parse (whole units only)."""
    gib, mib = 1024**3, 1024**2
    if n_bytes and n_bytes % gib == 0:
        return f"{n_bytes // gib}GB"
    return f"{max(1, n_bytes // mib)}MB"


class OpenAICompatAdapter(RuntimeAdapter):
    """What every OpenAI-compatible runtime adapter shares (not registered itself)."""

    # "prometheus" (text exposition) or "json" (metric_names values are dotted paths)
    metrics_format: ClassVar[str] = "prometheus"
    # where the server says what it serves (beyond /v1/models)
    identity_path: ClassVar[str | None] = None

    def template_values(self, ctx: LaunchContext) -> dict[str, Any]:
        values = super().template_values(ctx)
        values["model"] = model_path(ctx)
        values["model_cache"] = str(model_cache_dir())
        values["workdir"] = str(ctx.workdir)
        return values

    def format_argv(self, ctx: LaunchContext, default: Sequence[str]) -> list[str]:
        """The runtime entry's argv template (or `default`), placeholders filled."""
        values = self.template_values(ctx)
        template = list(ctx.runtime.argv) or list(default)
        return [part.format(**values) for part in template]

    def spec(self, ctx: LaunchContext, argv: list[str], env: Mapping[str, str] | None = None) -> LaunchSpec:
        """Finish a launch: the recipe's extra args last, so they can override anything."""
        return LaunchSpec(
            argv=argv + list(ctx.arm.recipe.extra_args),
            env={**dict(env or {}), **dict(ctx.runtime.env)},
            health_path=ctx.runtime.health_path,
            startup_timeout_s=ctx.runtime.startup_timeout_s,
        )

    def read_metrics(self, text: str) -> dict[str, float]:
        if self.metrics_format == "json":
            return json_metrics(text, self.metric_names)
        return super().read_metrics(text)

    def is_ready(self, status_code: int, body: str) -> bool:
        """Whether a health answer means "ready to serve". Most runtimes answer 503 while
        loading; some answer 200 with a status field, and override this."""
        return status_code == 200

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        """Per-request counters a response carries (draft/accepted tokens), by logical name.

        Runtimes without a /metrics endpoint still report speculation per request; this
        is where a probe finds it. Empty where the runtime reports none.
        """
        return {}

    def identity_extras(self, base_url: str, timeout: float = 5.0) -> dict[str, Any]:
        """What the server says about its model beyond the served id (path, size, context).

        Read once per arm, so a synchronous call is fine; never raises (errors land in
        `error`), because a missing identity endpoint must not fail a measurement.
        """
        out: dict[str, Any] = {}
        try:
            with httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout) as http:
                models = http.get("/v1/models")
                if models.status_code == 200:
                    data = models.json().get("data") or []
                    out["served_models"] = [m.get("id", "") for m in data if isinstance(m, dict)]
                    first = next((m for m in data if isinstance(m, dict)), {})
                    for key in ("max_model_len", "root", "owned_by"):
                        if key in first:
                            out[key] = first[key]
                    if isinstance(first.get("meta"), Mapping):
                        out["model_meta"] = dict(first["meta"])
                if self.identity_path:
                    extra = http.get(self.identity_path)
                    if extra.status_code == 200:
                        out.update(self.parse_identity(extra.json()))
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            out["error"] = f"identity: {type(exc).__name__}: {exc}"
        return out

    def parse_identity(self, doc: Any) -> dict[str, Any]:
        """The interesting fields of the runtime's own identity endpoint."""
        return {}


def model_path(ctx: LaunchContext) -> str:
    return expand_path(ctx.model.path) if ctx.model.path else ctx.model.name


# -- the external adapter ------------------------------------------------------------------

# Adapters whose /metrics families the external adapter recognises on a server it did not start.
FAMILIES = ("llamacpp", "vllm", "sglang", "simulator")


def detect_family(raw: Mapping[str, float]) -> RuntimeAdapter | None:
    """The known runtime whose metric names match most of what a /metrics page shows."""
    from arms.runtimes import registry  # late: the family modules import this one

    best, best_hits = None, 0
    for family in FAMILIES:
        adapter = registry.get(family)
        hits = sum(1 for name in adapter.metric_names.values() if name in raw)
        if hits > best_hits:
            best, best_hits = adapter, hits
    return best


@register
class ExternalAdapter(OpenAICompatAdapter):
    """A server started outside the campaign: measured at `runtime.url`, never launched.

    The first /metrics page read decides which known runtime it is; from then on its
    counters, their sources and the preferred cached-tokens field are that runtime's.
    """

    name: ClassVar[str] = "external"
    description: ClassVar[str] = "any OpenAI-compatible server at a URL (nothing is launched)"
    cached_tokens_field: ClassVar[str] = "usage.prompt_tokens_details.cached_tokens"
    # a placeholder until a /metrics page shows the family (non-empty, so probes ask)
    metric_names: ClassVar[Mapping[str, str]] = {"queue_depth": "num_requests_waiting"}

    def __init__(self) -> None:
        self.family: RuntimeAdapter | None = None

    def launch(self, ctx: LaunchContext) -> LaunchSpec | None:
        if not ctx.runtime.url:
            raise ValueError(
                f"runtime {ctx.runtime.name!r} uses the external adapter, which launches nothing: set its url"
            )
        return None

    def read_metrics(self, text: str) -> dict[str, float]:
        if self.family is None:
            self.family = detect_family(prometheus.parse(text))
            if self.family is None:
                return {}
            self.metric_names = dict(self.family.metric_names)
            self.cached_tokens_field = self.family.cached_tokens_field
        return self.family.read_metrics(text)

    def counter_sources(self) -> dict[str, str]:
        return self.family.counter_sources() if self.family else super().counter_sources()

    def counter_unit(self, name: str) -> str:
        return self.family.counter_unit(name) if self.family else super().counter_unit(name)
