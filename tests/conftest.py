"""Shared fixtures. Prefect runs against one temporary server for the whole session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server for the session; heartbeats off (they cost ~1 s a flow)."""
    from prefect.settings import temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    updates = {}
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
