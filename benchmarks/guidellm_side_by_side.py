"""Our load probe and GuideLLM, side by side on one server. A benchmark, not a test.

Both clients run the same open-loop load against one embedded simulator (`campaign
simulate`, 4 slots, real time, deterministic rates, `write_stamps` on): a constant 2
requests/s for 20 s, prompts of 256 words (the simulator's tokens) and 64 output tokens
held with ignore_eos. The runs alternate, ours then GuideLLM, each client a fresh
process of its own command line:

  ours      campaign probe URL --probe load --runtime simulator --profile constant ...
  GuideLLM  guidellm run --backend kind=openai_http,... --profile kind=constant,rate=2 ...

GuideLLM needs a tokenizer to size its synthetic prompts and cannot download one here,
so the script builds a word-level one (`tokenizers`, with the GuideLLM venv's Python)
whose tokens are the words of Faker's word list, the text GuideLLM writes its prompts
from; one of its tokens is then one simulator token, and both clients' prompts come out
at 259 server tokens (256 words and the chat markers).

Printed per run: requests sent and answered, the achieved send rate, the prompt and
output tokens the server counted, the client's TTFT p50/p99 (its own per-request
numbers), the server's own TTFT (`first_write_ns - received_ns`, from the simulator's
stamps) and the client's TTFT minus it, split into the send side and the receive side
(`arms.measures.ttft_parts`), then the client's cost: CPU seconds (user + sys of its
whole process tree, from wait4) in all and within the load window (from /proc samples),
wall seconds, peak memory (the tree's summed PSS, sampled) and its largest process's
peak RSS. Then the means over runs, the ratios ours / GuideLLM, and what the TTFT p50
difference between the two clients is made of.

Server stamps: ours keeps each stream's last chunk, where the stamps are. GuideLLM does
not, but it stores each request's response id (`chatcmpl-sim-N`); when the script may
open a packet socket (root, or CAP_NET_RAW) it reads the simulator's last chunks off the
loopback interface, passively, and matches them by that id (it checks itself against
ours' in-stream stamps). GuideLLM stamps with `time.time()`; its times are moved onto
the monotonic clock by the offset between the two clocks, read before each run. Without
the packet socket, GuideLLM's TTFT is compared with the server's TTFT distribution of
our runs at the same load instead (the simulator's rates are fixed, so the server side
sees the same schedule).

GuideLLM is $GUIDELLM, else `guidellm` on the PATH (install it in a venv of its own: it
brings torch and transformers); without it, our side runs alone.

    python benchmarks/guidellm_side_by_side.py                 # 2 runs each, 20 s at 2 req/s
    python benchmarks/guidellm_side_by_side.py --runs 3 --seconds 30 --rate 4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arms.measures import CONTENT, RequestRecord, percentile, ttft_parts, ttft_s  # noqa: E402

NS = 1_000_000_000
MIB = 1024 * 1024
PROMPT_TOKENS = 256
OUTPUT_TOKENS = 64
PARTS = ("send side", "server TTFT", "receive side", "client - server")
SIM_PROFILE = {"write_stamps": True, "run_sd": 0.0, "drift_sd_per_min": 0.0}
CAMPAIGN = [sys.executable, "-m", "cli"]  # this checkout's CLI, with the Python running the script
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


# ----------------------------------------------------------------------------- server


def start_simulator(port: int, log: Path) -> subprocess.Popen[bytes]:
    """`campaign simulate` on loopback, in its own process group; returns once /health is ok."""
    import httpx

    command = [
        *CAMPAIGN,
        "simulate",
        "--port",
        str(port),
        "--slots",
        "4",
        "--time-scale",
        "1",
        "--profile-json",
        json.dumps(SIM_PROFILE),
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(proc)
    raise SystemExit(f"the simulator did not come up on port {port}: {log.read_text()[-500:]}")


def warm_up(url: str) -> None:
    """Two streamed requests, so the server's first-use costs stay out of the runs."""
    import httpx

    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "warm up " * 100}],
        "max_tokens": 8,
        "stream": True,
    }
    with httpx.Client(base_url=url, timeout=30) as http:
        for _ in range(2):
            with http.stream("POST", "/v1/chat/completions", json=body) as resp:
                for _ in resp.iter_bytes():
                    pass


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a process group this script started: SIGTERM, then SIGKILL after 10 s."""
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


class StampSniffer:
    """The simulator's per-request stamps, read passively off the loopback interface.

    Every stream's last chunk carries `"id":"chatcmpl-sim-N"` and `"x_sim":{...}`; this
    thread reads the server's TCP payloads from a packet socket and keeps id -> stamps.
    `open` returns None where packet sockets are not allowed (not root, no CAP_NET_RAW).
    """

    CHUNK = re.compile(rb'"id":"(chatcmpl-sim-\d+)".*?"x_sim":\{"received_ns":(\d+),"first_write_ns":(\d+)')

    def __init__(self, sock: socket.socket, port: int):
        self.sock = sock
        self.port = port
        self.stamps: dict[str, dict[str, int]] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="stamp-sniffer", daemon=True)
        self.thread.start()

    @classmethod
    def open(cls, port: int) -> StampSniffer | None:
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))  # ETH_P_ALL
            sock.bind(("lo", 0))
        except (OSError, AttributeError):
            return None
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * MIB)
        sock.settimeout(0.2)
        return cls(sock, port)

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                frame, address = self.sock.recvfrom(262144)
            except TimeoutError:
                continue
            except OSError:
                return
            if address[2] == socket.PACKET_OUTGOING or frame[12:14] != b"\x08\x00":  # each loopback packet, once; IPv4
                continue
            ip = frame[14:]
            if ip[9] != 6:  # TCP
                continue
            tcp = ip[(ip[0] & 0x0F) * 4 :]
            if int.from_bytes(tcp[0:2], "big") != self.port:
                continue
            payload = tcp[(tcp[12] >> 4) * 4 :]
            if b'"x_sim"' not in payload:
                continue
            for rid, received, written in self.CHUNK.findall(payload):
                self.stamps[rid.decode()] = {"received_ns": int(received), "first_write_ns": int(written)}

    def close(self) -> None:
        self.done.set()
        self.thread.join(2)
        self.sock.close()


# ----------------------------------------------------------------------------- client cost


def _tree(root: int) -> list[int]:
    """The pids of a process and all its descendants, from /proc/<pid>/task/<tid>/children."""
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return pids


def _usage(pids: list[int]) -> tuple[float, int]:
    """CPU seconds (own and reaped children's, user + sys) and summed PSS bytes of live pids."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, pss = 0.0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            cpu += sum(int(v) for v in fields[11:15]) / tick  # utime stime cutime cstime
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
        except (OSError, IndexError, ValueError):
            pass
    return cpu, pss


@dataclass
class Cost:
    cpu_s: float = 0.0  # the whole tree, from wait4
    window_cpu_s: float | None = None  # within the load window, from the samples
    wall_s: float = 0.0
    peak_pss_mib: float = 0.0  # the tree's summed PSS, highest sample
    max_rss_mib: float = 0.0  # the largest single process of the tree (ru_maxrss)
    max_processes: int = 0  # the most processes the tree had at once, sampled
    returncode: int = 0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, tree CPU s)

    def cpu_at(self, t: float) -> float | None:
        """Tree CPU seconds at monotonic time t, interpolated between samples."""
        s = self.samples
        if not s or t < s[0][0] or t > s[-1][0]:
            return None
        for (t0, c0), (t1, c1) in zip(s, s[1:]):
            if t0 <= t <= t1:
                return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
        return s[-1][1]


