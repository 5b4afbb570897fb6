"""How long the instant commands take to start: `campaign --help`, `campaign check` on the
demo, and `campaign status`, each as a fresh process, as a user types them.

    python benchmarks/startup.py [--runs 10] [--top 10] [--file examples/demo.toml]

Each command runs `--runs` times (after one untimed run that fills the bytecode cache);
the median and p90 wall times are printed, then each command's `--top` modules by
cumulative import time (`python -X importtime`): where a start-up second goes. `status`
reads a fresh temporary database in which the demo campaign was registered (its queue
pending, as after a first `campaign run` was stopped before any measurement), and
`check` reads the same one, so it looks for earlier blocks to time the plan from.
Nothing outside the temporary folder is written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REGISTER = """
import sys
from campaign.store import queue
from campaign.store.database import database_url
from campaign.store.store import Store
from flows.resolve import load_campaign

spec = load_campaign(sys.argv[1])
queue.register(Store(database_url(sys.argv[2])), spec, source_path=sys.argv[1])
"""


def commands(file: Path, db: Path) -> dict[str, list[str]]:
    return {
        "--help": ["--help"],
        f"check {file.name}": ["check", str(file), "--db", str(db)],
        "status": ["status", "--db", str(db)],
    }


def run_once(args: list[str], env: dict[str, str], importtime: bool = False) -> tuple[float, str]:
    """Wall seconds of one `python -m cli ARGS`, and its stderr."""
    flags = ["-X", "importtime"] if importtime else []
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *flags, "-m", "cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # check exits 1 where a server binary is missing: still a start-up
        raise SystemExit(f"campaign {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return seconds, proc.stderr


def top_imports(stderr: str, top: int) -> list[tuple[float, str]]:
    """The modules with the largest cumulative import time (ms), from -X importtime."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative) / 1000, name.rstrip()))
    rows.sort(reverse=True)
    return rows[:top]


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="timed runs per command")
    ap.add_argument("--top", type=int, default=10, help="modules shown per command, by cumulative import time")
    ap.add_argument("--file", type=Path, default=ROOT / "examples" / "demo.toml", help="campaign file to check")
    args = ap.parse_args()
    file = args.file.resolve()
    with tempfile.TemporaryDirectory(prefix="campaign-startup-") as tmp:
        db = Path(tmp) / "campaign.db"
        env = {**os.environ, "COLUMNS": "120", "CAMPAIGN_DB": "", "PYTHONDONTWRITEBYTECODE": ""}
        subprocess.run([sys.executable, "-c", REGISTER, str(file), str(db)], cwd=ROOT, env=env, check=True)
        timed: dict[str, list[float]] = {}
        imports: dict[str, list[tuple[float, str]]] = {}
        for label, argv in commands(file, db).items():
            run_once(argv, env)  # untimed: writes the bytecode cache a user's second run has
            timed[label] = [run_once(argv, env)[0] for _ in range(args.runs)]
            imports[label] = top_imports(run_once(argv, env, importtime=True)[1], args.top)
    print(f"{'command':<22} {'median s':>9} {'p90 s':>7}  ({args.runs} runs each, {os.cpu_count()} cores)")
    for label, values in timed.items():
        print(f"{label:<22} {statistics.median(values):>9.3f} {p90(values):>7.3f}")
    for label, rows in imports.items():
        print(f"\n{label}: top {args.top} modules by cumulative import time")
        for ms, name in rows:
            print(f"  {ms:>8.1f} ms  {name.strip()}")


if __name__ == "__main__":
    main()
