"""The simulated engine's slots (parallel sequences) and how a prompt picks one: affinity
first, then an empty slot, then the least recently used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from arms.simulator.cache import common_prefix_len
from arms.simulator.request import SimRequest

SlotState = Literal["idle", "prefill", "decode"]


@dataclass
class Slot:
    """One parallel sequence: the tokens its KV state holds and the request using it."""

    id: int
    tokens: list[str] = field(default_factory=list)
    request: SimRequest | None = None
    last_used: int = 0

    @property
    def state(self) -> SlotState:
        if self.request is None:
            return "idle"
        return "decode" if self.request.state == "decode" else "prefill"


def choose_slot(slots: Sequence[Slot], prompt: Sequence[str], min_match: int) -> Slot | None:
    """The idle slot a prompt should run in, or None when every slot is busy.

    Affinity first: the idle slot sharing the longest prefix with the prompt, if that
    prefix is at least `min_match`. Otherwise an empty slot (lowest id), otherwise the
    least recently used idle slot — whose old conversation is the one to evict.
    """
    idle = [s for s in slots if s.request is None]
    if not idle:
        return None
    best, best_len = idle[0], -1
    for slot in idle:
        n = common_prefix_len(slot.tokens, prompt)
        if n > best_len:
            best, best_len = slot, n
    if best_len >= min_match:
        return best
    empty = [s for s in idle if not s.tokens]
    if empty:
        return empty[0]
    return min(idle, key=lambda s: s.last_used)
