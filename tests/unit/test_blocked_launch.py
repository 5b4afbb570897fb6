"""What a launch needs and this machine lacks (the server binary, a model file nothing here
writes) is `blocked` with its reason: `campaign check` says so before anything runs
(exit 1), and at run time the attempt ends blocked, not failed, before any process
starts. A model file that is absent but that its installed `model_package` writes is
no blocker: the adapter writes it before the first launch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from campaign.core.states import AttemptState
from campaign.store.store import Store
from campaign.store.tables import CampaignRow
from cli.main import app
from flows.resolve import launch_blockers, load_campaign
from tests.campaigns import arm, campaign_file, item, model, write_campaign

runner = CliRunner()


def llama(tmp_path: Path, *, binary: str, path: str, package: str | None = None) -> Path:
    """Two arms on one llama.cpp runtime whose binary and model file are as given."""
    options: dict[str, Any] = {"binary": binary, **({"model_package": package} if package else {})}
    return write_campaign(
        tmp_path,
        campaign_file(
            "llama",
            models=[model(path=path)],
            runtimes=[{"name": "cpp", "adapter": "llamacpp", "options": options}],
            arms=[arm("A", runtime="cpp", context=1024), arm("B", runtime="cpp", context=1024, recipe={"slots": 2})],
            queue=[item("decode", ["A", "B"], ["decode"])],
        ),
    )


def executable(path: Path) -> str:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def test_check_says_blocked_without_the_binary_or_the_model(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    file = llama(tmp_path, binary=str(tmp_path / "no-llama-server"), path=str(gguf))
    result = runner.invoke(app, ["check", str(file), "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 1, result.output
    assert (
        f"blocked: arms A, B: options.binary '{tmp_path / 'no-llama-server'}' is not an executable file"
        in result.output
    )
    assert result.output.rstrip().endswith("blocked (the run would end these arms blocked; fix it, then check again)")
    assert not (tmp_path / "none.db").exists()

    server = executable(tmp_path / "llama-server")
    assert launch_blockers(load_campaign(llama(tmp_path, binary=server, path=str(gguf)))) == []
    absent = tmp_path / "absent.gguf"
    (line,) = launch_blockers(load_campaign(llama(tmp_path, binary=server, path=str(absent))))
    assert line == f"arms A, B: model file '{absent}' is absent, and no options.model_package writes it"
    (line,) = launch_blockers(
        load_campaign(llama(tmp_path, binary=server, path=str(absent), package="no_such_model_package"))
    )
    assert "options.model_package 'no_such_model_package' that writes it is not installed" in line


def test_a_model_its_installed_package_writes_is_no_blocker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_model_package", type(sys)("fake_model_package"))
    server = executable(tmp_path / "llama-server")
    spec = load_campaign(
        llama(tmp_path, binary=server, path=str(tmp_path / "later.gguf"), package="fake_model_package")
    )
    assert launch_blockers(spec) == []


def test_check_says_blocked_for_a_program_that_is_not_on_path(tmp_path: Path) -> None:
    """Any adapter: the first word of the argv template, where it is written as is."""
    file = write_campaign(
        tmp_path,
        campaign_file(
            "vllm",
            models=[model(path="Qwen/Qwen3-8B")],
            runtimes=[
                {
                    "name": "v",
                    "adapter": "vllm",
                    "argv": ["no-such-python-here", "-m", "vllm"],
                    "env": {"PATH": str(tmp_path)},
                }
            ],
            arms=[arm("A", runtime="v", context=1024)],
            queue=[item("decode", ["A"], ["decode"])],
        ),
    )
    assert launch_blockers(load_campaign(file)) == [
        f"arm A: 'no-such-python-here' is not on PATH (searched: {tmp_path})"
    ]


def test_a_run_without_the_binary_ends_the_attempt_blocked(tmp_path: Path, db_url: str) -> None:
    from flows.arm_flow import _run_arm
    from flows.attempt import Attempt

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    spec = load_campaign(llama(tmp_path, binary=str(tmp_path / "no-llama-server"), path=str(gguf)))
    store = Store(db_url)
    camp = store.add(CampaignRow(name="llama"))
    attempt = Attempt.claim(store, camp.id or 0, "decode", "A", {}, fresh=True)
    outcome = _run_arm(spec, store, spec.item("decode"), attempt, tmp_path / "work")
    assert outcome.state == AttemptState.BLOCKED, outcome
    assert outcome.message == f"options.binary '{tmp_path / 'no-llama-server'}' is not an executable file"
    (row,) = store.attempts(camp.id or 0)
    assert (row.state, row.error, row.server_log) == (AttemptState.BLOCKED, outcome.message, "")  # no process started
