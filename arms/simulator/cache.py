"""Prefix matching and the simulated prefix cache.

Kept apart from the scheduler so the reuse rules (longest common prefix, LRU by tokens,
per-session cap) can be unit-tested without an event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def common_prefix_len(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common prefix of two token lists.

    Binary search over slice equality, so long histories (tens of thousands of tokens)
    are compared at C speed rather than token by token in Python.
    """
    limit = min(len(a), len(b))
    if limit == 0:
        return 0
    a_list, b_list = list(a[:limit]), list(b[:limit])
    if a_list == b_list:
        return limit
    lo, hi = 0, limit  # invariant: prefix of length lo matches, length hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a_list[lo:mid] == b_list[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class PrefixCache:
    """An LRU store of token sequences that a slot held before another conversation took it.

    Capacity is counted in tokens. A sequence longer than `session_cap` (or than the whole
    capacity) is not stored, which is how a per-session cap that is too small silently
    kills reuse at long contexts.
    """

    def __init__(self, capacity_tokens: int, session_cap: int | None = None) -> None:
        self.capacity = capacity_tokens
        self.session_cap = session_cap
        self._entries: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._used = 0

    @property
    def enabled(self) -> bool:
        """Whether the cache exists at all (capacity 0 turns it off)."""
        return self.capacity > 0

    @property
    def used_tokens(self) -> int:
        """Tokens currently held, for the memory and usage gauges."""
        return self._used

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[tuple[str, ...]]:
        """Stored sequences, least recently used first."""
        return list(self._entries)

    def store(self, tokens: Sequence[str]) -> bool:
        """Save a sequence, evicting least recently used entries; True if it was stored."""
        if not self.enabled or not tokens:
            return False
        key = tuple(tokens)
        if self.session_cap is not None and len(key) > self.session_cap:
            return False
        if len(key) > self.capacity:
            return False
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        # An entry that is a prefix of the new one is redundant; one that extends it
        # already covers every lookup the new one could serve.
        for existing in list(self._entries):
            n = common_prefix_len(existing, key)
            if n == len(key):
                self._entries.move_to_end(existing)
                return True
            if n == len(existing):
                self._remove(existing)
        while self._used + len(key) > self.capacity and self._entries:
            self._remove(next(iter(self._entries)))
        self._entries[key] = None
        self._used += len(key)
        return True

    def best_match(self, prompt: Sequence[str]) -> tuple[int, tuple[str, ...] | None]:
        """The longest common prefix any entry shares with `prompt`, and that entry."""
        best_len, best_key = 0, None
        for key in self._entries:
            n = common_prefix_len(key, prompt)
            if n > best_len:
                best_len, best_key = n, key
        return best_len, best_key

    def touch(self, key: tuple[str, ...]) -> None:
        """Mark an entry as just used (a hit), so LRU eviction spares it."""
        if key in self._entries:
            self._entries.move_to_end(key)

    def _remove(self, key: tuple[str, ...]) -> None:
        del self._entries[key]
        self._used -= len(key)
