"""How a probe's requests fail: error kinds, and the stall policy every probe shares.

Why kinds: a raw error string carries server text, offsets and ids, so no two are alike
and a table of them says nothing. `error_kind` folds each into the few kinds a person
acts on ("HTTP 503", "read timeout", "stream broken", "server sent no tokens", ...).

Why a stall policy: a server that stops sending mid-stream holds each request for the
whole read timeout, so a probe of a few dozen requests against a stalled server would
sit for an hour. After `STALL_LIMIT` consecutive stalls (read timeouts) the probe stops
sending: every later request comes back at once as "not run", stored like any other row,
so the record says what was skipped and why instead of what a dead server did to it.
"""

from __future__ import annotations

import re
import time
from typing import Any

from arms.measures import RequestRecord
from campaign.core import metrics
from campaign.core.states import SampleKind

NOT_RUN = "not run"
READ_TIMEOUT = "read timeout"
STALL_LIMIT = 2

_HTTP = re.compile(r"^HTTP (\d{3})\b")
_TYPE = re.compile(r"^([A-Z][A-Za-z]*(?:Error|Exception|Timeout)):")

# (substring of the client's error text, kind), first match wins; the texts are the ones
# `arms.client.stream_chat` writes.
_KINDS: tuple[tuple[str, str], ...] = (
    ("server sent no tokens", "server sent no tokens"),
    ("stream broken", "stream broken"),
    ("malformed SSE", "malformed SSE"),
    ("server error event", "server error event"),
    ("without [DONE]", "stream ended early"),
    ("cannot connect", "cannot connect"),
    ("connection failed", "cannot connect"),
    ("closed the connection", "connection closed"),
    ("malformed response", "malformed response"),
)


def error_kind(error: str | None) -> str:
    """The kind of a request's error, for counting; "" for a request that succeeded."""
    if not error:
        return ""
    if error.startswith(NOT_RUN):
        return NOT_RUN
    if match := _HTTP.match(error):
        return f"HTTP {match.group(1)}"
    if error.startswith("timeout"):
        # the client says "read timeout" when no byte came within it (a stall); any other
        # timeout is the request's total time limit
        return READ_TIMEOUT if READ_TIMEOUT in error else "timeout"
    for needle, kind in _KINDS:
        if needle in error:
            return kind
    if match := _TYPE.match(error):
        return match.group(1)
    return error.split(":", 1)[0][:40]


class StallGuard:
    """Counts consecutive stalls of one probe run; after `limit` of them it is tripped and
    the probe's requests are no longer sent (see `arms.probes.base.chat`).

    Any request that ends another way (a success, an HTTP error) resets the count: a
    server that answers between stalls is slow or flaky, not gone.
    """

    def __init__(self, limit: int = STALL_LIMIT):
        self.limit = limit
        self.consecutive = 0
        self.reason = ""  # set once tripped: what the "not run" records say

    @property
    def tripped(self) -> bool:
        return bool(self.reason)

    def observe(self, record: RequestRecord, read_timeout: float) -> None:
        if error_kind(record.error) != READ_TIMEOUT:
            self.consecutive = 0
            return
        self.consecutive += 1
        if self.consecutive >= self.limit and not self.reason:
            self.reason = f"stopped after {self.consecutive} consecutive stalls (no byte for {read_timeout:g} s)"

    def not_run(self) -> RequestRecord:
        """The record of a request the probe did not send."""
        now = time.perf_counter_ns()
        return RequestRecord(send_ns=now, end_ns=now, error=f"{NOT_RUN}: {self.reason}")


def record_failure(
    sink: Any,
    record: RequestRecord,
    *,
    mode: Any,
    scenario: str,
    context: int = 0,
    trial: int = 0,
    row_kind: SampleKind = SampleKind.SAMPLE,
) -> str:
    """A failed request as one measurement, and its kind: `not_run` (value 1) when the
    stall guard kept it from being sent, else `errors` (value 1). The source is the error
    kind; the raw message stays on the request row."""
    kind = error_kind(record.error)
    metric = metrics.NOT_RUN if kind == NOT_RUN else metrics.ERRORS
    sink.measurement(
        metric=metric, value=1, mode=mode, scenario=scenario, context=context, trial=trial, kind=row_kind, source=kind
    )
    return kind


def kind_slug(kind: str) -> str:
    """An error kind as a metric-name suffix: "HTTP 503" -> "http_503"."""
    return re.sub(r"[^a-z0-9]+", "_", kind.lower()).strip("_") or "other"


def record_errors(
    sink: Any, records: Any, *, mode: Any, scenario: str, context: int = 0, baseline: bool = False
) -> dict[str, float]:
    """One cell's request outcomes as summary rows (kind summary): `requests`,
    `requests_failed`, `error_rate`, `requests_retried`, and `requests_failed_<kind>` for
    each kind seen (source: the kind as `error_kind` names it). Requests the stall guard
    never sent are neither requests nor failures: they are counted apart, in
    `requests_not_run`. `baseline`: agent-load's baseline pass, whose rows share the cell
    under their `baseline_` names (`metrics.baseline`).

    Why every probe writes these in the cell a gate reads: failed requests never enter
    latency samples, so an arm that fails a third of its requests can look fastest. The
    gates read these rows (`gates.compare`) and an arm over the error limit cannot pass.
    """
    everything = list(records)
    records = [r for r in everything if error_kind(r.error) != NOT_RUN]  # never sent: not a request, not an error
    kinds: dict[str, tuple[str, int]] = {}
    for record in records:
        if not record.ok:
            kind = error_kind(record.error)
            slug = kind_slug(kind)
            kinds[slug] = (kind, kinds.get(slug, (kind, 0))[1] + 1)
    failed = sum(n for _, n in kinds.values())
    rows: list[tuple[metrics.Metric, float, str]] = [
        (metrics.REQUESTS, len(records), ""),
        (metrics.REQUESTS_FAILED, failed, ""),
        (
            metrics.REQUESTS_RETRIED,
            sum(1 for r in records if r.retries),
            "refused before any byte, sent again; times count from the first send",
        ),
        *((metrics.requests_failed_of(slug), n, kind) for slug, (kind, n) in sorted(kinds.items())),
    ]
    if len(everything) > len(records):
        rows.append((metrics.REQUESTS_NOT_RUN, len(everything) - len(records), NOT_RUN))
    if records:
        rows.append((metrics.ERROR_RATE, failed / len(records), f"{failed}/{len(records)}"))
    out = {}
    for metric, value, source in rows:
        named = metrics.baseline(metric) if baseline else metric
        sink.measurement(
            metric=named,
            value=value,
            mode=mode,
            scenario=scenario,
            context=context,
            kind=SampleKind.SUMMARY,
            source=source,
        )
        out[named.name] = value
    return out
