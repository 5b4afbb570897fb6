"""A trace replay on an arm page: when its requests were sent, and the TTFT they met.

Why beside the load curves: a replay's summary (goodput, p99 TTFT) says whether the arm
carried the trace, not when it fell behind. A recorded trace is bursty, so the page draws
its arrivals against time, the requests in flight, and the TTFT each stretch of the replay
met, one line per server run (block): a TTFT that climbs in a burst and recovers after it
is a queue that drained; one that climbs and stays is a server that did not keep up.

Reads the replay's request rows (their send and first-event stamps, `RequestRow.raw_json`),
not its summaries; times are seconds since the run's first send, in bins of about a
fortieth of the replay.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pandas as pd
from markupsafe import Markup

from arms.measures import NS, RequestRecord, ttft_s
from campaign.core.states import TRACE_SCENARIO_PREFIX, ProbeName
from campaign.core.units import num
from campaign.store.tables import RequestRow
from reports import charts

BINS = 40  # about this many steps across a replay
NICE_BINS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class Sent:
    """One replayed request, in seconds since its run's first send."""

    at: float
    ttft: float | None
    end: float  # when its response ended; its send time if none was stamped
    ok: bool


@dataclass(frozen=True)
class ReplayRun:
    """One trace replay of an arm (item, trace, context and mode), over its server runs."""

    title: str
    mode: str
    summary: str
    arrivals_chart: Markup
    ttft_chart: Markup


def _sent(rows: list[RequestRow]) -> list[Sent]:
    records = []
    for row in rows:
        record = RequestRecord.from_dict(json.loads(row.raw_json or "{}"))
        if record.send_ns:
            records.append(record)
    if not records:
        return []
    t0 = min(r.send_ns for r in records)
    return sorted(
        (Sent((r.send_ns - t0) / NS, ttft_s(r), (max(r.end_ns, r.send_ns) - t0) / NS, r.ok) for r in records),
        key=lambda s: s.at,
    )


def bin_width(span_s: float) -> float:
    """A round bin width that cuts `span_s` into about BINS steps."""
    return next((w for w in NICE_BINS if span_s / w <= BINS), NICE_BINS[-1])


def _edges(width: float, span: float) -> list[float]:
    return [i * width for i in range(int(span / width) + 1)]


def runs(
    requests: Callable[[Iterable[int]], list[RequestRow]], frame: pd.DataFrame, arm_id: str, chart_prefix: str
) -> list[ReplayRun]:
    """Charts for every trace replay of the arm in the report's rows (`ReportData.frame`);
    `requests` reads the request rows of probe runs (`Store.requests`)."""
    if frame.empty:
        return []
    mine = frame[
        (frame["arm_id"] == arm_id)
        & (frame["probe"] == ProbeName.LOAD.value)
        & frame["scenario"].astype(str).str.startswith(TRACE_SCENARIO_PREFIX)
    ]
    out: list[ReplayRun] = []
    for (item, scenario, context, mode), part in mine.groupby(
        ["item_key", "scenario", "context", "mode"], sort=True, observed=True
    ):
        run_ids = sorted({int(i) for i in part["probe_run_id"]})
        by_run: dict[int, list[RequestRow]] = {}
        for row in requests(run_ids):
            if row.scenario == scenario and row.mode == mode:
                by_run.setdefault(row.probe_run_id, []).append(row)
        replays = [s for s in (_sent(by_run.get(i, [])) for i in run_ids) if s]
        if not replays:
            continue
        out.append(
            _one(
                replays,
                str(item),
                str(scenario),
                int(context),
                str(mode),
                f"{chart_prefix}-replay-{item}-{int(context)}-{mode}",
            )
        )
    return out


@dataclass(frozen=True)
class Timeline:
    """One replay's steps: bin starts, requests sent per second in each, requests in
    flight at each bin's start, and the median TTFT of the requests sent in each."""

    edges: list[float]
    sent_rps: list[float]
    in_flight: list[float]
    ttft: list[float | None]


def timeline(sent: list[Sent], width: float, span: float) -> Timeline:
    edges = _edges(width, span)
    rates, flight, ttft = [], [], []
    for e in edges:
        here = [s for s in sent if e <= s.at < e + width]
        rates.append(len(here) / width)
        flight.append(float(sum(s.at <= e < s.end for s in sent)))
        times = [s.ttft for s in here if s.ttft is not None]
        ttft.append(statistics.median(times) if times else None)
    return Timeline(edges, rates, flight, ttft)


def _one(replays: list[list[Sent]], item: str, scenario: str, context: int, mode: str, cid: str) -> ReplayRun:
    span = max(s.end for sent in replays for s in sent)
    width = bin_width(span)
    lines = [timeline(sent, width, span) for sent in replays]
    named = len(replays) > 1
    # the trace's own arrivals (every run sends the same schedule): requests sent per second
    arrivals: list[tuple[str, list[tuple[float, float | None]], int]] = [
        ("sent (req/s)", list(zip(lines[0].edges, lines[0].sent_rps)), 0)
    ]
    ttft_lines: list[tuple[str, list[tuple[float, float | None]], int]] = []
    for k, line in enumerate(lines):
        name = f"server run {k + 1}" if named else ""
        arrivals.append((f"in flight, {name}" if named else "in flight", list(zip(line.edges, line.in_flight)), 1 + k))
        ttft_lines.append((f"median TTFT, {name}" if named else "median TTFT", list(zip(line.edges, line.ttft)), 1 + k))
    n = sum(len(s) for s in replays)
    failed = sum(not s.ok for sent in replays for s in sent)
    ttfts = sorted(t for sent in replays for s in sent if (t := s.ttft) is not None)
    summary = (
        f"{len(replays[0])} requests over {num(span)} s"
        + (f", {len(replays)} server runs" if named else "")
        + (f"; TTFT median {num(statistics.median(ttfts))} s, slowest {num(ttfts[-1])} s" if ttfts else "")
        + f"; {failed} of {n} failed; bins of {num(width)} s"
    )
    title = f"trace replay · {item} · {scenario[len(TRACE_SCENARIO_PREFIX) :]}{f' · context {context}' if context else ''} · {mode}"
    return ReplayRun(
        title,
        mode,
        summary,
        charts.xy_chart(
            f"{cid}-arrivals",
            "Arrivals and requests in flight",
            arrivals,
            x_title="time since the replay's first send (s)",
            y_title="req/s · requests",
        ),
        charts.xy_chart(
            f"{cid}-ttft",
            "TTFT over the replay: median of the requests sent in each bin",
            ttft_lines,
            x_title="time since the replay's first send (s)",
            y_title="TTFT (s)",
        ),
    )
