"""Ctrl-C, resume and sharing a machine, with real processes: a real SIGINT to a real
`campaign run`, a second Ctrl-C, a device slot left by a dead process and reclaimed from
another database, two runners started at the same instant, and a finished campaign."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from campaign.core.processes import group_alive
from campaign.core.states import AttemptState, ItemState, ProbeRunState
from campaign.store.store import Store
from tests.campaigns import three_context_decode
from tests.paths import ROOT

pytestmark = pytest.mark.integration

HOLDER_VARIABLE = "campaign-holder-device-local"


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Prefect home for the module's runs: its database (and the device's global
    concurrency limit in it) outlives each temporary server, as on a user's machine."""
    return tmp_path_factory.mktemp("prefect-home")


def _env(prefect_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(prefect_home), PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def _write(tmp_path: Path, name: str, repeats: int = 4) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(three_context_decode(name, repeats))
    return path


def _wait_for(what: str, check: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"the run ended (code {proc.returncode}) before {what}: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        try:
            if check():
                return
        except sqlite3.OperationalError:
            pass  # the database is being created
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout} s")


def _mid_probe(db: Path) -> bool:
    """A probe run finished, and another is running with rows already measured."""
    if not db.exists():
        return False
    with sqlite3.connect(db) as conn:
        done = conn.execute("select count(*) from probe_run where state='done'").fetchone()[0]
        running = conn.execute(
            "select count(*) from measurement m join probe_run p on m.probe_run_id=p.id where p.state='running'"
        ).fetchone()[0]
    return done >= 1 and running >= 1


def _slots_and_holder(prefect_home: Path) -> tuple[int, bool]:
    """The device limit's counted slots and whether a holder record exists, read from the
    Prefect database the temporary servers share."""
    with sqlite3.connect(prefect_home / "prefect.db") as conn:
        row = conn.execute("select active_slots from concurrency_limit_v2 where name='device-local'").fetchone()
        holder = conn.execute("select count(*) from variable where name=?", (HOLDER_VARIABLE,)).fetchone()[0]
    return (row[0] if row else 0), bool(holder)


def _gone(pids: list[int], timeout: float = 10.0) -> bool:
    """Every one of these processes has exited (a zombie waiting for init counts as gone)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _start(
    args: list[str], env: dict[str, str], cwd: Path, procs: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    procs.append(proc)
    return proc


def _run_to_mid_probe(
    tmp_path: Path, name: str, prefect_home: Path, procs: list[subprocess.Popen[bytes]]
) -> tuple[Path, Path, dict[str, str], subprocess.Popen[bytes], int]:
    """`campaign run` of a three-context decode campaign, started in its own session and
    waited on until a probe is mid-way (the moment both Ctrl-C tests interrupt): its file,
    database, environment, process, and the process group of the arm's server."""
    path = _write(tmp_path, name)
    db = tmp_path / f"{name}.db"
    env = _env(prefect_home)
    run = _start(_cli("run", str(path), "--db", str(db), "--workdir", str(tmp_path / "w")), env, tmp_path, procs)
    _wait_for("a probe mid-way", lambda: _mid_probe(db), run)
    with sqlite3.connect(db) as conn:
        pgid = conn.execute("select server_pgid from attempt where state='running'").fetchone()[0]
    return path, db, env, run, pgid


def test_first_ctrl_c_stops_cleanly_and_resume_completes(
    tmp_path: Path, prefect_home: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    path, db, env, run, pgid = _run_to_mid_probe(tmp_path, "stop", prefect_home, procs)
    sent = time.monotonic()
    os.kill(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=60)
    stopped_in = time.monotonic() - sent
    err_text = err.decode()
    assert run.returncode == 130, err_text
    assert "Traceback" not in err_text
    assert [line for line in err_text.splitlines() if "campaign resume" in line] == [
        line for line in err_text.splitlines() if line.startswith("interrupted:")
    ]
    assert len([line for line in err_text.splitlines() if "campaign resume" in line]) == 1, err_text
    assert stopped_in < 30, f"took {stopped_in:.1f} s to stop"

    store = Store(f"sqlite:///{db}")
    camp = store.campaign("stop")
    (attempt,) = store.attempts(camp.id)
    assert attempt.state == AttemptState.INTERRUPTED and attempt.error == "interrupted by the user"
    runs = store.probe_runs(attempt.id)
    assert ProbeRunState.RUNNING not in {r.state for r in runs}
    assert any(r.state == ProbeRunState.INTERRUPTED for r in runs)
    assert not group_alive(pgid)  # the server's group was stopped, not left behind
    assert _slots_and_holder(prefect_home) == (0, False)  # the device slot went back to the limit
    assert [i.state for i in store.items(camp.id)] == [ItemState.PENDING]

    resume = subprocess.run(
        _cli("resume", "--db", str(db), "--workdir", str(tmp_path / "w")),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert resume.returncode == 0, resume.stderr
    assert [i.state for i in store.items(camp.id)] == [ItemState.DONE]
    (attempt,) = store.attempts(camp.id)  # continued, not started again
    assert attempt.state == AttemptState.DONE
    done = [r for r in store.probe_runs(attempt.id) if r.state == ProbeRunState.DONE]
    assert sorted(r.context for r in done) == [1024, 2048, 4096]
    frame = store.measurements_frame(camp.id)
    assert frame[(frame["metric"] == "decode_tps") & (frame["kind"] == "sample")].groupby(
        "context"
    ).size().to_dict() == {1024: 4, 2048: 4, 4096: 4}

    # finished: run and resume say so, start no Prefect server, and exit 0
    for command in (["run", str(path)], ["resume"]):
        again = subprocess.run(
            _cli(*command, "--db", str(db), "--workdir", str(tmp_path / "w")),
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("nothing to do: every queue item of 'stop' has run (1 done)")
        assert "Prefect server" not in again.stderr
    assert len(store.attempts(camp.id)) == 1


def test_second_ctrl_c_exits_at_once_and_a_run_on_another_database_reclaims_the_slot(
    tmp_path: Path, prefect_home: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    import psutil

    _, _, env, run, pgid = _run_to_mid_probe(tmp_path, "hard", prefect_home, procs)
    helpers = [p.pid for p in psutil.Process(run.pid).children(recursive=True)]
    os.kill(run.pid, signal.SIGINT)
    time.sleep(0.05)
    sent = time.monotonic()
    os.kill(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert run.returncode == 130
    assert "exited at once" in err.decode() and "Traceback" not in err.decode()
    assert _gone([pgid, *helpers]), "left running"  # the arm's server and the temporary Prefect server
    # no time to release: the slot is still counted, its holder record names a dead pid
    assert _slots_and_holder(prefect_home) == (1, True)

    # another campaign, another database, the same machine: it must not wait forever
    other = _write(tmp_path, "other", repeats=1)
    result = subprocess.run(
        _cli("run", str(other), "--db", str(tmp_path / "other.db"), "--workdir", str(tmp_path / "w2")),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert result.returncode == 0, result.stderr
    assert "no longer exists); slot taken back" in result.stdout
    assert f"device local held by attempt 1 (hard: decode/A), pid {run.pid} on host" in result.stdout
    assert _slots_and_holder(prefect_home) == (0, False)
    # (resume after a hard stop is resume after a crash: tests/integration/test_resume.py)


def test_two_runners_at_the_same_instant_one_runs(
    tmp_path: Path, prefect_home: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    path = _write(tmp_path, "twice", repeats=1)
    db = tmp_path / "twice.db"  # new: both also race to create its tables
    env = _env(prefect_home)
    args = _cli("run", str(path), "--db", str(db), "--workdir", str(tmp_path / "w"))
    both = [_start(args, env, tmp_path, procs) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read().decode() if p.stderr else "") for p in both]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    refused = next(err for code, err in results if code == 1)
    winner = next(p for p, (code, _) in zip(both, results) if code == 0)
    assert refused.strip().splitlines() == [
        line
        for line in refused.strip().splitlines()
        if line.startswith("error: campaign 'twice' is already being run by")
    ]
    assert f"by pid {winner.pid} on host" in refused
    store = Store(f"sqlite:///{db}")
    camp = store.campaign("twice")
    assert [(a.item_key, a.arm_id, a.state) for a in store.attempts(camp.id)] == [("decode", "A", AttemptState.DONE)]


def test_an_unreachable_prefect_api_is_one_line(tmp_path: Path, prefect_home: Path) -> None:
    path = _write(tmp_path, "nowhere", repeats=1)
    env = {**_env(prefect_home), "PREFECT_API_URL": "http://127.0.0.1:9/api"}
    out = subprocess.run(
        _cli("run", str(path), "--db", str(tmp_path / "n.db")),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(
        "error: PREFECT_API_URL is http://127.0.0.1:9/api (from the environment) but no Prefect server answers there"
    )
    assert "campaign ui" in line


def test_a_prefect_server_that_cannot_start_in_time_is_one_line(tmp_path: Path, prefect_home: Path) -> None:
    """The wait is Prefect's own setting (raised to STARTUP_TIMEOUT_S by default, since a
    busy machine needs more than Prefect's 20 s); too short a wait is one line, exit 1."""
    from cli import prefect_server as cli_prefect

    assert cli_prefect.startup_timeout_s() == int(
        os.environ.get(cli_prefect.TIMEOUT_SETTING) or cli_prefect.STARTUP_TIMEOUT_S
    )
    assert cli_prefect.STARTUP_TIMEOUT_S >= 120
    path = _write(tmp_path, "slow", repeats=1)
    env = {**_env(prefect_home), cli_prefect.TIMEOUT_SETTING: "1"}
    out = subprocess.run(
        _cli("run", str(path), "--db", str(tmp_path / "s.db")),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines()[0] == "starting a local Prefect server..."
    (line,) = out.stderr.strip().splitlines()[1:]
    assert line.startswith("error: the temporary Prefect server did not answer within 1 s")
    assert _gone(_using(prefect_home))  # the server that was too slow is not left behind


def _using(prefect_home: Path) -> list[int]:
    """Processes started with this Prefect home (the runs and their Prefect servers)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PREFECT_HOME") == str(prefect_home):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_the_runner_claim_is_re_entrant_refuses_the_living_and_replaces_the_dead(tmp_path: Path) -> None:
    import socket

    from campaign.store import queue
    from campaign.store.tables import RunnerRow

    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    assert queue.claim_runner(store, "c", "campaign run") is True
    assert queue.claim_runner(store, "c", "campaign run") is False  # this process already holds it
    assert queue.current_runner(store, "c").startswith(
        f"pid {os.getpid()} on host {socket.gethostname()} (`campaign run`, since "
    )
    queue.release_runner(store, "c")
    assert queue.current_runner(store, "c") is None

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.add(RunnerRow(campaign_name="c", pid=sleeper.pid, host=socket.gethostname(), command="campaign resume"))
        with pytest.raises(
            queue.RunnerBusy,
            match=f"campaign 'c' is already being run by pid {sleeper.pid} on host .* \\(`campaign resume`, since ",
        ):
            queue.claim_runner(store, "c")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert queue.current_runner(store, "c") is None  # its process is gone
    assert queue.claim_runner(store, "c", "campaign run") is True  # so its claim is taken over
    store.add(RunnerRow(campaign_name="d", pid=1, host="another-host"))
    with pytest.raises(queue.RunnerBusy, match="on host another-host"):  # cannot be proven dead from here
        queue.claim_runner(store, "d")
