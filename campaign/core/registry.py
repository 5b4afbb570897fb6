"""A registry of named things: runtime adapters, probes, gate predicates.

Why one generic registry: campaign files name each of these by a string, and every
kind needs the same four things -- register under a name (built-ins and a user's own
plugins alike), look a name up with an error that lists what is known (the error a
person reads when a campaign file has a typo), list the names (for validation and
`--help`), and load the built-in modules on first use so callers need not know which
modules hold the built-ins. This module is core: it imports nothing of the project.

    ADAPTERS: Registry[type[RuntimeAdapter]] = Registry("runtime adapter", builtins=("arms.runtimes.vllm", ...))

    @ADAPTERS.register("vllm")
    class VllmAdapter(...): ...

    ADAPTERS.get("vllm")        # KeyError: no runtime adapter named 'x'; known: a, b
    ADAPTERS.names()            # sorted
    ADAPTERS.add("mine", thing) # the same without a decorator
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
D = TypeVar("D")

MISSING = "no {kind} named {name!r}; known: {known}"
"""The default lookup error; `{kind}`, `{name!r}` and `{known}` (comma-separated names)."""


class Registry(Generic[T]):
    """Names -> registered items of one kind.

    `builtins` are module names imported (once, in order) before the first lookup or
    listing; their imports register the built-in items. Registering a name again
    replaces the earlier item, so a plugin can override a built-in. `missing` is the
    message of the KeyError for an unknown name (see MISSING).
    """

    def __init__(self, kind: str, *, builtins: Iterable[str] = (), missing: str = MISSING) -> None:
        self.kind = kind
        self._builtins = tuple(builtins)
        self._missing = missing
        self._items: dict[str, T] = {}
        self._loaded = not self._builtins

    def add(self, name: str, item: T) -> T:
        """Register `item` under `name`; returns it."""
        self._items[str(name)] = item
        return item

    def register(self, name: str) -> Callable[[D], D]:
        """A decorator registering what it decorates under `name` (returned unchanged)."""

        def deco(item: D) -> D:
            self.add(name, item)  # type: ignore[arg-type]
            return item

        return deco

    def load_builtins(self) -> None:
        """Import the built-in modules (once). The flag is set first: those modules
        register through this registry, and must not trigger a second load."""
        if self._loaded:
            return
        self._loaded = True
        for module in self._builtins:
            importlib.import_module(module)

    def get(self, name: str) -> T:
        """The item registered under `name`; KeyError naming the known ones otherwise."""
        self.load_builtins()
        try:
            return self._items[str(name)]
        except KeyError:
            raise KeyError(self.missing_message(name)) from None

    def missing_message(self, name: object) -> str:
        return self._missing.format(kind=self.kind, name=name, known=", ".join(self.names()))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        self.load_builtins()
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, item) pairs, sorted by name."""
        self.load_builtins()
        return sorted(self._items.items(), key=lambda pair: pair[0])

    def __contains__(self, name: object) -> bool:
        self.load_builtins()
        return str(name) in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self.load_builtins()
        return len(self._items)
