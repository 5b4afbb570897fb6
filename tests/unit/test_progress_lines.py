"""The lines the campaign and arm flow runs carry in their Prefect log (`flows.progress.describe`)."""

from __future__ import annotations

from flows.progress import describe


def test_each_event_worth_reading_has_one_line_and_the_rest_none() -> None:
    assert describe("campaign-start", {"name": "c", "items": 1, "artifact": "c-queue"}) == (
        "campaign c: 1 queue item (the queue table: this run's Artifacts tab, key c-queue)"
    )
    assert describe("campaign-start", {"name": "c", "items": 3, "artifact": "c-queue"}).startswith(
        "campaign c: 3 queue items"
    )
    assert (
        describe("item-done", {"item": "k", "state": "failed", "reason": "A: 3/3 requests failed"})
        == "item k failed: A: 3/3 requests failed"
    )
    assert describe("item-done", {"item": "k", "state": "done", "reason": ""}) == "item k done"
    assert describe(
        "request", {"arm": "A", "probe": "agent-load", "ok": False, "error": "HTTP 400", "turn": 0, "conversation": 2}
    ) == ("arm A: agent-load request (conversation 2, turn 1) failed (HTTP 400)")
    assert describe("verdict", {"gate": "g", "verdict": "pass", "reason": "r"}) == "gate g: pass (r)"
    assert describe("tick", {}) is None
