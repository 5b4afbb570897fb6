"""The probe sink that writes to the campaign database, from a writer thread, in batches.

Why a writer thread: a probe calls the sink while other streams are in flight, and a
SQLite commit (an fsync under WAL, a busy wait when another writer holds the lock) made
on the event loop delays the timestamps of every stream that loop is reading. So the
probe's call only turns the row into a plain dict and puts it on a queue; one thread
takes what has accumulated (up to `flush_interval_s` apart) and inserts it in one
transaction per batch, with no ORM objects and nothing read back.

Nothing is lost that the campaign counts on: `close()` writes every queued row before it
returns, and the arm flow closes the sink before it marks the probe run done (and on a
failure, before it marks it failed, so what was measured is kept for the record). A
process killed mid-probe loses at most the last unflushed batch of a probe run that is
not done; readers never use rows of a run that is not done (`Store.measurements_frame`),
and resume measures that run again under a new probe-run id.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import IntegrityError

from arms.measures import RequestRecord, ttft_s
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind
from campaign.store.store import Store
from campaign.store.tables import EventRow, MeasurementRow, RequestRow, SampleRow, utcnow
from flows.progress import emit

_STOP = object()

# the event and progress kind of a probe's warning (`Sink.warn`)
PROBE_WARNING = "probe-warning"


class SinkWriteError(RuntimeError):
    """Rows the writer could not store; raised by `StoreSink.close()`."""


@dataclass
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)


class RowWriter:
    """One thread that inserts queued rows, a batch per transaction.

    A batch that breaks a constraint is retried row by row, so one bad row costs only
    itself; a batch the database refuses as a whole (locked past the busy timeout, gone)
    is not retried. The failures are kept and reported by `close()`.
    """

    def __init__(self, store: Store, *, flush_interval_s: float = 0.2, max_batch: int = 2000):
        self.store = store
        self.flush_interval_s = flush_interval_s
        self.max_batch = max_batch
        self.errors: list[str] = []
        self.rows_written = 0
        self.batches_written = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="campaign-row-writer", daemon=True)
        self._thread.start()

    def put(self, table: type[Any], row: dict[str, Any]) -> None:
        if self._closed:
            raise SinkWriteError("the sink is closed; a row arrived after its probe run ended")
        self._queue.put((table, row))

    def flush(self) -> None:
        """Block until every row queued so far is in the database (or has failed)."""
        if self._closed:
            return  # close() already wrote everything
        marker = _Flush()
        self._queue.put(marker)
        marker.done.wait()

    def close(self) -> None:
        """Write what is queued, stop the thread; raise SinkWriteError if any row failed."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()
        if self.errors:
            shown = "; ".join(self.errors[:3])
            more = f" (and {len(self.errors) - 3} more)" if len(self.errors) > 3 else ""
            raise SinkWriteError(f"{len(self.errors)} row(s) could not be stored: {shown}{more}")

    def _run(self) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            batch: list[tuple[type[Any], dict[str, Any]]] = []
            markers: list[_Flush] = []
            deadline = time.monotonic() + self.flush_interval_s
            while True:
                if item is _STOP:
                    stop = True
                elif isinstance(item, _Flush):
                    markers.append(item)
                else:
                    batch.append(item)
                if stop or markers or len(batch) >= self.max_batch:
                    break
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
            if stop:  # whatever was queued before the stop marker
                while True:
                    try:
                        rest = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(rest, _Flush):
                        markers.append(rest)
                    elif rest is not _STOP:
                        batch.append(rest)
            try:
                self._write(batch)
            except BaseException as exc:  # noqa: BLE001 - never die silently: close() must report it
                self.errors.extend([f"writer: {type(exc).__name__}: {exc}"] * max(len(batch), 1))
            finally:
                for marker in markers:
                    marker.done.set()

    def _write(self, batch: list[tuple[type[Any], dict[str, Any]]]) -> None:
        if not batch:
            return
        try:
            self.store.insert_rows(batch)
            self.rows_written += len(batch)
            self.batches_written += 1
            return
        except IntegrityError:
            pass  # some row breaks a constraint: find it below, keep the others
        except Exception as exc:  # noqa: BLE001 - the database itself failed (locked, gone): all of them
            self.errors.extend([f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"] * len(batch))
            return
        for table, row in batch:
            try:
                self.store.insert_rows([(table, row)])
                self.rows_written += 1
            except Exception as exc:  # noqa: BLE001 - recorded, raised by close()
                self.errors.append(f"{table.__tablename__}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


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
    block: int = 0  # the block's number, stored as the row's `repeat`
    flush_interval_s: float = 0.2
    writer: RowWriter = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.writer = RowWriter(self.store, flush_interval_s=self.flush_interval_s)

    def measurement(
        self,
        *,
        metric: Metric | str,
        value: float,
        mode: Mode | str,
        unit: str | None = None,
        scenario: str = "",
        context: int = 0,
        trial: int = 0,
        kind: SampleKind = SampleKind.SAMPLE,
        source: str = "",
    ) -> None:
        """One row, as `arms.probes.base.Sink` says: the catalogue's name and unit
        (`metrics.stored`), refused at the call when either is wrong."""
        name, unit = metrics.stored(metric, unit)
        number = float(value)
        if math.isnan(number):  # the store cannot hold NaN; say where it came from, now
            raise ValueError(f"measurement {name!r} ({scenario or 'no scenario'}) is NaN")
        self.writer.put(
            MeasurementRow,
            {
                "campaign_id": self.campaign_id,
                "attempt_id": self.attempt_id,
                "probe_run_id": self.probe_run_id,
                "item_key": self.item_key,
                "arm_id": self.arm_id,
                "repeat": self.block,
                "probe": self.probe,
                "scenario": scenario,
                "mode": str(mode),
                "context": context or self.default_context,
                "kind": str(kind),
                "trial": trial,
                "metric": name,
                "value": number,
                "unit": unit,
                "source": source,
                "simulated": self.simulated,
            },
        )

    def request(self, record: RequestRecord, *, scenario: str, mode: Mode | str, trial: int = 0) -> None:
        self.writer.put(
            RequestRow,
            {
                "probe_run_id": self.probe_run_id,
                "scenario": scenario,
                "mode": str(mode),
                "trial": trial,
                "ok": record.ok,
                "error": record.error or "",
                "raw_json": json.dumps(record.to_dict(), separators=(",", ":")),
            },
        )
        label = {k: v for k, v in record.label.items() if k in ("conversation", "turn")}
        emit(
            "request",
            arm=self.arm_id,
            probe=self.probe,
            ok=record.ok,
            scenario=scenario,
            error=record.error,
            ttft_s=ttft_s(record),
            **label,
        )

    def sample(self, series: str, t_s: float, value: float, label: str = "") -> None:
        self.writer.put(
            SampleRow,
            {
                "probe_run_id": self.probe_run_id,
                "series": series,
                "t_s": float(t_s),
                "value": float(value),
                "label": label,
            },
        )

    def warn(self, message: str) -> None:
        """A line in the run's output now, and an event of the campaign (`PROBE_WARNING`,
        with the attempt's item and arm) stored by the writer, as the rows are."""
        self.writer.put(
            EventRow,
            {
                "campaign_id": self.campaign_id,
                "item_key": self.item_key,
                "arm_id": self.arm_id,
                "kind": PROBE_WARNING,
                "from_state": "",
                "to_state": "",
                "message": f"{self.probe}: {message}",
                "at": utcnow(),
            },
        )
        emit(PROBE_WARNING, arm=self.arm_id, probe=self.probe, message=message)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        """Every row is in the database when this returns; raises SinkWriteError otherwise."""
        self.writer.close()

    def __enter__(self) -> StoreSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
