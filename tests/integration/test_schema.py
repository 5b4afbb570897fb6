"""A malformed campaign file through the CLI: one paragraph, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.campaigns import write_campaign
from tests.unit.test_schema import GOOD


def test_cli_prints_a_paragraph_and_exits_2(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, GOOD.replace("context = 4096\nrecipe", "context = -1\nrecipe"))
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--db", str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "arms[0] (id 'A').context: found -1, expected" in proc.stderr
