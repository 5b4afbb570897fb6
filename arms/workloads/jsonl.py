"""The JSON-lines files a workload reads (traces, recorded sessions, datasets): read,
split into numbered lines and parsed, each failure naming the file and the line, in the
error type of the format that asked. One reader, so the three formats refuse a bad file
in the same words.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_text(path: Path, what: str, error: type[ValueError]) -> str:
    """The file's text, or `error` saying it cannot read the `what`."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc})") from exc


def json_lines(path: Path, text: str, error: type[ValueError]) -> list[tuple[int, Any]]:
    """(line number, value) for every non-blank line, or `error` naming the line that is
    not JSON."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})") from exc
    return rows
