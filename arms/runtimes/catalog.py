"""Every built-in runtime adapter, registered: look adapters up here.

The one place that lists the built-in modules; each registers itself on import. A
campaign's own adapter registers through `arms.runtimes.registry.register` the same way.
"""

from __future__ import annotations

from arms.runtimes import (  # noqa: F401  (each registers itself on import)
    external,
    llamacpp,
    mlx_dspark,
    mlx_lm,
    mtplx,
    omlx,
    sglang,
    simulator,
    vllm,
)
from arms.runtimes.registry import ADAPTERS, get, names, register

__all__ = ["ADAPTERS", "get", "names", "register"]
