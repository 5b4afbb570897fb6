"""Prefect as its users expect it, against a real `prefect server start`
(tests/test_multihost.py's fixtures): the `campaign` deployment a worker serves, which
the UI launches and reruns; run logs and heartbeats of in-process arms on the server;
`campaign status` linking each arm's newest attempt to its flow run; and a host with no
worker ending its arm blocked instead of holding the campaign."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from campaign.states import AttemptState
from campaign.store import EventRow, Store
from campaign.summary import PREFECT_API_EVENT, attempt_links
from tests.prefectparts import env as _env
from tests.prefectparts import stop as _stop
from tests.prefectparts import wait_for as _wait_for
from tests.prefectparts import worker as _worker

ROOT = Path(__file__).resolve().parent.parent

TWO_ARMS = """
[campaign]
name = "{name}"
default_max_tokens = 16

[[models]]
name = "m"
quant = "q4"
bits_per_weight = 4.5

[[runtimes]]
name = "slow"
adapter = "simulator"
{host}
[runtimes.options.profile]
prefill_tps = 20000.0
decode_tps = 300.0

[[runtimes]]
name = "fast"
adapter = "simulator"
{host}
[runtimes.options.profile]
prefill_tps = 20000.0
decode_tps = 600.0

[[arms]]
id = "A"
model = "m"
runtime = "slow"
context = 4096

[[arms]]
id = "B"
model = "m"
runtime = "fast"
context = 4096

[[gates]]
id = "faster"
predicate = "relative_improvement"
params = {{ metric = "decode_tps", probe = "decode", min_gain = 0.10 }}
subjects = ["B"]
baseline = ["A"]

