"""Does the load client keep to its schedule? A benchmark, not a test.

The `load` probe, with a constant-rate (open-loop) profile, against the scheduled loopback
server of `client_accuracy.py` (started the way that script starts it, in its own
process: first token after `--ttft-ms`, then one every `--itl-ms`). For each rate it
prints what the probe itself stored: the offered rate, the schedule lag (actual send -
scheduled send) p50/p99/max, sends that waited for the in-flight cap, failures and the
client's CPU share; and beside them how late a bare asyncio sleep wakes at that rate with
nothing else to do (the machine's and the event loop's own share of any lag). A rate is
kept when its p99 lag stays within `--bound-ms`, no send waited for the in-flight cap and
nothing failed. The last lines name the highest rate kept (the highest rate this
machine's client can honestly offer) and the rates over the bound at which the bare loop
was over it too (the machine was busy, not the client). The dispatcher wakes up to 1 ms
late (the event loop's timer granularity): that is the floor of the lag.

    python benchmarks/load_lag.py                               # 25 .. 1600 req/s, 5 s each
    python benchmarks/load_lag.py --rates 100 400 --seconds 10 --bound-ms 5   # default bound: 10 ms
    python benchmarks/load_lag.py --trace --rates 10 50 200 --bound-ms 1      # the trace replayer

With `--trace` each rate replays a generated trace of one-turn sessions arriving as a
Poisson process at that rate (`campaign trace make`'s shape), through the trace profile:
the replayer's own sending error against its recorded times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SERVER = HERE / "client_accuracy.py"  # its scheduled loopback server, run as that script runs it


def start_server(ttft_ms: float, itl_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    from arms.server import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--serve", str(port), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert server.stdout is not None
    server.stdout.readline()  # "ready"
    return server, f"http://127.0.0.1:{port}"


def trace_file(rate: float, seconds: float, tokens: int) -> str:
    """A generated trace (`arms.workloads.traces.make_trace`) of one-turn sessions arriving as a
    Poisson process at `rate` for `seconds`: what the trace profile replays at that rate."""
    import tempfile

    from arms.workloads.traces import TraceShape, make_trace, write_trace

    shape = TraceShape(
        sessions=max(1, round(rate * seconds)),
        turns=1,
        system_blocks=1,
        task_blocks=1,
        turn_blocks=0,
        session_rate=rate,
        think_s=0.0,
        output_min=tokens,
        output_max=tokens,
        block_tokens=8,
        seed=int(rate),
    )
    path = Path(tempfile.mkdtemp()) / f"poisson{rate:g}.jsonl"
    write_trace(path, make_trace(shape))
    return str(path)


def one_rate(url: str, rate: float, seconds: float, tokens: int, cap: int, trace: bool = False) -> dict[str, float]:
    from arms.probes import load
    from arms.probes.base import MemorySink, ProbeTarget
    from arms.runtimes import catalog as registry

    target = ProbeTarget.speaking(
        registry.get("llamacpp"), base_url=url, model="bench"
    )  # the server answers /metrics as llama-server
    if trace:
        params = load.LoadParams(
            profile="trace", trace=trace_file(rate, seconds, tokens), block_tokens=8, max_in_flight=cap
        )
    else:
        params = load.LoadParams(
            profile="constant",
            rate=rate,
            duration_s=seconds,
            prompt_tokens=8,
            max_tokens=tokens,
            max_in_flight=cap,
        )
    sink = MemorySink()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(load.run(target, sink, params))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    out = {m["metric"]: m["value"] for m in sink.measurements if m["kind"] == "summary"}
    out["cpu_share"] = cpu / wall if wall else 0.0
    return out


def loop_lateness(rate: float, seconds: float) -> tuple[float, float]:
    """(p50, p99) ms by which a bare asyncio sleep wakes after its time at this rate, with
    no request sent: the machine's and the event loop's share of any schedule lag."""
    from arms.measures import percentile

    async def run() -> list[float]:
        start, late = time.perf_counter_ns(), []
        for i in range(int(rate * seconds)):
            due = start + int(i / rate * 1e9)
            wait = (due - time.perf_counter_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            late.append((time.perf_counter_ns() - due) / 1e6)
        return late

    late = asyncio.run(run())
    return percentile(late, 50) or 0.0, percentile(late, 99) or 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="*", default=[25, 50, 100, 200, 400, 800, 1600])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per rate")
    parser.add_argument("--tokens", type=int, default=8, help="tokens per stream")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--cap", type=int, default=1024, help="max in flight")
    parser.add_argument("--bound-ms", type=float, default=10.0, help="the p99 schedule lag a rate must stay within")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="replay a generated trace at each rate (the trace profile) instead of a constant rate",
    )
    args = parser.parse_args(argv)

    server, url = start_server(args.ttft_ms, args.itl_ms)
    try:
        one_rate(url, 10, 0.5, 2, args.cap)  # warm-up: imports and first connections stay out of the numbers
        per_request = (args.ttft_ms + args.itl_ms * (args.tokens - 1)) / 1000
        print(
            f"{'a replayed Poisson trace' if args.trace else 'constant rate'} for {args.seconds:g} s each; {args.tokens} tokens per stream (~{per_request * 1000:.0f} ms each); "
            f"server in its own process; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} before the run; bound: p99 lag <= {args.bound_ms:g} ms"
        )
        print(
            f"{'rate':>6} {'offered':>8} {'in flight':>9} {'lag p50':>8} {'p99':>8} {'max':>8} {'cap waits':>9} {'failed':>6} {'client CPU':>10} {'bare loop p50/p99':>18}"
        )
        kept: float | None = None
        noisy: list[float] = []
        for rate in args.rates:
            bare = loop_lateness(rate, min(args.seconds, 2.0))
            r = one_rate(url, rate, args.seconds, args.tokens, args.cap, args.trace)
            p50, p99, lmax = (
                r.get(k, float("nan")) * 1000
                for k in ("schedule_lag_p50_s", "schedule_lag_p99_s", "schedule_lag_max_s")
            )
            ok = p99 <= args.bound_ms and not r.get("in_flight_cap_waits") and r.get("requests_failed", 0) == 0
            print(
                f"{rate:6g} {r['offered_rps']:8.1f} {r['in_flight_peak']:9.0f} {p50:6.2f}ms {p99:6.2f}ms {lmax:6.1f}ms "
                f"{r.get('in_flight_cap_waits', 0):9.0f} {r.get('requests_failed', 0):6.0f} {r['cpu_share']:9.0%} {bare[0]:8.2f}/{bare[1]:.2f}ms"
                + ("" if ok else "  <- over the bound"),
                flush=True,
            )
            if ok and (kept is None or rate > kept):
                kept = rate
            elif not ok and bare[1] > args.bound_ms:
                noisy.append(rate)
        if kept is None:
            print(f"\nno rate kept p99 schedule lag within {args.bound_ms:g} ms")
        else:
            print(
                f"\nhighest rate with p99 schedule lag <= {args.bound_ms:g} ms, no cap waits, no failures: {kept:g} req/s"
            )
        if noisy:
            print(
                f"over the bound while a bare event loop was too ({', '.join(f'{r:g}' for r in noisy)} req/s): the machine's other load, not the client"
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
