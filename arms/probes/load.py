"""load: the load probe, load profiles (`arms.workloads.profiles`) against a live server
with latency targets and goodput; or a sweep from one request at a time up to the server's
maximum throughput that finds the highest rate it carries within the targets.

The profiles are defined in `arms.workloads.profiles`, sending on them in
`arms.workloads.dispatch`, every per-run number in `arms.workloads.load_stats`, a sweep's
rates and knee in `arms.workloads.sweep`. This probe takes its parameters
(`arms.probes.load_params`), supplies the workload (`arms.probes.load_workload`), sends
through `chat` (so the stall policy applies), samples the queue, and writes the rows; the
curve is read back from them in `arms.probes.load_curve`. The cells:

- probe `load`, scenario = the run's profile: `synchronous`, `concurrency=32`, `rate=1.5`
  (constant arrivals), `poisson=1.5`. In a sweep every run is one cell, so the curve is the
  set of cells; a gate "at a rate" names one.
- per request, trial = its index in the run: `ttft_s`, `tpot_s`, `e2e_s`, `itl_max_s` (its
  longest gap between token events: the worst stall its user saw), `schedule_lag_s`; a
  failure is its `errors` (or `not_run`) row. The raw record keeps the scheduled and the
  actual send.
- per run, summaries: `arms.workloads.load_stats.run_stats` (offered_rps, request_throughput_rps,
  output_tps, goodput_rps, target_attainment, p50/p90/p99 of ttft/tpot/itl/e2e, schedule
  lag p50/p99/max, in-flight peak and cap waits), the error counts (`record_errors`), the
  queue (`queue_depth_max`, `queue_depth_mean`, sample counts; samples every 0.5 s
  labelled with the scenario), and cache counter deltas.
- a sweep adds scenario `sweep`: `max_goodput_rps` (its source is the scenario it came
  from), `max_goodput_offered_rps` (its source says why the next rate did not hold),
  `synchronous_rps`, `max_throughput_rps`, `sweep_fraction`.

Per-request rows are written when a run has ended, not as each request ends: computing
them between sends would delay the sends still to come, and a probe run is stored whole
or measured again anyway.

Workloads: `synthetic` (a unique prompt of `prompt_tokens` words per request, `max_tokens`
out) or `agent` (agent-load's shape: request k is turn k // conversations of conversation
k % conversations, its prompt that conversation's history -- shared system prompt, its own
task, then per earlier turn a reply and a block of tool output -- so prefixes are shared
as in seed 000; the replies in the history are synthetic, since an open-loop request
cannot wait for the previous turn's answer). Output is held to `max_tokens` (`ignore_eos`)
so every rate asks for the same work.
"""

from __future__ import annotations

import math
import statistics
import uuid
from typing import Any

import httpx

from arms.measures import (
    RequestRecord,
    e2e_s,
    extract_cached_tokens,
    itl_s,
    record_payload,
    schedule_lag_s,
    tpot_s,
    ttft_s,
)
from arms.measures import prompt_tokens as usage_prompt_tokens
from arms.probes.base import READ_TIMEOUT_S, ProbeTarget, Sink
from arms.probes.counters import read_counters, record_counter_deltas
from arms.probes.failures import NOT_RUN, error_kind, record_errors, record_failure
from arms.probes.load_curve import SWEEP_SCENARIO, curve_rows, sweep_result
from arms.probes.load_params import LoadParams
from arms.probes.load_workload import LoadRequests
from arms.probes.queue_sampler import QueueSampler
from arms.workloads import dispatch, profiles, shards
from arms.workloads.dispatch import RunResult
from arms.workloads.load_stats import run_stats, targets_text
from arms.workloads.profiles import Kind, Profile
from arms.workloads.sweep import Point, knee, sweep_rates
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind

# -- one run --------------------------------------------------------------------------------------


