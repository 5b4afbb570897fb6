"""One probe at one context on a running server, its rows stored as it goes.

A plain call inside the arm's flow run, not a Prefect task run: the flow run is the unit a
user watches (one arm, one block), its log says when each probe starts and ends
(`flows.progress`), and the probe run's row holds its state. A task run per probe cost
its creation and state changes on the API, about a third of a second each with a lasting
server: a tenth of the demo's wall time for nothing the store does not already say.

Also why an attempt whose every request failed has failed, said as one line: the probe
runs end done, and only their requests' outcomes tell.
"""

from __future__ import annotations

import json
import re

from arms.probes import registry as probes
from arms.probes.base import ProbeTarget
from arms.probes.failures import NOT_RUN, error_kind
from arms.runtimes import catalog as runtimes
from arms.telemetry.record import CountingSink, record_telemetry
from arms.telemetry.sampler import TelemetrySampler
from arms.telemetry.sources import Where, devices_for
from campaign.core.processes import group_processes
from campaign.core.states import ProbeRunState
from campaign.store.measurements import RequestOutcome
from campaign.store.store import Store
from campaign.store.tables import ProbeRunRow, utcnow
from flows import interrupt
from flows.contracts import ProbeRun
from flows.progress import emit
from flows.sink import SinkWriteError, StoreSink


def run_probe(job: ProbeRun) -> int:
    """One probe run on a running server, its rows stored as it goes; the probe run's id."""
    store = Store(job.store_url)
    speaks = runtimes.get(job.speaks)
    probe, context, arm_id = job.probe, job.context, job.arm_id
    run = store.add(
        ProbeRunRow(attempt_id=job.attempt_id, probe=probe, context=context, settings_hash=job.settings_hash)
    )
    target = ProbeTarget(
        base_url=job.base_url,
        model=job.model,
        telemetry=speaks.telemetry,
        dialect=speaks.dialect,
        sampling=job.sampling,
        simulated=job.simulated,
        log_path=job.log_path,
        cached_tokens_field=job.cached_tokens_field,
    )
    pspec = probes.get(probe)
    params = pspec.params.model_validate_json(job.params_json)
    emit("probe-start", arm=arm_id, probe=probe, context=context)
    # The sink's writer thread stores rows in batches; closing it writes the rest. It is
    # closed before the run's state changes, so a run marked done has all its rows, and a
    # failed one keeps what was measured before the failure.
    sink = StoreSink(
        store, job.campaign_id, job.attempt_id, run.id, job.item_key, arm_id, probe, job.simulated, context, job.block
    )
    counted = CountingSink(sink)
    sampler = _sampler(job)
    try:
        try:
            if sampler is not None:
                sampler.measure_idle(IDLE_S[job.telemetry])
                sampler.start()
            try:
                interrupt.run_cancellable(pspec.run(target, counted, params))
            finally:
                telemetry = sampler.stop() if sampler is not None else None
            interrupt.check()  # a probe that ends after a stop request may hold broken requests
            if telemetry is not None:
                at = counted.context if counted.context is not None else context
                record_telemetry(sink, telemetry, counted.output_tokens, context=at)
        except BaseException:
            try:
                sink.close()
            except SinkWriteError:
                pass  # the probe's own failure is the one to report
            raise
        sink.close()
    except BaseException as exc:
        if isinstance(exc, interrupt.CampaignInterrupted):  # not a task failure: the arm flow records the stop
            store.update(
                ProbeRunRow, run.id, state=ProbeRunState.INTERRUPTED, error="interrupted by the user", ended_at=utcnow()
            )
            return 0
        store.update(
            ProbeRunRow, run.id, state=ProbeRunState.FAILED, error=f"{type(exc).__name__}: {exc}", ended_at=utcnow()
        )
        raise
    store.update(ProbeRunRow, run.id, state=ProbeRunState.DONE, ended_at=utcnow())
    emit("probe-done", arm=arm_id, probe=probe, context=context)
    return run.id or 0


# seconds of idle power read before each probe run: the simulator's idle draw is flat, a
# real device's settles over a second of samples
IDLE_S = {str(Where.SIMULATED): 0.1, str(Where.LOCAL): 1.0, str(Where.NONE): 0.0}


def _sampler(job: ProbeRun) -> TelemetrySampler | None:
    """The telemetry sampler of the job's server, or None when no device can be read."""
    where = Where(job.telemetry)
    pids = frozenset(p.pid for p in group_processes(job.server_pgid)) if job.server_pgid else frozenset()  # type: ignore[attr-defined]
    env = {"CUDA_VISIBLE_DEVICES": job.visible_devices} if job.visible_devices is not None else {}
    devices = devices_for(where, job.base_url, env, pids)
    return TelemetrySampler(devices) if devices else None


def all_failed_reason(outcome: RequestOutcome) -> str | None:
    """Why an arm whose every request failed has failed, or None if any succeeded (or it
    sent none): the count, the main error kind (`arms.probes.failures.error_kind`) and
    one raw message of that kind as the server said it, e.g. "30/30 requests failed,
    HTTP 400: the request needs 6197 tokens ... but the context size is 4096".

    Why fail the arm: its probes ran to the end and stored error rates only, so it would
    be `done` with no number a gate can read, and the item's verdict would say
    inconclusive where the truth is that the arm never served one request."""
    if not outcome.all_failed:
        return None
    kinds = {k: n for k, n in outcome.kinds.items() if k != NOT_RUN}
    sent = [e for e in outcome.errors if error_kind(e) != NOT_RUN]
    for raw in sent:  # kinds not counted in rows (none today) still name themselves
        kinds.setdefault(error_kind(raw), 0)
    kind = max(kinds.items(), key=lambda kv: kv[1])[0] if kinds else ""
    raw = next((e for e in sent if error_kind(e) == kind), sent[0] if sent else "")
    return f"{outcome.failed}/{outcome.requests} requests failed, {_readable(kind, raw)}"


def _readable(kind: str, raw: str, limit: int = 300) -> str:
    """A raw error as one line: an OpenAI-style JSON error body shown by its message."""
    head, sep, body = raw.partition(": ")
    if sep and body.lstrip().startswith("{"):
        try:
            error = json.loads(body).get("error")
            message = error.get("message") if isinstance(error, dict) else error
        except (ValueError, AttributeError):
            found = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
            message = found.group(1) if found else None
        if isinstance(message, str) and message:
            raw = f"{head}: {message}"
    text = " ".join(raw.split())
    if kind and not text.startswith(kind):
        text = f"{kind}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
