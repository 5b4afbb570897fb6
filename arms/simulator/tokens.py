"""The simulator's toy tokenizer and chat template.

A token is a whitespace-separated word. The template is built so that a conversation
sent back by a client renders to a prompt that *begins with exactly the tokens its slot
holds* (the previous prompt plus the generated words): that property is what lets the
engine model slot affinity and prefix reuse the way llama.cpp does, and lets probes
compute the expected reuse through `/tokenize`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

END = "<|end|>"
GENERATION_PROMPT = "<|assistant|>"
CALL_PREFIX = "<|call:"


def count_tokens(text: str) -> int:
    """Number of tokens in plain text (the word count)."""
    return len(text.split())


def content_text(content: Any) -> str:
    """Flatten OpenAI message content (a string, None, or a list of text parts) to text.

    Non-text parts (images, audio) contribute nothing: the simulator has no encoder.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type", "text") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
        return " ".join(texts)
    raise ValueError(f"unsupported message content of type {type(content).__name__}")


def call_token(name: str, arguments: Any) -> str:
    """One token standing for one tool call: name plus canonical, space-free JSON arguments.

    `arguments` may be the OpenAI wire form (a JSON string) or already parsed; both render
    identically so a call the simulator emitted and the client echoed back matches.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    encoded = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    # Keep it a single token even when a string value contains whitespace.
    encoded = "".join(encoded.split())
    return f"{CALL_PREFIX}{name}:{encoded}|>"


def tool_tokens(tools: Iterable[Any] | None) -> list[str]:
    """One token per declared tool, placed before the messages (like a system preamble)."""
    out: list[str] = []
    for tool in tools or []:
        if not isinstance(tool, Mapping):
            raise ValueError("each tool must be an object")
        fn = tool.get("function", tool)
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError("each tool needs a function name")
        out.append(f"<|tool:{name}|>")
    return out


def render_message(message: Mapping[str, Any]) -> list[str]:
    """Tokens of one chat message: role marker, content words, tool-call tokens, end marker."""
    if not isinstance(message, Mapping):
        raise ValueError("each message must be an object")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError("each message needs a role")
    tokens = [f"<|{role}|>"] + content_text(message.get("content")).split()
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("each tool call needs a function name")
        tokens.append(call_token(name, fn.get("arguments", {})))
    tokens.append(END)
    return tokens


def render_prompt(messages: Sequence[Mapping[str, Any]], tools: Iterable[Any] | None = None) -> list[str]:
    """The full prompt of a chat request, ending with the generation prompt `<|assistant|>`."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise ValueError("messages must be a list")
    tokens = tool_tokens(tools)
    for message in messages:
        tokens.extend(render_message(message))
    tokens.append(GENERATION_PROMPT)
    return tokens
