"""A search end to end on the simulator, killed with SIGKILL mid-search and resumed:
trials are arms of one block, nothing measured is measured again, the budget counts
what was spent before the kill, and the winner is confirmed on fresh blocks by the
ordinary gates; `campaign status` and the report show it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.campaigns import arm, campaign_file, model, sim
from tests.paths import ROOT

pytestmark = pytest.mark.integration

STARTS = 7


def search_file(name: str) -> str:
    return campaign_file(
        name,
        question="Which slots serve 3 agent conversations fastest on later turns?",
        models=[model("m")],
        runtimes=[sim(prefill_tps=4000.0, decode_tps=80.0, profile={"batch_penalty": 0.1})],
        arms=[arm("A", recipe={"slots": 1, "prefill_chunk": 512})],
        search={
            "base": "A",
            "seed": 3,
            "budget": {"starts": STARTS},
            "objective": {"metric": "ttft_later_median_s", "probe": "agent-load", "scenario": "summary"},
            "overrides": {
                "conversations": 3,
                "turns": 3,
                "system_tokens": 200,
                "task_tokens": 300,
                "turn_tokens": 120,
                "max_tokens": 8,
            },
            "confirm": {"top": 1, "max_candidates": 2, "blocks": 3, "min_gain": 0.2},
            "space": {"slots": {"low": 1, "high": 4}, "prefix_cache": {"choices": ["off", "1G"]}},
        },
    )


def _told(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # not created yet


def test_a_search_killed_mid_way_resumes_and_confirms_its_winner(tmp_path: Path) -> None:
    path = tmp_path / "search.toml"
    path.write_text(search_file("search-e2e"))
    db = tmp_path / "c.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    cli = [sys.executable, "-m", "cli"]
    run = subprocess.Popen(
        [*cli, "run", str(path), "--db", str(db), "--workdir", str(tmp_path / "w")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while _told(db) < 3 and time.monotonic() < deadline:  # the base and two trials told
            assert run.poll() is None, run.stderr.read().decode() if run.stderr else ""
            time.sleep(0.3)
        assert _told(db) >= 3
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)  # the runner and every server it started
        run.wait(30)
    with sqlite3.connect(db) as conn:
        before = {r[0] for r in conn.execute("select item_key from attempt where item_key like 'search-S-%'")}
    resumed = subprocess.run(
        [*cli, "resume", str(path), "--db", str(db), "--workdir", str(tmp_path / "w")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Traceback" not in resumed.stderr
    again = subprocess.run(
        [*cli, "run", str(path), "--db", str(db)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and again.stdout.startswith("nothing to do"), again.stdout + again.stderr

    with sqlite3.connect(db) as conn:
        states = dict(conn.execute("select state, count(*) from trials group by state").fetchall())
        done = conn.execute(
            "select item_key, count(*) from attempt where state = 'done' and item_key like 'search-%' group by item_key"
        ).fetchall()
        confirm_blocks = conn.execute(
            "select count(distinct repeat) from attempt where item_key = 'search-confirm' and state = 'done'"
        ).fetchone()[0]
    assert "RUNNING" not in states  # the trial the kill left running was finished on resume
    per_item = dict(done)
    assert per_item.pop("search-A") == 2 and per_item.pop("search-confirm") >= 2 * 3
    assert all(n == 1 for n in per_item.values()), per_item  # no trial arm measured twice
    assert before <= set(per_item)  # what ran before the kill is kept, not redone
    assert len(per_item) == STARTS - 2  # the budget counts the starts made before the kill
    assert confirm_blocks == 3

    from campaign.core.schema import CampaignSpec
    from campaign.store.store import Store
    from campaign.store.study import summary

    store = Store(f"sqlite:///{db}")
    row = store.campaign("search-e2e")
    assert row is not None and row.id is not None
    found = summary(store, CampaignSpec.model_validate_json(row.spec_json))
    assert found is not None and found.finished and found.confirmed
    verdicts = store.latest_verdicts(row.id)
    assert "search-beats-base" in verdicts and verdicts["search-beats-base"].verdict in ("pass", "fail", "inconclusive")
    # 1 slot against 3 conversations evicts every history: more slots win, confirmed
    assert verdicts["search-beats-base"].verdict == "pass", verdicts["search-beats-base"].reason

    status = subprocess.run(
        [*cli, "status", str(path), "--db", str(db)],
        env={**env, "COLUMNS": "80"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    assert "Search" in status.stdout and "search trials" in status.stdout and "fresh runs vs base A" in status.stdout
    assert max(len(line) for line in status.stdout.splitlines()) <= 80
    report = subprocess.run(
        [*cli, "report", str(path), "--db", str(db), "--out", str(tmp_path / "site")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "site" / "search.html").read_text()
    assert 'id="search-trials"' in page and "search-beats-base" in page and "<svg" in page
    assert 'href="search.html"' in (tmp_path / "site" / "index.html").read_text()
