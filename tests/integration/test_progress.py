"""A long probe is never silent: each request (each agent-load turn) moves the terminal's
progress line -- printed as lines where the output is not a terminal -- and is written to
the Prefect flow run's log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from campaign.store.store import Store
from cli import progress_view
from flows.progress import subscribe
from flows.resolve import load_campaign
from tests.campaigns import arm, campaign_file, item

pytestmark = pytest.mark.integration

CAMPAIGN = campaign_file(
    "talk",
    arms=[arm("A", recipe={"slots": 2})],
    queue=[
        item(
            "load",
            ["A"],
            ["agent-load"],
            title="agent load",
            overrides={
                "conversations": 2,
                "turns": 3,
                "system_tokens": 64,
                "task_tokens": 64,
                "turn_tokens": 32,
                "max_tokens": 8,
                "baseline": False,
            },
        )
    ],
)


def test_each_turn_shows_in_the_terminal_and_in_the_prefect_log(
    tmp_path: Path, prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

    from flows.campaign_flow import campaign_flow

    path = tmp_path / "talk.toml"
    path.write_text(CAMPAIGN)
    spec = load_campaign(path)
    store = Store(f"sqlite:///{tmp_path / 'talk.db'}")
    monkeypatch.setattr(progress_view, "LINE_EVERY_S", 0.0)
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    events: list[dict[str, object]] = []
    unsubscribe = subscribe(lambda kind, data: events.append(data) if kind == "request" else None)
    try:
        with temporary_settings(updates={PREFECT_LOGGING_TO_API_ENABLED: True}):
            with progress_view.CampaignProgress(console, spec):
                campaign_flow(str(path), store.url, str(tmp_path / "w"))
            APILogHandler().flush()
    finally:
        unsubscribe()

    turns = sorted((e["conversation"], e["turn"]) for e in events)
    assert turns == [(c, t) for c in range(2) for t in range(3)]
    printed = out.getvalue()
    for n in range(1, 7):
        assert f"arm A: agent-load @ 0 · {n} request{'s' if n > 1 else ''}" in printed
    assert "conversation 1, turn 3 · ttft " in printed

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_="talk/load/A")))
        assert runs
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[r.id for r in runs])))
    lines = [log.message for log in logs if "agent-load request" in log.message]
    assert len(lines) == 6, [log.message for log in logs]
    assert any(line.startswith("arm A: agent-load request (conversation 0, turn 1) ok, ttft ") for line in lines)
