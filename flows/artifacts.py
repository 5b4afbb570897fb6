"""Prefect artifacts: the queue as a table, a markdown verdict per gate, a link to the report.

Artifacts are how the Prefect UI shows the campaign; they are observations of the store,
so a failure to publish one is logged and never breaks a measurement.
"""

from __future__ import annotations

import logging
import re

from campaign.store.store import Store
from campaign.store.summary import summarize

log = logging.getLogger(__name__)


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    key = "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts if p)
    return re.sub(r"-+", "-", key).strip("-") or "campaign"


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
        create_table_artifact(table=table, key=artifact_key(name, "queue"), description=f"Campaign queue of {s.title}")
        for gate in s.gates:
            if gate.verdict == "pending":
                continue
            arms = "/".join(gate.subjects) + (f" vs {'/'.join(gate.baseline)}" if gate.baseline else "")
            md = f"### Gate {gate.id}: {gate.title}\n\n**{gate.verdict}** ({arms})\n\n{gate.reason}\n"
            md += runs_read(store, s.campaign_id, [*gate.subjects, *gate.baseline])
            create_markdown_artifact(
                markdown=md, key=artifact_key(name, "gate", gate.id), description=f"{gate.id}: {gate.verdict}"
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
