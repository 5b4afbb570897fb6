"""The registry of runtime adapters: campaign files name an adapter, this finds it.

Adapters register themselves with `@register` (under their `name`); `names()` imports
the built-in modules first so the registry is complete without callers knowing the
module list. `get()` returns a fresh adapter; adapters are immutable, so what one
caller learns at run time never leaks into another's.
"""

from __future__ import annotations

from typing import TypeVar

from arms.runtimes.base import RuntimeAdapter
from campaign.registry import Registry

A = TypeVar("A", bound=type[RuntimeAdapter])

ADAPTERS: Registry[type[RuntimeAdapter]] = Registry(
    "runtime adapter",
    builtins=(
        "arms.runtimes.simulator",
        "arms.runtimes.external",
        "arms.runtimes.llamacpp",
        "arms.runtimes.vllm",
        "arms.runtimes.sglang",
        "arms.runtimes.mlx_lm",
        "arms.runtimes.omlx",
        "arms.runtimes.mtplx",
        "arms.runtimes.mlx_dspark",
    ),
)


def register(cls: A) -> A:
    ADAPTERS.add(cls.name, cls)
    return cls


def names() -> list[str]:
    return ADAPTERS.names()


def get(name: str) -> RuntimeAdapter:
    return ADAPTERS.get(name)()
