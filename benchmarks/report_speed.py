"""How long `campaign report` takes on a big campaign: 30 arms, 200,000 measurements.

    python benchmarks/report_speed.py [--arms 30] [--rows 200000] [--keep DIR]

Builds the store with tests.synthetic (bulk insert, one transaction), renders the site
twice (the second run with a warm page cache is what a person re-running the report
sees) and prints seconds per phase. The aim is a few seconds: the report reads the
measurements with one query and aggregates them once, whatever the number of pages.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from campaign.store.store import Store  # noqa: E402
from reports.site import write_site  # noqa: E402
from tests import synthetic  # noqa: E402


def rows_per_trial(arms: int, contexts: int) -> int:
    """Measurement rows the synthetic campaign writes per trial (see tests.synthetic)."""
    measured = arms - 1  # the last arm is blocked
    cache = (measured - 1) * 2 * 5 * 4 + 1 * 5 * 4  # arm 2 probes greedy only
    decode = measured * contexts * 2 * 3
    return cache + decode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", type=int, default=30)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keep", type=Path, help="keep the database and the site in this folder")
    args = parser.parse_args(argv)

    folder = args.keep or Path(tempfile.mkdtemp(prefix="report-speed-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "bench.db"
    db.unlink(missing_ok=True)
    contexts = (4096, 32768, 131072)
    trials = max(1, math.ceil(args.rows / rows_per_trial(args.arms, len(contexts))))
    opts = synthetic.Options(
        name="bench",
        title="Report speed benchmark",
        arms=args.arms,
        trials=trials,
        decode_contexts=contexts,
        agent_conversations=3,
        agent_turns=10,
        requests_per_probe=5,
    )
    store = Store(f"sqlite:///{db}")
    t0 = time.perf_counter()
    synthetic.build(store, opts)
    built = time.perf_counter() - t0
    print(
        f"store: {args.arms} arms, {opts.counts['measurements']:,} measurements, "
        f"{opts.counts['requests']:,} request records, {opts.counts['samples']:,} samples; built in {built:.1f} s"
    )
    for run in ("cold", "warm"):
        site = folder / "site"
        shutil.rmtree(site, ignore_errors=True)
        phases: dict[str, float] = {}
        t0 = time.perf_counter()
        index = write_site(Store(f"sqlite:///{db}"), None, site, phases)
        total = time.perf_counter() - t0
        pages = len(list(site.rglob("*.html")))
        detail = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
        print(f"report ({run}): {total:.2f} s for {pages} pages ({detail})")
    print(f"index: {index}")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
