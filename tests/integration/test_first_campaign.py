"""docs/first-campaign.md, followed as a new user would: its simulator campaign loads and
checks, runs through `campaign run` to a verdict on every gate, and `campaign status` at
80 columns answers the file's question, a line or two per gate; its llama.cpp head,
put in place of the simulator's as the page says, loads and checks too (not run: that
needs the user's model and server).

Why a test: the page is the front door, and a campaign on it that no longer loads, or a
gate that stays pending (two arms at different contexts share no cell, so such a gate
never decides), would cost a new user the hour the page is meant to save."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.core.states import Verdict
from campaign.store.store import Store
from campaign.store.summary import summarize
from flows.resolve import load_campaign
from tests.paths import DOCS, ROOT
from tests.unit.test_docs_reference import loads_and_checks, toml_blocks

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Prefect home of the module's own, so the temporary server `campaign run` starts
    neither reads nor writes the profile of whoever runs the tests."""
    return tmp_path_factory.mktemp("prefect-home")


def _env(prefect_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(prefect_home), PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false", COLUMNS="80"
    )
    return env


def _blocks() -> tuple[str, str]:
    """The page's complete simulator campaign and its llama.cpp head (everything above
    the first `[[arms]]`)."""
    blocks = toml_blocks((DOCS / "first-campaign.md").read_text(encoding="utf-8"))
    simulated = [b for b in blocks if 'adapter = "simulator"' in b]
    llama = [b for b in blocks if 'adapter = "llamacpp"' in b]
    assert len(simulated) == 1 and len(llama) == 1, "the page holds one simulator campaign and one llama.cpp head"
    assert "[[arms]]" in simulated[0] and "[[arms]]" not in llama[0]
    return simulated[0], llama[0]


def test_the_llamacpp_variant_loads_and_checks(tmp_path: Path) -> None:
    simulated, head = _blocks()
    variant = head.rstrip() + "\n\n" + simulated[simulated.index("[[arms]]") :]
    loads_and_checks(tmp_path, "llama.toml", variant)
    loads_and_checks(tmp_path, "sim.toml", simulated)
    spec, sim = load_campaign(tmp_path / "llama.toml"), load_campaign(tmp_path / "sim.toml")
    assert [rt.adapter for rt in spec.runtimes] == ["llamacpp"]
    argv = spec.runtimes[0].argv
    assert argv[0] == "{llama_server}" and "--threads" in argv
    assert spec.campaign.name != sim.campaign.name  # done items are never run again under the old name
    assert [a.id for a in spec.arms] == [a.id for a in sim.arms] and [g.id for g in spec.gates] == [
        g.id for g in sim.gates
    ]


def test_the_simulator_campaign_runs_to_an_answer_at_80_columns(tmp_path: Path, prefect_home: Path) -> None:
    simulated, _ = _blocks()
    loads_and_checks(tmp_path, "agent-slots.toml", simulated)
    path, db = tmp_path / "agent-slots.toml", tmp_path / "c.db"
    spec = load_campaign(path)
    assert spec.campaign.question
    env = _env(prefect_home)
    run = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path), "--db", str(db), "--workdir", str(tmp_path / "w")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    gates = {g.id: g for g in summarize(Store(f"sqlite:///{db}"), spec.campaign.name).gates}
    assert set(gates) == {g.id for g in spec.gates}
    assert {gid: g.reason for gid, g in gates.items() if g.verdict == Verdict.PENDING} == {}

    status = subprocess.run(
        [sys.executable, "-m", "cli", "status", str(path), "--db", str(db)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    out = status.stdout
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert f"Question: {spec.campaign.question}" in " ".join(out.split())
    answer = out[out.index("Answer (") : out.index("Campaign queue")]
    for gate in spec.gates:
        assert re.search(rf"^  (PASS|FAIL|UNSURE|CONTROL|BLOCKED) +{re.escape(gate.id)}: ", answer, re.MULTILINE), (
            gate.id,
            answer,
        )
