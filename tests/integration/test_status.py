"""`campaign status` at 80 columns, as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from campaign.core.states import Verdict
from campaign.store.store import Store
from campaign.store.tables import VerdictRow
from tests import synthetic
from tests.paths import ROOT
from tests.unit.test_status import LONG, _rows  # noqa: F401 - helpers and fixtures


def test_status_at_80_columns_answers_first_and_verbose_shows_every_reason_in_full(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    cid = synthetic.build(store, synthetic.Options())
    store.add(VerdictRow(campaign_id=cid, gate_id="spec", verdict=Verdict.PASS, reason=LONG))
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    short = subprocess.run(
        [sys.executable, "-m", "cli", "status", "--db", str(tmp_path / "c.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert short.returncode == 0, short.stderr
    assert "Answer (" in short.stdout and "Gate verdicts" not in short.stdout  # the reasons fold away
    answer = short.stdout[short.stdout.index("Answer (") : short.stdout.index("Campaign queue")]
    assert max(len(line) for line in answer.splitlines()) <= 80
    assert "spec: " in answer and LONG not in " ".join(answer.split())  # the reason is not the answer
    out = subprocess.run(
        [sys.executable, "-m", "cli", "status", "--verbose", "--db", str(tmp_path / "c.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    gates_table = out.stdout[out.stdout.index("Gate verdicts") : out.stdout.index("Campaign queue")]
    reasons = _rows(gates_table)
    assert reasons["spec"] == LONG  # every word, in order, none cut
    widths = {len(line.strip("│").split("│")[-1]) for line in gates_table.splitlines() if line.startswith("│")}
    assert min(widths) >= 30  # the reason column, not squeezed to a few characters
    queue_table = out.stdout[out.stdout.index("Campaign queue") :]
    notes = _rows(queue_table)
    assert notes["hw"] == "Private compiler is unavailable in this build"  # keyed by the item's id, never left out
