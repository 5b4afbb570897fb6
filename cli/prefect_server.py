"""The Prefect API a `campaign run` reports to: the configured one, checked first, or a
temporary local server that this command starts, waits for, and stops.

Why the command starts the temporary server itself instead of leaving it to Prefect's
first client (which would start the same server, Prefect's SubprocessASGIServer, and
finds this one running):

1. a Ctrl-C in the terminal goes to the whole foreground process group, and Prefect's
   server process would die with it while the campaign still needs it to release its
   device slot -- so it is started from a thread with SIGINT blocked, a mask the child
   keeps (SIGTERM still stops it);
2. on a busy machine it needs far more than Prefect's default 20 s to answer (measured
   once on two cores loaded with three busy processes and more: 102 s with a new Prefect
   database, 59 s with an existing one), so it gets `STARTUP_TIMEOUT_S`
   (Prefect's own setting, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, wins when
   the user set it), while a server process that exits ends the wait at once;
3. the user sees "starting a local Prefect server..." instead of silence, and one line
   instead of a traceback if it truly cannot start.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

STARTUP_TIMEOUT_S = 300
TIMEOUT_SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"


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


@contextmanager
def prefect_api(announce: Callable[[str], None]) -> Iterator[PrefectApi]:
    """Yield the API runs report to; a temporary server is stopped on the way out."""
    configured = check_configured()
    if configured:
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: configured}):  # settings already loaded miss the env
            yield PrefectApi(configured, temporary=False)
        return
    announce("starting a local Prefect server...")
    os.environ.setdefault(TIMEOUT_SETTING, str(STARTUP_TIMEOUT_S))
    from prefect.server.api.server import SubprocessASGIServer

    from flows import interrupt

    server = SubprocessASGIServer()  # the instance Prefect's clients reuse

    def kill_now() -> None:  # the second Ctrl-C: no time for a clean stop
        proc = server.server_process
        if proc is not None and proc.poll() is None:
            proc.kill()

    forget = interrupt.on_hard_exit(kill_now)
    try:
        _start(server, startup_timeout_s(), announce)
        yield PrefectApi(server.api_url, temporary=True)
    finally:
        forget()
        server.stop()


def _start(server: Any, timeout: int, announce: Callable[[str], None]) -> None:
    """Start the server from a thread whose SIGINT is blocked (the child inherits the
    mask), while this thread watches: a server process that exits, or a Ctrl-C, ends
    the wait at once instead of after the whole timeout."""
    from flows import interrupt

    outcome: dict[str, BaseException] = {}

    def start() -> None:
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            server.start(timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - reported by the watching thread
            outcome["error"] = exc

    thread = threading.Thread(target=start, name="prefect-server-start", daemon=True)
    began = time.monotonic()
    thread.start()
    said = began
    while thread.is_alive():
        thread.join(0.25)
        proc = server.server_process
        code = proc.poll() if proc is not None else None
        if interrupt.requested() or (code is not None and code != 3):  # 3: port taken, Prefect retries
            server.stop()
            if interrupt.requested():
                raise interrupt.CampaignInterrupted("interrupted while the local Prefect server was starting")
            raise PrefectUnavailable(f"the temporary Prefect server exited with code {code} while starting; run `prefect server start` to see why")
        if time.monotonic() - said >= 30:
            said = time.monotonic()
            announce(f"still starting the local Prefect server ({said - began:.0f} s; the machine is busy)...")
    error = outcome.get("error")
    if error is not None:
        server.stop()
        detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise PrefectUnavailable(
            f"the temporary Prefect server did not answer within {timeout} s ({detail}); the machine may be very busy: "
            f"retry, raise {TIMEOUT_SETTING}, or start a lasting server with `campaign ui`"
        )
