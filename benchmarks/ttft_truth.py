"""How far is the client's TTFT from the server's own? A benchmark, not a test.

The simulator, with `write_stamps` on, says in each stream's last chunk when its handler
got the request (`received_ns`) and when it handed the first token chunk to the
transport (`first_write_ns`), on CLOCK_MONOTONIC, the clock the client stamps with
(`time.perf_counter_ns` on Linux is one clock for every process of the machine). So each
request's TTFT splits into

- the send side, `received_ns - send_ns`: from the client writing the request headers
  to the server's handler starting (loopback, the server's parse and its event loop);
- the server's own TTFT, `first_write_ns - received_ns` (what a server-side timer says);
- the receive side, `first token event - first_write_ns`: from the server's write to the
  client's stamp of those bytes (loopback, the client's event loop).

For each constant rate (the load probe, open loop, a synthetic prompt) it prints p50 and
p99 of each part in ms, and the client's TTFT minus the server's. The two sides are what
the client adds; a client whose stamps fell back to read time shows it in the receive
side growing with the rate.

    python benchmarks/ttft_truth.py                     # 2, 8, 32 req/s, 10 s each
    python benchmarks/ttft_truth.py --rates 4 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arms.measures import RequestRecord, percentile, ttft_parts  # noqa: E402


def start(prefill_tps: float, decode_tps: float) -> tuple[subprocess.Popen[bytes], str]:
    from arms.server import free_port

    port = free_port()
    profile = {"prefill_tps": prefill_tps, "decode_tps": decode_tps, "slots": 64, "write_stamps": True, "run_sd": 0.0}
    log = open(Path(tempfile.gettempdir()) / f"ttft-truth-{port}.log", "wb")  # noqa: SIM115 - the server's, closed with it
    proc = subprocess.Popen(
        [sys.executable, "-m", "arms.simulator", "--port", str(port), "--profile-json", json.dumps(profile)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the simulator did not come up on {url}")


PARTS = ("send side", "server TTFT", "receive side", "client - server")


def parts(rows: list[dict]) -> dict[str, list[float]]:
    """`arms.measures.ttft_parts` of every stored request row that has the stamps."""
    out: dict[str, list[float]] = {name: [] for name in PARTS}
    for row in rows:
        record = RequestRecord(**{k: v for k, v in row.items() if k in RequestRecord.__dataclass_fields__})
        split = ttft_parts(record)
        for name, value in (split or {}).items():
            out[name].append(value)
    return out


def one_rate(url: str, rate: float, seconds: float) -> dict[str, list[float]]:
    from arms.probes import load
    from arms.probes.base import MemorySink, ProbeTarget
    from arms.runtimes import catalog as registry

    target = ProbeTarget.speaking(registry.get("simulator"), base_url=url, model="sim", simulated=True)
    params = load.LoadParams(profile="constant", rate=rate, duration_s=seconds, prompt_tokens=256, max_tokens=16)
    sink = MemorySink()
    asyncio.run(load.run(target, sink, params))
    return parts(sink.requests)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=float, nargs="+", default=[2.0, 8.0, 32.0])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    proc, url = start(prefill_tps=20000.0, decode_tps=200.0)
    try:
        one_rate(url, 4, 1.0)  # warm-up: imports and first connections stay out of the numbers
        print(f"{'rate':>6}  {'n':>4}  " + "  ".join(f"{name:>22}" for name in PARTS))
        print(f"{'req/s':>6}  {'':>4}  " + "  ".join(f"{'p50 / p99 ms':>22}" for _ in PARTS))
        for rate in args.rates:
            found = one_rate(url, rate, args.seconds)
            n = len(found["send side"])
            cells = [
                f"{percentile(v, 50) * 1000:9.2f} / {percentile(v, 99) * 1000:8.2f}" if v else f"{'-':>22}"
                for v in found.values()
            ]
            print(f"{rate:6g}  {n:4d}  " + "  ".join(f"{c:>22}" for c in cells))
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
