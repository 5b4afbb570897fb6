"""Prefect as its users expect it, against a real `prefect server start`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from campaign.core.states import AttemptState
from campaign.store.store import Store
from campaign.store.summary import PREFECT_API_EVENT
from campaign.store.tables import EventRow
from tests.paths import ROOT
from tests.prefectparts import env as _env
from tests.prefectparts import stop as _stop
from tests.prefectparts import wait_for as _wait_for
from tests.prefectparts import worker as _worker
from tests.unit.test_prefect_ux import (  # noqa: F401 - helpers and fixtures
    _flow_runs,
    _status,
    no_worker,
    two_arms,
)


def test_the_campaign_deployment_launches_a_campaign_named_in_the_store_and_reruns_it(
    tmp_path: Path,
    prefect_server: str,
    postgres_cluster,  # type: ignore[no-untyped-def]
) -> None:
    """What the UI's "Run" on `campaign/campaign-h1` does: typed parameters naming a
    campaign kept in the shared database (its file is not on the worker's host), the
    same queue walk as `campaign run`, verdicts in the store. A second run (the UI's
    rerun) finds everything done and measures nothing again."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from campaign.store import queue
    from flows.resolve import load_campaign

    db = postgres_cluster.create_database("launched")
    path = tmp_path / "elsewhere" / "c.toml"
    path.parent.mkdir()
    path.write_text(two_arms("launched", gated=True))  # arms run in the launched run, on h1
    store = Store(db)
    queue.register(store, load_campaign(path), str(path))
    path.unlink()  # only the database knows the campaign now
    worker, log = _worker(tmp_path, prefect_server, db, "h1")
    try:
        _wait_for("the worker's start line", lambda: "campaign/campaign-h1" in log.read_text())
        _wait_for(
            "the campaign deployment",
            lambda: httpx.get(f"{prefect_server}/deployments/name/campaign/campaign-h1", timeout=5).status_code == 200,
        )
        launch = {"launch": {"campaign": "launched", "workdir": str(tmp_path / "w")}}
        with temporary_settings(updates={PREFECT_API_URL: prefect_server}):
            first = run_deployment("campaign/campaign-h1", parameters=launch, timeout=120)
            assert first.state is not None and first.state.is_completed(), (first.state, log.read_text())
            camp = store.campaign("launched")
            assert camp is not None and camp.id is not None
            verdict = store.latest_verdicts(camp.id)["faster"]
            assert verdict.verdict == "pass", verdict.reason  # B (400 tok/s) beats A (40), over 3 blocks
            assert "paired over 3 blocks" in verdict.reason, verdict.reason
            attempts = store.attempts(camp.id)
            assert sorted((a.arm_id, a.repeat, a.state, a.host) for a in attempts) == [
                (arm, repeat, "done", "h1") for arm in ("A", "B") for repeat in range(3)
            ]
            again = run_deployment("campaign/campaign-h1", parameters=launch, timeout=120)
            assert again.state is not None and again.state.is_completed(), again.state
    finally:
        _stop(worker)
    assert [a.id for a in store.attempts(camp.id)] == [a.id for a in attempts]  # the rerun measured nothing twice
    runs = _flow_runs(prefect_server, "campaign:launched")
    for att in attempts:  # the arms ran as subflows of the launched campaign run
        assert runs[att.flow_run_id]["parent_task_run_id"], "not a subflow of the campaign run"
    lines = _status(tmp_path, prefect_server, db)
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    ui = prefect_server.removesuffix("/api")
    text = "\n".join(lines)
    newest = {att.arm_id: att for att in attempts}  # status lists the newest attempt of each arm
    for att in newest.values():
        assert f"one/{att.arm_id} #{att.id} done on h1" in text
        assert f"{ui}/runs/flow-run/{att.flow_run_id}" in text, text


def test_in_process_arms_send_their_logs_and_heartbeats_to_a_configured_server(
    tmp_path: Path, prefect_server: str
) -> None:
    """`campaign run` against a lasting server, arms without a host (run in-process):
    the arm's progress lines are in the server's log of its flow run, and, where the user
    set Prefect's heartbeat frequency (they are off otherwise: `cli.commands`), the run
    beat its heart there. (A temporary server gets neither: it is gone with the run.)"""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    db = f"sqlite:///{tmp_path / 'c.db'}"
    path = tmp_path / "c.toml"
    path.write_text(two_arms("logged"))
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
        env={**_env(tmp_path, prefect_server, db, "run"), "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    store = Store(db)
    camp = store.campaign("logged")
    assert camp is not None and camp.id is not None
    arm_a = next(a for a in store.attempts(camp.id) if a.arm_id == "A")
    with temporary_settings(updates={PREFECT_API_URL: prefect_server}), get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[arm_a.flow_run_id])))
    messages = [entry.message for entry in logs]
    assert "arm A: decode @ 1024 started" in messages, messages
    assert "arm A: decode @ 1024 done" in messages, messages

    def beats() -> list:  # type: ignore[type-arg]
        since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
        body = {
            "filter": {
                "occurred": {"since": since},
                "event": {"name": ["prefect.flow-run.heartbeat"]},
                "resource": {"id": [f"prefect.flow-run.{arm_a.flow_run_id}"]},
            },
            "limit": 10,
        }
        return httpx.post(f"{prefect_server}/events/filter", json=body, timeout=10).json().get("events", [])

    assert _wait_for("the arm's heartbeat event", beats, timeout=30)


