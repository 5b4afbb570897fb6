"""The Prefect API a `campaign run` reports to: the configured one, checked first, or a
temporary local server that this command starts, waits for, and stops.

The temporary server is launched as soon as the command knows it will run something
(`begin`: after the campaign file is checked, so a file that is refused never touches
Prefect), and waited for only when the first flow needs it (`PrefectStart.api`): its
start-up (about 7 s on two idle cores, a fresh API process loading Prefect's whole server
stack) then runs on the other core while this process loads the flows.

Why the command starts the server itself, and as its own process rather than through
Prefect's `SubprocessASGIServer` (which launches the same uvicorn command line):

1. importing that class loads Prefect's server stack into this process too, about 5 s on
   two cores, for a process that only talks to the API over HTTP;
2. a Ctrl-C in the terminal goes to the whole foreground process group, and the server
   would die with it while the campaign still needs it to release its device slot -- so
   it is started with SIGINT blocked, a mask the child keeps (SIGTERM still stops it);
3. on a busy machine it needs far more than Prefect's default 20 s to answer (measured
   once on two cores loaded with three busy processes and more: 102 s with a new Prefect
   database, 59 s with an existing one), so the wait is `STARTUP_TIMEOUT_S` (Prefect's own
   setting, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, wins when the user set it),
   while a server process that exits ends the wait at once;
4. the user sees "starting a local Prefect server..." instead of silence, and one line
   instead of a traceback if it truly cannot start.

The runs then report to it as to a configured server (PREFECT_API_URL in this process's
settings), while `flows.prefect_api` knows it for temporary: gone with the command, so no
run links to it and no logs are sent to it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

STARTUP_TIMEOUT_S = 300
TIMEOUT_SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_LAUNCHES = 3  # a port taken between choosing it and binding it: another port, at most this often


class PrefectUnavailable(Exception):
    """No Prefect API to report to; the message is one line with the fix."""


def startup_timeout_s() -> int:
    try:
        return int(os.environ.get(TIMEOUT_SETTING) or STARTUP_TIMEOUT_S)
    except ValueError:
        return STARTUP_TIMEOUT_S


def check_configured() -> str | None:
    """The configured PREFECT_API_URL if it answers; None if none is configured. The
    server `campaign ui` recorded for this folder is put into this process's environment,
    so Prefect's own client reports to it too (the user's profile is not touched)."""
    from cli.ui_server import healthy
    from flows.prefect_api import ENVIRONMENT, RECORDED, configured_api

    configured = configured_api()
    if configured is None:
        return None
    url, source = configured
    if not healthy(url, timeout=5.0):
        if source == RECORDED:
            return None  # its server is gone (stopped by hand): a temporary one serves this run
        where = "the environment" if source == ENVIRONMENT else "the active Prefect profile"
        raise PrefectUnavailable(
            f"PREFECT_API_URL is {url} (from {where}) but no Prefect server answers there; "
            "start it with `campaign ui`, or stop using it: `campaign ui --stop` "
            "(or `prefect config unset PREFECT_API_URL` / `unset PREFECT_API_URL`)"
        )
    if source == RECORDED:
        os.environ["PREFECT_API_URL"] = url  # for what this process starts, and the checks below
    return url


@dataclass
class PrefectApi:
    url: str
    temporary: bool


def server_argv(port: int) -> list[str]:
    """Prefect's own temporary-server command line (what `SubprocessASGIServer` runs)."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]


# what Prefect sets for its temporary server: no UI, ephemeral mode
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}


