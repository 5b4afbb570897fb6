"""Campaigns on a real PostgreSQL server (tests/pgcluster.py): two `campaign run`
processes on one campaign never run an arm twice; the password never reaches Prefect."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.core.states import AttemptState, ProbeRunState
from campaign.store.store import Store
from tests.campaigns import arm, campaign_file, item
from tests.paths import ROOT

pytestmark = pytest.mark.integration


def two_items(name: str) -> str:
    """A and B on the simulator, two items of two blocks each."""
    return campaign_file(
        name,
        default_max_tokens=16,
        arms=[arm("A", context=4096), arm("B", context=4096)],
        queue=[
            item(key, ["A", "B"], ["decode"], title=title, contexts=[1024], repeats=2)
            for key, title in (("one", "first"), ("two", "second"))
        ],
    )


def test_two_campaign_runs_on_one_postgres_campaign_run_each_arm_once(tmp_path: Path, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    url = postgres_cluster.create_database("tworuns")
    path = tmp_path / "c.toml"
    path.write_text(two_items("tworuns"))
    procs = []
    for n in range(2):
        env = {
            **os.environ,
            "PREFECT_HOME": str(tmp_path / f"prefect{n}"),
            "PYTHONPATH": str(ROOT),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "CAMPAIGN_DB": url,
        }
        env.pop("PREFECT_API_URL", None)
        cmd = [sys.executable, "-m", "cli", "run", str(path), "--workdir", str(tmp_path / f"w{n}")]
        procs.append(
            subprocess.Popen(
                cmd,
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    results = [(p.wait(timeout=600), p.communicate()) for p in procs]
    codes = sorted(code for code, _ in results)
    # one ran the campaign; the other either found it running (exit 1, naming the
    # runner) or found it finished (exit 0, nothing to do)
    assert codes[0] == 0, results
    if codes[1] != 0:
        assert any("already being run by" in err for code, (_out, err) in results if code != 0), results

    store = Store(url)
    camp = store.campaign("tworuns")
    assert camp is not None
    attempts = store.attempts(camp.id)
    keys = [(a.item_key, a.arm_id, a.repeat) for a in attempts]
    assert sorted(keys) == sorted({(i, a, r) for i in ("one", "two") for a in "AB" for r in range(2)})  # each arm once
    assert all(a.state == AttemptState.DONE and a.host and a.heartbeat_at for a in attempts)
    for att in attempts:
        assert [r.state for r in store.probe_runs(att.id)] == [ProbeRunState.DONE]
    frame = store.measurements_frame(camp.id, latest_only=False)
    assert not frame.duplicated(["probe_run_id", "metric", "trial", "context", "scenario", "mode"]).any()


def test_the_password_is_no_flow_parameter(tmp_path: Path, postgres_cluster, prefect_harness: None) -> None:  # type: ignore[no-untyped-def]
    """Prefect keeps flow parameters in its database and shows them in its UI: the
    campaign and arm flows get the URL without its password, which the process that
    opened the store (or $CAMPAIGN_DB) supplies."""
    from prefect.client.orchestration import get_client

    from flows.campaign_flow import campaign_flow
    from tests.pgcluster import PASSWORD

    url = postgres_cluster.create_database("secret")
    path = tmp_path / "c.toml"
    path.write_text(two_items("secret"))
    store = Store(url)
    assert PASSWORD not in store.public_url and PASSWORD in store.url
    result = campaign_flow(str(path), store.public_url, str(tmp_path / "w"))
    assert set(result["items"].values()) == {"done"}
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(limit=200)
    mine = [r for r in runs if "secret" in str(r.parameters) or r.name.startswith("secret/")]
    assert mine and all(PASSWORD not in str(r.parameters) for r in runs)
    att = Store(url).attempts(store.campaign("secret").id)
    assert att and all(a.flow_run_id for a in att)  # each attempt names its Prefect flow run
