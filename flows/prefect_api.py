"""Which Prefect server runs report to: the configured one ($PREFECT_API_URL, the active
profile's) or the one `campaign ui` recorded for this folder; none means a temporary
server that lives as long as one command.

Here, in the flows layer, because it reads Prefect's settings: the store's summaries
below only record which server a run used (`campaign.store.summary.PREFECT_API_EVENT`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from campaign.core.processes import group_alive

# Where `campaign ui` records the server it started or found, so that runs from this folder
# report to it without the user's Prefect profile being changed (relative to the folder
# campaigns run in, beside the default store .campaign/campaign.db).
UI_RECORD = os.path.join(".campaign", "prefect-ui.json")

# where a configured server comes from (`configured_api`)
ENVIRONMENT, PROFILE, RECORDED = "environment", "profile", "ui record"


@dataclass(frozen=True)
class UiRecord:
    api_url: str
    pid: int | None  # the server `campaign ui` started; None for one it found running


def read_ui_record(path: str | Path = UI_RECORD) -> UiRecord | None:
    """The record `campaign ui` wrote, or None (absent, unreadable or malformed)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("api_url"), str) or not record["api_url"]:
        return None
    pid = record.get("pid")
    return UiRecord(record["api_url"], pid if isinstance(pid, int) else None)


def write_ui_record(api_url: str, pid: int | None, path: str | Path = UI_RECORD) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"api_url": api_url, "pid": pid}))
    return path


def forget_ui_record(path: str | Path = UI_RECORD) -> bool:
    path = Path(path)
    if path.exists():
        path.unlink()
        return True
    return False


def ui_record_url(path: str | Path = UI_RECORD) -> str | None:
    """The API address `campaign ui` recorded, if its server can still be there: the
    record names the pid of a server it started, and a dead one means the record is stale
    (a reboot, a kill) and is ignored rather than sending runs to nothing."""
    record = read_ui_record(path)
    if record is None:
        return None
    if record.pid is not None and not group_alive(record.pid):  # its own session: the group outlives a worker's exit
        return None
    return record.api_url


# the temporary server this process reports to (`temporary_api`): in Prefect's settings
# like a configured one, but gone with the command
_temporary: list[str] = []


@contextmanager
def temporary_api(url: str) -> Iterator[None]:
    """While the block runs, `url` (set into Prefect's settings by the caller) is this
    command's temporary server: `configured_api` does not count it as a lasting one, so
    no run links to it, no logs are sent to it and Prefect's heartbeats stay off."""
    _temporary.append(url)
    try:
        yield
    finally:
        _temporary.remove(url)


def _profile_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value) if value and str(value) not in _temporary else None


def configured_api() -> tuple[str, str] | None:
    """The lasting Prefect server runs report to and where that comes from:
    $PREFECT_API_URL (`ENVIRONMENT`), else the active profile's (`PROFILE`), else the one
    `campaign ui` recorded for this folder (`RECORDED`); None when runs would go to a
    temporary server (gone with the run, and out of reach of workers on other machines)."""
    env = os.environ.get("PREFECT_API_URL")
    if env:
        return env, ENVIRONMENT
    profile = _profile_url()
    if profile:
        return profile, PROFILE
    recorded = ui_record_url()
    return (recorded, RECORDED) if recorded else None


def configured_api_url() -> str | None:
    configured = configured_api()
    return configured[0] if configured else None
