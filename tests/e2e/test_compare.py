"""`campaign compare` end to end: the energy example run twice, the second time on a
slower simulator build (a profile override standing in for a new runtime version), then
compared as a CI check would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _campaign(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.integration
@pytest.mark.cpu_bound
def test_a_slower_build_is_a_regression_fails_the_ci_check_and_old_runs_are_rejudged(
    tmp_path: Path, examples: Path
) -> None:
    """Build 2 decodes at 48 tok/s where build 1 did 60: `campaign compare` names each
    side's build, finds output_tps regressed about 20% with its interval over 3 vs 3 runs,
    and `--fail-on regression:5%` exits 1; the same build against itself exits 0. Then
    `campaign rejudge` reads the stored runs under a stricter gate: the verdict moves and
    the gate page keeps the one before; a file with other arms is refused. Last, the slow
    build as a second campaign in the same database: the arm's history page has a point
    for each. About three minutes."""
    source = (examples / "energy.toml").read_text()
    slow = source.replace("decode_tps = 60.0", 'decode_tps = 48.0\nbuild = "2"')
    assert slow != source
    (tmp_path / "slow.toml").write_text(slow)
    for file, db in ((examples / "energy.toml", "before.db"), (tmp_path / "slow.toml", "after.db")):
        run = _campaign("run", str(file), "--db", db, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    shown = _campaign("compare", "before.db", "after.db", "--metric", "output_tps", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    assert result["before"]["arms"]["A"]["versions"] == ["simulator build 1"]
    assert result["after"]["arms"]["A"]["versions"] == ["simulator build 2"]
    changes = {c["arm"]: c for c in result["changes"]}
    assert set(changes) == {"A", "B"}
    for change in changes.values():
        assert change["label"] == "regression" and -0.3 < change["change"] < -0.1, change
        assert change["before_runs"] == change["after_runs"] == 3
    check = _campaign(
        "compare", "--baseline", "before.db", "--db", "after.db", "--fail-on", "regression:5%", cwd=tmp_path
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert "regression:5%: established in" in check.stdout and "ALARM output_tps A" in check.stdout
    same = _campaign(
        "compare", "--baseline", "before.db", "--db", "before.db", "--fail-on", "regression:5%", cwd=tmp_path
    )
    assert same.returncode == 0, same.stdout + same.stderr
    assert "none established" in same.stdout
    # the stored runs judged again under a stricter gate: the verdict moves, the page keeps the old one
    stricter = source.replace("min_gain = 0.2", "min_gain = 0.7")
    assert stricter != source
    (tmp_path / "stricter.toml").write_text(stricter)
    again = _campaign("rejudge", "stricter.toml", "--db", "before.db", cwd=tmp_path)
    assert again.returncode == 0 and "energy: pass -> fail" in again.stdout, again.stdout + again.stderr
    report = _campaign("report", "--db", "before.db", "--out", "site", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "site" / "gates" / "energy.html").read_text()
    assert 'id="rejudged"' in page and "stricter.toml" in page and "needs -70%" in page
    other = (
        source.replace('id = "B"', 'id = "C"')
        .replace('subjects = ["B"]', 'subjects = ["C"]')
        .replace('arms = ["A", "B"]', 'arms = ["A", "C"]')
    )
    (tmp_path / "other.toml").write_text(other)
    refused = _campaign("rejudge", "other.toml", "--db", "before.db", cwd=tmp_path)
    assert refused.returncode == 2 and "its arms differ from the stored campaign's" in refused.stderr
    # the slower build as a second campaign in the same database: the arm's history page
    # shows one point per campaign and build, each with its interval
    (tmp_path / "build2.toml").write_text(slow.replace('name = "energy"', 'name = "energy-build2"'))
    second = _campaign("run", "build2.toml", "--db", "before.db", cwd=tmp_path)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    report = _campaign("report", "--db", "before.db", "--campaign", "energy", "--out", "site2", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    history = (tmp_path / "site2" / "history" / "a.html").read_text()
    assert "energy · simulator build 1" in history and "energy-build2 · simulator build 2" in history
    assert history.count("<tr><td>output_tps</td>") == 2  # a point per campaign and build
