"""load: a load profile against a live server, with latency targets and goodput; or a
sweep from one request at a time up to the server's maximum throughput that finds the
highest rate it carries within the targets.

The profiles, the schedule, and every per-run number are defined in `arms.workloads.profiles`; this
probe supplies the workload, sends through `chat` (so the stall policy applies), samples
the queue, and writes the rows. The cells:

- probe `load`, scenario = the run's profile: `synchronous`, `concurrency=32`, `rate=1.5`
  (constant arrivals), `poisson=1.5`. In a sweep every run is one cell, so the curve is the
  set of cells; a gate "at a rate" names one.
- per request, trial = its index in the run: `ttft_s`, `tpot_s`, `e2e_s`, `itl_max_s` (its
  longest gap between token events: the worst stall its user saw), `schedule_lag_s`; a
  failure is its `errors` (or `not_run`) row. The raw record keeps the scheduled and the
  actual send.
- per run, summaries: `arms.workloads.profiles.run_stats` (offered_rps, request_throughput_rps,
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

import statistics
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field, PositiveFloat, model_validator

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
from arms.probes.agent_load import conversation_tokens
from arms.probes.base import ProbeTarget, QueueSampler, Sink, chat, read_counters, read_unchanged, record_counter_deltas
from arms.probes.failures import NOT_RUN, error_kind, record_errors, record_failure
from arms.probes.prompts import words
from arms.workloads import datasets, traces
from arms.workloads import profiles as load
from arms.workloads.datasets import Dataset, DatasetPrompt
from arms.workloads.profiles import Kind, Point, Profile, RunResult
from arms.workloads.traces import DEFAULT_BLOCK_TOKENS, TraceRequest
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind
from campaign.store.samples import kind_of

TargetName = Literal[
    "ttft_s", "tpot_s", "e2e_s"
]  # a campaign file's target keys, spelled out as a Literal must (`arms.workloads.profiles.meets`)
AGENT_FIELDS = ("conversations", "turns", "system_tokens", "task_tokens", "turn_tokens")
SWEEP_SCENARIO = "sweep"
DEFAULT_DURATION_S = 20.0


class LoadParams(BaseModel):
    profile: Kind = Field(
        default=Kind.SWEEP, description="synchronous | concurrent | constant | poisson | trace | sweep"
    )
    rate: float | None = Field(default=None, gt=0, description="constant, poisson: requests per second")
    concurrency: int | None = Field(default=None, ge=1, le=4096, description="concurrent: clients")
    seed: int = Field(
        default=0,
        description="poisson, sweep: seeds the arrivals (each step of a sweep its own, derived from it), so a run can be repeated",
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        description=f"seconds per run (each step of a sweep); default {DEFAULT_DURATION_S:g} unless requests is set",
    )
    requests: int | None = Field(
        default=None, ge=1, description="requests per run (with duration_s: whichever ends first)"
    )
    targets: dict[TargetName, PositiveFloat] = Field(
        default_factory=dict,
        description="latency targets a request must meet to count as goodput, e.g. {ttft_s = 2.0, tpot_s = 0.2}",
    )
    fraction: float = Field(
        default=0.9, gt=0, le=1, description="sweep: a rate holds when this share of its requests met every target"
    )
    rates: int = Field(
        default=4, ge=1, le=50, description="sweep: rates run between synchronous and maximum throughput"
    )
    max_concurrency: int = Field(default=32, ge=2, le=4096, description="sweep: clients of the maximum-throughput run")
    stop_at_saturation: bool = Field(
        default=True,
        description="sweep: no higher rate after the first that did not hold (the knee is decided there); false runs every rate, for the whole curve",
    )
    arrivals: Literal["constant", "poisson"] | None = Field(
        default=None,
        description="sweep: arrivals of its rate runs, default poisson (bursts as real traffic has, so a queue grows before the maximum rate); the constant and poisson profiles say their own, closed loops have none",
    )
    workload: Literal["synthetic", "agent", "trace", "dataset"] | None = Field(
        default=None,
        description="default: trace with the trace profile, dataset with a dataset, agent when any agent-shape field is set",
    )
    dataset: str | None = Field(
        default=None,
        description="dataset: a ShareGPT-style JSON or JSONL file; its prompts in turn, each its reply's length in words as output, capped by max_tokens",
    )
    trace: str | None = Field(
        default=None,
        description="trace: a Mooncake-style JSONL file (timestamp ms, input_length, output_length, hash_ids), replayed at its recorded times",
    )
    block_tokens: int = Field(
        default=DEFAULT_BLOCK_TOKENS, ge=1, description="trace: tokens per hash id block (Mooncake's traces: 512)"
    )
    time_scale: float = Field(
        default=1.0, gt=0, description="trace: the recorded gaps multiplied by this (0.5 replays twice as fast)"
    )
    prompt_tokens: int = Field(default=256, ge=1, description="synthetic: prompt size (words, about one token each)")
    max_tokens: int = Field(default=64, ge=2, description="output tokens per request")
    ignore_eos: bool = Field(default=True, description="hold every reply to max_tokens")
    conversations: int = Field(default=4, ge=1, le=1024, description="agent: conversations the requests cycle through")
    turns: int = Field(
        default=6, ge=1, le=200, description="agent: turns before a conversation starts over with a new task"
    )
    system_tokens: int = Field(default=2000, ge=0, description="agent: shared system prompt, in the server's tokens")
    task_tokens: int = Field(
        default=4000, ge=1, description="agent: unique task per conversation, in the server's tokens"
    )
    turn_tokens: int = Field(
        default=1600, ge=0, description="agent: tool output appended each later turn, in the server's tokens"
    )
    max_in_flight: int = Field(
        default=256,
        ge=1,
        le=4096,
        description="open loop: requests in flight at most; a send that finds it full waits, and is counted",
    )
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    context: int = 0

    @model_validator(mode="after")
    def _coherent(self) -> LoadParams:
        p = self.profile
        if (p == Kind.TRACE) != (self.trace is not None):
            raise ValueError(
                "profile trace replays a trace file (trace = 'traces/agents.jsonl', --trace FILE)"
                if p == Kind.TRACE
                else f"trace applies to the trace profile, not to {p}"
            )
        if p == Kind.TRACE:
            defaults = type(self).model_fields
            set_here = [
                f for f in (*AGENT_FIELDS, "prompt_tokens", "max_tokens") if getattr(self, f) != defaults[f].default
            ]
            if set_here or self.workload not in (None, "trace"):
                raise ValueError(
                    f"{', '.join(set_here) or 'workload'}: not for a trace replay, which sets its own prompts and output lengths"
                )
            self.workload = "trace"
            recorded(self.trace, self.block_tokens)  # refused here, naming the line, before anything runs
            return self
        if self.workload == "trace":
            raise ValueError("workload trace comes with profile trace")
        if self.workload == "dataset" and self.dataset is None:
            raise ValueError("workload dataset reads a dataset file (dataset = 'sharegpt.json', --dataset FILE)")
        if self.dataset is not None and self.workload not in (None, "dataset"):
            raise ValueError(f"dataset applies to the dataset workload, not to {self.workload}")
        if self.dataset is not None:
            set_here = [
                f for f in (*AGENT_FIELDS, "prompt_tokens") if getattr(self, f) != type(self).model_fields[f].default
            ]
            if set_here:
                raise ValueError(f"{', '.join(set_here)}: not for a dataset, whose records are the prompts")
            self.workload = "dataset"
            read_prompts(self.dataset)  # refused here, naming the record, before anything runs
        if p in load.OPEN_LOOP and self.rate is None:
            raise ValueError(f"profile {p} needs a rate in requests per second (rate = 2, --rate 2)")
        if self.rate is not None and p not in load.OPEN_LOOP:
            raise ValueError(f"rate applies to the constant and poisson profiles, not to {p}")
        if p == Kind.CONCURRENT and self.concurrency is None:
            raise ValueError("profile concurrent needs a number of clients (concurrency = 8, --concurrency 8)")
        if self.concurrency is not None and p != Kind.CONCURRENT:
            raise ValueError(
                f"concurrency applies to the concurrent profile, not to {p} (a sweep's is max_concurrency)"
            )
        if p == Kind.SWEEP:
            if not self.targets:
                raise ValueError(
                    "a sweep needs latency targets to find the rate that holds them (targets = {ttft_s = 2.0, tpot_s = 0.2}, --target ttft_s=2.0)"
                )
            if not load.QUEUE_TARGETS & set(self.targets):
                raise ValueError(
                    "a sweep needs a ttft_s or e2e_s target: a growing queue shows only there, a tpot_s target alone cannot see it"
                )
        if (
            self.arrivals is not None
            and p != Kind.SWEEP
            and self.arrivals != {Kind.CONSTANT: "constant", Kind.POISSON: "poisson"}.get(p)
        ):
            raise ValueError(
                f"arrivals applies to the sweep profile, not to {p} (the profile is its own arrival process)"
            )
        self.arrivals = {
            Kind.CONSTANT: "constant",
            Kind.POISSON: "poisson",
            Kind.SWEEP: self.arrivals or "poisson",
        }.get(p)
        if self.duration_s is None and self.requests is None:
            self.duration_s = DEFAULT_DURATION_S
        agent_set = [
            f
            for f in AGENT_FIELDS
            if f in self.model_fields_set and getattr(self, f) != type(self).model_fields[f].default
        ]
        if self.workload is None:
            self.workload = "agent" if agent_set else "synthetic"
        if self.workload == "synthetic" and agent_set:
            raise ValueError(
                f"{', '.join(agent_set)} shape(s) the agent workload, not the synthetic one (workload = 'agent')"
            )
        if (
            self.workload == "agent"
            and "prompt_tokens" in self.model_fields_set
            and self.prompt_tokens != type(self).model_fields["prompt_tokens"].default
        ):
            raise ValueError(
                "prompt_tokens sizes the synthetic workload; the agent one is sized by system_tokens, task_tokens and turn_tokens"
            )
        return self

    def reply_tokens(self, prompt: DatasetPrompt) -> int:
        """A dataset record's output length: its reply's (in words), capped by max_tokens."""
        return max(2, min(prompt.output_words, self.max_tokens))

    def _cut(self) -> tuple[list[float], list[TraceRequest]]:
        """The trace's send times and requests this run sends: cut by `requests` and `duration_s`."""
        return traces.cut(
            recorded(self.trace or "", self.block_tokens),
            count=self.requests,
            duration_s=self.duration_s,
            time_scale=self.time_scale,
        )

    def replayed(self) -> list[TraceRequest]:
        """The trace's requests this run sends (trace profile)."""
        return self._cut()[1]

    def profile_of(self) -> Profile:
        """The single run's profile (not for a sweep, which is several)."""
        if self.profile == Kind.TRACE:
            return load.trace(self._cut()[0], Path(self.trace or "").stem)
        if self.profile == Kind.SYNCHRONOUS:
            return load.synchronous()
        if self.profile == Kind.CONCURRENT:
            return load.concurrent(self.concurrency or 1)
        if self.profile == Kind.CONSTANT:
            return load.constant(self.rate or 0.0)
        if self.profile == Kind.POISSON:
            return load.poisson(self.rate or 0.0, self.seed)
        raise ValueError("a sweep is several runs")

    def request_tokens(self) -> int:
        """The most tokens one request holds by the stated sizes: a synthetic prompt and
        its reply, or an agent conversation's last turn as agent-load counts it."""
        if self.workload == "trace":
            return max(r.input_length + r.output_length for r in self.replayed())
        if self.workload == "dataset":
            data = read_prompts(self.dataset or "")
            return max(sum(len(c.split()) for _, c in p.messages) + self.reply_tokens(p) for p in data.prompts)
        if self.workload != "agent":
            return self.prompt_tokens + self.max_tokens
        return conversation_tokens(self.system_tokens, self.task_tokens, self.turns, self.turn_tokens, self.max_tokens)