def test_an_arm_no_worker_picks_up_ends_blocked_and_the_campaign_goes_on(tmp_path: Path, prefect_server: str) -> None:
    """Host `gone` had a worker once (its deployment is there) but none runs now: its
    arm's flow run stays Scheduled. After $CAMPAIGN_WORKER_WAIT_S the run is cancelled,
    the attempt ends blocked on `gone` naming the worker to start, and the next item
    runs."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    path = tmp_path / "c.toml"
    path.write_text(no_worker("deadhost"))
    env = {**_env(tmp_path, prefect_server, db, "run"), "CAMPAIGN_WORKER_WAIT_S": "4"}
    subprocess.run(  # what a worker that died leaves behind: its deployment, nobody polling it
        [sys.executable, "-c", "from flows.arm_flow import arm_flow; arm_flow.to_deployment(name='arm-gone').apply()"],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    began = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert time.monotonic() - began < 90
    store = Store(db)
    camp = store.campaign("deadhost")
    assert camp is not None and camp.id is not None
    items = {i.key: i for i in store.items(camp.id)}
    assert (items["far"].state, items["near"].state) == ("blocked", "done")
    assert "no worker for host gone picked up the arm within 4 s" in items["far"].reason
    assert "campaign worker --host gone" in items["far"].reason
    far = store.attempts(camp.id, "far")
    assert [(a.state, a.host) for a in far] == [(AttemptState.BLOCKED, "gone")]
    assert "campaign worker --host gone" in far[0].error
    cancelled = _flow_runs(prefect_server, "campaign:deadhost")
    assert [r["state_type"] for r in cancelled.values() if "arm:R" in r["tags"]] == ["CANCELLED"]


def test_status_lists_each_arms_flow_run_within_80_columns(tmp_path: Path) -> None:
    """At 80 columns a URL goes on a line of its own, never cut, after the line naming
    the arm, its attempt and host; without a configured Prefect server, status says
    nothing about flow runs."""
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    from campaign.store import queue
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(two_arms("wide"))
    cid = queue.register(store, load_campaign(path), str(path)).id
    assert cid is not None
    store.add(
        EventRow(
            campaign_id=cid,
            kind=PREFECT_API_EVENT,
            message="http://server-host:4200/api",
            at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    )
    ids = {}
    for arm, host in (("A", "h1"), ("B", "a-rather-long-host-name.lab.example.org")):
        att = store.new_attempt(cid, "one", arm, {})
        ids[arm] = f"0f0e0d0c-0b0a-4908-8706-05040302010{len(ids)}"
        store.update(type(att), att.id, state="done", flow_run_id=ids[arm], host=host, ended_at=datetime.now(UTC))
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), "PREFECT_API_URL": "http://server-host:4200/api"}
    env.pop("PREFECT_UI_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "cli", "status", "--db", str(tmp_path / "c.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, out.stdout
    runs = lines[lines.index("Flow runs (newest attempt of each arm)") + 1 :]
    assert [line.strip() for line in runs] == [
        "one/A #1 done on h1:",
        f"http://server-host:4200/runs/flow-run/{ids['A']}",
        "one/B #2 done on a-rather-long-host-name.lab.example.org:",
        f"http://server-host:4200/runs/flow-run/{ids['B']}",
    ], out.stdout
    env["PREFECT_API_URL"] = ""
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # an empty profile: no server configured
    out = subprocess.run(
        [sys.executable, "-m", "cli", "status", "--db", str(tmp_path / "c.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Flow runs" not in out.stdout and "flow-run/" not in out.stdout
