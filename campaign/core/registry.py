"""A registry of named things: runtime adapters, probes, gate predicates.

Why one generic registry: campaign files name each of these by a string, and every
kind needs the same things -- register an item under its own name (built-ins and a
user's own plugins alike, with the one call `register(item)`), look a name up with an
error that lists what is known (the error a person reads when a campaign file has a
typo), and list the names (for validation and `--help`). Each item carries its name
(an adapter class its `name`, a `ProbeSpec` and a `PredicateSpec` theirs), so a kind's
registry is told once how to read it. Which modules hold the built-ins is not this
module's business: one catalogue module per kind imports them statically
(docs/architecture.md). This module is core: it imports nothing of the project.

    PROBES: Registry[ProbeSpec] = Registry("probe", lambda spec: spec.name)

    PROBES.register(ProbeSpec("decode", ...))   # returns the spec
    PROBES.get("decode")        # KeyError: no probe named 'x'; known: a, b
    PROBES.names()              # sorted
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

MISSING = "no {kind} named {name!r}; known: {known}"
"""The default lookup error; `{kind}`, `{name!r}` and `{known}` (comma-separated names)."""


class Registry(Generic[T]):
    """Names -> registered items of one kind.

    `name_of` reads an item's name. Registering a name again replaces the earlier item,
    so a plugin can override a built-in. `missing` is the message of the KeyError for an
    unknown name (see MISSING).
    """

    def __init__(self, kind: str, name_of: Callable[[T], str], *, missing: str = MISSING) -> None:
        self.kind = kind
        self._name_of = name_of
        self._missing = missing
        self._items: dict[str, T] = {}

    def register(self, item: T) -> T:
        """Register `item` under its name; returns it (so it also serves as a decorator)."""
        self._items[str(self._name_of(item))] = item
        return item

    def get(self, name: str) -> T:
        """The item registered under `name`; KeyError naming the known ones otherwise."""
        try:
            return self._items[str(name)]
        except KeyError:
            raise KeyError(self.missing_message(name)) from None

    def missing_message(self, name: object) -> str:
        return self._missing.format(kind=self.kind, name=name, known=", ".join(self.names()))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, item) pairs, sorted by name."""
        return sorted(self._items.items(), key=lambda pair: pair[0])

    def __contains__(self, name: object) -> bool:
        return str(name) in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