def recorded(path: str, block_tokens: int) -> tuple[TraceRequest, ...]:
    """A trace file's requests (`read_unchanged`); a bad file raises a TraceError (a
    ValueError naming the line), which the params' check reports."""
    return tuple(read_unchanged(traces.read_trace, path, block_tokens))


def read_prompts(path: str) -> Dataset:
    """A dataset file's prompts (`read_unchanged`); a bad file raises a DatasetError."""
    return read_unchanged(datasets.read_dataset, path)


# -- workloads ------------------------------------------------------------------------------------


class Workload:
    """Request i's messages and label; built before an open-loop run starts its clock."""

    def __init__(self, params: LoadParams, salt: str, shared: str):
        self.p = params
        self.salt = salt
        self.system = words(params.system_tokens, f"{shared}/system") if params.workload == "agent" else ""
        self._piece = lru_cache(maxsize=4096)(words)
        self._block = lru_cache(maxsize=65536)(lambda block: words(params.block_tokens, f"{salt}/h{block}").split(" "))
        self.trace = params.replayed() if params.workload == "trace" else []
        self.implied = traces.implied_cached_tokens(self.trace, params.block_tokens) if self.trace else []

    def _trace_prompt(self, request: TraceRequest, i: int) -> str:
        """Equal hash ids as equal text (a block's words, seeded by its id and this run):
        a block the trace shares is a shared prefix on the server; the last block is as
        long as the request's input_length leaves it. Words are about a token each."""
        if not request.hash_ids:
            return words(request.input_length, f"{self.salt}/r{i}")
        size = self.p.block_tokens
        pieces = []
        for j, block in enumerate(request.hash_ids):
            pieces.append(" ".join(self._block(block)[: min(size, request.input_length - j * size)]))
        return " ".join(pieces)

    def prepare(self, i: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        p = self.p
        if p.workload == "dataset":
            prompts = read_prompts(p.dataset or "").prompts
            prompt = prompts[i % len(prompts)]
            return prompt.as_messages(), {"index": i, "record": i % len(prompts), "max_tokens": p.reply_tokens(prompt)}
        if p.workload == "trace":
            request = self.trace[i]
            label = {
                "index": i,
                "max_tokens": request.output_length,
                "input_length": request.input_length,
                "implied_cached_tokens": self.implied[i],
            }
            return [{"role": "user", "content": self._trace_prompt(request, i)}], label
        if p.workload != "agent":
            return [{"role": "user", "content": words(p.prompt_tokens, f"{self.salt}/{i}")}], {"index": i}
        generation, k = divmod(i, p.conversations * p.turns)
        turn, conv = divmod(k, p.conversations)
        who = f"{self.salt}/g{generation}/c{conv}"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": "Task: " + self._piece(p.task_tokens, f"{who}/task")},
        ]
        for t in range(turn):
            messages.append({"role": "assistant", "content": self._piece(p.max_tokens, f"{who}/reply{t}")})
            messages.append({"role": "user", "content": "Tool output: " + self._piece(p.turn_tokens, f"{who}/tool{t}")})
        return messages, {"index": i, "conversation": conv, "turn": turn, "generation": generation}


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
        put = {"mode": mode, "scenario": scenario, "context": context, "kind": SampleKind.SUMMARY}
        sink.measurement(metric=metrics.TRACE_REUSE, value=reported / prompts, source=", ".join(sorted(sources)), **put)
        sink.measurement(
            metric=metrics.TRACE_IMPLIED_REUSE,
            value=implied / prompts,
            source="trace hash_ids over the server's prompt_tokens",
            **put,
        )


