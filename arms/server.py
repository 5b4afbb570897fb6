"""Start, wait for, and stop a serving process -- and never leave one behind.

Why a process group: runtimes fork helpers (tokenizer workers, engine cores); killing the
parent alone orphans them and skews the next arm's memory and CPU. The group id and the
command line are recorded in the store before waiting for health, so that a later
`campaign resume` can find and stop a server a killed campaign left running, after
checking that the process really is ours.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx


class ServerStartError(Exception):
    """The server did not become healthy. `log_tail` holds its last lines."""

    def __init__(self, message: str, *, exit_code: int | None, log_tail: str):
        self.exit_code = exit_code
        self.log_tail = log_tail
        super().__init__(message)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 30) -> str:
    try:
        data = path.read_bytes()[-16384:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])


@dataclass
class ServerProcess:
    """One launched server. Use as a context manager so it is stopped on any exit."""

    argv: Sequence[str]
    base_url: str
    log_path: Path
    env: Mapping[str, str] | None = None
    health_path: str = "/health"
    startup_timeout_s: float = 120.0
    stop_timeout_s: float = 10.0
    on_started: Callable[[int, str], None] | None = None
    ready: Callable[[int, str], bool] | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, **(self.env or {})}
        try:
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise ServerStartError(
                f"cannot launch {self.argv[0]!r}: {exc.strerror}", exit_code=None, log_tail=str(exc)
            ) from None
        finally:
            log.close()
        if self.on_started:
            self.on_started(self.proc.pid, " ".join(self.argv))
        return self

    def wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer yet"
        with httpx.Client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                code = self.proc.poll()
                if code is not None:
                    raise ServerStartError(
                        f"server exited with code {code} before becoming healthy",
                        exit_code=code,
                        log_tail=tail(self.log_path),
                    )
                try:
                    response = http.get(self.base_url + self.health_path)
                    is_ready = self.ready or (lambda code, _body: code == 200)
                    if is_ready(response.status_code, response.text):
                        return
                    last = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                time.sleep(0.1)
        self.stop()
        raise ServerStartError(
            f"server not healthy after {self.startup_timeout_s:.0f} s (last answer: {last})",
            exit_code=None,
            log_tail=tail(self.log_path),
        )

    def stop(self) -> None:
        """SIGTERM to the group, then SIGKILL after the grace period."""
        if self.proc is None:
            return
        stop_group(self.proc.pid, self.stop_timeout_s, self.proc)

    def __enter__(self) -> ServerProcess:
        if self.proc is None:
            self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float = 10.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        else:
            _reap(pgid)
        if not group_alive(pgid):
            break
        time.sleep(0.05)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _reap(pid: int) -> None:
    """Collect an exited child of ours so it stops counting as alive (no-op otherwise)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def cmdline_of(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()


def kill_orphan(pgid: int, expected_cmdline: str) -> bool:
    """Stop a server a crashed campaign left behind, only if it is still the same program.

    Pids are reused; the recorded command line is the check that we kill our own server
    and not whatever now holds that number.
    """
    actual = cmdline_of(pgid)
    if actual is None or not expected_cmdline or actual != expected_cmdline.strip():
        return False
    stop_group(pgid, grace_s=5.0)
    return True


def rss_of_group(pgid: int) -> int | None:
    """Resident memory of every process in the group (Linux /proc), in bytes."""
    total = 0
    found = False
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            rss_pages = int((entry / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        total += rss_pages * page
        found = True
    return total if found else None
