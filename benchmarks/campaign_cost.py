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
    python benchmarks/campaign_cost.py --compare prefect

`--compare kept` runs the example instead with `keep_servers = false` (a server start
for every item, arm and block) and as shipped (consecutive items on the same arms,
recipes and blocks run on one server each): the server starts that keeping saves, and
whether the verdicts stay the same.

`--compare prefect` runs the example as shipped against the temporary Prefect server a
run starts for itself and against a lasting one (started first, as `campaign ui` starts
it), with every call to the Prefect API timed (`benchmarks/prefect_calls.py`): per run,
the calls and the seconds they held the campaign's thread, in all and per flow run,
by kind (flow run create, state changes, logs, artifacts, reads).

The fixed design and the adaptive one read different intervals (a t interval, a
confidence sequence), so a verdict the fixed design decides just past its threshold may
stay open under the adaptive one at the same budget: that is the price of looking after
every block, and the table shows it where it happens.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a line of the answer `campaign run` ends with: "  PASS    spec: C vs B: ..." (`reports.answer`)
VERDICT = re.compile(r"^  (PASS|FAIL|UNSURE|CONTROL|BLOCKED|PENDING)\s+([^:\s]+):")
WORDS = {
    "PASS": "pass",
    "FAIL": "fail",
    "UNSURE": "inconclusive",
    "CONTROL": "control",
    "BLOCKED": "blocked",
    "PENDING": "pending",
}


def adaptive_copy(text: str, max_blocks: int) -> str:
    """The campaign with every gated item's `repeats` removed and `max_blocks` set."""
    out: list[str] = []
    item_lines: list[str] = []
    in_item = gated = False

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


def run(
    path: Path, workdir: Path, env_extra: dict[str, str] | None = None, calls_to: Path | None = None
) -> tuple[float, str, dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env_extra or {})}
    if calls_to is not None:  # the CLI under benchmarks/prefect_calls.py's counting
        boot = f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import prefect_calls as p; p.record_cli(sys.argv[1], sys.argv[2:])"
        command = [sys.executable, "-c", boot, str(calls_to), "run", str(path)]
    else:
        command = [sys.executable, "-m", "cli", "run", str(path)]
    t0 = time.monotonic()
    proc = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.monotonic() - t0
    cost = next(
        (ln for ln in proc.stdout.splitlines() if ln.startswith("cost:")), f"(no cost line; exit {proc.returncode})"
    )
    verdicts = {}
    for line in proc.stdout.splitlines():
        m = VERDICT.match(line)
        if m:
            verdicts[m.group(2)] = WORDS[m.group(1)]
    return wall, cost, verdicts


def prefect_line(calls_json: Path, wall: float) -> str:
    """The Prefect calls of one run, as one line: in all, on the campaign's thread, per flow run."""
    if not calls_json.exists():
        return "prefect calls: (not recorded)"
    by_kind: dict[str, list[float]] = json.loads(calls_json.read_text())
    calls = int(sum(row[0] for row in by_kind.values()))
    blocking = sum(row[2] for row in by_kind.values())
    runs = max(1, int(by_kind.get("flow run create", [0])[0]))
    kinds = ", ".join(
        f"{kind} {row[2]:.1f} s" for kind, row in sorted(by_kind.items(), key=lambda kv: -kv[1][2]) if row[2] >= 0.05
    )
    return (
        f"prefect calls: {calls} in {runs} flow runs, {blocking:.1f} s on the campaign's thread "
        f"({blocking / wall:.1%} of the wall time, {1000 * blocking / runs:.0f} ms per flow run): {kinds}"
    )


def lasting_server(work: Path) -> tuple[dict[str, str], Path]:
    """A Prefect server of its own, as `campaign ui` starts one: the env that points a run at it."""
    sys.path.insert(0, str(ROOT))
    from arms.server import free_port
    from cli.ui_server import server_command, start_server

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    start_server(work / "ui", server_command(port=port), api)
    return {"PREFECT_API_URL": api}, work / "ui"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="demo")
    ap.add_argument("--max-blocks", type=int, default=10)
    ap.add_argument(
        "--compare",
        choices=("adaptive", "kept", "prefect"),
        default="adaptive",
        help="adaptive: fixed blocks vs max_blocks; kept: keep_servers false vs as shipped; "
        "prefect: a temporary Prefect server vs a lasting one",
    )
    args = ap.parse_args()
    source = (ROOT / "examples" / f"{args.example}.toml").read_text()
    if args.compare == "kept":
        runs = (("unkept (keep_servers false)", unkept_copy(source)), ("kept (as shipped)", source))
    elif args.compare == "prefect":
        runs = (("temporary (Prefect server)", source), ("lasting (Prefect server)", source))
    else:
        runs = (("fixed", source), (f"adaptive (max_blocks {args.max_blocks})", adaptive_copy(source, args.max_blocks)))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, text in runs:
            work = Path(tmp) / label.split()[0]
            work.mkdir()
            path = work / f"{args.example}.toml"
            path.write_text(text)
            env: dict[str, str] = {}
            server = None
            if label.startswith("lasting"):
                env, server = lasting_server(work)
            calls = work / "prefect-calls.json" if args.compare == "prefect" else None
            try:
                wall, cost, verdicts = run(path, work, env, calls)
            finally:
                if server is not None:
                    from cli.ui_server import stop_server

                    stop_server(server)
            results[label] = verdicts
            print(f"{label}: {wall:.0f} s of wall time\n  {cost}", flush=True)
            if calls is not None:
                print(f"  {prefect_line(calls, wall)}", flush=True)
    (first, f_v), (second, a_v) = results.items()
    print(f"{'gate':16s} {first.split()[0]:14s} {second.split()[0]:14s}")
    disagree = 0
    for gate in sorted(set(f_v) | set(a_v)):
        a, b = f_v.get(gate, "-"), a_v.get(gate, "-")
        decided = a in ("pass", "fail")
        mark = "" if a == b or not decided else f"  <- differs where the {first.split()[0]} run decided"
        disagree += bool(mark)
        print(f"{gate:16s} {a:14s} {b:14s}{mark}")
    if not f_v or not a_v:
        print("verdicts: not found in a run's output (its answer lines), nothing compared")
        return
    print(
        f"verdicts agree wherever the {first.split()[0]} run decided: {'yes' if not disagree else f'no ({disagree})'}"
    )


if __name__ == "__main__":
    main()
