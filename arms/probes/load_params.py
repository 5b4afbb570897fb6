"""The load probe's parameters (`LoadParams`): its profile, workload and targets, checked
together before anything runs, and the workload files they name, each read once.

The probe that runs them is `arms.probes.load`; the profiles they name are
`arms.workloads.profiles`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, PositiveFloat, model_validator

from arms.probes.agent_load_params import conversation_tokens
from arms.probes.base import read_unchanged
from arms.workloads import datasets, profiles, trace_formats, traces
from arms.workloads.datasets import Dataset, DatasetPrompt
from arms.workloads.load_stats import QUEUE_TARGETS, TargetName
from arms.workloads.profiles import Kind, Profile
from arms.workloads.traces import DEFAULT_BLOCK_TOKENS, TraceRequest
from campaign.core.states import Mode

Arrivals = Literal["constant", "poisson"]
AGENT_FIELDS = ("conversations", "turns", "system_tokens", "task_tokens", "turn_tokens")
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
    arrivals: Arrivals | None = Field(
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
        description="trace: a Mooncake-style JSONL file (timestamp ms, input_length, output_length, hash_ids), or an Azure LLM inference or BurstGPT CSV, replayed at its recorded times",
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
    client_procs: int = Field(
        default=1,
        ge=0,
        le=64,
        description="client processes that send each run (one schedule, one clock); 0 = one per 128 streams a run holds open, at most the cores less one",
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
        if self.trace is not None:  # the trace profile (its file and it come together, above)
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
        if p in profiles.OPEN_LOOP and self.rate is None:
            raise ValueError(f"profile {p} needs a rate in requests per second (rate = 2, --rate 2)")
        if self.rate is not None and p not in profiles.OPEN_LOOP:
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
            if not QUEUE_TARGETS & set(self.targets):
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
        arrivals: dict[Kind, Arrivals] = {
            Kind.CONSTANT: "constant",
            Kind.POISSON: "poisson",
            Kind.SWEEP: self.arrivals or "poisson",
        }
        self.arrivals = arrivals.get(p)
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
            return profiles.trace(self._cut()[0], Path(self.trace or "").stem)
        if self.profile == Kind.SYNCHRONOUS:
            return profiles.synchronous()
        if self.profile == Kind.CONCURRENT:
            return profiles.concurrent(self.concurrency or 1)
        if self.profile == Kind.CONSTANT:
            return profiles.constant(self.rate or 0.0)
        if self.profile == Kind.POISSON:
            return profiles.poisson(self.rate or 0.0, self.seed)
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
    return tuple(read_unchanged(trace_formats.read_requests, path, block_tokens))


def read_prompts(path: str) -> Dataset:
    """A dataset file's prompts (`read_unchanged`); a bad file raises a DatasetError."""
    return read_unchanged(datasets.read_dataset, path)
