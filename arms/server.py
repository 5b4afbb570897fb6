"""Start, wait for, and stop a serving process -- and never leave one behind.

Why a process group: runtimes fork helpers (tokenizer workers, engine cores); killing the
parent alone orphans them and skews the next arm's memory and CPU. The group id and the
command line are recorded in the store before waiting for health, so that a later
`campaign resume` can find and stop a server a killed campaign left running, after
checking that the process really is ours.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from arms import tls
from campaign.core.processes import stop_group


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


def tail(path: Path, lines: int = 250) -> str:
    """The log's last lines, enough to hold the root of a multi-process runtime's failure:
    vLLM's worker raises about 150 lines above its API server's last words."""
    try:
        data = path.read_bytes()[-65536:]
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
        with httpx.Client(timeout=2.0, verify=tls.verified()) as http:
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
