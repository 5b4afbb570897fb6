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
the timed requests (`_plan`), once, and only its word count is kept; the rows
`system_tokens_target`, `task_tokens_target` and `turn_tokens_target` say how they were
counted. A server without a tokenizer gets the word counts of old, labelled an estimate.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field, model_validator

from arms.measures import (
    RequestRecord,
    decode_tps,
    extract_cached_tokens,
    prompt_tokens,
    record_payload,
    tpot_s,
    ttft_s,
)
from arms.probes.base import (
    ProbeTarget,
    QueueSampler,
    Sink,
    chat,
    read_counters,
    read_unchanged,
    record_counter_deltas,
    record_response,
)
from arms.probes.failures import record_errors
from arms.probes.prompts import WORD_ESTIMATE, SizedWords, sized_words, tokenizer_for, words
from arms.workloads.sessions import Session, read_sessions
from campaign.core import metrics
from campaign.core.metrics import Metric
from campaign.core.states import Mode, SampleKind


class AgentLoadParams(BaseModel):
    conversations: int = Field(default=3, ge=1, le=1024, description="agent conversations sent at once")
    turns: int = Field(default=10, ge=1, le=200, description="turns per conversation, each one request")
    system_tokens: int = Field(
        default=2000,
        ge=0,
        description="shared system prompt, in the server's tokens, template included (seed 000: ~2K)",
    )
    task_tokens: int = Field(
        default=4000, ge=1, description="unique task per conversation, in the server's tokens (seed 000: ~4K)"
    )
    turn_tokens: int = Field(
        default=1600, ge=0, description="tool output appended each later turn, in the server's tokens (~1.6K)"
    )
    max_tokens: int = Field(default=200, ge=1, description="output tokens per turn (seed 000: up to 200)")
    baseline: bool = Field(default=True, description="also run one conversation alone, same shape")
    turn_timeout_s: float = Field(
        default=900.0, gt=0, description="a turn slower than this is a timeout (seed 000: 15 min)"
    )
    modes: list[Mode] = Field(default_factory=lambda: [Mode.CANONICAL])
    context: int = 0
    sessions: str | None = Field(
        default=None,
        description="recorded sessions: a JSONL of OpenAI-style message lists (your agent's logs), replayed turn by turn instead of the synthetic conversations",
    )
    history: Literal["recorded", "server"] = Field(
        default="recorded",
        description="sessions: later turns carry the recorded assistant replies, or the server's own",
    )
    session_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="sessions: at most this many at once, each starting when one ends; unset: each at its recorded start_s",
    )
    fan_out: int = Field(
        default=1,
        ge=1,
        le=64,
        description="branch requests sent at once before each later turn (sub-agents, parallel tools), each the history and a tool output of its own; their replies merge into the turn's request; 1: no branches",
    )
    tool_delay_s: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description="a tool's run time: the wait between a reply and the conversation's next request",
    )

    @model_validator(mode="after")
    def _sessions_shape(self) -> AgentLoadParams:
        if self.sessions is None:
            if self.session_concurrency is not None or self.history != "recorded":
                raise ValueError(
                    "history and session_concurrency apply to recorded sessions (sessions = 'agent-logs.jsonl')"
                )
            return self
        defaults = type(self).model_fields
        shaped = [
            f
            for f in (
                "conversations",
                "turns",
                "system_tokens",
                "task_tokens",
                "turn_tokens",
                "fan_out",
                "tool_delay_s",
            )
            if getattr(self, f) != defaults[f].default
        ]
        if shaped:
            raise ValueError(f"{', '.join(shaped)}: not for recorded sessions, which bring their own shape")
        recorded_sessions(self.sessions)  # refused here, naming the line, before anything runs
        return self

    def request_tokens(self) -> int:
        """The most tokens one request holds by the stated sizes: the last turn's prompt
        (system, task, every earlier turn's tool output and reply) and its reply, with a
        few tokens of chat template per message. `campaign check` holds it to the arm's
        context. Recorded sessions: their longest turn, in words and template tokens."""
        if self.sessions is not None:
            return max(
                sum(len(m["content"].split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in turn.messages)
                + min(turn.reply_words, self.max_tokens)
                for session in recorded_sessions(self.sessions)
                for turn in session.turns
            )
        return conversation_tokens(
            self.system_tokens,
            self.task_tokens,
            self.turns,
            self.turn_tokens,
            self.max_tokens,
            merged=self.fan_out if self.fan_out > 1 else 0,
        )


def recorded_sessions(path: str) -> tuple[Session, ...]:
    """A sessions file (`read_unchanged`); a bad file raises a SessionsError (a ValueError
    naming the line)."""
    return tuple(read_unchanged(read_sessions, path))


# chat-template tokens counted per message when a conversation's size is estimated
TEMPLATE_TOKENS_PER_MESSAGE = 8


def conversation_tokens(system: int, task: int, turns: int, turn: int, reply: int, merged: int = 0) -> int:
    """The tokens of an agent conversation's last request by its stated sizes: system
    prompt, task, every earlier turn's tool output and reply, the last reply, and the
    chat template's few tokens per message (agent-load's and the load probe's agent
    workload share this shape). `merged`: branch replies (at most `reply` each) merged
    into every later turn by a fan-out."""
    later = max(0, turns - 1)
    return (
        system + task + later * (turn + reply + merged * reply) + reply + TEMPLATE_TOKENS_PER_MESSAGE * (2 + 2 * later)
    )


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


TASK_LEAD = "Task: "
TOOL_LEAD = "Tool output: "
# The short conversation a piece is counted against: a piece's count is what it adds to a
# prompt, and a short stand-in keeps counting cheap (a chat template's messages are
# delimited by its own tokens, so what a message adds does not depend on what precedes it).
_ANCHOR: tuple[dict[str, Any], ...] = ({"role": "user", "content": TASK_LEAD.strip()},)
PIECES = ("system", "task", "turn")
# the row that says how large each piece was asked to be, and how it was counted
PIECE_TARGETS = {
    "system": metrics.SYSTEM_TOKENS_TARGET,
    "task": metrics.TASK_TOKENS_TARGET,
    "turn": metrics.TURN_TOKENS_TARGET,
}


def _system_text(salt: str, n: int) -> str:
    return words(n, f"{salt}/system")


def _task_text(salt: str, index: int, n: int) -> str:
    return TASK_LEAD + words(n, f"{salt}/task{index}")


def _tool_text(salt: str, index: int, turn: int, n: int, branch: int | None = None) -> str:
    """A tool's output; a branch's is its own text of the same word count."""
    return TOOL_LEAD + words(n, f"{salt}/tool{index}/{turn}" + ("" if branch is None else f"/b{branch}"))


@dataclass(frozen=True)
class _Plan:
    """The word counts of one phase's pieces, sized before its timed requests.

    Why word counts: the text is rebuilt from its salt when sent (`words` is seeded), so
    the plan of a long run stays small, and no count is taken while requests are timed.
    The shared system prompt is kept as text, built once for every conversation.
    `tools[c][t]` is the tool output appended after turn t of conversation c; `sources`
    says how each kind of piece was counted."""

    salt: str
    system: str
    tasks: tuple[int, ...]
    tools: tuple[tuple[int, ...], ...]
    sources: Mapping[str, str]


def _word_plan(params: AgentLoadParams, salt: str, conversations: int) -> _Plan:
    """The word counts of old (one word taken for one token): a server without a tokenizer."""
    later = max(0, params.turns - 1)
    return _Plan(
        salt,
        _system_text(salt, params.system_tokens),
        (params.task_tokens,) * conversations,
        ((params.turn_tokens,) * later,) * conversations,
        dict.fromkeys(PIECES, WORD_ESTIMATE),
    )


async def _plan(http: httpx.AsyncClient, params: AgentLoadParams, salt: str, conversations: int) -> _Plan:
    """Every piece of a phase sized in the server's tokens (`sized_words`), each once.

    The system message is sized by what it adds to the anchor; each task so that the
    turn-1 prompt counts system_tokens + task_tokens (the task takes the template's
    constant share, as a sized prompt does); each tool output by what it adds to the
    anchor after an empty reply, so a turn grows by the reply plus turn_tokens. All counts
    go one way (the anchor's), as a difference of counts taken two ways means nothing.
    Conversation 0 is sized first and its word counts start the others' searches, which
    then mostly take one request a piece."""
    anchor = list(_ANCHOR)
    reference = await tokenizer_for(http).tokens(anchor, keep=False)
    if reference is None:
        return _word_plan(params, salt, conversations)
    base, way = len(reference[0]), reference[1]
    found: dict[str, list[SizedWords]] = {kind: [] for kind in PIECES}
    fallback = {"system": params.system_tokens, "task": params.task_tokens, "turn": params.turn_tokens}

    async def size(
        kind: str, target: int, build: Callable[[int], list[dict[str, Any]]], above: int, start: int | None
    ) -> int:
        if target <= 0:  # an empty piece, as before: nothing to size
            return 0
        sized = await sized_words(http, target, build, base=above, start=start, way=way, keep=False)
        found[kind].append(sized)
        return fallback[kind] if sized.source == WORD_ESTIMATE else sized.words

    system = await size(
        "system",
        params.system_tokens,
        lambda n: [{"role": "system", "content": _system_text(salt, n)}, *anchor],
        base,
        None,
    )
    system_message = {"role": "system", "content": _system_text(salt, system)}  # one text, shared
    turn_one = params.system_tokens + params.task_tokens

    async def one(c: int, hints: tuple[int | None, int | None]) -> tuple[int, tuple[int, ...]]:
        task = await size(
            "task",
            turn_one,
            lambda n: [system_message, {"role": "user", "content": _task_text(salt, c, n)}],
            0,
            hints[0],
        )
        tools: list[int] = []
        for t in range(params.turns - 1):
            tools.append(
                await size(
                    "turn",
                    params.turn_tokens,
                    lambda n, t=t: [
                        *anchor,
                        {"role": "assistant", "content": ""},
                        {"role": "user", "content": _tool_text(salt, c, t, n)},
                    ],
                    base,
                    tools[-1] if tools else hints[1],
                )
            )
        return task, tuple(tools)

    first = await one(0, (params.task_tokens, None))
    hints = (first[0], first[1][-1] if first[1] else None)
    rest = await asyncio.gather(*(one(c, hints) for c in range(1, conversations)))
    sized = [first, *rest]
    sources = {kind: " + ".join(sorted({f.source for f in found[kind]})) or WORD_ESTIMATE for kind in PIECES}
    return _Plan(
        salt, system_message["content"], tuple(t for t, _ in sized), tuple(tools for _, tools in sized), sources
    )


def _record_plan(sink: Sink, params: AgentLoadParams, plan: _Plan, mode: Mode, phase: str) -> None:
    """The sizes asked for and how they were counted, as decode's `prompt_tokens_target`."""
    asked = {"system": params.system_tokens, "task": params.task_tokens, "turn": params.turn_tokens}
    for kind in PIECES:
        if kind == "turn" and params.turns < 2:
            continue  # no later turn: no tool output is ever sent
        sink.measurement(
            metric=PIECE_TARGETS[kind],
            value=asked[kind],
            mode=mode,
            scenario=phase,
            context=params.context,
            kind=SampleKind.SUMMARY,
            source=plan.sources[kind],
        )


async def _conversation(
    http: httpx.AsyncClient,
    target: ProbeTarget,
    params: AgentLoadParams,
    mode: Mode,
    plan: _Plan,
    index: int,
    sink: Sink,
    phase: _Phase,
) -> list[RequestRecord]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": plan.system},
        {"role": "user", "content": _task_text(plan.salt, index, plan.tasks[index])},
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
                                    "content": _tool_text(plan.salt, index, tool_turn, plan.tools[index][tool_turn], b),
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
        pending = (turn, _tool_text(plan.salt, index, turn, plan.tools[index][turn]))
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
    if rate is not None:
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
            value=tpot_s(record)[0],
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
            plan = await _plan(http, params, salt, params.conversations)
            base_plan = await _plan(http, params, f"{salt}-single", 1) if params.baseline else None
            _record_plan(sink, params, plan, mode, "load")
            if base_plan is not None:
                _record_plan(sink, params, base_plan, mode, "baseline")
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
