"""A server far slower than a working one: said in the run's output, never in a number.

Why: a server that shares its cores with other work runs at a fraction of its rate (a
llama-server with 2 threads on a busy 2-core machine: 0.67 tok/s and an 18 s TTFT, against
9-14 tok/s with 1 thread), and its numbers then describe the contention, not the recipe;
measured and compared without a word, they answer another question than the campaign's.
The first request a probe gets answered is held to floors that no working server falls
below, and under one the run says so (`Sink.warn`). Nothing is stored and no verdict reads
it: a slow server is still measured as it is.

The floors are conservative, so that the warning means something is wrong: a decode rate
under MIN_DECODE_TPS (the 270M model decoded at 9-14 tok/s on one shared core), and a
TTFT over TTFT_ALLOWANCE_S plus the prompt at MIN_PREFILL_TPS (the same machine
prefilled 144 tok/s).
"""

from __future__ import annotations

from collections.abc import Sequence

from arms.measures import RequestRecord, decode_tps, prompt_tokens, record_payload, ttft_s
from arms.probes.base import Sink
from campaign.core.units import num, plain

MIN_DECODE_TPS = 2.0
MIN_PREFILL_TPS = 10.0
TTFT_ALLOWANCE_S = 5.0


def slowness(decode: float | None, ttft: float | None, prompt: int) -> list[str]:
    """What of one request is under its floor, a phrase each; [] for none (or nothing
    measured)."""
    out = []
    if decode is not None and decode < MIN_DECODE_TPS:
        out.append(f"decoded {num(decode)} tok/s, under the floor of {plain(MIN_DECODE_TPS)} tok/s")
    allowed = TTFT_ALLOWANCE_S + prompt / MIN_PREFILL_TPS
    if ttft is not None and ttft > allowed:
        out.append(
            f"took {num(ttft)} s to its first token for {prompt} prompt tokens, over the {num(allowed)} s that "
            f"{plain(TTFT_ALLOWANCE_S)} s and a prefill of {plain(MIN_PREFILL_TPS)} tok/s would take"
        )
    return out


def judge_first(sink: Sink, records: Sequence[RequestRecord], prompt: int) -> bool:
    """Hold the first answered request of `records` to the floors, warning through `sink`
    when it is under one; its prompt is the server's count where it gave one, else
    `prompt`. True once a request was judged (warned of or not), so a probe judges one."""
    first = next((r for r in records if r.ok), None)
    if first is None:
        return False
    found = slowness(decode_tps(first)[0], ttft_s(first), prompt_tokens(record_payload(first)) or prompt)
    if found:
        sink.warn(
            f"the server is far slower than a working one: its first request {' and '.join(found)}; something else "
            "may hold its cores (llama.cpp: more --threads than free cores), and its numbers measure that, not the recipe"
        )
    return True
