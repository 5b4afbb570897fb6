"""What the store costs per measurement row and per claim, on SQLite and on PostgreSQL.

    python benchmarks/store_cost.py [--rows 50000] [--batch 500] [--claims 300] [--pg URL]

Rows go in as the probe sink writes them (`Store.insert_rows`, one transaction per
batch); a claim is `Store.claim_attempt` (lock, read the arm's attempts, insert the
running one) followed by finishing it, as one arm does. Without --pg, a throwaway
PostgreSQL cluster is started from Debian's server programs (tests/pgcluster.py) with
the server's default durability (fsync on), so its numbers are what a real server pays.
`--workers N` runs the claims from N processes at once, as N hosts' workers would.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from campaign.core.states import AttemptState  # noqa: E402
from campaign.store.store import Store
from campaign.store.tables import AttemptRow, CampaignRow, MeasurementRow, ProbeRunRow  # noqa: E402


def rows_cost(store: Store, rows: int, batch: int) -> float:
    camp = store.add(CampaignRow(name=f"rows-{time.time_ns()}"))
    att = store.new_attempt(camp.id, "k", "A", {})
    run = store.add(ProbeRunRow(attempt_id=att.id, probe="decode", context=0))
    base = {
        "campaign_id": camp.id,
        "attempt_id": att.id,
        "probe_run_id": run.id,
        "item_key": "k",
        "arm_id": "A",
        "repeat": 0,
        "probe": "decode",
        "scenario": "",
        "mode": "canonical",
        "context": 0,
        "unit": "tok/s",
        "source": "",
        "simulated": False,
    }
    started = time.perf_counter()
    for first in range(0, rows, batch):
        store.insert_rows(
            [
                (MeasurementRow, {**base, "trial": t, "metric": "decode_tps", "value": float(t)})
                for t in range(first, min(rows, first + batch))
            ]
        )
    return (time.perf_counter() - started) / rows


def _claims(url: str, campaign_id: int, arms: list[str]) -> int:
    store = Store(url)
    won = 0
    for arm in arms:
        how, att = store.claim_attempt(campaign_id, "k", arm, {}, 0, fresh=False)
        if how in ("new", "resumed"):
            store.update(AttemptRow, att.id, state=AttemptState.DONE)
            won += 1
    return won


def claim_cost(store: Store, claims: int, workers: int) -> tuple[float, int]:
    camp = store.add(CampaignRow(name=f"claims-{time.time_ns()}"))
    arms = [f"arm{i}" for i in range(claims)]
    started = time.perf_counter()
    if workers <= 1:
        won = _claims(store.url, camp.id or 0, arms)
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            won = sum(pool.starmap(_claims, [(store.url, camp.id or 0, arms)] * workers))
    return (time.perf_counter() - started) / claims, won


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--pg", help="a PostgreSQL URL (default: start a throwaway cluster)")
    args = parser.parse_args()
    cluster = None
    pg = args.pg
    if not pg:
        from tests.pgcluster import Cluster

        cluster = Cluster(fsync=True).start()
        pg = cluster.create_database("bench")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, url in (("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}"), ("postgres", pg)):
                store = Store(url)
                per_row = rows_cost(store, args.rows, args.batch)
                per_claim, won = claim_cost(store, args.claims, args.workers)
                assert won == args.claims, (won, args.claims)  # every arm claimed exactly once
                print(
                    f"{name:9s} {per_row * 1e6:8.1f} us/row ({1 / per_row:9.0f} rows/s, batches of {args.batch})  "
                    f"{per_claim * 1e3:7.2f} ms/claim ({1 / per_claim:6.0f} claims/s, {args.workers} process(es))"
                )
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
