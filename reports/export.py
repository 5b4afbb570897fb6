"""`campaign export`: measurements, samples and verdicts as CSV or Parquet tables, or one
llm-d Benchmark Report per server run (`reports.benchmark_report`).

Every measurement row is exported (all attempts), with a `counts` column saying whether
it is one a verdict reads (newest finished attempt, completed probe run); `cells` holds
each cell's value as the gates and the report read it (`reports.data.cell_values`);
samples carry their arm, item, probe and attempt so they can be joined without the
database.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
from sqlalchemy import text

from campaign.store.store import Store
from reports.benchmark_report import write_reports
from reports.data import cell_values

FORMATS = ("csv", "parquet", "benchmark-report")

_SAMPLES_SQL = text(
    """
SELECT s.id, a.arm_id, a.item_key, a.id AS attempt_id, p.id AS probe_run_id, p.probe, p.context,
       s.series, s.t_s, s.value, s.label
FROM sample s
JOIN probe_run p ON p.id = s.probe_run_id
JOIN attempt a ON a.id = p.attempt_id
WHERE a.campaign_id = :cid
ORDER BY s.id
"""
)
_VERDICTS_SQL = text(
    "SELECT id, gate_id, verdict, reason, evidence_json, computed_at FROM verdict WHERE campaign_id = :cid ORDER BY id"
)


class ExportError(Exception):
    """A reason the export cannot run that the user can fix (printed, exit code 2)."""


def require_parquet_engine() -> None:
    """Parquet needs pyarrow, which the project does not install by default."""
    try:
        importlib.import_module("pyarrow")
    except ImportError:
        raise ExportError(
            "parquet export needs pyarrow, which is not installed; install it with "
            "`pip install 'llm-campaign[parquet]'` (or `pip install pyarrow`), or use --format csv"
        ) from None


def tables(store: Store, campaign_id: int) -> dict[str, pd.DataFrame]:
    everything = store.measurements_frame(campaign_id, latest_only=False)
    latest = store.measurements_frame(campaign_id, latest_only=True)
    counted = set(latest["id"]) if not everything.empty else set()
    everything["counts"] = everything["id"].isin(counted) if not everything.empty else pd.Series(dtype=bool)
    with store.engine.connect() as conn:
        samples = pd.read_sql(_SAMPLES_SQL, conn, params={"cid": campaign_id})
        verdicts = pd.read_sql(_VERDICTS_SQL, conn, params={"cid": campaign_id})
    return {"measurements": everything, "cells": cell_values(latest), "samples": samples, "verdicts": verdicts}


def export(store: Store, campaign_id: int, out: Path | str, fmt: str) -> list[Path]:
    """Write one file per table (one JSON file per server run for benchmark-report) into
    `out`; return their paths."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of: {', '.join(FORMATS)}; found {fmt!r}")
    if fmt == "benchmark-report":
        return write_reports(store, campaign_id, out)
    if fmt == "parquet":
        require_parquet_engine()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in tables(store, campaign_id).items():
        path = out / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False, engine="pyarrow")
        written.append(path)
    return written
