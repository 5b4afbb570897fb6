"""Prompt datasets: a local ShareGPT-style file as a load's prompts and output lengths.

The shape vLLM's and GuideLLM's benchmarks read: a JSON list, or JSONL with one object a
line, each with `conversations`, a list of turns `{"from": "human" | "gpt" | "system",
"value": text}` (OpenAI-style `messages` with `role` and `content` are read too). A record
gives its system turn and first human turn as the prompt, and the length of the reply
that follows as the output length, in words (about a token each: the file carries text,
not a tokenizer's count). A record without a human turn followed by a reply is skipped
and counted, as the benchmarks do; a file that is not that shape is refused naming the
file, the record and the field.

A leaf of the domain core: plain values, no I/O beyond the file named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arms.workloads.jsonl import json_lines, read_text

ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}


class DatasetError(ValueError):
    """A dataset file that cannot be read: the file, the record and what was expected."""


@dataclass(frozen=True)
class DatasetPrompt:
    """One usable record: the messages to send and the reply's length in words."""

    messages: tuple[tuple[str, str], ...]  # (role, content)
    output_words: int

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass(frozen=True)
class Dataset:
    prompts: tuple[DatasetPrompt, ...]
    skipped: int  # records without a human turn and a reply after it


def _records(path: Path, text: str) -> list[tuple[str, Any]]:
    """(where, record) pairs: `record 3` in a JSON list, `line 3` in JSONL."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
        return [(f"record {i}", row) for i, row in enumerate(rows)]
    return [(f"line {number}", row) for number, row in json_lines(path, text, DatasetError)]


def _turns(path: Path, where: str, row: Any) -> list[tuple[str, str]]:
    if not isinstance(row, dict):
        raise DatasetError(
            f"{path}: {where}: expected an object with conversations (or messages), found {type(row).__name__}"
        )
    turns = row.get("conversations", row.get("messages"))
    if not isinstance(turns, list):
        raise DatasetError(
            f"{path}: {where}: expected conversations, a list of {{from, value}} turns (or messages of {{role, content}})"
        )
    out = []
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise DatasetError(f"{path}: {where}: turn {k}: expected an object, found {type(turn).__name__}")
        speaker = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        if not isinstance(speaker, str) or not isinstance(text, str):
            raise DatasetError(f"{path}: {where}: turn {k}: expected from and value as text (or role and content)")
        role = ROLES.get(speaker.lower())
        if role is None:
            raise DatasetError(
                f"{path}: {where}: turn {k}: speaker {speaker!r}; expected one of {', '.join(sorted(ROLES))}"
            )
        out.append((role, text))
    return out


def read_dataset(path: str | Path) -> Dataset:
    """Every usable prompt of a ShareGPT-style file, in file order."""
    source = Path(path)
    text = read_text(source, "dataset", DatasetError)
    prompts, skipped = [], 0
    for where, row in _records(source, text):
        turns = _turns(source, where, row)
        system = [t for t in turns[:1] if t[0] == "system"]
        rest = turns[len(system) :]
        if (
            len(rest) < 2
            or rest[0][0] != "user"
            or rest[1][0] != "assistant"
            or not rest[0][1].strip()
            or not rest[1][1].split()
        ):
            skipped += 1
            continue
        prompts.append(DatasetPrompt(tuple(system + [rest[0]]), len(rest[1][1].split())))
    if not prompts:
        raise DatasetError(
            f"{source}: no usable prompt ({skipped} record(s) without a human turn and a reply after it)"
        )
    return Dataset(tuple(prompts), skipped)
