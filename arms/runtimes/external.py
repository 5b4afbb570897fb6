"""The generic OpenAI-compatible adapter, and the base the real-runtime adapters share.

Why one base: every real runtime here speaks the same chat API and differs only in its
launch flags and in *where* it reports the numbers a probe needs (cached tokens, queue
depth, draft acceptance). The base holds what they share -- model-path placeholders and
identity from /v1/models -- so each runtime module is a table of its differences.

`external` itself launches nothing: it measures a server someone else started (a URL in
the runtime entry). It reads /metrics when there is one and recognises the counter
families of the runtimes it knows (llama.cpp, vLLM, SGLang, the simulator). What it
recognises comes back as a value, the adapter bound to that family (`recognise`); the
adapter itself never changes, the caller keeps what it got back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import httpx

from arms.runtimes import prometheus
from arms.runtimes.base import LaunchContext, RuntimeAdapter
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


def size_string(n_bytes: int) -> str:
    """Bytes as the `8GB` / `512MB` strings MLX-based servers parse (whole units only)."""
    gib, mib = 1024**3, 1024**2
    if n_bytes and n_bytes % gib == 0:
        return f"{n_bytes // gib}GB"
    return f"{max(1, n_bytes // mib)}MB"


@dataclass(frozen=True)
class OpenAICompatAdapter(RuntimeAdapter):
    """What every OpenAI-compatible runtime adapter shares (not registered itself)."""

    def template_values(self, ctx: LaunchContext) -> dict[str, Any]:
        values = super().template_values(ctx)
        values["model"] = model_path(ctx)
        values["model_cache"] = str(model_cache_dir())
        values["workdir"] = str(ctx.workdir)
        return values

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


def model_path(ctx: LaunchContext) -> str:
    return expand_path(ctx.model.path) if ctx.model.path else ctx.model.name


# -- the external adapter ------------------------------------------------------------------

# Adapters whose /metrics families the external adapter recognises on a server it did not start.
FAMILIES = ("llamacpp", "vllm", "sglang", "simulator")
# a placeholder until a /metrics page shows the family (non-empty, so probes ask)
_UNKNOWN_FAMILY_METRICS: Mapping[str, str] = {"queue_depth": "num_requests_waiting"}


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
@dataclass(frozen=True)
class ExternalAdapter(OpenAICompatAdapter):
    """A server started outside the campaign: measured at `runtime.url`, never launched.

    A /metrics page decides which known runtime it is: `recognise(page)` returns this
    adapter bound to that `family`, whose counters, their sources and the preferred
    cached-tokens field it then uses. Unbound, each page read is matched afresh.
    """

    name: ClassVar[str] = "external"
    description: ClassVar[str] = "any OpenAI-compatible server at a URL (nothing is launched)"
    launches: ClassVar[bool] = False
    family: RuntimeAdapter | None = None

    @property  # type: ignore[misc]
    def metric_names(self) -> Mapping[str, str]:  # type: ignore[override]
        return self.family.metric_names if self.family else _UNKNOWN_FAMILY_METRICS

    def recognise(self, metrics_text: str) -> RuntimeAdapter:
        if self.family is not None:
            return self
        family = detect_family(prometheus.parse(metrics_text))
        if family is None:
            return self
        return replace(self, family=family, cached_tokens_field=family.cached_tokens_field)

    def read_metrics(self, text: str) -> dict[str, float]:
        family = self.family or detect_family(prometheus.parse(text))
        return family.read_metrics(text) if family else {}

    def counter_sources(self) -> dict[str, str]:
        return self.family.counter_sources() if self.family else super().counter_sources()

    def counter_unit(self, name: str) -> str:
        return self.family.counter_unit(name) if self.family else super().counter_unit(name)
