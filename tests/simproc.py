"""Start the simulator as a real process for a test, with the project's own lifecycle code."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from arms.server import ServerProcess, free_port


@contextmanager
def simulator(tmp_path: Path, **profile: Any) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "arms.simulator", "--port", str(port), "--profile-json", json.dumps(profile)]
    root = str(Path(__file__).resolve().parent.parent)
    server = ServerProcess(
        argv=argv,
        base_url=f"http://127.0.0.1:{port}",
        log_path=tmp_path / f"sim-{port}.log",
        env={"PYTHONPATH": root},
        startup_timeout_s=30,
    )
    with server:
        yield server.base_url
