"""Operating-system processes: is it alive, is it still the same one, stop its group.

Why in the core: the queue proves a holder dead (own host, pid gone or reused) before it
takes an attempt over, and `campaign resume` stops a server a killed run left behind;
both are facts about processes, not about any runtime, so every layer may ask them here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


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
    _signal_group(pgid, signal.SIGTERM)
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
        _signal_group(pgid, signal.SIGKILL)
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


def _signal_group(pgid: int, sig: int) -> None:
    """Signal a process group unless it is gone: a group that ended on its own between
    two steps of `stop_group` is what stopping it wanted."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


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
    return pid_gone(pid, started) is None


def pid_gone(
    pid: int, started: float | None, gone: str = "is gone", reused: str = "now belongs to a later process"
) -> str | None:
    """Why the local process `pid` (started at `started`, when known) is provably not
    running any more, or None while it is: the one liveness rule for everything held by
    a process on this host (an attempt, a campaign's runner, a device slot). `gone` and
    `reused` word the two proofs for the caller's message."""
    now = process_start(pid)
    if now is None:
        return f"pid {pid} {gone}"
    if started is not None and abs(now - started) > 1.0:
        return f"pid {pid} {reused}"
    return None


def holder_gone(
    here: bool,
    pid: int | None,
    started: float | None,
    silent_s: float | None,
    stale_s: float,
    gone: str = "is gone",
    reused: str = "now belongs to a later process",
) -> str | None:
    """Why a holder is provably gone, or None if it may still run. On this host its
    process decides (alive: it keeps what it holds, however late its signs of life);
    elsewhere only silence longer than `stale_s` proves it (a pid on another machine says
    nothing here). Returns "silent" reasons as "silent for N s (limit M s)"; callers name
    the kind of silence (heartbeat, lease)."""
    if here and pid:
        return pid_gone(pid, started, gone, reused)
    if silent_s is not None and silent_s > stale_s:
        return f"silent for {silent_s:.0f} s (limit {stale_s:.0f} s)"
    return None


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
