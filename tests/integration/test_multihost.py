"""Arms placed on two hosts, for real: a `prefect server start` on a free loopback port,
a real PostgreSQL (tests/pgcluster.py), two `campaign worker` processes named h1 and h2,
and `campaign run` dispatching to them (flows/placement.py). Everything runs on this
machine; the host names are what `campaign worker --host` says, as on a lab of several."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from campaign.core.states import AttemptState, ProbeRunState
from campaign.store.store import Store
from tests.campaigns import arm, campaign_file, gate, item, sim
from tests.paths import ROOT
from tests.prefectparts import env as _env
from tests.prefectparts import stop as _stop
from tests.prefectparts import wait_for as _wait_for
from tests.prefectparts import worker as _worker

pytestmark = pytest.mark.integration


def two_hosts(name: str) -> str:
    """A on h1 against B on h2, and an arm X whose runtime h1 cannot start."""
    return campaign_file(
        name,
        default_max_tokens=16,
        # tenfold: decode_tps is client-timed, and beside busy test workers 300 vs 600
        # measured 190 vs 241
        runtimes=[
            sim("sim1", decode_tps=40.0, host="h1"),
            sim("sim2", decode_tps=400.0, host="h2"),
            {
                "name": "refusing",
                "adapter": "simulator",
                "host": "h1",
                "options": {"profile": {"faults": {"refuse_start": "this accelerator is not in the machine"}}},
            },
        ],
        arms=[
            arm("X", runtime="refusing", context=4096),
            arm("A", runtime="sim1", context=4096),
            arm("B", runtime="sim2", context=4096),
        ],
        gates=[FASTER],
        queue=[
            item(
                "one",
                ["A", "B"],
                ["decode"],
                title="A on h1 against B on h2",
                contexts=[1024],
                gate="faster",
                repeats=3,
            ),
            item("two", ["X"], ["decode"], title="an arm its host cannot serve", contexts=[1024]),
        ],
    )


FASTER = gate(
    "faster",
    "relative_improvement",
    {"metric": "decode_tps", "probe": "decode", "min_gain": 0.10, "min_runs": 2},
    ["B"],
    ["A"],
)


def test_arms_on_two_hosts_are_recorded_with_their_host_and_gated_together(
    tmp_path: Path,
    prefect_server: str,
    postgres_cluster,  # type: ignore[no-untyped-def]
) -> None:
    db = postgres_cluster.create_database("twohosts")
    path = tmp_path / "c.toml"
    path.write_text(two_hosts("twohosts"))
    workers = [_worker(tmp_path, prefect_server, db, host) for host in ("h1", "h2")]
    try:
        for _proc, log in workers:
            _wait_for("the worker's start line", lambda log=log: "serving deployment arm/arm-" in log.read_text())
        run = subprocess.run(
            [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
            env=_env(tmp_path, prefect_server, db, "run"),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        logs = "\n".join(log.read_text() for _p, log in workers)
        assert run.returncode == 0, (run.stdout, run.stderr, logs)
    finally:
        for proc, _log in workers:
            _stop(proc)
    assert "worker for host h1 stopped" in workers[0][1].read_text()  # Ctrl-C stops it cleanly

    store = Store(db)
    camp = store.campaign("twohosts")
    assert camp is not None and camp.id is not None
    by_arm: dict[str, list] = {}
    for a in store.attempts(camp.id):
        by_arm.setdefault(a.arm_id, []).append(a)
    assert set(by_arm) == {"A", "B", "X"}
    assert [len(by_arm[arm]) for arm in ("A", "B", "X")] == [3, 3, 1]  # item one runs 3 blocks
    assert {arm: {a.host for a in atts} for arm, atts in by_arm.items()} == {"A": {"h1"}, "B": {"h2"}, "X": {"h1"}}
    [blocked_x] = by_arm["X"]
    assert blocked_x.state == AttemptState.BLOCKED and blocked_x.error == "this accelerator is not in the machine"
    for att in (*by_arm["A"], *by_arm["B"]):
        assert att.state == AttemptState.DONE
        assert att.flow_run_id
        assert [r.state for r in store.probe_runs(att.id or 0)] == [ProbeRunState.DONE]
    assert len({a.flow_run_id for a in (*by_arm["A"], *by_arm["B"])}) == 6  # one flow run per server start
    assert sorted(a.repeat for a in by_arm["A"]) == sorted(a.repeat for a in by_arm["B"]) == [0, 1, 2]
    attempts = {arm: atts[-1] for arm, atts in by_arm.items()}
    verdict = store.latest_verdicts(camp.id)["faster"]
    assert verdict.verdict == "pass", verdict.reason  # B (600 tok/s on h2) beats A (300 on h1), over 3 blocks
    assert "paired over 3 blocks" in verdict.reason, verdict.reason

    # the arms' flow runs are subflows of the campaign run, tagged with where they ran
    runs = httpx.post(
        f"{prefect_server}/flow_runs/filter", json={"flow_runs": {"tags": {"all_": ["campaign:twohosts"]}}}, timeout=10
    ).json()
    by_id = {r["id"]: r for r in runs}
    for arm_id, host in (("A", "h1"), ("B", "h2")):
        for att in by_arm[arm_id]:
            flow_run = by_id[att.flow_run_id]
            assert {f"arm:{arm_id}", f"host:{host}", "item:one"} <= set(flow_run["tags"])
            assert flow_run["parent_task_run_id"], "not a subflow of the campaign run"
            assert flow_run["state_type"] == "COMPLETED"
    blocked = by_id[attempts["X"].flow_run_id]  # not Completed: the UI shows what happened
    assert (blocked["state_type"], blocked["state_name"]) == ("FAILED", "Blocked")
    assert blocked["state"]["message"] == "this accelerator is not in the machine"


def test_a_campaign_naming_hosts_without_a_prefect_server_fails_fast(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(two_hosts("noserver"))
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--db", str(tmp_path / "c.db")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    lines = [line for line in lines if not line.startswith("warning: ")]  # design warnings come first
    assert len(lines) == 1 and lines[0].startswith("error: arms of 'noserver' run on hosts h1, h2"), run.stderr
    assert "campaign worker --host NAME" in lines[0] and "PREFECT_API_URL" in lines[0]
    assert time.monotonic() - started < 60  # no temporary server was started to find out


def test_failed_and_blocked_arms_end_in_states_named_for_them() -> None:
    """An arm's outcome is its flow run's state (what the Prefect UI colours and names),
    and stays readable as the state's data by an in-process caller."""
    from prefect.client.schemas.objects import StateType

    from flows.arm_states import outcome_of, run_state
    from flows.contracts import ArmOutcome

    def outcome(state: str, message: str = "") -> ArmOutcome:
        return ArmOutcome("A", state, message, 7, 0, "item")

    failed = run_state(outcome("failed", "RuntimeError: server exited"))
    assert (failed.type, failed.name, failed.message) == (StateType.FAILED, "Failed", "RuntimeError: server exited")
    blocked = run_state(outcome("blocked", "no such device"))
    assert (blocked.type, blocked.name, blocked.message) == (StateType.FAILED, "Blocked", "no such device")
    assert outcome_of(blocked) == outcome("blocked", "no such device")
    assert outcome_of(failed) == outcome("failed", "RuntimeError: server exited")
    # the data is an exception, so that a worker's flow run ending in it logs what
    # happened to the arm, not that a dict "cannot be resolved into an exception"
    with pytest.raises(Exception, match="arm A blocked: no such device"):
        blocked.result()
    assert run_state(outcome("done")) == outcome("done")  # completes with the outcome as its result
    chained = outcome("done").chained([ArmOutcome("A", "failed", "broken", 8, 0, "later")])
    assert run_state(chained) is chained  # its own attempt completed: the chained failure is in the data
    with pytest.raises(ValueError):  # a flow that raised raises again for its caller
        from prefect.states import Failed

        outcome_of(Failed(data=ValueError("broken")))


