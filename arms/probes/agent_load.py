"""agent-load: N concurrent agent conversations x T turns, the workload of seed 000.

Turn 1 is a shared system prompt plus a task unique to the conversation; every later turn
appends the model's reply and a block of synthetic tool output, so each conversation's
history grows turn over turn. TTFT is recorded per conversation and turn, queue depth is
sampled every 0.5 s (through the single-stream baseline too, so its samples show the
queue really was empty), and cache counters are taken as deltas over the load -- so the
stored numbers can say *which* mechanism (slot affinity or the prefix cache) kept TTFT
flat. A single-stream run of the same shape is measured beside it.

Sizes are the server's tokens, chat template included, as in the other probes: the turn-1
prompt (system + task) counts `system_tokens + task_tokens`, the system message adds
`system_tokens` of them, and each later turn adds `turn_tokens` besides the model's reply
(the reply's closing, the tool-output message, its template). Every piece is sized before
the timed requests (`arms.probes.agent_pieces`), once, and only its word count is kept;
the rows `system_tokens_target`, `task_tokens_target` and `turn_tokens_target` say how
they were counted. A server without a tokenizer gets the word counts of old, labelled an
estimate. The parameters are `arms.probes.agent_load_params`.

The agentic shape: `tool_delay_s` is a tool's run time, waited between a reply and the
conversation's next request (the gap in which a server may hand the slot to someone
else). With `fan_out` F > 1 each later turn is a fan-out and a merge, as an agent that
sends sub-agents (or parallel tool calls the model runs) does: F branch requests at once,
each the history so far plus a tool output of its own (`turn_tokens`), then the turn's
request with the tool output and every branch's reply appended. A conversation is one
user, but during a fan-out it holds up to F requests in flight: `requests_in_flight_max`
(the client's own count) beside `conversations` says how many slots the workload really
asked for, and `branch_ttft_*` and `fan_out_wait_*` (first branch sent to last branch
answered: what the merge waits on) say what the branches cost.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from arms.measures import (
    RequestRecord,
    decode_tps,
    extract_cached_tokens,
    prompt_tokens,
    record_payload,
    tpot_s,
    ttft_s,
)
from arms.probes.agent_load_params import AgentLoadParams, recorded_sessions
from arms.probes.agent_pieces import Plan, record_plan, size_pieces, task_text, tool_text
from arms.probes.base import ProbeTarget, Sink, chat, record_response
from arms.probes.counters import read_counters, record_counter_deltas
from arms.probes.failures import record_errors
from arms.probes.queue_sampler import QueueSampler
from arms.workloads.sessions import Session
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind


def turn_scenario(conversation: int, turn: int) -> str:
    return f"c{conversation}-t{turn}"


def baseline_scenario(turn: int) -> str:
    return f"baseline-t{turn}"


def branch_scenario(turn_cell: str, branch: int) -> str:
    """A fan-out branch's cell: its turn's, and the branch (`c0-t2-b1`)."""
    return f"{turn_cell}-b{branch}"


MERGE_LEAD = "Branch results:"


@dataclass
class _InFlight:
    """The client's own count of requests in flight in a phase, and its peak."""

    now: int = 0
    peak: int = 0

    def __enter__(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def __exit__(self, *_: object) -> None:
        self.now -= 1


@dataclass
class _Phase:
    """What one phase's conversations share: the cells they write to and the tallies
    kept beside their turns (fan-out branches and how long each merge waited)."""

    scenario_of: Callable[[int, int], str]
    flight: _InFlight
    branches: list[RequestRecord]
    waits: list[float]


async def _conversation(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    params: AgentLoadParams,
    mode: Mode,
    plan: Plan,
    index: int,
    sink: Sink,
    phase: _Phase,
) -> list[RequestRecord]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": plan.system},
        {"role": "user", "content": task_text(plan.salt, index, plan.tasks[index])},
    ]

    async def send(history: list[dict[str, Any]], scenario: str, turn: int, label: dict[str, Any]) -> RequestRecord:
        with phase.flight:
            record = await chat(
                http,
                target,
                history,
                mode,
                params.max_tokens,
                read_timeout=target.read_timeout or params.turn_timeout_s,
                total_timeout=params.turn_timeout_s,
            )
        record.label = label
        sink.request(record, scenario=scenario, mode=mode, trial=turn)
        _emit_turn(sink, target, record, scenario, mode, params.context, turn)
        return record

    records = []
    pending: tuple[int, str] | None = None  # the last reply's tool output: (its turn, text)
    for turn in range(params.turns):
        history = messages
        if pending is not None:
            tool_turn, tool = pending
            if params.fan_out > 1:
                # the fan-out: every branch sees the history so far and a tool output of its own
                started = time.perf_counter()
                branch_records = await asyncio.gather(
                    *(
                        send(
                            [
                                *messages,
                                {
                                    "role": "user",
                                    "content": tool_text(plan.salt, index, tool_turn, plan.tools[index][tool_turn], b),
                                },
                            ],
                            branch_scenario(phase.scenario_of(index, turn), b),
                            turn,
                            {"conversation": index, "turn": turn, "branch": b},
                        )
                        for b in range(params.fan_out)
                    )
                )
                phase.waits.append(time.perf_counter() - started)
                phase.branches.extend(branch_records)
                tool += f"\n{MERGE_LEAD}\n" + "\n".join(
                    (r.text.strip() or "ok") if r.ok else f"({r.error})" for r in branch_records
                )
            history = [*messages, {"role": "user", "content": tool}]
        record = await send(history, phase.scenario_of(index, turn), turn, {"conversation": index, "turn": turn})
        records.append(record)
        if not record.ok:
            # The conversation goes on, as an agent harness retries a failed step: the next
            # turn re-sends this history (after a fan-out afresh). Ending it here would drop
            # the later turns of the arm that fails most, and flatter its latencies; the
            # failure stays counted.
            continue
        if turn == params.turns - 1:
            break  # the last turn's tool output would never be sent
        if params.tool_delay_s:
            await asyncio.sleep(params.tool_delay_s)  # the tool runs
        messages = [*history, {"role": "assistant", "content": record.text.strip() or "ok"}]
        pending = (turn, tool_text(plan.salt, index, turn, plan.tools[index][turn]))
    return records


