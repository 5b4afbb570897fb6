"""The probe sink that writes to the campaign database, one committed row at a time."""

from __future__ import annotations

import json
from dataclasses import dataclass

from arms.metrics import RequestRecord
from campaign.states import Mode
from campaign.store import MeasurementRow, RequestRow, SampleRow, Store
from flows.progress import emit


@dataclass
class StoreSink:
    store: Store
    campaign_id: int
    attempt_id: int
    probe_run_id: int
    item_key: str
    arm_id: str
    probe: str
    simulated: bool
    default_context: int = 0
    repeat: int = 0

    def measurement(
        self,
        *,
        metric: str,
        value: float,
        unit: str,
        mode: Mode | str,
        scenario: str = "",
        context: int = 0,
        trial: int = 0,
        source: str = "",
    ) -> None:
        self.store.add(
            MeasurementRow(
                campaign_id=self.campaign_id,
                attempt_id=self.attempt_id,
                probe_run_id=self.probe_run_id,
                item_key=self.item_key,
                arm_id=self.arm_id,
                repeat=self.repeat,
                probe=self.probe,
                scenario=scenario,
                mode=str(mode),
                context=context or self.default_context,
                trial=trial,
                metric=metric,
                value=float(value),
                unit=unit,
                source=source,
                simulated=self.simulated,
            )
        )

    def request(self, record: RequestRecord, *, scenario: str, mode: Mode | str, trial: int = 0) -> None:
        self.store.add(
            RequestRow(
                probe_run_id=self.probe_run_id,
                scenario=scenario,
                mode=str(mode),
                trial=trial,
                ok=record.ok,
                error=record.error or "",
                raw_json=json.dumps(record.to_dict(), separators=(",", ":")),
            )
        )
        emit("request", arm=self.arm_id, probe=self.probe, ok=record.ok)

    def sample(self, series: str, t_s: float, value: float, label: str = "") -> None:
        self.store.add(SampleRow(probe_run_id=self.probe_run_id, series=series, t_s=t_s, value=value, label=label))