[[queue]]
id = "one"
title = "B against A"
arms = ["A", "B"]
probes = ["decode"]
contexts = [1024]
gate = "faster"
"""

# TWO_ARMS gated for a verdict: two blocks (each arm gets two server starts) and a gate
# that decides over two runs per arm (its default asks for three); a 2x gain with the
# simulator's small spread is decided by a paired t with one degree of freedom
GATED_TWO_ARMS = TWO_ARMS.replace("min_gain = 0.10 }}", "min_gain = 0.10, min_runs = 2 }}").replace(
    'gate = "faster"\n', 'gate = "faster"\nrepeats = 2\n'
)
assert GATED_TWO_ARMS.count("repeats = 2") == 1 and GATED_TWO_ARMS.count("min_runs = 2") == 1


def _flow_runs(api: str, tag: str) -> dict[str, dict]:
    runs = httpx.post(f"{api}/flow_runs/filter", json={"flow_runs": {"tags": {"all_": [tag]}}}, timeout=10).json()
    return {r["id"]: r for r in runs}


def _status(tmp_path: Path, api: str, db: str) -> list[str]:
    env = {**_env(tmp_path, api, db, "status"), "COLUMNS": "80"}
    out = subprocess.run([sys.executable, "-m", "cli", "status"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_campaign_deployment_launches_a_campaign_named_in_the_store_and_reruns_it(
    tmp_path: Path, prefect_server: str, postgres_cluster  # type: ignore[no-untyped-def]
) -> None:
    """What the UI's "Run" on `campaign/campaign-h1` does: typed parameters naming a
    campaign kept in the shared database (its file is not on the worker's host), the
    same queue walk as `campaign run`, verdicts in the store. A second run (the UI's
    rerun) finds everything done and measures nothing again."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from campaign import queue
    from flows.resolve import load_campaign

    db = postgres_cluster.create_database("launched")
    path = tmp_path / "elsewhere" / "c.toml"
    path.parent.mkdir()
    path.write_text(GATED_TWO_ARMS.format(name="launched", host=""))  # arms run in the launched run, on h1
    store = Store(db)
    queue.register(store, load_campaign(path), str(path))
    path.unlink()  # only the database knows the campaign now
    worker, log = _worker(tmp_path, prefect_server, db, "h1")
    try:
        _wait_for("the worker's start line", lambda: "campaign/campaign-h1" in log.read_text())
        _wait_for("the campaign deployment", lambda: httpx.get(f"{prefect_server}/deployments/name/campaign/campaign-h1", timeout=5).status_code == 200)
        launch = {"launch": {"campaign": "launched", "workdir": str(tmp_path / "w")}}
        with temporary_settings(updates={PREFECT_API_URL: prefect_server}):
            first = run_deployment("campaign/campaign-h1", parameters=launch, timeout=120)
            assert first.state is not None and first.state.is_completed(), (first.state, log.read_text())
            camp = store.campaign("launched")
            assert camp is not None and camp.id is not None
            verdict = store.latest_verdicts(camp.id)["faster"]
            assert verdict.verdict == "pass", verdict.reason  # B (600 tok/s) beats A (300), over 2 blocks
            assert "paired over 2 blocks" in verdict.reason, verdict.reason
            attempts = store.attempts(camp.id)
            assert sorted((a.arm_id, a.repeat, a.state, a.host) for a in attempts) == [
                ("A", 0, "done", "h1"), ("A", 1, "done", "h1"), ("B", 0, "done", "h1"), ("B", 1, "done", "h1")
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
    the arm's progress lines are in the server's log of its flow run, and the run beat
    its heart there. (A temporary server gets neither: it is gone with the run.)"""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    db = f"sqlite:///{tmp_path / 'c.db'}"
    path = tmp_path / "c.toml"
    path.write_text(TWO_ARMS.format(name="logged", host=""))
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
        env=_env(tmp_path, prefect_server, db, "run"), cwd=tmp_path, capture_output=True, text=True, timeout=180,
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
        body = {"filter": {"occurred": {"since": since}, "event": {"name": ["prefect.flow-run.heartbeat"]},
                           "resource": {"id": [f"prefect.flow-run.{arm_a.flow_run_id}"]}}, "limit": 10}
        return httpx.post(f"{prefect_server}/events/filter", json=body, timeout=10).json().get("events", [])

    assert _wait_for("the arm's heartbeat event", beats, timeout=30)


NO_WORKER = """
[campaign]
name = "{name}"
default_max_tokens = 16

[[models]]
name = "m"
quant = "q4"
bits_per_weight = 4.5

[[runtimes]]
name = "remote"
adapter = "simulator"
host = "gone"

[[runtimes]]
name = "here"
adapter = "simulator"

[[arms]]
id = "R"
model = "m"
runtime = "remote"
context = 4096

[[arms]]
id = "L"
model = "m"
runtime = "here"
context = 4096

[[queue]]
id = "far"
title = "an arm on a host whose worker died"
arms = ["R"]
probes = ["decode"]
contexts = [1024]

[[queue]]
id = "near"
title = "an arm here"
arms = ["L"]
probes = ["decode"]
contexts = [1024]
"""


def test_an_arm_no_worker_picks_up_ends_blocked_and_the_campaign_goes_on(
    tmp_path: Path, prefect_server: str
) -> None:
    """Host `gone` had a worker once (its deployment is there) but none runs now: its
    arm's flow run stays Scheduled. After $CAMPAIGN_WORKER_WAIT_S the run is cancelled,
    the attempt ends blocked on `gone` naming the worker to start, and the next item
    runs."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    path = tmp_path / "c.toml"
    path.write_text(NO_WORKER.format(name="deadhost"))
    env = {**_env(tmp_path, prefect_server, db, "run"), "CAMPAIGN_WORKER_WAIT_S": "4"}
    subprocess.run(  # what a worker that died leaves behind: its deployment, nobody polling it
        [sys.executable, "-c", "from flows.arm_flow import arm_flow; arm_flow.to_deployment(name='arm-gone').apply()"],
        env=env, cwd=tmp_path, check=True, capture_output=True, timeout=120,
    )
    began = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
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


def test_attempt_links_name_the_host_and_link_only_runs_on_a_lasting_server(tmp_path: Path) -> None:
    """Which server an attempt's flow run is on is what the run that ended it recorded;
    a temporary server gives no link (its pages are gone), a lasting one gives
    `<ui>/runs/flow-run/<id>`, and PREFECT_UI_URL, when given, is the UI linked to."""
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    from campaign import queue
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(TWO_ARMS.format(name="links", host=""))
    cid = queue.register(store, load_campaign(path), str(path)).id
    assert cid is not None
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store.add(EventRow(campaign_id=cid, kind=PREFECT_API_EVENT, message="", at=t0))  # a temporary server
    old = store.new_attempt(cid, "one", "A", {})
    store.update(type(old), old.id, state="done", flow_run_id="run-old", ended_at=t0 + timedelta(minutes=1))
    store.add(EventRow(campaign_id=cid, kind=PREFECT_API_EVENT, message="http://srv:4200/api", at=t0 + timedelta(minutes=2)))
    new = store.new_attempt(cid, "one", "A", {})
    store.update(type(new), new.id, state="done", flow_run_id="run-new", host="h9", ended_at=t0 + timedelta(minutes=3))
    links = attempt_links(store, cid)
    assert [(link.flow_run_id, link.url) for link in links] == [("run-old", None), ("run-new", "http://srv:4200/runs/flow-run/run-new")]
    assert links[1].host == "h9"
    [newest] = attempt_links(store, cid, ui_url="https://prefect.lab", newest_only=True)
    assert newest.url == "https://prefect.lab/runs/flow-run/run-new"

    # the arm's page says the same: its host, and a link only for the lasting server's run
    from reports.site import write_site

    os.environ.pop("PREFECT_UI_URL", None)
    out = write_site(store, "links", tmp_path / "site")
    page = (out.parent / "arms" / "a.html").read_text(encoding="utf-8")
    table = page[page.index('<table id="attempts">'):]
    table = table[: table.index("</table>")]
    assert 'href="http://srv:4200/runs/flow-run/run-new"' in table and "run-old" not in table
    assert "<td>h9</td>" in table


def test_status_lists_each_arms_flow_run_within_80_columns(tmp_path: Path) -> None:
    """At 80 columns a URL goes on a line of its own, never cut, after the line naming
    the arm, its attempt and host; without a configured Prefect server, status says
    nothing about flow runs."""
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    from campaign import queue
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(TWO_ARMS.format(name="wide", host=""))
    cid = queue.register(store, load_campaign(path), str(path)).id
    assert cid is not None
    store.add(EventRow(campaign_id=cid, kind=PREFECT_API_EVENT, message="http://server-host:4200/api", at=datetime(2026, 1, 1, tzinfo=UTC)))
    ids = {}
    for arm, host in (("A", "h1"), ("B", "a-rather-long-host-name.lab.example.org")):
        att = store.new_attempt(cid, "one", arm, {})
        ids[arm] = f"0f0e0d0c-0b0a-4908-8706-05040302010{len(ids)}"
        store.update(type(att), att.id, state="done", flow_run_id=ids[arm], host=host, ended_at=datetime.now(UTC))
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), "PREFECT_API_URL": "http://server-host:4200/api"}
    env.pop("PREFECT_UI_URL", None)
    out = subprocess.run([sys.executable, "-m", "cli", "status", "--db", str(tmp_path / "c.db")], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, out.stdout
    runs = lines[lines.index("Flow runs (newest attempt of each arm)") + 1:]
    assert [line.strip() for line in runs] == [
        "one/A #1 done on h1:", f"http://server-host:4200/runs/flow-run/{ids['A']}",
        "one/B #2 done on a-rather-long-host-name.lab.example.org:", f"http://server-host:4200/runs/flow-run/{ids['B']}",
    ], out.stdout
    env["PREFECT_API_URL"] = ""
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # an empty profile: no server configured
    out = subprocess.run([sys.executable, "-m", "cli", "status", "--db", str(tmp_path / "c.db")], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Flow runs" not in out.stdout and "flow-run/" not in out.stdout