async def _replay_session(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    params: AgentLoadParams,
    mode: Mode,
    session: Session,
    index: int,
    sink: Sink,
) -> list[RequestRecord]:
    """One recorded session, turn by turn, each after its recorded think time; a later
    turn's history carries the recorded replies, or (`history = "server"`) the server's."""
    records: list[RequestRecord] = []
    replies: list[str] = []
    for number, turn in enumerate(session.turns):
        if number and turn.think_s:
            await asyncio.sleep(turn.think_s)
        messages = [dict(m) for m in turn.messages]
        if params.history == "server":
            answered = iter(replies)
            messages = [
                {"role": "assistant", "content": next(answered, m["content"])} if m["role"] == "assistant" else m
                for m in messages
            ]
        record = await chat(
            http,
            target,
            messages,
            mode,
            max(1, min(turn.reply_words, params.max_tokens)),
            read_timeout=target.read_timeout or params.turn_timeout_s,
            total_timeout=params.turn_timeout_s,
        )
        record.label = {"conversation": index, "turn": number, "session": session.id}
        scenario = turn_scenario(index, number)
        sink.request(record, scenario=scenario, mode=mode, trial=number)
        _emit_turn(sink, target, record, scenario, mode, params.context, number)
        records.append(record)
        replies.append((record.text.strip() or "ok") if record.ok else turn.reply)
    return records


async def _replay_sessions(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    params: AgentLoadParams,
    mode: Mode,
    sessions: tuple[Session, ...],
    sink: Sink,
) -> list[list[RequestRecord]]:
    """Every session: each at its recorded start (relative to the first), or, with
    `session_concurrency`, at most that many at once in their recorded order."""
    first = sessions[0].start_s
    gate = asyncio.Semaphore(params.session_concurrency) if params.session_concurrency else None
    start = time.perf_counter()

    async def one(index: int, session: Session) -> list[RequestRecord]:
        if gate is not None:
            async with gate:
                return await _replay_session(http, target, params, mode, session, index, sink)
        await asyncio.sleep(max(0.0, session.start_s - first - (time.perf_counter() - start)))
        return await _replay_session(http, target, params, mode, session, index, sink)

    return list(await asyncio.gather(*(one(i, s) for i, s in enumerate(sessions))))


