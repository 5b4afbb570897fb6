"""The load probe's workload: request i's messages and label, built before an open-loop
run starts its clock -- a synthetic prompt, an agent conversation's turn, a dataset
record, or a trace request whose shared hash-id blocks are shared text.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from arms.probes.load_params import LoadParams, read_prompts
from arms.probes.prompts import words
from arms.workloads import traces
from arms.workloads.traces import TraceRequest


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
