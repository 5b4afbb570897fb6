"""Prefect as its users expect it, against a real `prefect server start`
(tests/integration/test_multihost.py's fixtures): the `campaign` deployment a worker serves, which
the UI launches and reruns; run logs and heartbeats of in-process arms on the server;
`campaign status` linking each arm's newest attempt to its flow run; and a host with no
worker ending its arm blocked instead of holding the campaign."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from campaign.store.store import Store
from campaign.store.summary import PREFECT_API_EVENT, attempt_links
from campaign.store.tables import EventRow
from tests.campaigns import arm, campaign_file, gate, item, sim
from tests.prefectparts import env as _env


def two_arms(name: str, gated: bool = False) -> str:
    """A on a slow simulated runtime, B on a fast one, one item and a gate "faster". Gated
    for a verdict: three blocks (each arm gets three server starts, the least the gate's
    default decides on). The gain is tenfold because decode_tps is timed by the client: on a
    busy machine a fast simulated stream loses most to scheduling delay (600 against 300
    tok/s once measured 270 against 182, and a paired t over two blocks left it open)."""
    params = {"metric": "decode_tps", "probe": "decode", "min_gain": 0.10}
    return campaign_file(
        name,
        default_max_tokens=16,
        runtimes=[sim("slow", decode_tps=40.0), sim("fast", decode_tps=400.0)],
        arms=[arm("A", runtime="slow", context=4096), arm("B", runtime="fast", context=4096)],
        gates=[gate("faster", "relative_improvement", params, ["B"], ["A"])],
        queue=[
            item(
                "one",
                ["A", "B"],
                ["decode"],
                title="B against A",
                contexts=[1024],
                gate="faster",
                **({"repeats": 3} if gated else {}),
            )
        ],
    )


def _flow_runs(api: str, tag: str) -> dict[str, dict]:
    runs = httpx.post(f"{api}/flow_runs/filter", json={"flow_runs": {"tags": {"all_": [tag]}}}, timeout=10).json()
    return {r["id"]: r for r in runs}


def _status(tmp_path: Path, api: str, db: str) -> list[str]:
    env = {**_env(tmp_path, api, db, "status"), "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "cli", "status"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def no_worker(name: str) -> str:
    """R on a runtime of host "gone" (no worker there), L on one here."""
    return campaign_file(
        name,
        default_max_tokens=16,
        runtimes=[{"name": "remote", "adapter": "simulator", "host": "gone"}, {"name": "here", "adapter": "simulator"}],
        arms=[arm("R", runtime="remote", context=4096), arm("L", runtime="here", context=4096)],
        queue=[
            item("far", ["R"], ["decode"], title="an arm on a host whose worker died", contexts=[1024]),
            item("near", ["L"], ["decode"], title="an arm here", contexts=[1024]),
        ],
    )


def test_attempt_links_name_the_host_and_link_only_runs_on_a_lasting_server(tmp_path: Path) -> None:
    """Which server an attempt's flow run is on is what the run that ended it recorded;
    a temporary server gives no link (its pages are gone), a lasting one gives
    `<ui>/runs/flow-run/<id>`, and PREFECT_UI_URL, when given, is the UI linked to."""
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    from campaign.store import queue
    from flows.resolve import load_campaign

    path = tmp_path / "c.toml"
    path.write_text(two_arms("links"))
    cid = queue.register(store, load_campaign(path), str(path)).id
    assert cid is not None
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store.add(EventRow(campaign_id=cid, kind=PREFECT_API_EVENT, message="", at=t0))  # a temporary server
    old = store.new_attempt(cid, "one", "A", {})
    store.update(type(old), old.id, state="done", flow_run_id="run-old", ended_at=t0 + timedelta(minutes=1))
    store.add(
        EventRow(campaign_id=cid, kind=PREFECT_API_EVENT, message="http://srv:4200/api", at=t0 + timedelta(minutes=2))
    )
    new = store.new_attempt(cid, "one", "A", {})
    store.update(type(new), new.id, state="done", flow_run_id="run-new", host="h9", ended_at=t0 + timedelta(minutes=3))
    links = attempt_links(store, cid)
    assert [(link.flow_run_id, link.url) for link in links] == [
        ("run-old", None),
        ("run-new", "http://srv:4200/runs/flow-run/run-new"),
    ]
    assert links[1].host == "h9"
    [newest] = attempt_links(store, cid, ui_url="https://prefect.lab", newest_only=True)
    assert newest.url == "https://prefect.lab/runs/flow-run/run-new"

    # the arm's page says the same: its host, and a link only for the lasting server's run
    from reports.site import write_site

    os.environ.pop("PREFECT_UI_URL", None)
    out = write_site(store, "links", tmp_path / "site")
    page = (out.parent / "arms" / "a.html").read_text(encoding="utf-8")
    table = page[page.index('<table id="attempts">') :]
    table = table[: table.index("</table>")]
    assert 'href="http://srv:4200/runs/flow-run/run-new"' in table and "run-old" not in table
    assert "<td>h9</td>" in table


def test_the_commands_temporary_server_is_not_taken_for_a_configured_one(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`campaign run` puts its temporary server into Prefect's settings like a configured
    one; while `temporary_api` marks it, `configured_api` does not count it, so no run
    links to a server that is gone with the command, and none is sent its logs."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows import prefect_api

    monkeypatch.chdir(tmp_path)  # no `campaign ui` record here
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    url = "http://127.0.0.1:9/api"
    with temporary_settings(updates={PREFECT_API_URL: url}):
        assert prefect_api.configured_api() == (url, prefect_api.PROFILE)
        with prefect_api.temporary_api(url):
            assert prefect_api.configured_api() is None
        assert prefect_api.configured_api() == (url, prefect_api.PROFILE)