def _emit_turn(
    sink: Sink, target: ProbeTarget, record: RequestRecord, scenario: str, mode: Mode, context: int, turn: int
) -> None:
    if record_response(sink, target, record, mode=mode, scenario=scenario, context=context, trial=turn) is None:
        return
    rate, source = decode_tps(record)
    tpot = tpot_s(record)[0]  # from the same window as the rate: both or neither
    if rate is not None and tpot is not None:
        sink.measurement(
            metric=metrics.DECODE_TPS,
            value=rate,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=turn,
            source=source,
        )
        sink.measurement(
            metric=metrics.TPOT_S,
            value=tpot,
            mode=mode,
            scenario=scenario,
            context=context,
            trial=turn,
            source=source,
        )


def _later_turns(records: list[list[RequestRecord]]) -> list[float]:
    return [t for conv in records for r in conv[1:] if (t := ttft_s(r)) is not None]


def _first_turns(records: list[list[RequestRecord]]) -> list[float]:
    return [t for conv in records if conv and (t := ttft_s(conv[0])) is not None]


def _turn_medians(records: list[list[RequestRecord]], turns: int) -> list[float | None]:
    out: list[float | None] = []
    for turn in range(turns):
        values = [t for conv in records if len(conv) > turn and (t := ttft_s(conv[turn])) is not None]
        out.append(statistics.median(values) if values else None)
    return out


def _summaries(
    sink: Sink,
    records: list[list[RequestRecord]],
    params: AgentLoadParams,
    mode: Mode,
    baseline: bool,
    phase: _Phase | None = None,
) -> None:
    """Derived numbers: summaries, not samples; `baseline`: the baseline pass's, under
    their `baseline_` names (`metrics.baseline`)."""
    later, first = _later_turns(records), _first_turns(records)
    medians = _turn_medians(records, params.turns)
    ctx = params.context

    def named(metric: Metric) -> Metric:
        return metrics.baseline(metric) if baseline else metric

    def put(metric: Metric, value: float | None) -> None:
        if value is not None:
            sink.measurement(
                metric=named(metric), value=value, mode=mode, scenario="summary", context=ctx, kind=SampleKind.SUMMARY
            )

    put(metrics.TTFT_LATER_MEDIAN_S, statistics.median(later) if later else None)
    put(metrics.TTFT_LATER_MAX_S, max(later) if later else None)
    put(metrics.TTFT_FIRST_TURN_S, medians[0] if medians else None)
    put(metrics.TTFT_FIRST_MEDIAN_S, statistics.median(first) if first else None)
    second = next((m for m in medians[1:2] if m is not None), None)
    last = next((m for m in reversed(medians[1:]) if m is not None), None)
    put(metrics.TTFT_SECOND_TURN_S, second)
    put(metrics.TTFT_LAST_TURN_S, last)
    if second and last:
        put(metrics.TTFT_GROWTH_RATIO, last / second)
    # each later turn's TTFT beside its median: the samples a gate's n and interval come
    # from (`gates.compare` reads `<x>_median<unit>` through `<x><unit>`)
    for i, value in enumerate(later):
        sink.measurement(
            metric=named(metrics.TTFT_LATER_S), value=value, mode=mode, scenario="summary", context=ctx, trial=i
        )
    for i, value in enumerate(first):
        sink.measurement(
            metric=named(metrics.TTFT_FIRST_S), value=value, mode=mode, scenario="summary", context=ctx, trial=i
        )
    branches = phase.branches if phase is not None else []
    if phase is not None:
        put(metrics.REQUESTS_IN_FLIGHT_MAX, phase.flight.peak)
    if branches:
        times = [t for r in branches if (t := ttft_s(r)) is not None]
        put(metrics.BRANCH_TTFT_MEDIAN_S, statistics.median(times) if times else None)
        put(metrics.BRANCH_TTFT_MAX_S, max(times) if times else None)
        waits = phase.waits if phase is not None else []
        put(metrics.FAN_OUT_WAIT_MEDIAN_S, statistics.median(waits) if waits else None)
        put(metrics.FAN_OUT_WAIT_MAX_S, max(waits) if waits else None)
    # requests, failures by kind (timeouts, HTTP errors, turns not run after stalls), error
    # rate: the branches' among them
    record_errors(
        sink,
        [r for conv in records for r in conv] + branches,
        mode=mode,
        scenario="summary",
        context=ctx,
        baseline=baseline,
    )


