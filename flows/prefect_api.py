"""Which Prefect server runs report to: the configured one ($PREFECT_API_URL, the active
profile's) or the one `campaign ui` recorded for this folder; none means a temporary
server that lives as long as one command.

Here, in the flows layer, because it reads Prefect's settings: the store's summaries
below only record which server a run used (`campaign.summary.PREFECT_API_EVENT`).
"""

from __future__ import annotations

import json
import os


# Where `campaign ui` records the server it started or found, so that runs from this folder
# report to it without the user's Prefect profile being changed (relative to the folder
# campaigns run in, beside the default store .campaign/campaign.db).
UI_RECORD = os.path.join(".campaign", "prefect-ui.json")


def ui_record_url(path: str = UI_RECORD) -> str | None:
    """The API address `campaign ui` recorded, if its server can still be there: the
    record names the pid of a server it started, and a dead pid means the record is stale
    (a reboot, a kill) and is ignored rather than sending runs to nothing."""
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return None
    url = record.get("api_url") if isinstance(record, dict) else None
    pid = record.get("pid") if isinstance(record, dict) else None
    if not isinstance(url, str) or not url:
        return None
    if isinstance(pid, int):
        try:
            os.killpg(pid, 0)  # started in its own session: the group outlives a worker's exit
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
    return url


def configured_api_url() -> str | None:
    """The lasting Prefect server runs report to: $PREFECT_API_URL, else the active
    profile's, else the one `campaign ui` recorded for this folder (`UI_RECORD`); None
    when runs would go to a temporary server (gone with the run, and out of reach of
    workers on other machines)."""
    env = os.environ.get("PREFECT_API_URL")
    if env:
        return env
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value) if value else ui_record_url()
