"""Where Prefect's share of a campaign goes: every HTTP call the campaign process makes to
the Prefect API, timed and counted by kind, with a lasting server and with a temporary
one. A benchmark, not a test.

Runs an example campaign in this process (`flows.campaign_flow.campaign_flow`, the flow
`campaign run` runs) on a fresh database, with httpx's send wrapped so each request to the
API is timed on the caller's clock, then prints per kind of call (flow run create, state
changes, task runs, logs, artifacts, device-lock leases and holder records, reads,
other) the count, the total seconds and the share of the campaign's wall time, and the
calls and seconds per flow run. The calls made
from the Prefect client's own background threads (log and event workers) are counted
too; whether they delay the campaign depends on the GIL, not on the wire, so "blocking"
counts only the calls made on the campaign's own thread.

    python benchmarks/prefect_calls.py [--example energy] [--server temporary|lasting]

`lasting` starts `prefect server start` on a free port first (as `campaign ui` does) and
stops it after; `temporary` is the server Prefect starts for a flow when none is
configured. The server's own CPU is not the campaign's and is not counted here.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = (
    ("flow run create", re.compile(r"POST .*/flow_runs/?$")),
    ("flow run state", re.compile(r"POST .*/flow_runs/[^/]+/set_state")),
    ("task run", re.compile(r".*/task_runs")),
    ("logs", re.compile(r"POST .*/logs")),
    ("artifacts", re.compile(r".*/artifacts")),
    ("events", re.compile(r".*/events")),
    ("device lock", re.compile(r".*/(v2/concurrency_limits|variables)")),
    ("reads", re.compile(r"^(GET|POST) .*/(filter|flows/|flow_runs/[^/]+$|deployments|health|admin|csrf)")),
)


class Calls:
    """Every API call seen: (kind, seconds, on the campaign's thread)."""

    def __init__(self, api: str):
        self.api = api
        self.main = threading.get_ident()
        self.seen: list[tuple[str, float, bool]] = []
        self.lock = threading.Lock()
        self.others: dict[str, int] = defaultdict(int)

    def kind(self, method: str, url: str) -> str:
        text = f"{method} {url.split('?')[0]}"
        return next((name for name, pattern in KINDS if pattern.match(text)), "other")

    def add(self, method: str, url: str, seconds: float) -> None:
        if "/api/" not in url or (self.api and not url.startswith(self.api)):
            return  # a server under test, not Prefect (a temporary server's address is not known before)
        kind = self.kind(method, url)
        with self.lock:
            self.seen.append((kind, seconds, threading.get_ident() == self.main))
            if kind == "other":
                self.others[f"{method} {re.sub(r'[0-9a-f-]{36}', '<id>', url.split('?')[0].split('/api', 1)[-1])}"] += 1


def instrument(calls: Calls) -> None:
    import httpx

    sync_send, async_send = httpx.Client.send, httpx.AsyncClient.send

    def send(self: httpx.Client, request: httpx.Request, **kw: object) -> httpx.Response:
        t0 = time.perf_counter()
        try:
            return sync_send(self, request, **kw)  # type: ignore[arg-type]
        finally:
            calls.add(request.method, str(request.url), time.perf_counter() - t0)

    async def asend(self: httpx.AsyncClient, request: httpx.Request, **kw: object) -> httpx.Response:
        t0 = time.perf_counter()
        try:
            return await async_send(self, request, **kw)  # type: ignore[arg-type]
        finally:
            calls.add(request.method, str(request.url), time.perf_counter() - t0)

    httpx.Client.send = send  # type: ignore[method-assign]
    httpx.AsyncClient.send = asend  # type: ignore[method-assign]


def totals(calls: Calls) -> dict[str, list[float]]:
    """Per kind: [calls, seconds, seconds on the campaign's thread]."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for kind, seconds, blocking in calls.seen:
        row = out[kind]
        row[0] += 1
        row[1] += seconds
        row[2] += seconds if blocking else 0.0
    return dict(out)


def record_cli(out: str, argv: list[str]) -> None:
    """Run the campaign CLI in this process with every Prefect call counted, the totals
    written to `out` (JSON) as the process exits, however it exits: what
    `benchmarks/campaign_cost.py --compare prefect` runs each campaign under."""
    import atexit
    import json

    calls = Calls(os.environ.get("PREFECT_API_URL", ""))
    instrument(calls)
    atexit.register(lambda: Path(out).write_text(json.dumps(totals(calls))))
    from cli.main import main as cli_main

    sys.argv = ["campaign", *argv]
    cli_main()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--example", default="energy")
    parser.add_argument("--server", choices=("temporary", "lasting"), default="lasting")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prefect-calls-"))
    server = None
    api = ""
    if args.server == "lasting":
        from arms.server import free_port
        from cli.ui_server import server_command, start_server, stop_server

        port = free_port()
        api = f"http://127.0.0.1:{port}/api"
        start_server(work / "ui", server_command(port=port), api)
        server = work / "ui"
        os.environ["PREFECT_API_URL"] = api
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    calls = Calls(api)
    instrument(calls)
    from campaign.store.store import Store
    from flows.campaign_flow import campaign_flow

    store = Store(f"sqlite:///{work / 'c.db'}")
    example = Path(__file__).resolve().parents[1] / "examples" / f"{args.example}.toml"
    t0 = time.perf_counter()
    try:
        campaign_flow(str(example), store.url, str(work / "run"))
    finally:
        wall = time.perf_counter() - t0
        if server is not None:
            time.sleep(3)  # the client's log worker sends the last run logs before their server goes
            stop_server(server)
    runs = len({a.flow_run_id for a in store.attempts(1) if a.flow_run_id}) + 1  # the arms' and the campaign's
    print(
        f"{args.example} with a {args.server} Prefect server: {wall:.1f} s wall, {runs} flow runs, {len(calls.seen)} API calls"
    )
    print(f"{'kind':16} {'calls':>6} {'seconds':>8} {'share':>6} {'blocking s':>10} {'per flow run':>13}")
    by_kind = totals(calls)
    for kind, (count, seconds, blocking) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
        print(
            f"{kind:16} {int(count):6d} {seconds:8.2f} {seconds / wall:6.1%} {blocking:10.2f} {count / runs:6.1f} calls"
        )
    if calls.others:
        print("other: " + ", ".join(f"{path} x{n}" for path, n in sorted(calls.others.items(), key=lambda kv: -kv[1])))
    blocking = sum(row[2] for row in by_kind.values())
    print(f"prefect calls: {blocking:.2f} s on the campaign's thread ({blocking / wall:.1%} of the wall time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
