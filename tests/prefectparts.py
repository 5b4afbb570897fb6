"""A real Prefect server and `campaign worker` processes, for the tests that place arms on
hosts (tests/integration/test_multihost.py, tests/unit/test_prefect_ux.py). The server is one per session
(`prefect_server` in conftest.py): starting one costs 20-40 s on two busy cores."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """Ctrl-C first (what a user does), then kill the whole group."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(
                timeout=90
            )  # a worker stopping beside two other test workers takes its time (45 s was once short)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def lasting_server(home: Path) -> Iterator[str]:
    """A lasting Prefect server, as a user starts one, in its own process group; yields
    its API URL and stops it (Ctrl-C, then the whole group) when done."""
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = (home / "server.log").open("wb")
    cmd = [
        sys.executable,
        "-m",
        "prefect",
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--analytics-off",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (home / "server.log").read_text()
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the Prefect server did not answer"
            time.sleep(0.5)
        yield api
    finally:
        stop(proc)
        log.close()


def env(tmp_path: Path, api: str, db: str, name: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / f"prefect-{name}"),
        "PYTHONPATH": str(ROOT),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "CAMPAIGN_DB": db,
        "CAMPAIGN_HEARTBEAT_S": "1",
        "CAMPAIGN_WORKER_WAIT_S": "120",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
    }  # a worker looks for runs every second, not every 10
    env.pop("CAMPAIGN_HOST", None)
    return env


def worker(tmp_path: Path, api: str, db: str, host: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"worker-{host}.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--host", host],
            env=env(tmp_path, api, db, host),
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log


def wait_for(what: str, check, timeout: float = 90.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")
