"""Raw request records: one .jsonl per arm beside its page, and a few answers to show.

Why keep them downloadable: every metric is recomputable from the raw record (send time,
each event's first-byte time, usage, timings), so a reader who doubts a number can redo
it. All attempts are written, not only the newest, each line saying which attempt it
came from and whether its probe run finished (a run cut short by a crash keeps the rows
it stored; resume measured it again as a new run). The model's answers shown on the page
are escaped like every other value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sqlalchemy import text

from campaign.store.store import Store

_SQL = text(
    """
SELECT a.arm_id, a.item_key, a.id AS attempt_id, a.number, a.state AS attempt_state,
       p.id AS probe_run_id, p.state AS probe_run_state, p.probe, p.context,
       r.id, r.scenario, r.mode, r.trial, r.ok, r.error, r.raw_json
FROM request_record r
JOIN probe_run p ON p.id = r.probe_run_id
JOIN attempt a ON a.id = p.attempt_id
WHERE a.campaign_id = :cid
ORDER BY a.arm_id, r.id
"""
)
ANSWERS_PER_ARM = 12
ANSWER_CHARS = 240


@dataclass
class Answer:
    probe: str
    scenario: str
    mode: str
    attempt: int
    ok: bool
    text: str
    error: str


@dataclass
class RawFiles:
    """Per arm: the .jsonl file name (relative to the arm pages), how many records it
    holds, and sample answers."""

    files: dict[str, str]
    counts: dict[str, int]
    answers: dict[str, list[Answer]]


def write(store: Store, campaign_id: int, folder: Path, names: dict[str, str]) -> RawFiles:
    """Stream every request record of the campaign into `<folder>/<arm page>.requests.jsonl`."""
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    counts: dict[str, int] = {}
    answers: dict[str, list[Answer]] = {}
    seen: set[tuple[str, str, str, str]] = set()
    handle: IO[str] | None = None
    current = None
    try:
        with store.engine.connect() as conn:
            result = conn.execution_options(stream_results=True).execute(_SQL, {"cid": campaign_id})
            for row in result:
                arm_id = row.arm_id
                if arm_id not in names:
                    continue
                if arm_id != current:
                    if handle:
                        handle.close()
                    current = arm_id
                    files[arm_id] = f"{names[arm_id]}.requests.jsonl"
                    handle = (folder / files[arm_id]).open("w", encoding="utf-8")
                    counts[arm_id] = 0
                raw = row.raw_json or "{}"
                head = json.dumps(
                    {
                        "arm": arm_id,
                        "item": row.item_key,
                        "attempt_id": row.attempt_id,
                        "attempt": row.number,
                        "attempt_state": row.attempt_state,
                        "probe_run_id": row.probe_run_id,
                        "probe_run_state": row.probe_run_state,
                        "probe": row.probe,
                        "context": row.context,
                        "request_id": row.id,
                        "scenario": row.scenario,
                        "mode": row.mode,
                        "trial": row.trial,
                        "ok": bool(row.ok),
                        "error": row.error,
                    },
                    separators=(",", ":"),
                )
                record = raw if raw.lstrip().startswith("{") else json.dumps(raw)
                assert handle is not None
                line = head[:-1] + ',"record":' + record + "}\n"
                # same JSON, but inert even if something sniffs the file as HTML
                handle.write(line.replace("<", "\\u003c").replace(">", "\\u003e"))
                counts[arm_id] += 1
                key = (arm_id, row.probe, row.scenario, row.mode)
                mine = answers.setdefault(arm_id, [])
                if key not in seen and len(mine) < ANSWERS_PER_ARM:
                    seen.add(key)
                    mine.append(_answer(row, raw))
    finally:
        if handle:
            handle.close()
    return RawFiles(files, counts, answers)


def _answer(row: object, raw: str) -> Answer:
    try:
        data = json.loads(raw)
    except ValueError:
        data = {}
    content = str(data.get("text") or data.get("reasoning") or "") if isinstance(data, dict) else ""
    if not content and isinstance(data, dict) and data.get("tool_calls"):
        content = "tool calls: " + json.dumps(data["tool_calls"])[:ANSWER_CHARS]
    if len(content) > ANSWER_CHARS:
        content = content[: ANSWER_CHARS - 1] + "…"
    return Answer(
        probe=row.probe,
        scenario=row.scenario,
        mode=row.mode,
        attempt=row.number,  # type: ignore[attr-defined]
        ok=bool(row.ok),
        text=content,
        error=row.error,  # type: ignore[attr-defined]
    )
