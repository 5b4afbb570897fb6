"""Shared fixtures. Prefect runs against one temporary server for the whole session."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server for the session; heartbeats off (they cost ~1 s a flow).
    On two cores shared by three test workers it has answered 503 for longer than the
    client's 5 retries (a subflow's task run create, in the seed-robustness test): 10."""
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    updates: dict = {PREFECT_CLIENT_MAX_RETRIES: 10}
    try:
        from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY

        updates[PREFECT_FLOWS_HEARTBEAT_FREQUENCY] = None
    except ImportError:
        pass
    with prefect_test_harness(server_startup_timeout=90):
        with temporary_settings(updates=updates):
            yield


@pytest.fixture
def examples() -> Path:
    return ROOT / "examples"


# -- a green run means the real parts ran ---------------------------------------------------------

# Tests that need a real part (llama-server + model, headless Chromium, pyarrow, PostgreSQL)
# skip with a reason when it is missing, so a laptop can still run the rest. The README's
# test command (which CI runs) installs every one of them, so there a skip means a real part
# silently did not run: the session fails unless CAMPAIGN_ALLOW_SKIPS=1 says that is wanted.
_skipped: list[str] = []
# seconds each lane's tests took (setup, call and teardown summed over every worker):
# what a lane costs, where xdist runs the lanes side by side and the wall clock cannot tell
_lane_seconds: dict[str, float] = {}
_lane_tests: dict[str, set[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    parts = report.nodeid.split("/")
    lane = parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"
    _lane_seconds[lane] = _lane_seconds.get(lane, 0.0) + report.duration
    _lane_tests.setdefault(lane, set()).add(report.nodeid)
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _lane_seconds:
        lanes = ", ".join(
            f"{lane} {len(_lane_tests[lane])} tests {seconds / 60:.1f} min"
            for lane, seconds in sorted(_lane_seconds.items())
        )
        terminalreporter.write_line(f"test time per lane (summed over workers): {lanes}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _skipped or os.environ.get("CAMPAIGN_ALLOW_SKIPS") == "1":
        return
    if session.config.getoption("collectonly", default=False):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line(
            f"{len(_skipped)} test(s) skipped: a real part they need did not run "
            "(set CAMPAIGN_ALLOW_SKIPS=1 to accept that on a machine without it):",
            red=True,
        )
        for line in _skipped:
            reporter.write_line(f"  {line}", red=True)
    if exitstatus == 0:
        session.exitstatus = 1


# -- a real PostgreSQL for the store tests on both backends ----------------------------------------


@pytest.fixture(scope="session")
def postgres_cluster():
    """One throwaway PostgreSQL cluster for the session (tests/pgcluster.py); skipped
    (which fails a CI session) where the server programs are not installed."""
    from tests.pgcluster import Cluster, server_bin

    if server_bin("initdb") is None:
        pytest.skip("PostgreSQL server programs not installed (apt-get install postgresql)")
    cluster = Cluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One lasting `prefect server start` for the session's host-placement tests."""
    from tests.prefectparts import lasting_server

    yield from lasting_server(tmp_path_factory.mktemp("prefect-server"))


_pg_databases = iter(range(1, 1_000_000))


def postgres_database(request: pytest.FixtureRequest) -> str:
    """A new database in the session's PostgreSQL cluster (integration lane)."""
    cluster = request.getfixturevalue("postgres_cluster")
    return cluster.create_database(f"t{next(_pg_databases)}")


# -- lanes --------------------------------------------------------------------------------------

# tests/unit: pure logic and in-process servers, no subprocess (tests/unit/conftest.py holds
# that); tests/integration: real processes, Prefect, PostgreSQL, Chromium; tests/e2e: whole
# example campaigns and real runtimes. The folder is the lane; the marker follows from it,
# so `-m "not e2e"` and `-m integration` select by lane too.
LANES = ("unit", "integration", "e2e")


# Real runtimes (llama.cpp, MLX, vLLM) are marked by what they need, and all of them
# `runtimes`, so `-m runtimes` starts every real server there is.
RUNTIME_MARKS = ("llamacpp", "mlx", "vllm")

# The suite runs on several pytest-xdist workers (the README's command: `-n 3 --dist
# loadgroup`): most integration and e2e time is spent waiting on a simulated clock, at a
# quarter of a core. A real runtime computes instead, on every core it finds, and two of
# them side by side made each take ten times as long; an open-loop load schedule must
# send on time, and beside two busy workers the sweep example's client fell 12-37 ms
# behind (its runs then, rightly, measure nothing valid). So every test that starts a
# real runtime or times a schedule (`cpu_bound`) is in one xdist group, and those run one
# after another on one worker.
CPU_GROUP = "cpu-bound"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        lane = Path(str(item.fspath)).parent.name
        if lane in ("integration", "e2e"):
            item.add_marker(getattr(pytest.mark, lane))
        runtime = any(item.get_closest_marker(mark) for mark in RUNTIME_MARKS)
        if runtime:
            item.add_marker(pytest.mark.runtimes)
        if runtime or item.get_closest_marker("cpu_bound"):
            item.add_marker(pytest.mark.xdist_group(CPU_GROUP))
