"""Prefect's flow-run heartbeats are off in a campaign run unless the user set their
frequency: each sync flow run otherwise waits for its heartbeat thread at its end."""

from __future__ import annotations

import pytest
from prefect.settings import get_current_settings

from cli.commands import _heartbeat_asked, _quiet_heartbeat


def test_heartbeats_are_off_in_a_campaign_run(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("cli.commands._heartbeat_asked", lambda: False)
    assert get_current_settings().flows.heartbeat_frequency is not None  # Prefect's default beats
    with _quiet_heartbeat():
        assert get_current_settings().flows.heartbeat_frequency is None
    assert get_current_settings().flows.heartbeat_frequency is not None


@pytest.mark.parametrize("name", ["PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY"])
def test_a_frequency_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "45")
    assert _heartbeat_asked()
    with _quiet_heartbeat():
        assert get_current_settings().flows.heartbeat_frequency == 45


def test_no_frequency_set_means_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY"):
        monkeypatch.delenv(name, raising=False)

    class Profile:
        settings: dict[str, str] = {}

    monkeypatch.setattr("prefect.settings.load_current_profile", lambda: Profile())
    assert not _heartbeat_asked()
