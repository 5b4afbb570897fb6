"""Blocked -> fixed -> resume; kill -9 mid-arm -> resume with exactly-once measurements and
no orphan server; rerun keeps history; a confirmatory item says what changed and moved."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign.core.processes import group_alive
from campaign.core.states import AttemptState, ItemState, ProbeRunState, Verdict
from campaign.store.store import Store
from tests.campaigns import arm, campaign_file, gate, item, sim, three_context_decode
from tests.paths import ROOT

pytestmark = pytest.mark.integration


def ane_campaign(refused: bool) -> str:
    """L on the simulator, O on an "ane" runtime whose start is refused (while `refused`)
    with the message of a build missing its compiler; an item gated on O vs L, one after it."""
    faults = {"faults": {"refuse_start": "Private ANE procedure-bank compiler is unavailable"}} if refused else {}
    return campaign_file(
        "blocked",
        default_max_tokens=32,
        runtimes=[sim(decode_tps=200.0), sim("ane", decode_tps=200.0, profile=faults)],
        arms=[arm("L", context=4096), arm("O", runtime="ane", context=4096, recipe={"prefill_chunk": 1024})],
        gates=[
            gate(
                "7",
                "relative_improvement",
                {"metric": "decode_tps", "probe": "decode", "min_gain": -0.5},
                ["O"],
                ["L"],
                title="ANE",
            )
        ],
        queue=[
            item("ane", ["L", "O"], ["decode"], title="ANE 4K (Gate 7)", contexts=[1024], gate="7", repeats=3),
            item("after", ["O"], ["decode"], title="after ANE", contexts=[1024], depends_on=["ane"]),
        ],
    )


def rerun_campaign() -> str:
    """V, one slot with a 64M session cap, a cache item and a confirmatory one at 1G."""
    overrides = {"prompt_tokens": 1500, "modes": ["canonical"]}
    return campaign_file(
        "rerun",
        default_max_tokens=32,
        runtimes=[sim(decode_tps=200.0)],
        arms=[arm("V", recipe={"slots": 1, "prefix_cache": "1G", "session_cache_cap": "64M"})],
        queue=[
            item("cache", ["V"], ["cache-probe"], title="cache 2K, cap 64M", overrides=overrides),
            item(
                "confirm",
                ["V"],
                ["cache-probe"],
                title="confirmatory: cap 1G",
                confirms="cache",
                change={"session_cache_cap": "1G"},
                overrides=overrides,
            ),
        ],
    )


def test_blocked_then_fixed_then_resume_passes(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow

    body = ane_campaign(refused=True)
    path = tmp_path / "c.toml"
    path.write_text(body)
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign("blocked")
    verdict = store.latest_verdicts(camp.id)["7"]
    assert verdict.verdict == Verdict.BLOCKED
    assert "'Private ANE procedure-bank compiler is unavailable'" in verdict.reason
    assert {i.key: i.state for i in store.items(camp.id)} == {"ane": ItemState.BLOCKED, "after": ItemState.PENDING}
    # O's refusal ends the item's run: no block after the one it was refused in starts
    (refused,) = store.attempts(camp.id, "ane", "O")
    assert refused.state == AttemptState.BLOCKED
    l_attempts = store.attempts(camp.id, "ane", "L")
    assert all(a.repeat <= refused.repeat for a in l_attempts), [(a.repeat, a.state) for a in l_attempts]

    # the environment is fixed: the runtime build now has its compiler
    path.write_text(ane_campaign(refused=False))
    campaign_flow(str(path), store.url, str(tmp_path / "w"), recheck_blocked=True)
    assert {i.key: i.state for i in store.items(camp.id)} == {"ane": ItemState.DONE, "after": ItemState.DONE}
    assert store.latest_verdicts(camp.id)["7"].verdict == Verdict.PASS
    l_now = store.attempts(camp.id, "ane", "L")
    assert l_now[: len(l_attempts)] == l_attempts  # L's done blocks were not measured again
    assert sorted(a.repeat for a in l_now) == [0, 1, 2]
    for block in range(3):  # a verdict needs three blocks, each its own server start
        states = [a.state for a in store.attempts(camp.id, "ane", "O") if a.repeat == block]
        assert states == ([AttemptState.BLOCKED] if block == refused.repeat else []) + [AttemptState.DONE]


def test_kill_minus_9_mid_arm_then_resume(tmp_path: Path) -> None:
    body = three_context_decode("crash")
    path = tmp_path / "crash.toml"
    path.write_text(body)
    db = tmp_path / "crash.db"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PYTHONPATH": str(ROOT),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "cli", "run", str(path), "--db", str(db), "--workdir", str(tmp_path / "w")]
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        pgid = None
        while time.monotonic() < deadline:
            time.sleep(0.3)
            if not db.exists():
                continue
            try:
                with sqlite3.connect(db) as conn:
                    done = conn.execute("select count(*) from probe_run where state='done'").fetchone()[0]
                    running = conn.execute(
                        "select count(*) from measurement m join probe_run p on m.probe_run_id=p.id where p.state='running'"
                    ).fetchone()[0]
                    row = conn.execute("select server_pgid from attempt where state='running'").fetchone()
            except sqlite3.OperationalError:
                continue
            if done >= 1 and running >= 1 and row and row[0]:
                pgid = row[0]
                break
        assert pgid is not None, proc.stderr.read().decode() if proc.poll() is not None else "no progress"
        os.kill(proc.pid, signal.SIGKILL)  # the campaign process dies mid-probe
        proc.wait(timeout=10)
        assert group_alive(pgid)  # its server is now an orphan
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    try:
        resume = subprocess.run(
            [sys.executable, "-m", "cli", "resume", "--db", str(db), "--workdir", str(tmp_path / "w")],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            start_new_session=True,
        )
    finally:
        # the killed process's own helpers (Prefect's temporary server) die with its group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert resume.returncode == 0, resume.stderr
    assert not group_alive(pgid)  # the orphan was recognised by its command line and stopped

    store = Store(f"sqlite:///{db}")
    camp = store.campaign("crash")
    assert [i.state for i in store.items(camp.id)] == [ItemState.DONE]
    (attempt,) = store.attempts(camp.id)  # continued, not restarted
    assert attempt.state == AttemptState.DONE
    runs = store.probe_runs(attempt.id)
    done = [r for r in runs if r.state == ProbeRunState.DONE]
    assert sorted(r.context for r in done) == [1024, 2048, 4096]  # each probe run finished exactly once
    assert any(r.state == ProbeRunState.INTERRUPTED for r in runs)
    frame = store.measurements_frame(camp.id)
    per_context = (
        frame[(frame["metric"] == "decode_tps") & (frame["kind"] == "sample")].groupby("context").size().to_dict()
    )
    assert per_context == {1024: 4, 2048: 4, 4096: 4}
    assert not frame.duplicated(["probe_run_id", "metric", "trial", "context", "scenario", "mode"]).any()
    for att in store.attempts(camp.id):
        if att.server_pgid:
            assert not group_alive(att.server_pgid)


def test_rerun_keeps_history_and_confirmatory_item_says_what_moved(tmp_path: Path, prefect_harness: None) -> None:
    from campaign.store.summary import summarize
    from flows.campaign_flow import campaign_flow, rerun_flow

    body = rerun_campaign()
    # a 1-slot server with a session cap below the prompt size: the tool_turn prime is
    # evicted from the slot by nothing, so make the cap bite through the cache instead
    path = tmp_path / "r.toml"
    path.write_text(body)
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign("rerun")
    view = {i.key: i for i in summarize(store, "rerun").items}
    assert view["confirm"].isolation.startswith("confirms 'cache', changing only session_cache_cap (V: 64M -> 1G)")

    before = store.attempts(camp.id, "cache", "V")
    rerun_flow(str(path), store.url, "cache", {"max_tokens": 4}, str(tmp_path / "w"))
    after = store.attempts(camp.id, "cache", "V")
    assert len(after) == len(before) + 1
    assert json.loads(after[-1].overrides_json) == {"max_tokens": 4, "modes": ["canonical"], "prompt_tokens": 1500}
    frame = store.measurements_frame(camp.id)
    assert set(frame[frame["item_key"] == "cache"]["attempt_id"]) == {after[-1].id}  # newest counts
    everything = store.measurements_frame(camp.id, latest_only=False)
    assert {before[-1].id, after[-1].id} <= set(everything["attempt_id"])  # history kept
    assert summarize(store, "rerun").items[0].attempts == 2
    assert summarize(store, "rerun").items[0].overrides == "rerun with max_tokens=4"  # shown in status and report