def slow(name: str, host: str = "h1", stoppable: bool = False) -> str:
    """A slow arm on `host` (120 tokens at 40 tok/s). Stoppable: with B beside it on the
    same host and a gate, in two blocks (block 0 runs B then A under the default seed), the
    gate deciding over two runs."""
    runtimes = [sim("sim1", decode_tps=40.0, host=host)] + (
        [sim("sim1b", decode_tps=400.0, host=host)] if stoppable else []
    )
    arms = [arm("A", runtime="sim1", context=4096)] + ([arm("B", runtime="sim1b", context=4096)] if stoppable else [])
    more = {"gate": "faster", "repeats": 2} if stoppable else {}
    return campaign_file(
        name,
        default_max_tokens=120,
        runtimes=runtimes,
        arms=arms,
        gates=[FASTER] if stoppable else [],
        queue=[item("one", [a["id"] for a in arms], ["decode"], title="a slow arm on h1", contexts=[1024], **more)],
    )


def test_a_worker_killed_mid_arm_leaves_its_attempt_continued_once_after_restart(
    tmp_path: Path,
    prefect_server: str,
    postgres_cluster,  # type: ignore[no-untyped-def]
) -> None:
    """SIGKILL the worker while its arm measures: the flow run is left Running in
    Prefect and the attempt running in the store. `campaign run` sees the attempt's
    heartbeat stop, sends the arm again, and the restarted worker takes the dead attempt
    over: one attempt, continued, finished once."""
    from campaign.core.processes import kill_orphan

    db = postgres_cluster.create_database("killed")
    path = tmp_path / "c.toml"
    path.write_text(slow("killed"))
    store = Store(db)
    worker, log = _worker(tmp_path, prefect_server, db, "h1")
    run = subprocess.Popen(
        [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
        env=_env(tmp_path, prefect_server, db, "run"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    first = None
    try:

        def measuring():  # type: ignore[no-untyped-def]
            camp = store.campaign("killed")
            atts = store.attempts(camp.id) if camp and camp.id else []
            return atts[0] if atts and atts[0].server_pgid and store.probe_runs(atts[0].id or 0) else None

        first = _wait_for("the arm to measure on h1", measuring, timeout=120)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        worker, log = _worker(tmp_path, prefect_server, db, "h1")  # the machine is back
        out, err = run.communicate(timeout=240)
        assert run.returncode == 0, (out, err, log.read_text())
    finally:
        _stop(worker)
        if run.poll() is None:
            _stop(run)
        if first is not None and first.server_pgid:
            kill_orphan(first.server_pgid, first.server_cmdline)  # the killed worker's server
    camp = store.campaign("killed")
    assert camp is not None and camp.id is not None
    attempts = store.attempts(camp.id)
    assert [(a.id, a.state, a.host) for a in attempts] == [(first.id, AttemptState.DONE, "h1")]
    assert attempts[0].flow_run_id != first.flow_run_id  # continued by the second flow run
    assert [r.state for r in store.probe_runs(first.id or 0)].count(ProbeRunState.DONE) == 1
    assert any(e.kind == "recover" and f"attempt {first.id} taken over" in e.message for e in store.events(camp.id))


@pytest.mark.parametrize(
    ("host", "served_once", "said"),
    [
        ("nobody", False, "no worker has ever served host nobody"),
        ("gone", True, "no worker for host gone picked up the arm within 3 s"),
    ],
)
def test_an_arm_on_a_host_without_a_worker_is_blocked_saying_which_worker_to_start(
    tmp_path: Path,
    prefect_server: str,
    postgres_cluster,
    host: str,
    served_once: bool,
    said: str,  # type: ignore[no-untyped-def]
) -> None:
    """Never served: no deployment to run. Served once, worker since stopped: the run
    would stay Scheduled forever; it is cancelled after the wait instead. Either way the
    arm's attempt ends blocked on that host, with the worker to start as its reason."""
    db = postgres_cluster.create_database(f"noworker{host}")
    path = tmp_path / "c.toml"
    path.write_text(slow("noworker", host=host))
    env = {**_env(tmp_path, prefect_server, db, "run"), "CAMPAIGN_WORKER_WAIT_S": "3"}
    if served_once:  # what a worker leaves behind: its deployment, with nobody polling it
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"from flows.arm_flow import arm_flow; arm_flow.to_deployment(name='arm-{host}').apply()",
            ],
            env=env,
            cwd=tmp_path,
            check=True,
            capture_output=True,
            timeout=120,
        )
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    store = Store(db)
    camp = store.campaign("noworker")
    assert camp is not None and camp.id is not None
    item = store.items(camp.id)[0]
    assert item.state == "blocked"  # not the arm's fault: `campaign resume` re-checks it
    assert said in item.reason and f"campaign worker --host {host}" in item.reason
    assert "CAMPAIGN_WORKER_WAIT_S" in item.reason
    [attempt] = store.attempts(camp.id)
    assert (attempt.state, attempt.host) == (AttemptState.BLOCKED, host) and said in attempt.error


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_of_campaign_run_stops_the_arm_on_its_worker_and_resume_continues_it_once(
    tmp_path: Path,
    prefect_server: str,
    postgres_cluster,  # type: ignore[no-untyped-def]
) -> None:
    """Ctrl-C while an arm measures on h1's worker: `campaign run` exits 130 with the
    usual hint, the arm's flow run is cancelled, the worker stops its server, and its
    attempt ends interrupted (not running, not done). `campaign resume` continues that
    attempt once and gives the verdict an uninterrupted run gives."""
    from campaign.core.processes import kill_orphan

    db = postgres_cluster.create_database("stopped")
    path = tmp_path / "c.toml"
    path.write_text(slow("stopped", stoppable=True))
    store = Store(db)
    worker, log = _worker(tmp_path, prefect_server, db, "h1")
    env = _env(tmp_path, prefect_server, db, "run")
    first = None
    try:
        run = subprocess.Popen(
            [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / "w")],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

        def measuring():  # type: ignore[no-untyped-def]
            """Slow A's attempt of block 0 while it measures (B, fast, may run before it)."""
            camp = store.campaign("stopped")
            atts = [a for a in store.attempts(camp.id, "one", "A") if a.repeat == 0] if camp and camp.id else []
            live = atts and atts[0].state == AttemptState.RUNNING and atts[0].server_pgid
            return atts[0] if live and store.probe_runs(atts[0].id or 0) else None

        first = _wait_for("the arm to measure on h1", measuring, timeout=180)
        stopped_at = time.monotonic()
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in its terminal does
        out, err = run.communicate(timeout=30)
        took = time.monotonic() - stopped_at
        assert run.returncode == 130, (out, err, log.read_text())
        assert took < 15, f"campaign run took {took:.1f} s to stop"
        assert "`campaign resume` carries on" in err and "Traceback" not in err, err

        def flow_run_state() -> str:
            return httpx.get(f"{prefect_server}/flow_runs/{first.flow_run_id}", timeout=10).json()["state_type"]

        _wait_for("the arm's flow run to end", lambda: flow_run_state() not in ("RUNNING", "CANCELLING"), timeout=30)
        assert flow_run_state() == "CANCELLED", (flow_run_state(), log.read_text())
        _wait_for("the worker to stop the arm's server", lambda: not _group_alive(first.server_pgid), timeout=20)
        [stopped] = store.attempts(first.campaign_id, "one", "A")
        runs = [(r.probe, r.state, r.error) for r in store.probe_runs(first.id or 0)]
        assert (stopped.state, stopped.error) == (AttemptState.INTERRUPTED, "interrupted by the user"), (
            runs,
            log.read_text(),
        )
        assert [state for _p, state, _e in runs] == [ProbeRunState.INTERRUPTED], runs
        assert worker.poll() is None, log.read_text()  # the worker goes on serving

        resume = subprocess.run(
            [sys.executable, "-m", "cli", "resume", str(path), "--workdir", str(tmp_path / "w")],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resume.returncode == 0, (resume.stdout, resume.stderr, log.read_text())
    finally:
        _stop(worker)
        if run.poll() is None:
            _stop(run)
        if first is not None and first.server_pgid and _group_alive(first.server_pgid):
            kill_orphan(first.server_pgid, first.server_cmdline)
    camp = store.campaign("stopped")
    assert camp is not None and camp.id is not None
    attempts = store.attempts(camp.id)
    a_one = [a for a in attempts if (a.item_key, a.arm_id, a.repeat) == ("one", "A", 0)]
    assert [(a.id, a.state) for a in a_one] == [(first.id, AttemptState.DONE)]  # the same attempt, continued
    runs = [r.state for r in store.probe_runs(first.id or 0)]
    assert runs.count(ProbeRunState.DONE) == 1 and ProbeRunState.RUNNING not in runs, runs
    resumed = [
        e for e in store.events(camp.id) if e.kind == "attempt-resumed" and e.arm_id == "A" and e.item_key == "one"
    ]
    assert len(resumed) == 1, resumed
    assert sorted((a.arm_id, a.repeat, a.state) for a in attempts) == [
        ("A", 0, AttemptState.DONE),
        ("A", 1, AttemptState.DONE),
        ("B", 0, AttemptState.DONE),
        ("B", 1, AttemptState.DONE),
    ]
    assert {i.key: i.state for i in store.items(camp.id)} == {"one": "done"}
    verdict = store.latest_verdicts(camp.id)["faster"]
    assert verdict.verdict == "pass", verdict.reason  # B (400 tok/s) beats A (40) over 2 blocks, as without the stop
