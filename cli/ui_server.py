"""`campaign ui`: find or start a local Prefect server with its UI, and point runs at it.

Order of looking: a PREFECT_API_URL already set (environment or active Prefect profile)
is used if it answers, and is an error if it does not (starting a second server would
not help: runs would still go to the configured URL). Otherwise a server already
answering on 127.0.0.1:4200 is used. Otherwise `prefect server start --analytics-off` is
started as a background process in its own session, its log and pid under the workdir
(.campaign/prefect-server.log, .pid).

So that the next `campaign run` from this folder reports to it, the server's address (and
the pid of a server it started) is recorded in .campaign/prefect-ui.json
(`flows.prefect_api.UI_RECORD`), which `campaign run`, `resume`, `status` and `report` read
when nothing else is configured. The user's Prefect profile is left alone: it is theirs,
and other projects run against it. `--write-profile` writes PREFECT_API_URL into the
active profile instead (what `prefect config set` does), recording what the profile held
before (.campaign/prefect-profile.json) so that `campaign ui --stop` puts it back.
`--stop` stops the server it started and removes the record, so a stopped server never
leaves runs pointed at nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx

from campaign.core.processes import stop_group
from flows.prefect_api import RECORDED, UI_RECORD, configured_api, read_ui_record, write_ui_record

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
    recorded: Path | None = None


def ui_url(api_url: str) -> str:
    return api_url.rstrip("/").removesuffix("/api") + "/"


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        response = httpx.get(api_url.rstrip("/") + "/health", timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def ui_api_url(api_url: str, timeout: float = 2.0) -> str | None:
    """Where the server's UI looks for its API (its /ui-settings), or None if it does not say."""
    try:
        response = httpx.get(ui_url(api_url) + "ui-settings", timeout=timeout)
        return str(response.json().get("api_url")) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def port_holder(port: int, host: str = HOST) -> str | None:
    """What listens on `port` ("PID 123: python -m http.server"), "something" when the port
    is taken but the process cannot be seen, None when the port is free."""
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            return None
        except OSError:
            pass
    import psutil

    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                try:
                    return f"PID {conn.pid}: {' '.join(psutil.Process(conn.pid).cmdline())[:120]}"
                except psutil.Error:
                    return f"PID {conn.pid}"
    except psutil.Error:
        pass
    return "another process"


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
    # the UI asks /ui-settings where its API is; unset, Prefect answers the default port's,
    # and a UI on any other port shows no runs ("Can't connect to Server API")
    env["PREFECT_UI_API_URL"] = env["PREFECT_SERVER_UI_API_URL"] = api_url
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
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


PROFILE_RECORD = "prefect-profile.json"


def profile_api_url() -> tuple[str, str | None]:
    """The active Prefect profile's name and the PREFECT_API_URL it persists (not the
    environment's)."""
    from prefect.settings import PREFECT_API_URL, load_current_profile

    profile = load_current_profile()
    value = profile.settings.get(PREFECT_API_URL)
    return profile.name, (str(value) if value else None)


def write_profile(api_url: str, workdir: Path | None = None) -> None:
    """Set PREFECT_API_URL in the active profile; with `workdir`, first record what it
    was, for `restore_profile` (an earlier record is kept: it holds the user's value)."""
    from prefect.settings import PREFECT_API_URL, update_current_profile

    if workdir is not None:
        record = workdir / PROFILE_RECORD
        if not record.exists():
            name, previous = profile_api_url()
            workdir.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({"profile": name, "previous": previous, "written": api_url}))
    update_current_profile({PREFECT_API_URL: api_url})


def restore_profile(workdir: Path) -> str | None:
    """Undo `write_profile`: the profile gets back its earlier PREFECT_API_URL, or loses
    the setting if it had none. Left alone if someone changed it since (or switched
    profiles). Returns what was done, for the user."""
    from prefect.settings import PREFECT_API_URL, update_current_profile

    record_path = workdir / PROFILE_RECORD
    if not record_path.exists():
        return None
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record_path.unlink(missing_ok=True)
        return None
    name, current = profile_api_url()
    if name != record.get("profile") or current != record.get("written"):
        record_path.unlink(missing_ok=True)
        return f"PREFECT_API_URL in the Prefect profile was changed since `campaign ui` set it; left as it is ({current or 'unset'})"
    previous = record.get("previous")
    update_current_profile({PREFECT_API_URL: previous})
    record_path.unlink(missing_ok=True)
    if previous:
        return f"PREFECT_API_URL restored to {previous} in Prefect profile {name!r}"
    return f"PREFECT_API_URL removed from Prefect profile {name!r} (runs use a temporary local server again)"


def ensure_ui(
    workdir: Path,
    *,
    write_config: bool = False,
    command: list[str] | None = None,
    api_url: str = DEFAULT_API,
    record: Path | None = Path(UI_RECORD),
) -> UiResult:
    """Find or start the server. `write_config` writes the active Prefect profile (opt-in);
    otherwise, with `record`, the server is recorded for runs from this folder."""
    configured = configured_api()
    if configured is not None and configured[1] != RECORDED:  # the user's own setting wins
        url = configured[0]
        if not healthy(url):
            raise UiError(
                f"PREFECT_API_URL is set to {url} but no Prefect server answers there; start it, or unset it "
                "(`unset PREFECT_API_URL`, `prefect config unset PREFECT_API_URL`) and run `campaign ui` again"
            )
        return UiResult(url, ui_url(url), False, None, None, False)
    if healthy(api_url):
        started, pid, log = False, None, None
        earlier = read_ui_record(record) if record is not None else None
        if earlier is not None and earlier.api_url == api_url:
            pid = earlier.pid  # the server an earlier `campaign ui` started: keep its pid
        elsewhere = ui_api_url(api_url)
        if elsewhere is not None and elsewhere.rstrip("/") != api_url.rstrip("/"):
            raise UiError(
                f"a Prefect server answers at {api_url}, but its UI looks for its API at {elsewhere}, so its Runs "
                "page shows nothing of it; stop it and run `campaign ui` again (it starts one whose UI uses its own API)"
            )
    else:
        port = urlparse(api_url).port
        holder = port_holder(port) if port is not None else None
        if holder is not None:
            raise UiError(
                f"port {port} is taken by {holder}, which is not a Prefect server; choose another with --port"
            )
        pid, log = start_server(workdir, command or server_command(), api_url)
        started = True
    if write_config:
        write_profile(api_url, workdir)
        return UiResult(api_url, ui_url(api_url), started, pid, log, True)
    recorded = write_ui_record(api_url, pid, record) if record is not None else None
    return UiResult(api_url, ui_url(api_url), started, pid, log, False, recorded)
