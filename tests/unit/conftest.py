"""The unit lane starts no process and no Prefect server: a test here that tries fails
with `LaneViolation`, naming where it belongs. That keeps `pytest tests/unit` the fast
loop for working on the code (under two minutes on two cores), whatever is added to it."""

from __future__ import annotations

import asyncio
import asyncio.subprocess
import multiprocessing
import subprocess
from pathlib import Path

import pytest


class LaneViolation(RuntimeError):
    """A unit test tried to start a process or a server."""


def _refuse(what: str):  # type: ignore[no-untyped-def]
    def refuse(*args: object, **kwargs: object) -> None:
        raise LaneViolation(
            f"tests/unit starts no {what}: move this test to tests/integration (real processes) or tests/e2e"
        )

    return refuse


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("subprocess"))
    monkeypatch.setattr(asyncio, "create_subprocess_exec", _refuse("subprocess"))
    monkeypatch.setattr(asyncio.subprocess, "create_subprocess_exec", _refuse("subprocess"))
    monkeypatch.setattr(asyncio, "create_subprocess_shell", _refuse("subprocess"))
    monkeypatch.setattr(multiprocessing.Process, "start", _refuse("process"))


@pytest.fixture(scope="session")
def prefect_harness():  # type: ignore[no-untyped-def]
    raise LaneViolation("tests/unit starts no Prefect server: a test that runs flows belongs in tests/integration")


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """The store on SQLite here; tests/integration runs the same store tests on PostgreSQL."""
    return f"sqlite:///{tmp_path / 'c.db'}"
