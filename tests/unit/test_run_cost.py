"""campaign run's last line: where the whole command's wall time went."""

from __future__ import annotations

import re

from campaign.summary import RunCost


def test_the_cost_line_splits_the_whole_wall_time() -> None:
    cost = RunCost(server_starts=23, blocks={"smoke": 3, "spec": 4}, probing_s=147.0, attempts_s=170.0)
    line = cost.line(wall_s=193.0, before_s=11.5)
    assert line.startswith("cost: 23 server starts; blocks per item: smoke 3, spec 4; 3 min 13 s: ")
    parts = dict((name, int(pct)) for name, pct in re.findall(r"(probing|servers starting and stopping|start-up \(imports, checks, the Prefect server\)|the rest \(Prefect flow runs, verdicts\)) (\d+)%", line))
    assert parts == {
        "probing": 76, "servers starting and stopping": 12,
        "start-up (imports, checks, the Prefect server)": 6, "the rest (Prefect flow runs, verdicts)": 6,
    }
    assert "probing 76% (1.31x)" in line  # the wall time over the probing time


def test_start_up_never_takes_more_than_is_left() -> None:
    """A start-up longer than what probing and servers leave (a clock skew between the
    process start and the store's stamps) is cut, so the shares never pass 100%."""
    line = RunCost(2, {"k": 1}, probing_s=80.0, attempts_s=95.0).line(wall_s=100.0, before_s=30.0)
    assert "start-up (imports, checks, the Prefect server) 5%" in line and "the rest (Prefect flow runs, verdicts) 0%" in line


def test_a_run_that_started_no_server_has_no_shares() -> None:
    assert RunCost(0, {}, 0.0).line(12.0) == "cost: 0 server starts; blocks per item: none; 12 s"
