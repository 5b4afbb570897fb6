"""`campaign status` at 80 columns: every reason is shown in full, wrapped; the titles are
what gives way (narrowed, then left out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from campaign.states import Verdict
from cli.status_view import fit
from campaign.store import Store, VerdictRow
from reports import synthetic

ROOT = Path(__file__).resolve().parent.parent
LONG = ("decode_tps: A1 107 (+150% [+130%, +171%]) vs A0 40.0; needs +10% or more; tool loop A1 2/3, A0 3/3; "
        "error rate A1 0.00, A0 0.00; queue depth A1 up to 2 while A0 stayed at 0")


def _rows(table: str) -> dict[str, str]:
    """First cell -> last cell's text, continuation lines joined (a row goes on while its
    first cell is blank)."""
    rows: dict[str, list[str]] = {}
    key = None
    for line in table.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            key = cells[0]
            rows[key] = []
        if key is not None and cells[-1]:
            rows[key].append(cells[-1])
    return {k: " ".join(v) for k, v in rows.items()}


def test_status_at_80_columns_shows_every_reason_in_full(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    cid = synthetic.build(store, synthetic.Options())
    store.add(VerdictRow(campaign_id=cid, gate_id="spec", verdict=Verdict.PASS, reason=LONG))
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "cli", "status", "--db", str(tmp_path / "c.db")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    gates_table = out.stdout[out.stdout.index("Gate verdicts"):out.stdout.index("Campaign queue")]
    reasons = _rows(gates_table)
    assert reasons["spec"] == LONG  # every word, in order, none cut
    widths = {len(line.strip("│").split("│")[-1]) for line in gates_table.splitlines() if line.startswith("│")}
    assert min(widths) >= 30  # the reason column, not squeezed to a few characters
    queue_table = out.stdout[out.stdout.index("Campaign queue"):]
    notes = _rows(queue_table)
    assert notes["4"] == "Private compiler is unavailable in this build"


def test_titles_give_way_before_the_reason() -> None:
    wide_title, wide_text = fit(200, [8, 12, 14], title=30, text=60)
    assert (wide_title, wide_text) == (30, 60)  # room for both: both whole
    title, text = fit(110, [8, 12, 14], title=30, text=90)
    assert title is not None and title < 30 and text > 40  # the title narrows first
    title, text = fit(80, [8, 12, 14], title=30, text=150)
    assert title is None and text == 80 - 34 - 13  # then goes, and the reason takes its place
