"""Stopping a campaign cleanly on Ctrl-C, and at once on the second.

Why cooperative and not a KeyboardInterrupt: a KeyboardInterrupt lands wherever the main
thread happens to be (inside Prefect's engine, a database commit, a thread pool wait)
and leaves worker threads running on. Here the first SIGINT only sets a flag, cancels
the probe coroutines that are running (each runs under `run_cancellable`) and sends
SIGTERM to the servers the arms launched; every layer then finishes its own bookkeeping
(the probe run and the attempt are marked interrupted, the server group is stopped, the
device slot is released) and raises `CampaignInterrupted` up to the command line, which
prints one line and exits 130. The second SIGINT kills what is left and exits at once;
`campaign resume` cleans up after that, as after a crash.

An arm run by `campaign worker` is stopped the same way: Ctrl-C of `campaign run` cancels
the arm's flow run, the worker's runner sends SIGTERM to the flow run's process, and
`stop_on_sigterm` turns that SIGTERM into the same cooperative stop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

EXIT_CODE = 130

_requested = threading.Event()
_lock = threading.RLock()  # re-entrant: the signal handlers call request() on the main thread, which may hold it
_server_groups: set[int] = set()
_loops: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = {}
_on_hard_exit: list[Callable[[], None]] = []


class CampaignInterrupted(Exception):
    """The user asked the campaign to stop; everything it was doing is recorded as
    interrupted and `campaign resume` carries on from there."""


def requested() -> bool:
    return _requested.is_set()


def check(what: str = "") -> None:
    """Raise `CampaignInterrupted` if a stop was asked for (a safe point between steps)."""
    if _requested.is_set():
        raise CampaignInterrupted(what or "interrupted")


def request() -> None:
    """Ask everything to stop: running probes are cancelled, launched servers get SIGTERM."""
    _requested.set()
    with _lock:
        groups = list(_server_groups)
        loops = list(_loops.values())
    for loop, task in loops:
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:  # the loop just closed: its probe is over anyway
            pass
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)


def reset() -> None:
    """Forget a previous stop request (tests run several campaigns in one process)."""
    _requested.clear()


def track_server(pgid: int) -> None:
    with _lock:
        _server_groups.add(pgid)
    if _requested.is_set():  # launched just as the stop came in
        _signal_group(pgid, signal.SIGTERM)


def untrack_server(pgid: int) -> None:
    with _lock:
        _server_groups.discard(pgid)


def on_hard_exit(callback: Callable[[], None]) -> Callable[[], None]:
    """Something to kill on the second Ctrl-C (e.g. the temporary Prefect server)."""
    _on_hard_exit.append(callback)
    return lambda: _on_hard_exit.remove(callback) if callback in _on_hard_exit else None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_cancellable(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, cancelled by a stop request: raises `CampaignInterrupted`."""
    if _requested.is_set():
        coro.close()
        raise CampaignInterrupted("interrupted before start")

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        key = id(task)
        with _lock:
            _loops[key] = (asyncio.get_running_loop(), task)
        try:
            if _requested.is_set():
                raise asyncio.CancelledError
            return await coro
        finally:
            with _lock:
                _loops.pop(key, None)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if _requested.is_set():
            raise CampaignInterrupted("interrupted") from None
        raise
    except Exception:
        if _requested.is_set():  # the server went away under the probe: that is the stop
            raise CampaignInterrupted("interrupted") from None
        raise


def _own_flow_run_process() -> bool:
    """This process was started by a worker's runner to run the current flow run (the
    runner names it in $PREFECT__FLOW_RUN_ID), as opposed to an arm run in-process by
    `campaign run`, whose SIGTERM stays Prefect's."""
    from prefect.runtime import flow_run

    return bool(flow_run.id) and os.environ.get("PREFECT__FLOW_RUN_ID") == str(flow_run.id)


class SigtermStop:
    """What `stop_on_sigterm` saw: whether the runner's SIGTERM stopped the arm."""

    def __init__(self) -> None:
        self.signalled = False

    def end_state(self, message: str) -> Any:
        """The flow run's end state after a SIGTERM stop: Cancelled, what the runner's
        cancellation asked for and what the Prefect UI shows for a stopped run; None when
        no SIGTERM came. `message` is the arm's outcome's; the outcome itself is in the store,
        where `campaign run` reads it."""
        if not self.signalled:
            return None
        from prefect.states import Cancelled

        return Cancelled(message=f"stopped on this host: {message or 'interrupted'}")


@contextmanager
def stop_on_sigterm() -> Iterator[SigtermStop]:
    """In a worker's flow-run process: the runner's SIGTERM (the flow run was cancelled,
    e.g. by Ctrl-C of `campaign run`) is a stop request, as the first Ctrl-C is locally.

    Why not Prefect's own handling: it raises `TerminationSignal` wherever the main
    thread is, past every `except Exception`, so the arm's server was stopped but its
    attempt stayed `running` and its probe run ended `failed`. Here the arm stops at its
    safe points and records the stop (probe run and attempt `interrupted`, server
    stopped, device slot released), and the flow returns `SigtermStop.end_state`. A
    second SIGTERM goes to Prefect's handler, as before. Elsewhere (an arm run
    in-process by `campaign run`) this does nothing."""
    stop = SigtermStop()
    if not _own_flow_run_process() or threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handle(signum: int, frame: Any) -> None:
        if stop.signalled and callable(previous):
            previous(signum, frame)
            return
        stop.signalled = True
        request()

    signal.signal(signal.SIGTERM, handle)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


class SigintHandler:
    """Install the two-step Ctrl-C for the duration of a `with` block (main thread only)."""

    def __init__(self, announce: Callable[[str], None] | None = None):
        self.announce = announce or (lambda text: print(text, file=sys.stderr, flush=True))
        self._previous: Any = None
        self.count = 0

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.announce(
                "stopping: the running arm is being stopped and recorded as interrupted (Ctrl-C again to exit at once)"
            )
            request()
            return
        with _lock:
            groups = list(_server_groups)
        for pgid in groups:
            _signal_group(pgid, signal.SIGKILL)
        for callback in list(_on_hard_exit):
            try:
                callback()
            except Exception:
                pass
        self.announce("exited at once; `campaign resume` stops what was left running and carries on")
        os._exit(EXIT_CODE)

    def __enter__(self) -> SigintHandler:
        reset()
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
