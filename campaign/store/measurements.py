"""The measurement frame: the rows verdicts and pages read, with the columns each carries,
in one SQL query, and the request tally of an attempt.

Why one module: which attempt's rows a verdict reads (`newest_done_attempts`, and its SQL
twin `_LATEST_CLAUSE`) and which columns a row carries (`FRAME_COLUMNS`) are facts every
gate and page depends on; they are stated here once, beside the query that applies them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from sqlalchemy import text
from sqlalchemy.engine import Engine

from campaign.core import metrics
from campaign.core.states import AttemptState, ProbeRunState, SampleKind
from campaign.store.tables import AttemptRow, MeasurementRow

MEASUREMENT_COLUMNS = list(MeasurementRow.model_fields)
# columns every frame row carries beside the measurement's own (frame name -> SQL over
# its attempt `t` and probe run `r`): which block (server run) measured it, in which
# place of the block's order, under which probe settings (the probe run's; rows from
# before those were recorded fall back to the item's, on the attempt) and which server
# recipe, and which attempt of its (item, arm, repeat)
ATTEMPT_FRAME_COLUMNS = {
    "block_id": "t.block_id",
    "block_order": "t.block_order",
    "settings_hash": "COALESCE(NULLIF(r.settings_hash, ''), t.settings_hash)",
    "recipe_hash": "t.recipe_hash",
    "attempt_number": "t.number",
    "server_block": "COALESCE(NULLIF(t.server_block, ''), t.block_id)",  # the start it ran on (`gates.runs.block_of`)
    # where it ran and what it served: an ablation must share its subject's placement and model
    "host": "t.host",
    "machine": "t.machine",
    "device_lease": "t.device_lease",  # '<device limit>/<lease id>': the limit names the device
    "served_model": "t.served_model",
    "fingerprint": "t.fingerprint",
}
FRAME_COLUMNS = [*MEASUREMENT_COLUMNS, *ATTEMPT_FRAME_COLUMNS]
MEASUREMENT_TEXT_COLUMNS = (
    "item_key",
    "arm_id",
    "probe",
    "scenario",
    "mode",
    "kind",
    "metric",
    "unit",
    "source",
    "block_id",
    "settings_hash",
    "recipe_hash",
    "host",
    "machine",
    "device_lease",
    "served_model",
    "fingerprint",
    "server_block",
)
_MEASUREMENTS_SQL = """
SELECT {columns} FROM measurement m
{join}
WHERE m.campaign_id = :cid
{latest}
"""
_ATTEMPT_JOIN = "LEFT JOIN attempt t ON t.id = m.attempt_id LEFT JOIN probe_run r ON r.id = m.probe_run_id"
# the SQL twin of newest_done_attempts (a test checks they agree)
_LATEST_CLAUSE = """
  AND m.probe_run_id IN (
    SELECT p.id FROM probe_run p JOIN attempt a ON a.id = p.attempt_id
    WHERE a.campaign_id = :cid AND p.state = :run_done)
  AND m.attempt_id IN (
    SELECT MAX(a.id) FROM attempt a
    WHERE a.campaign_id = :cid AND a.state = :attempt_done
      AND a.overrides_json = (
        SELECT b.overrides_json FROM attempt b
        WHERE b.campaign_id = :cid AND b.state = :attempt_done
          AND b.item_key = a.item_key AND b.arm_id = a.arm_id
        ORDER BY b.id DESC LIMIT 1)
    GROUP BY a.item_key, a.arm_id, a.repeat)
"""


@dataclass
class RequestOutcome:
    """An attempt's requests as its probes counted them (`Store.request_outcome`)."""

    requests: int = 0
    failed: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # error kind -> failed requests
    errors: list[str] = field(default_factory=list)  # raw messages, the first ones

    @property
    def all_failed(self) -> bool:
        return self.requests > 0 and self.failed >= self.requests


def newest_done_attempts(attempts: Iterable[AttemptRow]) -> dict[tuple[str, str, int], int]:
    """The attempt each verdict reads: per (item, arm, repeat), the newest finished one
    that ran with the same overrides as the newest finished attempt of its (item, arm).

    A rerun adds newer attempts; older ones stay in the history, unread by gates. Repeats
    measured under different settings are never pooled: after `campaign rerun X --set
    max_tokens=96` has finished only some repeats, the others' older attempts (other
    overrides) drop out of the verdict instead of being mixed into its medians.
    """
    done = sorted((a for a in attempts if a.state == AttemptState.DONE), key=lambda a: a.id or 0)
    settings = {(a.item_key, a.arm_id): a.overrides_json for a in done}  # the newest wins
    newest: dict[tuple[str, str, int], int] = {}
    for att in done:
        if att.overrides_json == settings[(att.item_key, att.arm_id)]:
            newest[(att.item_key, att.arm_id, att.repeat)] = att.id or 0
    return newest


