"""How many token events per second can the load client stamp before its own times move?

The emitter is `benchmarks/client_accuracy.py`'s loopback server (its own process), which
writes into each token the time it was scheduled and the time it was written. Our client
is the load probe's own: its runs are sent by `arms.workloads.shards` over `--procs`
client processes (1 and 2 by default; one schedule, one clock), each reading its share of
`--streams` streams at once (64, 256, 1024) at inter-token gaps from `--itl-ms` (20, 10,
5, 2 ms), so the offered event rate rises by stream count and by gap. Per run it prints:

- events per second of wall time, and per second of client CPU (events per client core,
  the CPU of all client processes summed);
- the TTFT and inter-token error against the time the emitter wrote each token (its own
  stamp: the emitter's lateness is not the client's), p50 and p99;
- whether the p99 error is within 1 ms, and the emitter's own send lag p99 beside it.

Then, per process count, the offered rate at which the error first passes 1 ms, and at
256 streams and 10 ms a bare aiohttp client in the same run for comparison. GuideLLM
and AIPerf are compared where they are installed (`pip install guidellm aiperf`); the
line says when they are not. The last line reads

    client capacity: N events/s per core; p99 error X ms at 256 streams; procs P

with P the fewest processes whose p99 error at 256 streams and 10 ms stayed within 1 ms
(the most tried, when none did), X that error (the larger of TTFT and ITL), and N the
most events per client CPU second among that P's runs within 1 ms.

    python benchmarks/client_capacity.py [--streams 64 256 1024] [--itl-ms 20 10 5 2] [--procs 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_spec = importlib.util.spec_from_file_location("client_accuracy", Path(__file__).with_name("client_accuracy.py"))
assert _spec is not None and _spec.loader is not None
accuracy = importlib.util.module_from_spec(_spec)
sys.modules["client_accuracy"] = accuracy  # its dataclasses look their module up by name
_spec.loader.exec_module(accuracy)


@dataclass(frozen=True)
class Row:
    procs: int
    streams: int
    itl_ms: float
    result: accuracy.Result

    @property
    def error_ms(self) -> float:
        return max(self.result.own_ttft_p99_ms, self.result.own_itl_p99_ms)

    @property
    def within(self) -> bool:
        return self.error_ms <= 1.0 and not self.result.errors


def measure_sharded(url: str, streams: int, tokens: int, procs: int) -> accuracy.Result:
    """`streams` streams at once, sent by the load probe's sharded dispatch, scored as
    `client_accuracy.measure` scores a client (its `Result`)."""
    from arms.workloads import profiles, shards

    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "max_tokens": tokens}
    wall0 = time.perf_counter()
    run = asyncio.run(
        shards.run(
            shards.FixedRequests(url, body),
            profiles.concurrent(streams),
            procs=procs,
            duration_s=None,
            requests=streams,
            max_in_flight=streams,
            warm=streams,
        )
    )
    wall = time.perf_counter() - wall0
    return accuracy.score("ours", streams, [accuracy._stream_of(r) for r in run.records], run.span_s or wall, run.cpu_s)


def other_clients() -> list[str]:
    found = []
    for name in ("guidellm", "aiperf"):
        if importlib.util.find_spec(name) is not None:
            found.append(name)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="*", default=[64, 256, 1024])
    parser.add_argument("--itl-ms", type=float, nargs="*", default=[20.0, 10.0, 5.0, 2.0])
    parser.add_argument("--procs", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    args = parser.parse_args()
    from arms.server import free_port

    print(
        f"{'procs':>5} {'streams':>7} {'ITL ms':>6} {'offered ev/s':>12} {'events/s':>9} {'ev/core-s':>9} "
        f"{'TTFT err p50':>12} {'p99':>8} {'ITL err p50':>11} {'p99':>8} {'emitter lag p99':>15} {'<=1 ms':>6} errors"
    )
    rows: list[Row] = []
    bare: accuracy.Result | None = None
    for itl in args.itl_ms:
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                accuracy.__file__,
                "--serve",
                str(port),
                "--ttft-ms",
                str(args.ttft_ms),
                "--itl-ms",
                str(itl),
            ],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            assert server.stdout is not None
            server.stdout.readline()
            url = f"http://127.0.0.1:{port}"
            accuracy.measure("ours", url, 2, 5)  # warm-up: imports and first use stay out of the numbers
            for streams in args.streams:
                for procs in args.procs:
                    r = measure_sharded(url, streams, args.tokens, procs)
                    row = Row(procs, streams, itl, r)
                    rows.append(row)
                    print(
                        f"{procs:5d} {streams:7d} {itl:6g} {streams * 1000 / itl:12.0f} {r.events_per_s:9.0f} {r.capacity:9.0f} "
                        f"{r.own_ttft_p50_ms:10.2f}ms {r.own_ttft_p99_ms:6.2f}ms {r.own_itl_p50_ms:9.2f}ms {r.own_itl_p99_ms:6.2f}ms "
                        f"{r.server_lag_p99_ms:13.2f}ms {'yes' if row.within else 'NO':>6} {r.errors}",
                        flush=True,
                    )
                if streams == 256 and itl == 10.0:
                    bare = accuracy.measure("aiohttp", url, streams, args.tokens)
        finally:
            server.terminate()
            server.wait(10)
    for procs in args.procs:
        mine = sorted((r for r in rows if r.procs == procs), key=lambda r: r.streams * 1000 / r.itl_ms)
        passed = next((r for r in mine if not r.within), None)
        where = (
            f"at {passed.streams * 1000 / passed.itl_ms:.0f} offered events/s ({passed.streams} streams, {passed.itl_ms:g} ms)"
            if passed
            else "not within the rates tried"
        )
        print(f"procs {procs}: the p99 error first passes 1 ms {where}")
    if bare is not None:
        worst = max(bare.own_ttft_p99_ms, bare.own_itl_p99_ms)
        print(
            f"bare aiohttp, 256 streams, 10 ms, one process: p99 error {worst:.2f} ms, {bare.capacity:.0f} events/s per core"
        )
    others = other_clients()
    print(
        "GuideLLM / AIPerf: "
        + (f"installed ({', '.join(others)}), not driven by this script yet" if others else "not installed here")
    )
    at_256 = {r.procs: r for r in rows if r.streams == 256 and r.itl_ms == 10.0}
    fits = [p for p in sorted(at_256) if at_256[p].within]
    procs = fits[0] if fits else max(args.procs)
    best = max((r.result.capacity for r in rows if r.procs == procs and r.within), default=0.0)
    error = at_256[procs].error_ms if procs in at_256 else float("nan")
    print(f"client capacity: {best:.0f} events/s per core; p99 error {error:.2f} ms at 256 streams; procs {procs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
