"""How many token events per second can the load client stamp before its own times move?

The emitter is `benchmarks/client_accuracy.py`'s loopback server (its own process), which
writes into each token the time it was scheduled and the time it was written. Our client
(`arms.client.stream_chat` on the timed aiohttp transport, as the probes use it) reads
`--streams` streams at once (64, 256, 1024) at inter-token gaps from `--itl-ms` (20, 10,
5, 2 ms), so the offered event rate rises by stream count and by gap. Per run it prints:

- events per second of wall time, and per second of client CPU (events per client core);
- the TTFT and inter-token error against the emitter's own stamps, p50 and p99;
- whether the p99 error is within 1 ms, and the emitter's own send lag p99 beside it (a
  late emitter is not the client's error).

One client process (`procs 1`); the client does not shard its streams over processes.
The last line reads

    client capacity: N events/s per core; p99 error X ms at 256 streams; procs P

with N the most events per client CPU second among the runs whose p99 error stayed
within 1 ms, and X the p99 error (the larger of TTFT and ITL) at 256 streams and 10 ms.

    python benchmarks/client_capacity.py [--streams 64 256 1024] [--itl-ms 20 10 5 2] [--tokens 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_spec = importlib.util.spec_from_file_location("client_accuracy", Path(__file__).with_name("client_accuracy.py"))
assert _spec is not None and _spec.loader is not None
accuracy = importlib.util.module_from_spec(_spec)
sys.modules["client_accuracy"] = accuracy  # its dataclasses look their module up by name
_spec.loader.exec_module(accuracy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="*", default=[64, 256, 1024])
    parser.add_argument("--itl-ms", type=float, nargs="*", default=[20.0, 10.0, 5.0, 2.0])
    parser.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    args = parser.parse_args()
    from arms.server import free_port

    print(
        f"{'streams':>7} {'ITL ms':>6} {'offered ev/s':>12} {'events/s':>9} {'ev/core-s':>9} "
        f"{'TTFT err p50':>12} {'p99':>8} {'ITL err p50':>11} {'p99':>8} {'emitter lag p99':>15} {'<=1 ms':>6} errors"
    )
    best, at_256 = 0.0, float("nan")
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
                r = accuracy.measure("ours", url, streams, args.tokens)
                worst = max(r.ttft_p99_ms, r.itl_p99_ms)
                within = worst <= 1.0 and not r.errors
                if within:
                    best = max(best, r.capacity)
                if streams == 256 and itl == 10.0:
                    at_256 = worst
                print(
                    f"{streams:7d} {itl:6g} {streams * 1000 / itl:12.0f} {r.events_per_s:9.0f} {r.capacity:9.0f} "
                    f"{r.ttft_p50_ms:10.2f}ms {r.ttft_p99_ms:6.2f}ms {r.itl_p50_ms:9.2f}ms {r.itl_p99_ms:6.2f}ms "
                    f"{r.server_lag_p99_ms:13.2f}ms {'yes' if within else 'NO':>6} {r.errors}",
                    flush=True,
                )
        finally:
            server.terminate()
            server.wait(10)
    print(f"client capacity: {best:.0f} events/s per core; p99 error {at_256:.2f} ms at 256 streams; procs 1")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