def read_frame(
    engine: Engine,
    campaign_id: int,
    latest_only: bool = True,
    *,
    columns: list[str] | None = None,
    categorical: bool = False,
) -> pd.DataFrame:
    """Measurements as a frame, read with one SQL query (an ORM object per row is what
    made 200,000-row reports slow).

    With `latest_only`, only what verdicts read: rows of the newest finished attempt
    per (item, arm, repeat) -- see `newest_done_attempts` -- from probe runs that
    completed. `categorical` stores text columns as pandas categories, which makes
    comparisons and groupbys integer work.

    Every row carries its attempt's block (`FRAME_COLUMNS`, joined in the same
    query): `block_id` (one id per block, i.e. per server run of each arm; shared
    by the arms of the block, new under other settings), `block_order` (the arm's
    0-based place in its block; <NA> for attempts made before blocks),
    `settings_hash` (its probe run's settings, a cell's `settings`), `recipe_hash`
    ('' before blocks) and `attempt_number`. Pair
    arms only within a `block_id`. `columns` picks any of them.
    """
    wanted = columns or FRAME_COLUMNS
    unknown = [c for c in wanted if c not in MEASUREMENT_COLUMNS and c not in ATTEMPT_FRAME_COLUMNS]
    if unknown:
        raise KeyError(
            f"no measurement frame column {', '.join(map(repr, unknown))}; columns: {', '.join(FRAME_COLUMNS)}"
        )
    joined = any(c in ATTEMPT_FRAME_COLUMNS for c in wanted)
    sql = _MEASUREMENTS_SQL.format(
        columns=", ".join(ATTEMPT_FRAME_COLUMNS[c] if c in ATTEMPT_FRAME_COLUMNS else f"m.{c}" for c in wanted),
        join=_ATTEMPT_JOIN if joined else "",
        latest=_LATEST_CLAUSE if latest_only else "",
    )
    params: dict[str, Any] = {"cid": campaign_id}
    if latest_only:
        params |= {"run_done": ProbeRunState.DONE.value, "attempt_done": AttemptState.DONE.value}
    with engine.connect() as conn:
        frame = pd.read_sql(text(sql), conn, params=params)
    frame.columns = wanted
    for col in ("id", "campaign_id", "attempt_id", "probe_run_id", "context", "trial", "repeat", "attempt_number"):
        if col in frame:
            frame[col] = frame[col].astype("int64")
    if "block_order" in frame:  # NULL for attempts made before blocks
        frame["block_order"] = frame["block_order"].astype("Int64")
    if "value" in frame:
        frame["value"] = frame["value"].astype(float)
    if "simulated" in frame:
        frame["simulated"] = frame["simulated"].astype(bool)
    for col in MEASUREMENT_TEXT_COLUMNS:
        if col in frame:
            frame[col] = frame[col].fillna("").astype("category" if categorical else str)
    return frame


def request_outcome(engine: Engine, attempt_id: int, errors: int = 200) -> RequestOutcome:
    """How the requests of an attempt's finished probe runs went, from the summary
    rows every probe writes per cell (`arms.probes.failures.record_errors`):
    `requests` and `requests_failed`, with any phase prefix (`baseline_requests`),
    summed; failures by kind from the `requests_failed_<kind>` rows (the kind is
    their source); and the raw messages of the first `errors` failed requests."""
    runs = "SELECT p.id FROM probe_run p WHERE p.attempt_id = :aid AND p.state = :done"
    params = {"aid": attempt_id, "done": ProbeRunState.DONE.value, "summary": SampleKind.SUMMARY.value}
    tally = {"tally": f"%{metrics.REQUESTS.name}%"}
    out = RequestOutcome()
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT m.metric, m.source, m.value FROM measurement m WHERE m.attempt_id = :aid AND m.kind = :summary "
                f"AND m.metric LIKE :tally AND m.probe_run_id IN ({runs})"
            ),
            {**params, **tally},
        ).all()
        for metric, source, value in rows:
            if metric.endswith(metrics.REQUESTS.name):
                out.requests += int(value)
            elif metric.endswith(metrics.REQUESTS_FAILED.name):
                out.failed += int(value)
            elif metrics.FAILED_KIND_PREFIX in metric:
                out.kinds[source or ""] = out.kinds.get(source or "", 0) + int(value)
        if out.failed:
            out.errors = [
                e
                for (e,) in conn.execute(
                    text(
                        f"SELECT r.error FROM request_record r WHERE r.probe_run_id IN ({runs}) AND r.error <> '' "
                        "ORDER BY r.id LIMIT :n"
                    ),
                    {**params, "n": errors},
                )
            ]
    return out
