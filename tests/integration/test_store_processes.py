"""The store under real processes: concurrent claims from several processes, and the
proof that a holder is gone, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.store.store import Store
from campaign.store.tables import CampaignRow
from tests.conftest import postgres_database


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else postgres_database(request)


def test_concurrent_claims_from_many_processes_give_one_winner(db_url: str) -> None:
    """Four processes claim the same arms at the same instant: each (arm, repeat) is
    taken by exactly one of them, and no arm finished by one is taken again by another."""
    import subprocess
    import sys

    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    script = (
        "import sys\n"
        "from campaign.store.store import Store, AttemptRow\n"
        "from campaign.core.states import AttemptState\n"
        "s = Store(sys.argv[1]); cid = int(sys.argv[2])\n"
        "print('ready', flush=True); sys.stdin.readline()\n"
        "won = []\n"
        "for arm in 'ABCDEF':\n"
        "    how, att = s.claim_attempt(cid, 'k', arm, {}, 0, fresh=False)\n"
        "    if how in ('new', 'resumed'):\n"
        "        won.append(arm); s.update(AttemptRow, att.id, state=AttemptState.DONE)\n"
        "print(''.join(won))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, store.url, str(camp.id)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:  # all at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert sorted("".join(outs)) == list("ABCDEF")  # every arm won once, by someone
    assert sorted(a.arm_id for a in store.attempts(camp.id)) == list("ABCDEF")  # and run once


def test_holder_gone_needs_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pid on another machine proves nothing; a fresh heartbeat keeps any holder; a
    stale one (past HEARTBEAT_STALE_S) or a gone pid on this machine proves death."""
    import os
    import subprocess
    from datetime import timedelta

    from campaign.store.liveness import holder_gone, this_host, this_machine
    from campaign.store.tables import AttemptRow, utcnow

    monkeypatch.setenv("CAMPAIGN_HOST", "h1")
    now = utcnow()
    fresh, stale = now - timedelta(seconds=5), now - timedelta(seconds=3600)
    dead = subprocess.Popen(["true"])
    dead.wait()
    att = lambda **kw: AttemptRow(campaign_id=1, item_key="k", arm_id="A", number=1, **kw)  # noqa: E731
    assert this_host() == "h1"
    assert holder_gone(att(host="h2", owner_pid=dead.pid, heartbeat_at=fresh), now, 60) is None
    assert "no heartbeat" in (holder_gone(att(host="h2", owner_pid=os.getpid(), heartbeat_at=stale), now, 60) or "")
    assert "is gone" in (holder_gone(att(host="h1", owner_pid=dead.pid, heartbeat_at=fresh), now, 60) or "")
    assert holder_gone(att(host="h1", owner_pid=os.getpid(), heartbeat_at=stale), now, 60) is None  # alive here: kept
    later = att(host="h1", owner_pid=os.getpid(), owner_start=1.0, heartbeat_at=fresh)
    assert "later process" in (holder_gone(later, now, 60) or "")
    # the pid is read on the machine that made it, whatever the placement label says:
    # another worker's label on this machine is still judged by its pid...
    here = this_machine()
    assert "is gone" in (
        holder_gone(att(host="h2", machine=here, owner_pid=dead.pid, heartbeat_at=fresh), now, 60) or ""
    )
    # ...and a holder on another machine under this label only by its heartbeat
    assert (
        holder_gone(att(host="h1", machine=here + "-elsewhere", owner_pid=dead.pid, heartbeat_at=fresh), now, 60)
        is None
    )
