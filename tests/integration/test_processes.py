"""Process facts through psutil (Linux and macOS alike, no /proc): command lines for the
orphan check, resident memory of a server and all its descendants, and stopping a helper
that left the server's process group."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from campaign.core.processes import (
    cmdline_of,
    group_processes,
    process_start,
    rss_of_group,
    same_process_alive,
    stop_group,
)

PARENT = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); x = bytearray(40_000_000); time.sleep(60)'])\n"
    "y = bytearray(20_000_000)\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


def _server() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not psutil.Process(proc.pid).children():
        time.sleep(0.05)
    return proc


def test_command_line_start_time_and_liveness() -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd, it shows the parent's command line
        while cmdline_of(proc.pid) != " ".join(argv) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cmdline_of(proc.pid) == " ".join(argv)
        started = process_start(proc.pid)
        assert started is not None and same_process_alive(proc.pid, started)
        assert not same_process_alive(proc.pid, started - 3600)  # same pid, another process
    finally:
        proc.kill()
        proc.wait()
    assert cmdline_of(proc.pid) is None and process_start(proc.pid) is None


def test_memory_counts_descendants_and_stop_reaches_those_that_left_the_group() -> None:
    proc = _server()
    try:
        (child,) = psutil.Process(proc.pid).children()
        assert {p.pid for p in group_processes(proc.pid)} == {proc.pid, child.pid}  # type: ignore[attr-defined]
        deadline = time.monotonic() + 10
        while child.memory_info().rss < 40_000_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        leader, child_rss = psutil.Process(proc.pid).memory_info().rss, child.memory_info().rss
        total = rss_of_group(proc.pid)
        assert child_rss >= 40_000_000
        assert total is not None and total >= 0.95 * (leader + child_rss)  # the child's 40 MB are in it
        stop_group(proc.pid, grace_s=5.0, proc=proc)  # type: ignore[arg-type]
        child.wait(timeout=10)
        assert not child.is_running()
    finally:
        for p in (
            [proc.pid, *[c.pid for c in psutil.Process(proc.pid).children()]] if psutil.pid_exists(proc.pid) else []
        ):
            try:
                psutil.Process(p).kill()
            except psutil.NoSuchProcess:
                pass
    assert rss_of_group(proc.pid) is None
