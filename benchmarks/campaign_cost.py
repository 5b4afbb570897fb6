"""What a campaign costs with a fixed number of blocks and when it adds blocks until each
gate is settled: server starts, blocks per item, wall time, and the verdicts of both.

Runs an example campaign twice through the CLI, each on its own fresh database: as
shipped (each item its `repeats`), and adaptive (every gated item's `repeats` line
removed and `max_blocks` set campaign-wide, so it runs `min_blocks` and then one block at
a time until its gate is pass or fail). It prints each run's cost line (`campaign run`'s
last line: server starts, blocks per item, wall time and where it went), the gate
verdicts side by side, and whether they agree wherever the fixed design decided.

    python benchmarks/campaign_cost.py [--example demo] [--max-blocks 10]
    python benchmarks/campaign_cost.py --example qwen38 --compare kept

`--compare kept` runs the example instead with `keep_servers = false` (a server start
for every item, arm and block) and as shipped (consecutive items on the same arms,
recipes and blocks run on one server each): the server starts that keeping saves, and
whether the verdicts stay the same.

The fixed design and the adaptive one read different intervals (a t interval, a
confidence sequence), so a verdict the fixed design decides just past its threshold may
stay open under the adaptive one at the same budget: that is the price of looking after
every block, and the table shows it where it happens.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERDICT = re.compile(r"^│ (?!\d+ )(\S+)\s+│.*?│ (pass|fail|inconclusive|pending|blocked)\s+│")


def adaptive_copy(text: str, max_blocks: int) -> str:
    """The campaign with every gated item's `repeats` removed and `max_blocks` set."""
    out, in_item, gated, item_lines = [], False, False, []

    def flush() -> None:
        kept = [ln for ln in item_lines if not (gated and re.match(r"^repeats\s*=", ln))]
        out.extend(kept)

    for line in text.splitlines():
        if line.startswith("["):
            if in_item:
                flush()
            item_lines, in_item, gated = [], line.strip() == "[[queue]]", False
            if line.strip() == "[campaign]":
                out.append(line)
                out.append(f"max_blocks = {max_blocks}")
                continue
        if in_item:
            item_lines.append(line)
            gated = gated or bool(re.match(r"^gate\s*=", line))
        else:
            out.append(line)
    if in_item:
        flush()
    return "\n".join(out) + "\n"


def unkept_copy(text: str) -> str:
    """The campaign with `keep_servers = false`: every item starts its own servers."""
    assert "keep_servers" not in text, "the example sets keep_servers itself"
    return text.replace("[campaign]\n", "[campaign]\nkeep_servers = false\n", 1)


def run(path: Path, workdir: Path) -> tuple[float, str, dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "run", str(path)],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    wall = time.monotonic() - t0
    cost = next(
        (ln for ln in proc.stdout.splitlines() if ln.startswith("cost:")), f"(no cost line; exit {proc.returncode})"
    )
    verdicts = {}
    for line in proc.stdout.splitlines():
        m = VERDICT.match(line)
        if m:
            verdicts[m.group(1)] = m.group(2)
    return wall, cost, verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="demo")
    ap.add_argument("--max-blocks", type=int, default=10)
    ap.add_argument(
        "--compare",
        choices=("adaptive", "kept"),
        default="adaptive",
        help="adaptive: fixed blocks vs max_blocks; kept: keep_servers false vs as shipped",
    )
    args = ap.parse_args()
    source = (ROOT / "examples" / f"{args.example}.toml").read_text()
    if args.compare == "kept":
        runs = (("unkept (keep_servers false)", unkept_copy(source)), ("kept (as shipped)", source))
    else:
        runs = (("fixed", source), (f"adaptive (max_blocks {args.max_blocks})", adaptive_copy(source, args.max_blocks)))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, text in runs:
            work = Path(tmp) / label.split()[0]
            work.mkdir()
            path = work / f"{args.example}.toml"
            path.write_text(text)
            wall, cost, verdicts = run(path, work)
            results[label] = verdicts
            print(f"{label}: {wall:.0f} s of wall time\n  {cost}", flush=True)
    (first, f_v), (second, a_v) = results.items()
    print(f"{'gate':16s} {first.split()[0]:14s} {second.split()[0]:14s}")
    disagree = 0
    for gate in sorted(set(f_v) | set(a_v)):
        a, b = f_v.get(gate, "-"), a_v.get(gate, "-")
        decided = a in ("pass", "fail")
        mark = "" if a == b or not decided else f"  <- differs where the {first.split()[0]} run decided"
        disagree += bool(mark)
        print(f"{gate:16s} {a:14s} {b:14s}{mark}")
    print(
        f"verdicts agree wherever the {first.split()[0]} run decided: {'yes' if not disagree else f'no ({disagree})'}"
    )


if __name__ == "__main__":
    main()