class TemporaryServer:
    """One temporary Prefect API process: launched at once, waited for later, stopped on
    every way out (its output goes to a temporary file, read back only to say why it died)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.launches = 0
        self._output = tempfile.TemporaryFile()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def launch(self) -> None:
        from arms.server import free_port

        self.port, self.launches = free_port(), self.launches + 1
        self._output.seek(0)
        self._output.truncate()
        blocked = hasattr(signal, "pthread_sigmask")
        if blocked:  # the child keeps the mask: the terminal's Ctrl-C is this process's alone
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.proc = subprocess.Popen(
                server_argv(self.port),
                env={**os.environ, **SERVER_ENV},
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=subprocess.STDOUT,
            )
        finally:
            if blocked:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def output(self) -> str:
        self._output.seek(0)
        return self._output.read()[-4000:].decode("utf-8", errors="replace")

    def wait(self, timeout: float, announce: Callable[[str], None]) -> None:
        """Until the API answers its health check. A process that exits ends the wait at
        once (a port taken meanwhile: launched again on another); so does a Ctrl-C."""
        from cli.ui_server import healthy
        from flows import interrupt

        began = said = time.monotonic()
        while True:
            if interrupt.requested():
                self.stop()
                raise interrupt.CampaignInterrupted("interrupted while the local Prefect server was starting")
            assert self.proc is not None
            code = self.proc.poll()
            if code is not None:
                text = self.output()
                if "address already in use" in text.lower() and self.launches < _LAUNCHES:
                    self.launch()
                    continue
                self.stop()
                last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
                raise PrefectUnavailable(
                    f"the temporary Prefect server exited with code {code} while starting ({last[:200]}); "
                    "run `prefect server start` to see why"
                )
            if healthy(self.api_url, timeout=2.0):
                return
            now = time.monotonic()
            if now - began >= timeout:
                self.stop()
                raise PrefectUnavailable(
                    f"the temporary Prefect server did not answer within {timeout:.0f} s; the machine may be very busy: "
                    f"retry, raise {TIMEOUT_SETTING}, or start a lasting server with `campaign ui`"
                )
            if now - said >= 30:
                said = now
                announce(f"still starting the local Prefect server ({now - began:.0f} s; the machine is busy)...")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        self.stop()
        self._output.close()

    def kill_now(self) -> None:
        """The second Ctrl-C: no time for a clean stop."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()


class PrefectStart:
    """The Prefect API of one command, its temporary server already launched when none is
    configured (`begin`). A context manager: the server is stopped on the way out, on any
    path (the file refused, nothing to do, a Ctrl-C, the run's end)."""

    def __init__(self) -> None:
        self.configured: str | None = None
        self.problem: PrefectUnavailable | None = None  # raised by `api`, where the command makes it one line
        self.server: TemporaryServer | None = None
        self._forget: Callable[[], None] | None = None

    def __enter__(self) -> PrefectStart:
        try:
            self.configured = check_configured()
        except PrefectUnavailable as exc:
            self.problem = exc
            return self
        if self.configured is None:
            from flows import interrupt

            self.server = TemporaryServer()
            self._forget = interrupt.on_hard_exit(self.server.kill_now)
            self.server.launch()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._forget is not None:
            self._forget()
        if self.server is not None:
            self.server.close()

    @contextmanager
    def api(self, announce: Callable[[str], None]) -> Iterator[PrefectApi]:
        """Wait for the API (once), and report to it while the block runs."""
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from flows.prefect_api import temporary_api

        if self.problem is not None:
            raise self.problem
        if self.configured:
            with temporary_settings(updates={PREFECT_API_URL: self.configured}):  # settings already loaded miss the env
                yield PrefectApi(self.configured, temporary=False)
            return
        assert self.server is not None
        if self.server.proc is None:
            raise PrefectUnavailable("the temporary Prefect server was already stopped")
        announce("starting a local Prefect server...")
        self.server.wait(startup_timeout_s(), announce)
        with temporary_api(self.server.api_url), temporary_settings(updates={PREFECT_API_URL: self.server.api_url}):
            yield PrefectApi(self.server.api_url, temporary=True)


def begin() -> PrefectStart:
    """`with begin() as start: ... with start.api(announce) as api: ...`"""
    return PrefectStart()
