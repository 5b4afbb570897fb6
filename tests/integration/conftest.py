"""The integration lane: real processes on loopback, Prefect, PostgreSQL, Chromium."""

from __future__ import annotations

import pytest

from tests.conftest import postgres_database


@pytest.fixture
def db_url(request: pytest.FixtureRequest) -> str:
    """The store tests of tests/unit, on a fresh PostgreSQL database (tests/integration/test_store.py)."""
    return postgres_database(request)