def run_measured(command: list[str], log: Path, env: dict[str, str] | None = None, every_s: float = 0.25) -> Cost:
    """Run a client process (its own process group) to its end; sample its tree's CPU and
    memory every `every_s`, and take its final CPU and largest RSS from wait4."""
    cost = Cost()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    started = time.monotonic()
    ended = threading.Event()

    def sample() -> None:
        while not ended.is_set():
            pids = _tree(proc.pid)
            cpu, pss = _usage(pids)
            cost.samples.append((time.monotonic(), cpu))
            cost.max_processes = max(cost.max_processes, len(pids))
            cost.peak_pss_mib = max(cost.peak_pss_mib, pss / MIB)
            ended.wait(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = cost.returncode = os.waitstatus_to_exitcode(status)
    finally:
        ended.set()
        sampler.join(5)
        stop(proc)
    exited = time.monotonic()
    cost.wall_s = exited - started
    cost.cpu_s = rusage.ru_utime + rusage.ru_stime
    cost.samples = [(started, 0.0), *cost.samples, (exited, cost.cpu_s)]  # the ends: nothing yet, all of it
    cost.max_rss_mib = rusage.ru_maxrss / 1024  # KiB on Linux
    return cost


# ----------------------------------------------------------------------------- runs


@dataclass
class Run:
    client: str
    sent: int = 0
    ok: int = 0
    send_rate: float = 0.0
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    ttft: list[float] = field(default_factory=list)  # the client's own, s, answered requests
    parts: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in PARTS})
    stamps_note: str = ""
    window: tuple[float, float] | None = None  # monotonic s: first send, last end
    cost: Cost = field(default_factory=Cost)

    def add_parts(self, record: RequestRecord) -> None:
        for name, value in (ttft_parts(record) or {}).items():
            self.parts[name].append(value)

    def finish(self, sends: list[float]) -> None:
        sends = sorted(sends)
        self.sent = len(sends)
        self.send_rate = (len(sends) - 1) / (sends[-1] - sends[0]) if len(sends) > 1 and sends[-1] > sends[0] else 0.0
        if self.window:
            start, end = (self.cost.cpu_at(t) for t in self.window)
            self.cost.window_cpu_s = None if start is None or end is None else end - start


