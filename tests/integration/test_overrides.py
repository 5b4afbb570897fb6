"""Overrides through real flows and the CLI: a recipe set reaches the server's launch, and a
bad one exits 2 before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.store.store import Store
from flows.overrides import check_rerun
from tests.unit.test_overrides import (  # noqa: F401 - helpers and fixtures
    _cli,
    _spec,  # noqa: F401 - helpers and fixtures
)


@pytest.mark.integration
def test_a_recipe_set_reaches_the_servers_launch(tmp_path: Path, prefect_harness: None) -> None:
    from flows.campaign_flow import campaign_flow, rerun_flow

    path, spec = _spec(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    campaign_flow(str(path), store.url, str(tmp_path / "w"))
    checked = check_rerun(spec, spec.queue[0], {"slots": 3})  # type: ignore[attr-defined]
    rerun_flow(str(path), store.url, "decode", checked.overrides, str(tmp_path / "w"))
    camp = store.campaign("ovr")
    first, second = store.attempts(camp.id, "decode", "B")

    def served_slots(cmdline: str) -> int:
        return json.loads(cmdline.split("--profile-json ", 1)[1])["slots"]

    assert served_slots(first.server_cmdline) == 2
    assert served_slots(second.server_cmdline) == 3
    assert json.loads(second.overrides_json)["recipe.slots"] == 3


def test_the_cli_exits_2_before_starting_anything(tmp_path: Path) -> None:
    path, _ = _spec(tmp_path, "repeat = 3")
    out = _cli(tmp_path, "run", str(path), "--db", str(tmp_path / "c.db"))
    assert out.returncode == 2
    assert (
        "unknown key 'repeat'; valid keys: probe parameters of decode:" in out.stderr and "Traceback" not in out.stderr
    )
    path, _ = _spec(tmp_path)
    out = _cli(
        tmp_path, "rerun", "decode", "--set", "max_token=96", "--file", str(path), "--db", str(tmp_path / "c.db")
    )
    assert out.returncode == 2
    assert out.stderr.startswith("error: --set: unknown key 'max_token'; valid keys:")
    assert not (tmp_path / "prefect").exists()  # refused before Prefect was touched