async def run_profile(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    sink: Sink,
    params: LoadParams,
    profile: Profile,
    mode: Mode,
    workload: Workload,
) -> tuple[RunResult, dict[str, float]]:
    """One run of one profile, every row of it written; returns it and its per-run numbers."""
    scenario, ctx = profile.scenario, params.context

    async def send(i: int, item: tuple[list[dict[str, Any]], dict[str, Any]]) -> RequestRecord:
        messages, label = item
        tokens = int(label.get("max_tokens", params.max_tokens))  # a trace's own output length
        extra = {"ignore_eos": True, "min_tokens": tokens} if params.ignore_eos else None
        record = await chat(http, target, messages, mode, tokens, extra=extra)
        record.label = label
        return record

    before = await read_counters(http, target)
    async with QueueSampler(http, target, sink, phase=scenario) as sampler:
        result = await load.run(
            profile,
            send,
            prepare=workload.prepare,
            duration_s=params.duration_s,
            requests=params.requests,
            max_in_flight=params.max_in_flight,
            stop=lambda: target.stalls.tripped,
        )
    for trial, record in enumerate(result.records):
        sink.request(record, scenario=scenario, mode=mode, trial=trial)
        _per_request(sink, record, mode=mode, scenario=scenario, context=ctx, trial=trial)
    if params.workload == "trace":
        _trace_reuse(sink, target, result.records, mode=mode, scenario=scenario, context=ctx)
    numbers: dict[str, float] = {}
    for stat in load.run_stats(result, params.targets):
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

            def workload(profile: Profile, shared: str = shared) -> Workload:
                return Workload(params, f"{shared}-{profile.scenario}", shared)

            if params.profile != Kind.SWEEP:
                profile = params.profile_of()
                await run_profile(http, target, sink, params, profile, mode, workload(profile))
                continue
            await sweep(http, target, sink, params, mode, workload)


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
    sweep); then the knee: the highest rate whose goodput holds (`arms.workloads.profiles.knee`).

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

    first = await step(load.synchronous())
    top = await step(load.concurrent(params.max_concurrency))
    sync_rps, max_rps = (
        first.get(metrics.REQUEST_THROUGHPUT_RPS.name, 0.0),
        top.get(metrics.REQUEST_THROUGHPUT_RPS.name, 0.0),
    )
    planned = load.sweep_rates(sync_rps, max_rps, params.rates)
    for i, rate in enumerate(planned):
        if target.stalls.tripped:
            break  # the stall guard stopped the probe: the rates not run are not measured
        constant = load.constant(rate)
        profile = (
            load.poisson(rate, load.step_seed(params.seed, constant.scenario))
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
    found = load.knee(points, params.fraction)
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
    put(metrics.SYNCHRONOUS_RPS, sync_rps, load.synchronous().scenario)
    put(metrics.MAX_THROUGHPUT_RPS, max_rps, load.concurrent(params.max_concurrency).scenario)
    put(metrics.SWEEP_FRACTION, params.fraction, load.targets_text(params.targets))
    put(metrics.SWEEP_RUNS, len(points), "synchronous, maximum throughput, then the rates")
    put(metrics.SWEEP_RATES_SKIPPED, skipped, stopped or "every planned rate ran")
    if skipped and params.duration_s:
        put(
            metrics.SWEEP_TIME_SAVED_S,
            skipped * params.duration_s,
            f"{skipped} run(s) of {params.duration_s:g} s not spent",
        )


# -- the curve, for the command line, JSON and the report --------------------------------------

CURVE_METRICS = tuple(
    m.name
    for m in (
        metrics.OFFERED_RPS,
        metrics.REQUEST_THROUGHPUT_RPS,
        metrics.GOODPUT_RPS,
        metrics.TARGET_ATTAINMENT,
        metrics.OUTPUT_TPS,
        metrics.TTFT_P50_S,
        metrics.TTFT_P99_S,
        metrics.TPOT_P50_S,
        metrics.TPOT_P99_S,
        metrics.E2E_P99_S,
        metrics.ERROR_RATE,
        metrics.QUEUE_DEPTH_MEAN,
        metrics.QUEUE_DEPTH_MAX,
        metrics.SCHEDULE_LAG_P99_S,
        metrics.IN_FLIGHT_CAP_WAITS,
    )
)


def curve_rows(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (mode, context, run) from stored measurement rows (dicts with metric,
    scenario, mode, context, trial, value): the run's summary numbers, median over repeats,
    ordered by offered rate. The sweep's own cell is not a run and is left out."""
    cells: dict[tuple[str, int, str], dict[str, list[float]]] = {}
    for m in measurements:
        if kind_of(m) != SampleKind.SUMMARY or m["scenario"] == SWEEP_SCENARIO or m["metric"] not in CURVE_METRICS:
            continue
        key = (str(m["mode"]), int(m.get("context", 0)), str(m["scenario"]))
        cells.setdefault(key, {}).setdefault(str(m["metric"]), []).append(float(m["value"]))
    rows = []
    for (mode, context, scenario), values in cells.items():
        if metrics.OFFERED_RPS.name not in values:
            continue
        row: dict[str, Any] = {
            "mode": mode,
            "context": context,
            "scenario": scenario,
            "open_loop": load.is_open_loop(scenario),
        }
        row.update({metric: statistics.median(v) for metric, v in values.items()})
        rows.append(row)
    return sorted(
        rows, key=lambda r: (r["mode"] != Mode.CANONICAL.value, r["mode"], r["context"], r[metrics.OFFERED_RPS.name])
    )


def sweep_result(measurements: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(mode, context) -> the sweep cell's numbers and sources (max_goodput_rps and the rest)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for m in measurements:
        if m["scenario"] == SWEEP_SCENARIO and kind_of(m) == SampleKind.SUMMARY:
            cell = out.setdefault((str(m["mode"]), int(m.get("context", 0))), {})
            cell[str(m["metric"])] = float(m["value"])
            cell[f"{m['metric']}_source"] = str(m.get("source", ""))
    return out


def extras(measurements: list[dict[str, Any]], requests: list[dict[str, Any]]) -> dict[str, Any]:
    """What `campaign probe --json` adds for a run: the curve, one row per run, and the
    sweep's answer per (mode, context)."""
    return {
        "curve": curve_rows(measurements),
        "sweep": [{"mode": m, "context": c, **cell} for (m, c), cell in sweep_result(measurements).items()],
    }