def _median(values: list[float]) -> float | None:
    return percentile(values, 50) if values else None


def run_ours(url: str, rate: float, seconds: float, workdir: Path, sniffer: StampSniffer | None, k: int) -> Run:
    out = workdir / f"ours-{k}.json"
    command = [
        *CAMPAIGN,
        "probe",
        url,
        "--probe",
        "load",
        "--runtime",
        "simulator",
        "--profile",
        "constant",
        "--rate",
        f"{rate:g}",
        "--duration",
        f"{seconds:g}",
        "--prompt-tokens",
        str(PROMPT_TOKENS),
        "--max-tokens",
        str(OUTPUT_TOKENS),
        "--json",
        str(out),
    ]
    run = Run("ours")
    run.cost = run_measured(command, workdir / f"ours-{k}.log")
    if run.cost.returncode or not out.exists():
        raise SystemExit(f"our probe failed ({run.cost.returncode}): {(workdir / f'ours-{k}.log').read_text()[-800:]}")
    rows = json.loads(out.read_text())["requests"]
    fields_ = RequestRecord.__dataclass_fields__
    sends, ends, prompts, outputs, seen = [], [], [], [], 0
    sniffed = {tuple(s.values()) for s in sniffer.stamps.values()} if sniffer else set()
    for row in rows:
        record = RequestRecord(**{key: value for key, value in row.items() if key in fields_})
        if not record.send_ns:
            continue  # never sent
        sends.append(record.send_ns / NS)
        ends.append((record.end_ns or record.send_ns) / NS)
        ttft = ttft_s(record)
        if ttft is None:
            continue
        run.ok += 1
        run.ttft.append(ttft)
        run.add_parts(record)
        usage = record.usage or {}
        prompts.append(usage.get("prompt_tokens"))
        outputs.append(usage.get("completion_tokens"))
        stamps = (record.extra or {}).get("x_sim") or {}
        seen += (stamps.get("received_ns"), stamps.get("first_write_ns")) in sniffed
    run.window = (min(sends), max(ends)) if sends else None
    run.prompt_tokens = _median([p for p in prompts if p is not None])
    run.output_tokens = _median([o for o in outputs if o is not None])
    run.stamps_note = f"in stream: {len(run.parts['server TTFT'])}/{run.ok}"
    if sniffer:
        run.stamps_note += f"; sniffer saw the same {seen}"
    run.finish(sends)
    return run


def clock_offset() -> float:
    """time.time() - time.perf_counter() (CLOCK_REALTIME - CLOCK_MONOTONIC on Linux), from
    the tightest of a few paired readings."""
    best = None
    for _ in range(20):
        a = time.perf_counter()
        wall = time.time()
        b = time.perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) / 2)
    assert best is not None
    return best[1]


