"""`campaign probe URL`: summary, JSON records per conversation turn, and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from arms.server import free_port
from tests.simproc import simulator

pytestmark = pytest.mark.integration


def campaign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "campaign.cli", *args], capture_output=True, text=True, timeout=300)


def test_agent_load_json_and_exit_0(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    with simulator(tmp_path, slots=2, prefill_tps=20000.0, decode_tps=300.0, faults={"error_5xx_every": 7}) as url:
        proc = campaign(
            "probe", url, "--probe", "agent-load", "--conversations", "3", "--turns", "4",
            "--system-tokens", "50", "--task-tokens", "80", "--turn-tokens", "40", "--max-tokens", "8",
            "--runtime", "simulator", "--json", str(out),
        )
    assert proc.returncode == 0, proc.stderr
    assert "TTFT per turn" in proc.stdout
    assert "failed" in proc.stdout  # failed requests are counted in the summary
    doc = json.loads(out.read_text())
    load = [t for t in doc["turns"] if t["phase"] == "load"]
    assert {"conversation", "turn", "ttft_s"} <= set(load[0])
    assert len({t["conversation"] for t in load}) == 3
    assert doc["requests"] and doc["measurements"]


def test_bad_arguments_exit_2_and_unreachable_exit_1(tmp_path: Path) -> None:
    proc = campaign("probe", "http://127.0.0.1:9", "--probe", "warp-drive")
    assert proc.returncode == 2 and "expected one of" in proc.stderr
    proc = campaign("probe", "http://127.0.0.1:9", "--probe", "decode", "--conversations", "3")
    assert proc.returncode == 2 and "--conversations" in proc.stderr
    proc = campaign("probe", f"http://127.0.0.1:{free_port()}", "--probe", "decode")
    assert proc.returncode == 1 and "cannot reach" in proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
