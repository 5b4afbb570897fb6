"""`campaign ui`: find or start a local Prefect server with its UI, and point runs at it.

Order of looking: a PREFECT_API_URL already set (environment or active Prefect profile)
is used if it answers, and is an error if it does not (starting a second server would
not help: runs would still go to the configured URL). Otherwise a server already
answering on 127.0.0.1:4200 is used. Otherwise `prefect server start --analytics-off` is
started as a background process in its own session, its log and pid under the workdir
(.campaign/prefect-server.log, .pid).

So that the next `campaign run` reports to it, PREFECT_API_URL is written into the active
Prefect profile (what `prefect config set` does, through Prefect's own settings API) -- a
profile outlives the shell, unlike an exported variable, and `prefect config unset
PREFECT_API_URL` undoes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from arms.server import stop_group

HOST = "127.0.0.1"
PORT = 4200
DEFAULT_API = f"http://{HOST}:{PORT}/api"


class UiError(Exception):
    """Something the user must fix; printed as one paragraph."""


@dataclass
class UiResult:
    api_url: str
    ui_url: str
    started: bool
    pid: int | None
    log: Path | None
    profile_written: bool


def ui_url(api_url: str) -> str:
    return api_url.rstrip("/").removesuffix("/api") + "/"


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        response = httpx.get(api_url.rstrip("/") + "/health", timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def configured_api_url() -> str | None:
    """PREFECT_API_URL from the environment or the active profile, if any."""
    env = os.environ.get("PREFECT_API_URL")
    if env:
        return env
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value) if value else None


def server_command(host: str = HOST, port: int = PORT) -> list[str]:
    prefect = Path(sys.executable).with_name("prefect")
    head = [str(prefect)] if prefect.exists() else [sys.executable, "-m", "prefect"]
    return [*head, "server", "start", "--analytics-off", "--host", host, "--port", str(port)]


def start_server(workdir: Path, command: list[str], api_url: str, timeout_s: float = 90.0) -> tuple[int, Path]:
    """Start the server detached (own session, so a Ctrl-C in this shell leaves it up)
    and wait until its API answers. On timeout, stop it and say where the log is."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "prefect-server.log"
    env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("PREFECT_API_URL", None)
    with log.open("ab") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    (workdir / "prefect-server.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UiError(f"the Prefect server exited with code {proc.returncode} before answering; see {log}")
        if healthy(api_url, timeout=1.0):
            return proc.pid, log
        time.sleep(0.5)
    stop_server(workdir)
    raise UiError(f"the Prefect server did not answer at {api_url} within {timeout_s:.0f} s; see {log}")


def stop_server(workdir: Path) -> bool:
    """Stop the server this command started (by the pid it recorded), if it runs."""
    pid_file = workdir / "prefect-server.pid"
    if not pid_file.exists():
        return False
    try:
        pid = int(pid_file.read_text().strip())
    except ValueError:
        pid_file.unlink()
        return False
    try:
        os.killpg(pid, 0)  # its own session: the group is the server and its workers
    except ProcessLookupError:
        pid_file.unlink()
        return False
    stop_group(pid, grace_s=5.0)
    pid_file.unlink(missing_ok=True)
    return True


def write_profile(api_url: str) -> None:
    from prefect.settings import PREFECT_API_URL, update_current_profile

    update_current_profile({PREFECT_API_URL: api_url})


def ensure_ui(workdir: Path, *, write_config: bool = True, command: list[str] | None = None, api_url: str = DEFAULT_API) -> UiResult:
    configured = configured_api_url()
    if configured:
        if not healthy(configured):
            raise UiError(
                f"PREFECT_API_URL is set to {configured} but no Prefect server answers there; start it, or unset it "
                "(`unset PREFECT_API_URL`, `prefect config unset PREFECT_API_URL`) and run `campaign ui` again"
            )
        return UiResult(configured, ui_url(configured), False, None, None, False)
    if healthy(api_url):
        started, pid, log = False, None, None
    else:
        pid, log = start_server(workdir, command or server_command(), api_url)
        started = True
    if write_config:
        write_profile(api_url)
    return UiResult(api_url, ui_url(api_url), started, pid, log, write_config)
