"""The instant commands import only what they need: `campaign --help` and `campaign new`
load neither the probes (nor their HTTP clients) nor Prefect, scipy or pandas; `campaign
probe` is built only when it runs. `benchmarks/startup.py` times them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HEAVY = ("arms.probes.registry", "aiohttp", "prefect", "scipy", "pandas", "statsmodels")


def loaded_after(args: list[str], cwd: Path) -> list[str]:
    """The heavy modules loaded in a fresh process that runs `campaign ARGS` (exit 0)."""
    code = (
        "import sys\n"
        "from cli.main import main\n"
        f"sys.argv = ['campaign', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return list(ast.literal_eval(proc.stdout.strip().splitlines()[-1]))


def test_help_and_new_import_nothing_heavy(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    assert loaded_after(["--help"], root) == []
    assert loaded_after(["new", "--out", str(tmp_path / "c.toml")], root) == []
