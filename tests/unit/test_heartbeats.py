"""Prefect's flow-run heartbeats are off in a campaign run unless the user set their
frequency: each sync flow run otherwise waits for its heartbeat thread at its end.

Each test sets the frequency it starts from, so it holds whether or not the session's
Prefect test harness (which turns heartbeats off) is active on the same worker."""

from __future__ import annotations

import pytest
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

from cli.commands import _heartbeat_asked, _quiet_heartbeat

_NAMES = ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY")


def _frequency() -> int | None:
    return get_current_settings().flows.heartbeat_frequency


def test_heartbeats_are_off_in_a_campaign_run(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("cli.commands._heartbeat_asked", lambda: False)
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 30}):
        with _quiet_heartbeat():
            assert _frequency() is None
        assert _frequency() == 30


@pytest.mark.parametrize("name", _NAMES)
def test_a_frequency_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "45")
    assert _heartbeat_asked()
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 45}):
        with _quiet_heartbeat():
            assert _frequency() == 45


def test_no_frequency_set_means_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _NAMES:
        monkeypatch.delenv(name, raising=False)

    class Profile:
        settings: dict[str, str] = {}

    monkeypatch.setattr("prefect.settings.load_current_profile", lambda: Profile())
    assert not _heartbeat_asked()
