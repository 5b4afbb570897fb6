"""A campaign file run through the campaign flow in a test, and the rows it stored.

Why: the tests that start a real runtime (llama.cpp, mlx-lm, mlx-dspark, vLLM) each wrote
their file, ran it, found the campaign and picked a metric's values out of the frame in
the same few lines; here once, so a test says only what it checks of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.store.store import Store


@dataclass
class Run:
    """What `run_campaign` gives back: the store, the campaign's row, the flow's result."""

    store: Store
    campaign: Any
    result: dict[str, Any]

    def attempts(self) -> dict[str, Any]:
        """The campaign's attempts by arm id (the last one of an arm with several)."""
        return {a.arm_id: a for a in self.store.attempts(self.campaign.id)}

    def frame(self) -> Any:
        return self.store.measurements_frame(self.campaign.id)


def run_campaign(tmp_path: Path, text: str, name: str) -> Run:
    """Write `text` to `tmp_path/NAME.toml`, run it with its own SQLite store and the work
    folder `tmp_path/w`, and return the run of campaign `name` (which must be stored)."""
    from flows.campaign_flow import campaign_flow

    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    store = Store(f"sqlite:///{tmp_path / (name + '.db')}")
    result = campaign_flow(str(path), store.url, str(tmp_path / "w"))
    camp = store.campaign(name)
    assert camp is not None and camp.id is not None, f"campaign {name!r} was not stored"
    return Run(store, camp, result)


def metric(
    frame: Any, arm: str, probe: str, name: str, scenario: str | None = None, *, kind: str | None = None
) -> list[float]:
    """The values of one metric of one arm and probe (and scenario, and row kind, when given)."""
    rows = frame[(frame["arm_id"] == arm) & (frame["probe"] == probe) & (frame["metric"] == name)]
    if kind is not None:
        rows = rows[rows["kind"] == kind]
    if scenario is not None:
        rows = rows[rows["scenario"] == scenario]
    return [float(v) for v in rows["value"]]
