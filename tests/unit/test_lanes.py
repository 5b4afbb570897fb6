"""The lanes hold: every test lives in tests/unit, tests/integration or tests/e2e, and a
unit test that starts a process fails instead of silently slowing the fast lane."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from tests.paths import TESTS
from tests.unit.conftest import LaneViolation


def test_a_unit_test_cannot_start_a_process() -> None:
    with pytest.raises(LaneViolation, match="move this test to tests/integration"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(LaneViolation):
        asyncio.run(asyncio.create_subprocess_exec(sys.executable, "-c", "pass"))


def test_every_test_module_is_in_a_lane() -> None:
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert loose == [], f"tests outside a lane folder (unit, integration, e2e): {loose}"
    for lane in ("unit", "integration", "e2e"):
        assert (TESTS / lane / "__init__.py").exists()
        assert any((TESTS / lane).glob("test_*.py")), lane


def test_the_lane_markers_follow_the_folders(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("integration") is None
    assert request.node.get_closest_marker("e2e") is None
