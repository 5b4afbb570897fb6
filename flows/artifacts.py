"""Prefect artifacts: the queue as a table, a markdown verdict per gate, a link to the report.

Artifacts are how the Prefect UI shows the campaign; they are observations of the store,
so a failure to publish one is logged and never breaks a measurement. The campaign asks
for them after every group of items, and most have not changed since: an artifact is
published only when its content differs from what this process last published under its
key to the same server, so the UI's versions of an artifact are its changes, and an
unchanged one costs no call.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from campaign.store.store import Store
from campaign.store.summary import summarize

log = logging.getLogger(__name__)


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    key = "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts if p)
    return re.sub(r"-+", "-", key).strip("-") or "campaign"


_published: dict[tuple[str, str], str] = {}  # (API URL, artifact key) -> the content last published there


def _publish_changed(key: str, content: str, create: Callable[..., object], **fields: Any) -> None:
    """`create(key=key, **fields)` unless `content` is what this process last published
    under `key` to the configured server (a temporary one: "")."""
    from flows.prefect_api import configured_api_url

    where = (configured_api_url() or "", key)
    if _published.get(where) == content:
        return
    create(key=key, **fields)
    _published[where] = content


def publish(store: Store, name: str) -> None:
    try:
        from prefect.artifacts import create_markdown_artifact, create_table_artifact

        s = summarize(store, name)
        table = [
            {
                "#": i,
                "item": it.title,
                "arms": "/".join(it.arms),
                "gate": it.gate or "",
                "state": it.state,
                "attempts": it.attempts,
                "note": it.reason,
            }
            for i, it in enumerate(s.items, 1)
        ]
        key = artifact_key(name, "queue")
        _publish_changed(
            key, repr(table), create_table_artifact, table=table, description=f"Campaign queue of {s.title}"
        )
        for gate in s.gates:
            if gate.verdict == "pending":
                continue
            arms = "/".join(gate.subjects) + (f" vs {'/'.join(gate.baseline)}" if gate.baseline else "")
            md = f"### Gate {gate.id}: {gate.title}\n\n**{gate.verdict}** ({arms})\n\n{gate.reason}\n"
            md += runs_read(store, s.campaign_id, [*gate.subjects, *gate.baseline])
            about = f"{gate.id}: {gate.verdict}"
            _publish_changed(
                artifact_key(name, "gate", gate.id), md, create_markdown_artifact, markdown=md, description=about
            )
    except Exception as exc:  # observation only
        log.warning("could not publish Prefect artifacts: %s", exc)


def runs_read(store: Store, campaign_id: int, arms: list[str]) -> str:
    """The flow runs of the arms' finished attempts, as links the Prefect UI opens: where
    the blocks a verdict read were measured."""
    from campaign.core.states import AttemptState

    links = [
        f"[{a.arm_id} block {a.repeat + 1}](/runs/flow-run/{a.flow_run_id})"
        for a in store.attempts(campaign_id)
        if a.arm_id in arms and a.state == AttemptState.DONE and a.flow_run_id
    ]
    return f"\nRead from the flow runs: {', '.join(links)}\n" if links else ""


def publish_report_link(name: str, index_path: str) -> None:
    try:
        from prefect.artifacts import create_link_artifact

        create_link_artifact(
            link=f"file://{index_path}", link_text="HTML verdict report", key=artifact_key(name, "report")
        )
    except Exception as exc:
        log.warning("could not publish the report link: %s", exc)