def run_guidellm(
    guidellm: str,
    tokenizer: Path,
    url: str,
    rate: float,
    seconds: float,
    workdir: Path,
    sniffer: StampSniffer | None,
    server_ttft: list[float],
    k: int,
) -> Run:
    out = workdir / f"guidellm-{k}.json"
    command = guidellm_command(guidellm, tokenizer, url, rate, seconds, out)
    run = Run("GuideLLM")
    offset = clock_offset()
    run.cost = run_measured(command, workdir / f"guidellm-{k}.log", env=OFFLINE)
    drift_ms = (clock_offset() - offset) * 1000
    if run.cost.returncode or not out.exists():
        raise SystemExit(
            f"GuideLLM failed ({run.cost.returncode}): {(workdir / f'guidellm-{k}.log').read_text()[-1500:]}"
        )
    bench = json.loads(out.read_text())["benchmarks"][0]
    sends, ends, prompts, outputs, matched = [], [], [], [], 0
    for status in ("successful", "incomplete", "errored"):
        for req in bench["requests"].get(status) or []:
            timings = req["info"]["timings"]
            if timings.get("request_start") is None:
                continue
            sends.append(timings["request_start"] - offset)
            ends.append((timings.get("request_end") or timings.get("resolve_end") or timings["request_start"]) - offset)
            if status != "successful" or req.get("time_to_first_token_ms") is None:
                continue
            run.ok += 1
            run.ttft.append(req["time_to_first_token_ms"] / 1000)
            prompts.append(req.get("prompt_tokens"))
            outputs.append(req.get("output_tokens"))
            stamps = sniffer.stamps.get(req.get("response_id") or "") if sniffer else None
            if stamps and timings.get("first_token_iteration") is not None:
                matched += 1
                send_ns = round((timings["request_start"] - offset) * NS)
                first_ns = round((timings["first_token_iteration"] - offset) * NS)
                run.add_parts(
                    RequestRecord(send_ns=send_ns, event_ns=[first_ns], event_kind=[CONTENT], extra={"x_sim": stamps})
                )
    if matched:
        run.stamps_note = f"sniffed by response id: {matched}/{run.ok}; clocks moved {drift_ms:+.3f} ms"
    else:
        run.parts["server TTFT"] = list(server_ttft)
        run.parts["client - server"] = []
        run.stamps_note = "none per request: server TTFT is that of our runs"
    run.window = (min(sends), max(ends)) if sends else None
    run.prompt_tokens = _median([p for p in prompts if p is not None])
    run.output_tokens = _median([o for o in outputs if o is not None])
    run.finish(sends)
    return run


def guidellm_command(guidellm: str, tokenizer: Path, url: str, rate: float, seconds: float, out: Path) -> list[str]:
    return [
        guidellm,
        "run",
        "--backend",
        f"kind=openai_http,target={url}",
        "--profile",
        f"kind=constant,rate={rate:g}",
        "--constraint",
        f"kind=max_duration,seconds={seconds:g}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
        "--tokenizer",
        f"kind=hf_auto,model={tokenizer}",
        "--output",
        f"kind=json,path={out}",
        "--disable-console-interactive",
    ]


# The tokenizer GuideLLM sizes its prompts with, built by GuideLLM's own Python (its venv
# has `tokenizers`, `transformers` and `faker`): one token per word of Faker's word list
# (capitalised too), per number and per punctuation mark, split like the `Whitespace`
# pre-tokenizer; decoding joins tokens with single spaces, so a prompt of N tokens is N
# whitespace words, N tokens to the simulator.
_TOKENIZER_SCRIPT = r"""
import json, sys
from pathlib import Path
from faker.providers.lorem.en_US import Provider
from tokenizers import Tokenizer, models, pre_tokenizers

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
vocab = {"[UNK]": 0}
for word in [*Provider.word_list, *(w.capitalize() for w in Provider.word_list), *map(str, range(10000)), *".,;:!?'-\"()"]:
    vocab.setdefault(word, len(vocab))
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer.save(str(out / "tokenizer.json"))
config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1000000, "clean_up_tokenization_spaces": False}
(out / "tokenizer_config.json").write_text(json.dumps(config))

from faker import Faker
from transformers import AutoTokenizer

loaded = AutoTokenizer.from_pretrained(str(out))
ids = loaded.encode("7 12 " + Faker().text(max_nb_chars=4000))
assert len(loaded.decode(ids[:256], skip_special_tokens=True).split()) == 256, "a token is not one word"
print(len(vocab))
"""


def ensure_tokenizer(guidellm: str) -> Path:
    """A local tokenizer folder beside GuideLLM's venv (built once), for `--tokenizer`."""
    venv = Path(guidellm).resolve().parent.parent
    folder = venv / "wordlevel-tokenizer"
    if not (folder / "tokenizer.json").exists():
        python = Path(guidellm).parent / "python"
        done = subprocess.run(
            [str(python), "-c", _TOKENIZER_SCRIPT, str(folder)],
            capture_output=True,
            text=True,
            env={**os.environ, **OFFLINE},
        )
        if done.returncode:
            raise SystemExit(f"could not build a tokenizer for GuideLLM in {folder}: {done.stderr[-800:]}")
    return folder


