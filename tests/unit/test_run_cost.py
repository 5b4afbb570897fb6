"""campaign run's last line: where the whole command's wall time went."""

from __future__ import annotations

import re
from datetime import timedelta

from campaign.core.states import AttemptState
from campaign.store.store import Store
from campaign.store.summary import RunCost, run_cost
from campaign.store.tables import AttemptRow, CampaignRow, ProbeRunRow, utcnow


def test_the_cost_line_splits_the_whole_wall_time() -> None:
    cost = RunCost(server_starts=23, blocks={"smoke": 3, "spec": 4}, probing_s=147.0, attempts_s=170.0)
    line = cost.line(wall_s=193.0, before_s=11.5)
    assert line.startswith("cost: 23 server starts; blocks per item: smoke 3, spec 4; 3 min 13 s: ")
    parts = dict(
        (name, int(pct))
        for name, pct in re.findall(
            r"(probing|servers starting and stopping|start-up \(imports, checks, the Prefect server\)|orchestration \(Prefect flow runs, verdicts\)) (\d+)%",
            line,
        )
    )
    assert parts == {
        "probing": 76,
        "servers starting and stopping": 12,
        "start-up (imports, checks, the Prefect server)": 6,
        "orchestration (Prefect flow runs, verdicts)": 6,
    }
    assert "probing 76% of the wall time (the wall time is 1.31x the probing time)" in line  # each ratio says of what


def test_start_up_never_takes_more_than_is_left() -> None:
    """A start-up longer than what probing and servers leave (a clock skew between the
    process start and the store's stamps) is cut, so the shares never pass 100%."""
    line = RunCost(2, {"k": 1}, probing_s=80.0, attempts_s=95.0).line(wall_s=100.0, before_s=30.0)
    assert (
        "start-up (imports, checks, the Prefect server) 5%" in line
        and "orchestration (Prefect flow runs, verdicts) 0%" in line
    )


def test_a_run_that_started_no_server_has_no_shares() -> None:
    assert RunCost(0, {}, 0.0).line(12.0) == "cost: 0 server starts; blocks per item: none; 12 s"


def test_a_run_that_measured_only_servers_it_did_not_start_says_so() -> None:
    line = RunCost(0, {"k": 3}, probing_s=50.0, attempts_s=55.0, kept=6).line(wall_s=80.0)
    assert line.startswith("cost: 0 server starts (all kept); blocks per item: k 3; 80 s: probing 62% of the wall time")


def test_only_an_attempt_that_started_a_server_process_is_a_start(db_url: str) -> None:
    """A server at a URL (no process, no log) was started by nobody here: counting its
    attempts as starts would say "12 server starts" of a run against your own servers. A
    chained attempt on a kept server and a launch that failed before any process started
    are no start either; what measured without a start of its own is kept."""
    store = Store(db_url)
    camp = store.add(CampaignRow(name="c"))
    since = utcnow() - timedelta(seconds=1)

    def attempt(item: str, arm: str, log: str = "", probed: bool = True) -> None:
        row = store.add(
            AttemptRow(
                campaign_id=camp.id,
                item_key=item,
                arm_id=arm,
                number=1,
                state=AttemptState.DONE,
                server_log=log,
                ended_at=utcnow(),
            )
        )
        if probed:
            store.add(ProbeRunRow(attempt_id=row.id, probe="decode", context=0, ended_at=utcnow()))

    for arm in ("A", "B"):
        attempt("url", arm)  # measured a server at a URL
    cost = run_cost(store, "c", since)
    assert (cost.server_starts, cost.kept) == (0, 2)
    assert cost.line(10.0).startswith("cost: 0 server starts (all kept); blocks per item: url 1")
    attempt("lead", "A", log="w/lead-A.log")
    attempt("chained", "A", log="w/lead-A.log")  # on the server the lead started
    attempt("broken", "B", probed=False)  # its launch failed: no process
    cost = run_cost(store, "c", since)
    assert (cost.server_starts, cost.kept) == (1, 3)