def _per_request(sink: Sink, record: RequestRecord, *, mode: Mode, scenario: str, context: int, trial: int) -> None:
    lag = schedule_lag_s(record)
    if lag is not None and error_kind(record.error) != NOT_RUN:  # a request never sent has no lag
        sink.measurement(
            metric=metrics.SCHEDULE_LAG_S, value=lag, mode=mode, scenario=scenario, context=context, trial=trial
        )
    if not record.ok:
        record_failure(sink, record, mode=mode, scenario=scenario, context=context, trial=trial)
        return

    def put(metric: Metric, value: float | None, source: str = "") -> None:
        if value is not None:
            sink.measurement(
                metric=metric, value=value, mode=mode, scenario=scenario, context=context, trial=trial, source=source
            )

    put(metrics.TTFT_S, ttft_s(record))
    tpot, source = tpot_s(record)
    put(metrics.TPOT_S, tpot, source)
    put(metrics.E2E_S, e2e_s(record))
    gaps = itl_s(record)
    put(metrics.ITL_MAX_S, max(gaps) if gaps else None)


def _trace_reuse(
    sink: Sink, target: ProbeTarget, records: list[RequestRecord], *, mode: Mode, scenario: str, context: int
) -> None:
    """A replay's reuse, the server's beside the trace's: per request the cached tokens the
    server reported and those the trace implies (an unbounded prefix cache); per run
    `trace_reuse` and `trace_implied_reuse`, each cached / prompt tokens over the run's
    succeeded requests. A cache that evicts, or never matches, shows as the difference."""
    reported = implied = prompts = 0
    sources = set()
    for trial, record in enumerate(records):
        if not record.ok:
            continue
        label = record.label or {}
        payload = record_payload(record)
        cached, field = extract_cached_tokens(payload, prefer=target.cached_field)
        prompt = usage_prompt_tokens(payload)
        implied_here = int(label.get("implied_cached_tokens", 0))
        sink.measurement(
            metric=metrics.IMPLIED_CACHED_TOKENS,
            value=implied_here,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=trial,
            source=f"trace hash_ids, of input_length {label.get('input_length')}",
        )
        if cached is None or prompt is None:
            continue
        sink.measurement(
            metric=metrics.CACHED_TOKENS,
            value=cached,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=trial,
            source=field,
        )
        reported, implied, prompts = reported + cached, implied + implied_here, prompts + prompt
        sources.add(field)
    if prompts:

        def put(metric: Metric, value: float, source: str) -> None:
            sink.measurement(
                metric=metric,
                value=value,
                source=source,
                mode=mode,
                scenario=scenario,
                context=context,
                kind=SampleKind.SUMMARY,
            )

        put(metrics.TRACE_REUSE, reported / prompts, ", ".join(sorted(sources)))
        put(metrics.TRACE_IMPLIED_REUSE, implied / prompts, "trace hash_ids over the server's prompt_tokens")


