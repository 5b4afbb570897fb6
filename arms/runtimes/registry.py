"""The registry of runtime adapters: campaign files name an adapter, this finds it.

Adapters register themselves with `@register` (under their `name`) when their module is
imported, through the one call every kind registers with (`campaign.core.registry`); `arms.runtimes.catalog` imports every built-in, so callers look names up
there and no adapter module imports another through this registry. `get()` returns a
fresh adapter; adapters are immutable, so what one caller learns at run time never
leaks into another's.
"""

from __future__ import annotations

from typing import TypeVar

from arms.runtimes.base import RuntimeAdapter
from campaign.core.registry import Registry

A = TypeVar("A", bound=type[RuntimeAdapter])

ADAPTERS: Registry[type[RuntimeAdapter]] = Registry("runtime adapter", lambda cls: cls.name)


def register(cls: A) -> A:
    """Register an adapter class (built-in or a campaign's own) under its `name`."""
    ADAPTERS.register(cls)
    return cls


def names() -> list[str]:
    return ADAPTERS.names()


def get(name: str) -> RuntimeAdapter:
    return ADAPTERS.get(name)()
