"""The engine model: slots with affinity, a prefix cache, a chunked-prefill scheduler.

Pure asyncio, no HTTP, so it can be driven in-process (with a `VirtualClock`, exactly).
The behaviours it exists to reproduce come from the seeds: a conversation resumes in the
slot holding its state and prefills only its new tail; when conversations outnumber slots
a returning one re-prefills its whole history in chunks, and while it does, every decoding
stream starves (one engine step does both, so prefill chunks lengthen every decode step);
speculative decoding emits several tokens per step at a per-step cost. Rates vary between
server starts and drift during a run (`arms.simulator.variation`): each engine is one start.
A request inside it is `arms.simulator.request`; its slots, and how a prompt picks one,
`arms.simulator.slots`.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from arms.simulator.cache import PrefixCache, common_prefix_len
from arms.simulator.clock import Clock, ScaledClock
from arms.simulator.power import PowerMeter
from arms.simulator.profile import SimProfile
from arms.simulator.reply import ReplyContext, ReplyPolicy, at_least, text_rng, words_policy
from arms.simulator.request import ContextLimitError, Emission, SimRequest
from arms.simulator.slots import Slot, choose_slot
from arms.simulator.variation import RunVariation


@dataclass
class Counters:
    """Cumulative counters, exported as `sim_<name>` on /metrics."""

    requests_total: int = 0
    prompt_tokens_total: int = 0
    prompt_tokens_cached_total: int = 0
    generation_tokens_total: int = 0
    cache_lookups_total: int = 0
    cache_hits_total: int = 0
    draft_tokens_total: int = 0
    draft_accepted_tokens_total: int = 0
    errors_total: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class _Step:
    duration: float
    prefill: list[tuple[Slot, SimRequest, int]]
    decode: list[tuple[Slot, SimRequest]]


class Engine:
    """The simulated serving engine. Create it, `start()` it inside a running loop, `submit`."""

    def __init__(
        self, profile: SimProfile, *, reply_policy: ReplyPolicy | None = None, clock: Clock | None = None
    ) -> None:
        self.profile = profile
        if reply_policy is None:
            from arms.simulator.tool_policy import scripted_tool_policy

            reply_policy = scripted_tool_policy(profile.tool_success_rate, words_policy)
        self.reply_policy: ReplyPolicy = reply_policy
        self.clock: Clock = clock or ScaledClock(profile.time_scale)
        self.slots = [Slot(i) for i in range(profile.slots)]
        self.cache = PrefixCache(profile.prefix_cache_tokens, profile.session_cap_tokens)
        self.counters = Counters()
        # this start's rate factors (1.0 throughout when the profile does not vary)
        self.variation = RunVariation(profile)
        self.power = PowerMeter(profile)  # what this start draws (/device)
        self._queue: deque[SimRequest] = deque()
        self._request_ids = itertools.count(1)
        self._admit_seq = itertools.count(1)
        self._use_tick = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # How far (model seconds) the step chain may fall behind the clock before it
        # re-anchors instead of bursting to catch up.
        self._max_lag = 0.02 * profile.time_scale

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the scheduler coroutine; call from inside the running event loop."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        """Stop the scheduler and cancel every unfinished request."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for req in list(self._queue) + [s.request for s in self.slots if s.request]:
            self.cancel(req)

    # ------------------------------------------------------------------ requests
    def submit(
        self,
        prompt: Sequence[str],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        ignore_eos: bool = False,
        min_tokens: int = 0,
    ) -> SimRequest:
        """Queue a request; it is admitted at once if a slot is idle.

        `ignore_eos` (generate all of max_tokens) and `min_tokens` (no end before that
        many) lengthen a reply that would end sooner, as llama.cpp and vLLM do.

        Raises ContextLimitError when prompt + max_tokens exceeds ctx_size, ValueError
        for an empty prompt or max_tokens < 1.
        """
        prompt = list(prompt)
        if not prompt:
            raise ValueError("empty prompt")
        n_max = self.profile.default_max_tokens if max_tokens is None else int(max_tokens)
        if n_max < 1:
            raise ValueError("max_tokens must be at least 1")
        if len(prompt) + n_max > self.profile.ctx_size:
            raise ContextLimitError(len(prompt), n_max, self.profile.ctx_size)
        self.start()
        request_id = next(self._request_ids)
        rng = text_rng(
            model=self.profile.model,
            prompt=prompt,
            temperature=temperature,
            seed=self.profile.seed,
            request_counter=request_id,
        )
        plan = self.reply_policy(
            ReplyContext(
                request_id=request_id,
                model=self.profile.model,
                prompt=tuple(prompt),
                max_tokens=n_max,
                temperature=temperature,
                rng=rng,
                messages=messages,
                tools=tools,
            )
        )
        plan = at_least(plan, n_max if ignore_eos else min(min_tokens, n_max), n_max, rng)
        draft_rng = random.Random(f"draft:{self.profile.seed}:{request_id}")
        req = SimRequest(request_id, prompt, n_max, plan, self.clock.now(), draft_rng)
        self.counters.requests_total += 1
        self.counters.prompt_tokens_total += len(prompt)
        self._queue.append(req)
        self._admit_waiting(self.clock.now())
        self._wake.set()
        return req

    def cancel(self, req: SimRequest) -> None:
        """Abandon a request (client went away); its slot keeps what it processed so far."""
        if req.done:
            return
        now = self.clock.now()
        if req.state == "queued":
            self._queue.remove(req)
        elif req.slot_id is not None:
            slot = self.slots[req.slot_id]
            if slot.request is req:
                slot.request = None
                slot.last_used = next(self._use_tick)
        req.state = "cancelled"
        req.finish_reason = "cancelled"
        req.finished_at = now
        req.deliver(Emission([], "cancelled", now))
        self._admit_waiting(now)
        self._wake.set()

    def flush_cache(self) -> dict[str, int]:
        """Forget every cached prefix: the prefix cache and what idle slots still hold (a
        busy slot keeps its request's tokens). What SGLang's /flush_cache does; a server
        kept for another queue item is emptied this way before a probe that needs a cold
        cache. Returns what was dropped."""
        dropped = {
            "cache_entries": len(self.cache),
            "slot_tokens": sum(len(s.tokens) for s in self.slots if s.request is None),
        }
        self.cache = PrefixCache(self.profile.prefix_cache_tokens, self.profile.session_cap_tokens)
        for slot in self.slots:
            if slot.request is None:
                slot.tokens = []
        return dropped

    def record_error(self) -> None:
        """Count an error answer the front end gave (errors_total)."""
        self.counters.errors_total += 1

    # ------------------------------------------------------------------- reports
    def gauges(self) -> dict[str, int]:
        """Point-in-time values: queue depth, busy slots, memory, cache occupancy."""
        used = self.cache.used_tokens
        memory = (
            self.profile.base_memory_bytes
            + self.profile.slot_memory_bytes * len(self.slots)
            + int(used * self.profile.kv_bytes_per_token)
        )
        return {
            "requests_deferred": len(self._queue),
            "slots_busy": sum(1 for s in self.slots if s.request is not None),
            "memory_bytes": memory,
            "prefix_cache_tokens_used": used,
        }

    def metrics(self) -> dict[str, int]:
        """Counters and gauges together, by their unprefixed names."""
        return {**self.counters.as_dict(), **self.gauges()}

    def slot_states(self) -> list[dict[str, Any]]:
        """What /slots reports for each slot."""
        return [
            {"id": s.id, "state": s.state, "n_ctx": self.profile.ctx_size, "n_tokens": len(s.tokens)}
            for s in self.slots
        ]

    # ----------------------------------------------------------------- time model
    def prefill_time(self, n_tokens: int, at: float = 0.0) -> float:
        """Model seconds to prefill n tokens in a step starting at model time `at`."""
        if not self.profile.varies:
            return n_tokens / (self.profile.prefill_tps * self.profile.prefill_speedup)
        rate = self.profile.prefill_tps * self.variation.prefill_factor(at)
        return n_tokens / (rate * self.profile.prefill_speedup)

    def decode_step_time(self, batch: int, longest_ctx: int, at: float = 0.0) -> float:
        """Model seconds of one decode step for `batch` decoding slots, starting at `at`.

        The base cost grows with batch size; the KV-read term grows with the longest
        context; speculation multiplies the base by the drafting cost and the KV term by
        `verify_kv_factor` (verification re-reads the KV). This start's decode factor
        (run effect and drift) divides the whole step: a start that decodes 5% slower
        reads its KV 5% slower too.
        """
        p = self.profile
        base = (1.0 / p.decode_tps) * (1.0 + p.batch_penalty * (batch - 1))
        kv = p.kv_read_s_per_ktok * longest_ctx / 1000.0
        if p.speculative:
            base *= 1.0 + p.draft_cost * p.draft_k
            kv *= p.verify_kv_factor
        if not p.varies:
            return base + kv
        return (base + kv) / self.variation.decode_factor(at)

    # ---------------------------------------------------------------- admission
    def _admit_waiting(self, now: float) -> None:
        while self._queue:
            head = self._queue[0]
            slot = choose_slot(self.slots, head.prompt, self.profile.cache_min_match)
            if slot is None:
                return
            self._queue.popleft()
            self._admit(head, slot, now)

    def _admit(self, req: SimRequest, slot: Slot, now: float) -> None:
        p = self.profile
        prompt = req.prompt
        slot_lcp = common_prefix_len(slot.tokens, prompt)
        if slot.tokens and slot_lcp < len(slot.tokens) and not p.disable_reuse:
            # Another conversation is about to overwrite this slot: keep its state.
            self.cache.store(slot.tokens)
        reused = min(slot_lcp, len(prompt) - 1)
        if self.cache.enabled:
            self.counters.cache_lookups_total += 1
            if not p.disable_reuse:
                match, key = self.cache.best_match(prompt)
                match = min(match, len(prompt) - 1)
                if key is not None and match >= p.cache_min_match and match > reused:
                    reused = match
                    self.counters.cache_hits_total += 1
                    self.cache.touch(key)
        if p.disable_reuse or (p.reuse_ceiling_tokens is not None and len(prompt) > p.reuse_ceiling_tokens):
            reused = 0
        slot.tokens = list(prompt[:reused])
        slot.request = req
        slot.last_used = next(self._use_tick)
        req.slot_id = slot.id
        req.cached_tokens = reused
        req.state = "prefill"
        req.admitted_at = now
        req.admit_seq = next(self._admit_seq)
        self.counters.prompt_tokens_cached_total += reused

    # ----------------------------------------------------------------- scheduler
    async def _run(self) -> None:
        chained_end: float | None = None
        while True:
            now = self.clock.now()
            start = now if chained_end is None else max(chained_end, now - self._max_lag)
            step = self._plan_step(start)
            if step is None:
                chained_end = None
                self._wake.clear()
                await self._wake.wait()
                continue
            end = start + step.duration
            self.power.on_step(start, step.duration, sum(n for _, _, n in step.prefill), len(step.decode))
            await self.clock.sleep_until(end)
            self._apply(step, end)
            chained_end = end

    def _plan_step(self, start: float = 0.0) -> _Step | None:
        busy = [(s, s.request) for s in self.slots if s.request is not None]
        decoding = [(s, r) for s, r in busy if r.state == "decode"]
        prefilling = sorted(((s, r) for s, r in busy if r.state == "prefill"), key=lambda pair: pair[1].admit_seq)
        if not decoding and not prefilling:
            return None
        p = self.profile
        budget = p.effective_interleave_chunk if decoding else p.prefill_chunk
        allocations: list[tuple[Slot, SimRequest, int]] = []
        for slot, req in prefilling:
            if budget <= 0:
                break
            n = min(budget, req.to_prefill)
            allocations.append((slot, req, n))
            budget -= n
        duration = p.step_overhead_s + self.prefill_time(sum(n for _, _, n in allocations), start)
        if decoding:
            longest = max(len(s.tokens) for s, _ in decoding)
            duration += self.decode_step_time(len(decoding), longest, start)
        return _Step(duration, allocations, decoding)

    def _apply(self, step: _Step, t: float) -> None:
        first_tokens: list[tuple[Slot, SimRequest]] = []
        for slot, req, n in step.prefill:
            if slot.request is not req:
                continue  # cancelled during the step
            start = req.cached_tokens + req.prefilled
            slot.tokens.extend(req.prompt[start : start + n])
            req.prefilled += n
            if req.to_prefill == 0:
                first_tokens.append((slot, req))
        for slot, req in step.decode:
            if slot.request is not req:
                continue
            self._decode(slot, req, t)
        for slot, req in first_tokens:
            # The first token comes from the prefill's last logits, in the same step.
            req.state = "decode"
            req.first_token_at = t
            self._emit(slot, req, 1, t)
        self._admit_waiting(t)

    def _decode(self, slot: Slot, req: SimRequest, t: float) -> None:
        p = self.profile
        if not p.speculative:
            self._emit(slot, req, 1, t)
            return
        accepted = 0
        for _ in range(p.draft_k):
            if req.draft_rng.random() < p.acceptance:
                accepted += 1
            else:
                break
        remaining = req.target - len(req.generated)
        accepted = min(accepted, max(0, remaining - 1))  # drafts past max_tokens are discarded
        req.draft_tokens += p.draft_k
        req.accepted_tokens += accepted
        self.counters.draft_tokens_total += p.draft_k
        self.counters.draft_accepted_tokens_total += accepted
        self._emit(slot, req, 1 + accepted, t, drafted=p.draft_k, accepted=accepted)

    def _emit(self, slot: Slot, req: SimRequest, n: int, t: float, *, drafted: int = 0, accepted: int = 0) -> None:
        start = len(req.generated)
        n = max(0, min(n, req.target - start))
        tokens = req.plan.tokens[start : start + n]
        req.generated.extend(tokens)
        slot.tokens.extend(tokens)
        self.counters.generation_tokens_total += n
        finish: str | None = None
        if len(req.generated) >= req.target:
            finish = "length" if req.target < len(req.plan.tokens) else req.plan.finish_reason
            req.state = "done"
            req.finish_reason = finish
            req.finished_at = t
            slot.request = None
            slot.last_used = next(self._use_tick)
        req.deliver(Emission(list(tokens), finish, t, drafted, accepted))
