"""The registry of runtime adapters: campaign files name an adapter, this finds it.

Adapters register themselves with `@register`; `names()` imports the built-in modules
first so the registry is complete without callers knowing the module list.
"""

from __future__ import annotations

import importlib

from arms.runtimes.base import RuntimeAdapter

_ADAPTERS: dict[str, type[RuntimeAdapter]] = {}
_BUILTIN = (
    "arms.runtimes.simulator",
    "arms.runtimes.external",
    "arms.runtimes.llamacpp",
    "arms.runtimes.vllm",
    "arms.runtimes.sglang",
    "arms.runtimes.mlx_lm",
    "arms.runtimes.omlx",
    "arms.runtimes.mtplx",
    "arms.runtimes.mlx_dspark",
)
_loaded = False


def register(cls: type[RuntimeAdapter]) -> type[RuntimeAdapter]:
    _ADAPTERS[cls.name] = cls
    return cls


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in _BUILTIN:
            importlib.import_module(module)


def names() -> list[str]:
    _load_builtins()
    return sorted(_ADAPTERS)


def get(name: str) -> RuntimeAdapter:
    _load_builtins()
    try:
        return _ADAPTERS[name]()
    except KeyError:
        raise KeyError(f"no runtime adapter named {name!r}; known: {', '.join(sorted(_ADAPTERS))}") from None
