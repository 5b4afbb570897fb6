"""The README's first command, in-process: the demo campaign runs through Prefect and the
report's index lists every gate with its verdict and every queue item with its state."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.store.store import Store

pytestmark = pytest.mark.integration


def test_demo_campaign_and_report(tmp_path: Path, examples: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow
    from flows.resolve import load_campaign
    from reports.site import write_site

    spec = load_campaign(examples / "demo.toml")
    store = Store(f"sqlite:///{tmp_path / 'demo.db'}")
    result = campaign_flow(str(examples / "demo.toml"), store.url, str(tmp_path / "work"))
    assert set(result["items"].values()) == {"done"}
    assert result["verdicts"] == {"cache": "pass", "spec": "pass", "q8": "fail"}

    index = write_site(store, "demo", tmp_path / "site")
    html = index.read_text()
    for gate in spec.gates:
        assert gate.title in html
    for item in spec.queue:
        assert item.title in html
    for verdict in ("pass", "fail"):
        assert f">{verdict}<" in html