async def run_profile(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    sink: Sink,
    params: LoadParams,
    profile: Profile,
    mode: Mode,
    requests: LoadRequests,
) -> tuple[RunResult, dict[str, float]]:
    """One run of one profile, every row of it written; returns it and its per-run numbers.
    Sent by this process, or by `client_procs` worker processes (`arms.workloads.shards`)."""
    scenario, ctx = profile.scenario, params.context
    before = await read_counters(http, target)
    warm = warm_count(profile, params.max_in_flight)
    procs = params.client_procs or shards.auto_procs(warm)
    if procs == 1:
        await requests.warm(http, warm)
    async with QueueSampler(http, target, sink, phase=scenario) as sampler:
        if procs > 1:
            result = await shards.run(
                requests,
                profile,
                procs=procs,
                duration_s=params.duration_s,
                requests=params.requests,
                max_in_flight=params.max_in_flight,
                warm=warm,
            )
            for record in sorted(result.records, key=lambda r: r.end_ns):  # each process guarded its own
                target.stalls.observe(record, target.read_timeout or READ_TIMEOUT_S)
        else:

            async def send(i: int, item: Any) -> RequestRecord:
                return await requests.send(http, i, item)

            result = await dispatch.run(
                profile,
                send,
                prepare=requests.prepare,
                duration_s=params.duration_s,
                requests=params.requests,
                max_in_flight=params.max_in_flight,
                stop=requests.stopped,
            )
    for trial, record in enumerate(result.records):
        sink.request(record, scenario=scenario, mode=mode, trial=trial)
        _per_request(sink, record, mode=mode, scenario=scenario, context=ctx, trial=trial)
    if params.workload == "trace":
        _trace_reuse(sink, target, result.records, mode=mode, scenario=scenario, context=ctx)
    numbers: dict[str, float] = {}
    for stat in run_stats(result, params.targets):
        sink.measurement(
            metric=stat.metric,
            value=stat.value,
            mode=mode,
            scenario=scenario,
            context=ctx,
            kind=SampleKind.SUMMARY,
            source=stat.source,
        )
        numbers[stat.metric.name] = stat.value
    if profile.open_loop:
        sink.measurement(
            metric=metrics.RATE_RPS,
            value=profile.rate,
            mode=mode,
            scenario=scenario,
            context=ctx,
            kind=SampleKind.SUMMARY,
            source=profile.kind.value,
        )
    else:
        sink.measurement(
            metric=metrics.CONCURRENCY,
            value=profile.concurrency,
            mode=mode,
            scenario=scenario,
            context=ctx,
            kind=SampleKind.SUMMARY,
        )
    record_errors(sink, result.records, mode=mode, scenario=scenario, context=ctx)
    sampler.record(mode=mode, scenario=scenario, context=ctx)
    if sampler.series:
        mean = sum(v for _, v in sampler.series) / len(sampler.series)
        sink.measurement(
            metric=metrics.QUEUE_DEPTH_MEAN,
            value=mean,
            mode=mode,
            scenario=scenario,
            context=ctx,
            kind=SampleKind.SUMMARY,
            source=f"{len(sampler.series)} samples",
        )
        numbers["queue_growth"] = queue_growth([v for _, v in sampler.series])
    await record_counter_deltas(http, target, sink, before, mode=mode, scenario=scenario, context=ctx)
    return result, numbers


async def run(target: ProbeTarget, sink: Sink, params: LoadParams) -> None:
    run_id = uuid.uuid4().hex[:8]
    pool = max(
        params.max_in_flight, params.max_concurrency if params.profile == Kind.SWEEP else 1, params.concurrency or 1
    )
    async with target.client(pool + 2) as http:
        for mode in params.modes:
            shared = f"load-{run_id}-{mode}"

            def workload(profile: Profile, shared: str = shared, mode: Mode = mode) -> LoadRequests:
                return LoadRequests(target, params, mode, f"{shared}-{profile.scenario}", shared)

            if params.profile != Kind.SWEEP:
                profile = params.profile_of()
                await run_profile(http, target, sink, params, profile, mode, workload(profile))
                continue
            await sweep(http, target, sink, params, mode, workload)


def warm_count(profile: Profile, cap: int) -> int:
    """Connections to open before a run: a closed loop's clients all send at its start, so
    its concurrency (capped); an open loop's requests in flight are about its rate times a
    response's time, so its rate rounded up (at least one, at most the in-flight cap). Not
    the cap itself: a server that serves a connection per thread (llama-server) would hold
    a thread for each idle one."""
    if not profile.open_loop:
        return min(cap, max(1, profile.concurrency))
    return min(cap, max(1, math.ceil(profile.rate or 1)))


def queue_growth(depths: list[float]) -> float:
    """How much the queue grew over a run: the mean depth of its last third of samples
    minus that of its first third (0 with fewer than 3 samples). A server that cannot
    carry a rate shows a queue growing without bound; one that can, a flat one."""
    if len(depths) < 3:
        return 0.0
    third = len(depths) // 3
    return statistics.fmean(depths[-third:]) - statistics.fmean(depths[:third])


