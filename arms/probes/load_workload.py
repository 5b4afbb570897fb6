"""The load probe's workload: request i's messages and label, built before an open-loop
run starts its clock -- a synthetic prompt, an agent conversation's turn, a dataset
record, or a trace request whose shared hash-id blocks are shared text -- and how a
request is sent (`LoadRequests`, which also crosses to the client processes of a run
sent by several, `arms.workloads.shards`).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from functools import lru_cache
from typing import Any

import httpx

from arms.client import warm_connections
from arms.measures import RequestRecord
from arms.probes.base import ProbeTarget, chat
from arms.probes.load_params import LoadParams, read_prompts
from arms.probes.prompts import words
from arms.workloads import traces
from arms.workloads.traces import TraceRequest
from campaign.core.states import Mode


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


class LoadRequests:
    """How one run of the load probe builds and sends request i (`shards.Requester`).

    Picklable: the target, parameters and names cross to a client process, and each
    process builds its own `Workload` (its caches are not worth copying) on first use."""

    def __init__(self, target: ProbeTarget, params: LoadParams, mode: Mode, salt: str, shared: str):
        self.target, self.params, self.mode, self.salt, self.shared = target, params, mode, salt, shared
        self._workload: Workload | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_workload": None}

    @property
    def workload(self) -> Workload:
        if self._workload is None:
            self._workload = Workload(self.params, self.salt, self.shared)
        return self._workload

    def client(self, pool: int) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        return self.target.client(pool)

    async def warm(self, http: httpx.AsyncClient, connections: int) -> int:
        return await warm_connections(http, connections)

    def prepare(self, i: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return self.workload.prepare(i)

    async def send(
        self, http: httpx.AsyncClient, i: int, item: tuple[list[dict[str, Any]], dict[str, Any]]
    ) -> RequestRecord:
        messages, label = item
        p = self.params
        tokens = int(label.get("max_tokens", p.max_tokens))  # a trace's own output length
        extra = {"ignore_eos": True, "min_tokens": tokens} if p.ignore_eos else None
        record = await chat(http, self.target, messages, self.mode, tokens, extra=extra)
        record.label = label
        return record

    def stopped(self) -> bool:
        return self.target.stalls.tripped