# ----------------------------------------------------------------------------- printing


def _ms(value: float | None, width: int = 7) -> str:
    return f"{'-':>{width}}" if value is None else f"{value * 1000:{width}.1f}"


def _pct(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


HEADER = (
    f"{'run':>3} {'client':8} {'sent':>4} {'ok':>4} {'sent/s':>6} {'in/out tok':>10} | {'TTFT p50':>8} {'p99':>7} "
    f"{'srv p50':>7} {'cli-srv p50':>11} {'p99':>7} {'send p50':>8} {'recv p50':>8} | {'CPU s':>6} {'in load':>7} "
    f"{'wall s':>6} {'PSS MiB':>7} {'maxRSS':>6}"
)


def print_run(k: int, run: Run) -> None:
    p, c = run.parts, run.cost
    tokens = f"{run.prompt_tokens or 0:.0f}/{run.output_tokens or 0:.0f}"
    window = "-" if c.window_cpu_s is None else f"{c.window_cpu_s:.2f}"
    print(
        f"{k:3d} {run.client:8} {run.sent:4d} {run.ok:4d} {run.send_rate:6.2f} {tokens:>10} | {_ms(_pct(run.ttft, 50), 8)} "
        f"{_ms(_pct(run.ttft, 99))} {_ms(_pct(p['server TTFT'], 50))} {_ms(_pct(p['client - server'], 50), 11)} "
        f"{_ms(_pct(p['client - server'], 99))} {_ms(_pct(p['send side'], 50), 8)} {_ms(_pct(p['receive side'], 50), 8)} | "
        f"{c.cpu_s:6.2f} {window:>7} {c.wall_s:6.1f} {c.peak_pss_mib:7.0f} {c.max_rss_mib:6.0f}",
        flush=True,
    )
    print(f"{'':13}stamps: {run.stamps_note}; client processes: {c.max_processes}", flush=True)


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


SUMMARY = (  # label, how to get it from a run, unit scale, ratio wanted
    ("achieved send rate, req/s", lambda r: r.send_rate, 1, False),
    ("TTFT p50, ms (client's own)", lambda r: _pct(r.ttft, 50), 1000, False),
    ("TTFT p99, ms", lambda r: _pct(r.ttft, 99), 1000, False),
    ("server's own TTFT p50, ms", lambda r: _pct(r.parts["server TTFT"], 50), 1000, False),
    ("server's own TTFT p99, ms", lambda r: _pct(r.parts["server TTFT"], 99), 1000, False),
    ("client - server p50, ms", lambda r: _pct(r.parts["client - server"], 50), 1000, False),
    ("client - server p99, ms", lambda r: _pct(r.parts["client - server"], 99), 1000, False),
    ("  send side p50, ms", lambda r: _pct(r.parts["send side"], 50), 1000, False),
    ("  receive side p50, ms", lambda r: _pct(r.parts["receive side"], 50), 1000, False),
    ("CPU s, whole process tree", lambda r: r.cost.cpu_s, 1, True),
    ("CPU s within the load window", lambda r: r.cost.window_cpu_s, 1, True),
    (
        "CPU s outside it (start, end)",
        lambda r: None if r.cost.window_cpu_s is None else r.cost.cpu_s - r.cost.window_cpu_s,
        1,
        True,
    ),
    (
        "CPU ms per answered request, in load",
        lambda r: None if r.cost.window_cpu_s is None or not r.ok else r.cost.window_cpu_s / r.ok,
        1000,
        True,
    ),
    ("wall s of the client process", lambda r: r.cost.wall_s, 1, True),
    ("peak memory, MiB (tree PSS)", lambda r: r.cost.peak_pss_mib, 1, True),
    ("largest process peak RSS, MiB", lambda r: r.cost.max_rss_mib, 1, True),
)


def print_summary(runs: list[Run]) -> None:
    ours = [r for r in runs if r.client == "ours"]
    theirs = [r for r in runs if r.client == "GuideLLM"]
    print(f"\nmeans over runs ({len(ours)} ours, {len(theirs)} GuideLLM)")
    print(f"{'':38} {'ours':>9} {'GuideLLM':>9} {'ours/GuideLLM':>14}")
    means: dict[str, tuple[float | None, float | None]] = {}
    for label, get, scale, ratio in SUMMARY:
        a, b = _mean([get(r) for r in ours]), _mean([get(r) for r in theirs])
        means[label] = (a, b)
        cells = [f"{'-':>9}" if v is None else f"{v * scale:9.2f}" for v in (a, b)]
        share = f"{a / b:14.2f}" if ratio and a is not None and b else ""
        print(f"{label:38} {cells[0]} {cells[1]} {share}")
    if not theirs:
        return
    (a_ttft, b_ttft), (a_srv, b_srv) = means["TTFT p50, ms (client's own)"], means["server's own TTFT p50, ms"]
    (a_cs, b_cs) = means["client - server p50, ms"]
    (a_send, b_send), (a_recv, b_recv) = means["  send side p50, ms"], means["  receive side p50, ms"]
    if None in (a_ttft, b_ttft, a_srv, b_srv):
        return
    if a_cs is None or b_cs is None:  # GuideLLM without stamps: its server TTFT is borrowed from our runs
        print(
            f"\nTTFT p50 - the server's TTFT p50 of our runs: GuideLLM {(b_ttft - a_srv) * 1000:+.2f} ms, "
            f"ours {(a_ttft - a_srv) * 1000:+.2f} ms (no per-request split for GuideLLM)"
        )
        return
    print(
        f"\nTTFT p50, GuideLLM - ours: {(b_ttft - a_ttft) * 1000:+.2f} ms, made of (differences of p50s, which add up only roughly):"
    )
    print(
        f"  the server's own TTFT   {(b_srv - a_srv) * 1000:+8.2f} ms   (what the server did differently for the two clients)"
    )
    if None not in (a_send, b_send, a_recv, b_recv):
        print(
            f"  send side               {(b_send - a_send) * 1000:+8.2f} ms   (client stamp of the send -> server handler start)"
        )
        print(
            f"  receive side            {(b_recv - a_recv) * 1000:+8.2f} ms   (server's first-token write -> client stamp)"
        )
    closer = "ours" if abs(a_cs) < abs(b_cs) else "GuideLLM"
    print(
        f"closer to the server's own TTFT at p50: {closer} (client - server: ours {a_cs * 1000:+.2f} ms, "
        f"GuideLLM {b_cs * 1000:+.2f} ms)"
    )


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs of each client, alternating (default 2)")
    ap.add_argument("--rate", type=float, default=2.0, help="requests per second, constant (default 2)")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of load per run (default 20)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (clients' JSON and logs)")
    args = ap.parse_args(argv)
    from arms.server import free_port

    guidellm = os.environ.get("GUIDELLM") or shutil.which("guidellm") or ""
    if not (Path(guidellm).is_file() and os.access(guidellm, os.X_OK)):
        print(f"GuideLLM not found at {guidellm} (set $GUIDELLM to its executable): running our side alone")
        guidellm = ""
    tokenizer = ensure_tokenizer(guidellm) if guidellm else None

    workdir = Path(tempfile.mkdtemp(prefix="guidellm-side-by-side-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    simulator = start_simulator(port, workdir / "simulator.log")
    sniffer = None
    runs: list[Run] = []
    try:
        sniffer = StampSniffer.open(port)
        warm_up(url)
        print(f"simulator {url}: 4 slots, time scale 1, profile {json.dumps(SIM_PROFILE)}")
        print(
            f"load: constant {args.rate:g} req/s for {args.seconds:g} s, {PROMPT_TOKENS} prompt words, {OUTPUT_TOKENS} output tokens; "
            f"load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        )
        if sniffer is None:
            print("no packet socket (needs root or CAP_NET_RAW): GuideLLM's requests get no per-request server stamps")
        if guidellm:
            print(
                "GuideLLM: "
                + " ".join(
                    guidellm_command(
                        guidellm, tokenizer or Path(), url, args.rate, args.seconds, workdir / "guidellm-K.json"
                    )
                )
            )
        print("\n" + HEADER)
        for k in range(1, args.runs + 1):
            ours = run_ours(url, args.rate, args.seconds, workdir, sniffer, k)
            runs.append(ours)
            print_run(k, ours)
            if guidellm and tokenizer:
                pooled = [v for r in runs if r.client == "ours" for v in r.parts["server TTFT"]]
                theirs = run_guidellm(guidellm, tokenizer, url, args.rate, args.seconds, workdir, sniffer, pooled, k)
                runs.append(theirs)
                print_run(k, theirs)
        print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
        print_summary(runs)
    finally:
        if sniffer:
            sniffer.close()
        stop(simulator)
        if args.keep:
            print(f"\nkept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
