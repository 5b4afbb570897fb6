"""`campaign status` at 80 columns: every reason is shown in full, wrapped; the titles are
what gives way (narrowed, then left out)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from cli.status_view import fit, render_status
from tests.campaigns import arm, campaign_file, item

LONG = (
    "decode_tps: A1 107 (+150% [+130%, +171%]) vs A0 40.0; needs +10% or more; tool loop A1 2/3, A0 3/3; "
    "error rate A1 0.00, A0 0.00; queue depth A1 up to 2 while A0 stayed at 0"
)


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


def test_titles_give_way_before_the_reason() -> None:
    wide_title, wide_text = fit(200, [8, 12, 14], title=30, text=60)
    assert (wide_title, wide_text) == (30, 60)  # room for both: both whole
    title, text = fit(110, [8, 12, 14], title=30, text=90)
    assert title is not None and title < 30 and text > 40  # the title narrows first
    title, text = fit(80, [8, 12, 14], title=30, text=150)
    assert title is None and text == 80 - 34 - 13  # then goes, and the reason takes its place


def test_a_campaign_without_gates_says_so_instead_of_an_empty_table(tmp_path: Path) -> None:
    """An empty rich table squeezes each header into a column of its own width ("reas" over
    "on"): a campaign with no gates gets one line saying there are none, then its queue."""
    from campaign.store import queue
    from campaign.store.store import Store
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(campaign_file("no-gates", arms=[arm("A")], queue=[item("one", ["A"], ["decode"], contexts=[1024])]))
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    queue.register(store, load_campaign(path), str(path))
    console = Console(width=80, record=True, color_system=None)
    render_status(console, store, "no-gates")
    text = console.export_text()
    assert "Gate verdicts: none" in text and "reas" not in text
    assert "pending" in text.split("Campaign queue")[1]  # the queue follows, its item not run yet