async def run(target: ProbeTarget, sink: Sink, params: AgentLoadParams) -> None:
    run_id = uuid.uuid4().hex[:8]
    if params.sessions is not None:
        await _run_sessions(target, sink, params)
        return
    async with target.client(params.conversations * params.fan_out + 2) as http:
        for mode in params.modes:
            salt = f"agent-{run_id}-{mode}"
            # every piece of both phases is counted here, before any timed request
            plan = await size_pieces(http, params, salt, params.conversations)
            base_plan = await size_pieces(http, params, f"{salt}-single", 1) if params.baseline else None
            record_plan(sink, params, plan, mode, "load")
            if base_plan is not None:
                record_plan(sink, params, base_plan, mode, "baseline")
            before = await read_counters(http, target)
            load = _Phase(turn_scenario, _InFlight(), [], [])
            async with QueueSampler(http, target, sink, phase="load") as sampler:
                records = await asyncio.gather(
                    *(
                        _conversation(http, target, params, mode, plan, c, sink, load)
                        for c in range(params.conversations)
                    )
                )
            await record_counter_deltas(http, target, sink, before, mode=mode, scenario="load", context=params.context)
            sampler.record(mode=mode, scenario="load", context=params.context)
            _summaries(sink, list(records), params, mode, baseline=False, phase=load)
            if base_plan is not None:
                before = await read_counters(http, target)
                alone = _Phase(lambda _c, t: baseline_scenario(t), _InFlight(), [], [])
                async with QueueSampler(http, target, sink, phase="baseline") as base_sampler:
                    single = await _conversation(http, target, params, mode, base_plan, 0, sink, alone)
                await record_counter_deltas(
                    http, target, sink, before, mode=mode, scenario="baseline", context=params.context
                )
                base_sampler.record(mode=mode, scenario="baseline", context=params.context)
                _summaries(sink, [single], params, mode, baseline=True, phase=alone)


async def _run_sessions(target: ProbeTarget, sink: Sink, params: AgentLoadParams) -> None:
    """Recorded sessions in place of the synthetic conversations: the same cells (`cK-tN`),
    summaries and queue samples, over the sessions' own turns; no baseline (a recorded
    session has one shape, its own). `sessions_replayed` says which history was sent."""
    sessions = recorded_sessions(params.sessions or "")
    shaped = params.model_copy(update={"turns": max(len(s.turns) for s in sessions), "conversations": len(sessions)})
    async with target.client(min(len(sessions), params.session_concurrency or len(sessions)) + 2) as http:
        for mode in params.modes:
            before = await read_counters(http, target)
            async with QueueSampler(http, target, sink, phase="load") as sampler:
                records = await _replay_sessions(http, target, params, mode, sessions, sink)
            await record_counter_deltas(http, target, sink, before, mode=mode, scenario="load", context=params.context)
            sampler.record(mode=mode, scenario="load", context=params.context)
            _summaries(sink, records, shaped, mode, baseline=False)
            concurrency = (
                f"at most {params.session_concurrency} at once"
                if params.session_concurrency
                else "each at its recorded start"
            )
            sink.measurement(
                metric=metrics.SESSIONS_REPLAYED,
                value=len(sessions),
                mode=mode,
                scenario="load",
                context=params.context,
                kind=SampleKind.SUMMARY,
                source=f"{os.path.basename(params.sessions or '')}: history {params.history}, {concurrency}",
            )


def turn_records(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat record per conversation turn from a MemorySink's raw requests (for JSON)."""
    out = []
    for raw in requests:
        label = raw.get("label") or {}
        if "turn" not in label:
            continue
        rec = RequestRecord.from_dict(raw)
        payload = record_payload(rec)
        cached, field = extract_cached_tokens(payload)
        out.append(
            {
                "phase": "baseline" if str(raw.get("scenario", "")).startswith("baseline") else "load",
                "conversation": label["conversation"],
                "turn": label["turn"],
                "branch": label.get("branch"),
                "ttft_s": ttft_s(rec),
                "decode_tps": decode_tps(rec)[0],
                "prompt_tokens": prompt_tokens(payload),
                "cached_tokens": cached,
                "cached_tokens_source": field,
                "error": rec.error,
            }
        )
    return out


def extras(measurements: list[dict[str, Any]], requests: list[dict[str, Any]]) -> dict[str, Any]:
    """What `campaign probe --json` adds for a run: every turn's TTFT, by conversation."""
    return {"turns": turn_records(requests)}
