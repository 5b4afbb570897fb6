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
    """SIGTERM to the group, SIGKILL after `grace_s`; descendants that left the group
    (a helper that called setsid) are found through psutil and stopped alike."""
    strays = [p for p in group_processes(pgid) if _pgid_of(p.pid) != pgid]  # type: ignore[attr-defined]
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for stray in strays:
        _signal_process(stray, signal.SIGTERM)
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
    for stray in strays:
        _signal_process(stray, signal.SIGKILL)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError, OSError):
        return None


def _signal_process(proc: object, sig: int) -> None:
    """Signal a psutil.Process unless it is gone (psutil checks the pid was not reused)."""
    import psutil

    try:
        proc.send_signal(sig)  # type: ignore[attr-defined]
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass


def _reap(pid: int) -> None:
    """Collect an exited child of ours so it stops counting as alive (no-op otherwise)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def cmdline_of(pid: int) -> str | None:
    """The process's command line, words joined by spaces (psutil: Linux, macOS, BSD)."""
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def process_start(pid: int) -> float | None:
    """When the process started (epoch seconds), or None if it does not exist.

    With the pid, this names a process for good: a pid reused by a later process has a
    later start time."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def same_process_alive(pid: int, started: float | None) -> bool:
    """Whether `pid` still runs and is the process that started at `started` (when known)."""
    now = process_start(pid)
    if now is None:
        return False
    return started is None or abs(now - started) <= 1.0


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


def group_processes(pgid: int) -> list[object]:
    """Every live process of a server: the group's leader, its descendants (even those
    that left the group) and any other process still in the group."""
    import psutil

    found: dict[int, psutil.Process] = {}
    try:
        leader = psutil.Process(pgid)
        found[leader.pid] = leader
        for child in leader.children(recursive=True):
            found[child.pid] = child
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass
    for proc in psutil.process_iter():
        if proc.pid in found:
            continue
        try:
            if os.getpgid(proc.pid) == pgid:
                found[proc.pid] = proc
        except (ProcessLookupError, PermissionError, OSError):
            continue
    return list(found.values())


def rss_of_group(pgid: int) -> int | None:
    """Resident memory of a server's processes (see `group_processes`), in bytes."""
    import psutil

    total = 0
    found = False
    for proc in group_processes(pgid):
        try:
            total += proc.memory_info().rss  # type: ignore[attr-defined]
            found = True
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total if found else None
