"""One side of a comparison across campaigns (`campaign compare`): a campaign's canonical
rows from its finished attempts, optionally those started in a time window, and per arm
what ran -- the model it was given and served, and the runtime build -- so a comparison
can say what changed between the sides and refuse one whose model changed when the
question is the runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from campaign.core.states import AttemptState
from campaign.store.store import Store


@dataclass(frozen=True)
class ArmSide:
    """What one arm ran on one side: the model entry (name/quant), the ids its servers
    said they serve, and the runtime builds they reported (one, unless it changed)."""

    arm_id: str
    model: str
    served: tuple[str, ...]
    runtime: str
    versions: tuple[str, ...]

    @property
    def version(self) -> str:
        return ", ".join(self.versions) or "unknown build"


@dataclass(frozen=True)
class Side:
    label: str
    campaign: str
    frame: pd.DataFrame  # canonical rows of the side's finished attempts (every frame column)
    arms: dict[str, ArmSide]


def load_side(
    store: Store,
    campaign: str | None,
    label: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Side:
    """The side of `campaign` (the newest when None) in `store`. With `since`/`until`, the
    rows of finished attempts started in [since, until); without, what the verdicts read
    (the newest finished attempt of each item, arm and block). Raises LookupError when
    there is no such campaign."""
    row = store.campaign(campaign)
    if row is None or row.id is None:
        raise LookupError(f"no campaign {'named ' + repr(campaign) + ' ' if campaign else ''}in {store.url}")
    windowed = since is not None or until is not None
    frame = store.measurements_frame(row.id, latest_only=not windowed)
    attempts = [a for a in store.attempts(row.id) if a.state == AttemptState.DONE]
    if windowed:
        kept = {
            a.id
            for a in attempts
            if a.started_at is not None
            and (since is None or _naive(a.started_at) >= _naive(since))
            and (until is None or _naive(a.started_at) < _naive(until))
        }
        frame = frame[frame["attempt_id"].isin(kept)]
        attempts = [a for a in attempts if a.id in kept]
    used = set(frame["attempt_id"]) if not frame.empty else set()
    frame = frame[frame["mode"] == "canonical"].reset_index(drop=True)
    arms: dict[str, ArmSide] = {}
    entries = {a.arm_id: a for a in store.arms(row.id)}
    for arm_id, entry in entries.items():
        mine = [a for a in attempts if a.arm_id == arm_id and a.id in used]
        if not mine:
            continue
        served: dict[str, None] = {}
        versions: dict[str, None] = {}
        for a in mine:
            identity = json.loads(a.identity_json or "{}")
            served.update(dict.fromkeys(identity.get("served_models") or []))
            if identity.get("runtime_version"):
                versions[str(identity["runtime_version"])] = None
        arms[arm_id] = ArmSide(arm_id, f"{entry.model}/{entry.quant}", tuple(served), entry.runtime, tuple(versions))
    return Side(label, row.name, frame, arms)


def _naive(when: datetime) -> datetime:
    """A stored time in UTC without its zone (SQLite keeps naive UTC, PostgreSQL aware)."""
    from datetime import UTC

    return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo is not None else when