async def sweep(
    http: httpx.AsyncClient, target: ProbeTarget, sink: Sink, params: LoadParams, mode: Mode, workload: Any
) -> None:
    """Synchronous, then maximum throughput, then `rates` rates between the two (GuideLLM's
    sweep); then the knee: the highest rate whose goodput holds (`arms.workloads.sweep.knee`).

    The knee walks up from the lowest rate and stops at the first that does not hold, so no
    higher rate can change it: with `stop_at_saturation` the sweep stops there, records
    why (the share that met the targets, how the queue and the schedule lag went) and the
    rates and device time it did not spend."""
    points: list[Point] = []
    stopped = ""
    skipped = 0

    async def step(profile: Profile) -> dict[str, float]:
        _, numbers = await run_profile(http, target, sink, params, profile, mode, workload(profile))
        points.append(
            Point(
                profile.scenario,
                numbers.get(metrics.OFFERED_RPS.name, 0.0),
                numbers.get(metrics.GOODPUT_RPS.name, 0.0),
                numbers.get(metrics.TARGET_ATTAINMENT.name, 0.0),
                profile.open_loop,
            )
        )
        return numbers

    first = await step(profiles.synchronous())
    top = await step(profiles.concurrent(params.max_concurrency))
    sync_rps, max_rps = (
        first.get(metrics.REQUEST_THROUGHPUT_RPS.name, 0.0),
        top.get(metrics.REQUEST_THROUGHPUT_RPS.name, 0.0),
    )
    planned = sweep_rates(sync_rps, max_rps, params.rates)
    for i, rate in enumerate(planned):
        if target.stalls.tripped:
            break  # the stall guard stopped the probe: the rates not run are not measured
        constant = profiles.constant(rate)
        profile = (
            profiles.poisson(rate, profiles.step_seed(params.seed, constant.scenario))
            if params.arrivals == "poisson"
            else constant
        )
        numbers = await step(profile)
        attainment = numbers.get(metrics.TARGET_ATTAINMENT.name, 1.0)
        if params.stop_at_saturation and attainment + 1e-9 < params.fraction and i + 1 < len(planned):
            skipped = len(planned) - i - 1
            stopped = (
                f"saturated at {profile.scenario}: {attainment:.0%} of its requests met the targets (< {params.fraction:.0%}); "
                f"queue grew {numbers.get('queue_growth', 0.0):+.1f} over the run, schedule lag p99 "
                f"{numbers.get(metrics.SCHEDULE_LAG_P99_S.name, 0.0) * 1000:.0f} ms; {skipped} higher rate(s) not run"
            )
            break
    found = knee(points, params.fraction)
    ctx = params.context

    def put(metric: Metric, value: float, source: str = "") -> None:
        sink.measurement(
            metric=metric,
            value=value,
            mode=mode,
            scenario=SWEEP_SCENARIO,
            context=ctx,
            kind=SampleKind.SUMMARY,
            source=source,
        )

    put(metrics.MAX_GOODPUT_RPS, found.max_goodput_rps, found.point.scenario if found.point else "")
    put(metrics.MAX_GOODPUT_OFFERED_RPS, found.point.offered_rps if found.point else 0.0, found.text())
    put(metrics.SYNCHRONOUS_RPS, sync_rps, profiles.synchronous().scenario)
    put(metrics.MAX_THROUGHPUT_RPS, max_rps, profiles.concurrent(params.max_concurrency).scenario)
    put(metrics.SWEEP_FRACTION, params.fraction, targets_text(params.targets))
    put(metrics.SWEEP_RUNS, len(points), "synchronous, maximum throughput, then the rates")
    put(metrics.SWEEP_RATES_SKIPPED, skipped, stopped or "every planned rate ran")
    if skipped and params.duration_s:
        put(
            metrics.SWEEP_TIME_SAVED_S,
            skipped * params.duration_s,
            f"{skipped} run(s) of {params.duration_s:g} s not spent",
        )


def extras(measurements: list[dict[str, Any]], requests: list[dict[str, Any]]) -> dict[str, Any]:
    """What `campaign probe --json` adds for a run: the curve, one row per run, and the
    sweep's answer per (mode, context)."""
    return {
        "curve": curve_rows(measurements),
        "sweep": [{"mode": m, "context": c, **cell} for (m, c), cell in sweep_result(measurements).items()],
    }
