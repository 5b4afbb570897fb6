"""How accurately does a streaming client see token times? A benchmark, not a test.

A scripted loopback server (its own process) streams SSE tokens on a fixed schedule and
writes into each token the time it was scheduled and the time it was actually written
(CLOCK_MONOTONIC, which both processes share). Each client stamps every event; the
error of a stamp is `client stamp - scheduled time`, so a late stamp means a wrong TTFT
or ITL in a real measurement. The server's own send lag (`written - scheduled`) is
printed beside it, so server lateness is not blamed on the client.

Clients, each with the same requests in the same run:
  ours         arms.client.stream_chat (httpx API, timed aiohttp transport)
  aiohttp      a plain aiohttp client reading lines and parsing JSON as they come
  httpx        a plain httpx.AsyncClient with its default transport, same loop

Printed per client and concurrency: TTFT error p50/p99 (first token), ITL error p50/p99
(|measured gap - scheduled gap|), the send-stamp gap (server receipt - client send stamp),
events per wall second, events per client CPU second (capacity), and ratios to ours.

    python benchmarks/client_accuracy.py                    # 1, 16, 64, 256 streams
    python benchmarks/client_accuracy.py --streams 64 --tokens 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NS = 1_000_000_000


# ----------------------------------------------------------------------------- server


class _StreamProtocol(asyncio.Protocol):
    """A minimal HTTP/1.1 keep-alive server that answers every POST with a scheduled SSE stream."""

    def __init__(self, scheduler: _Scheduler):
        self.scheduler = scheduler
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        recv_ns = time.perf_counter_ns()
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            self.scheduler.start(self, json.loads(body or b"{}"), recv_ns)


class _Scheduler:
    def __init__(self, ttft_ms: float, itl_ms: float):
        self.ttft_ns = int(ttft_ms * 1e6)
        self.itl_ns = int(itl_ms * 1e6)
        self.loop = asyncio.get_running_loop()

    def start(self, proto: _StreamProtocol, body: dict, recv_ns: int) -> None:
        assert proto.transport is not None
        proto.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        n = int(body.get("max_tokens", 64))
        first = recv_ns + self.ttft_ns
        self._write(proto, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "recv": recv_ns})
        self.loop.create_task(self._stream(proto, n, first))

    @staticmethod
    def _write(proto: _StreamProtocol, obj: dict | None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
        if proto.transport is not None and not proto.transport.is_closing():
            proto.transport.write(b"%x\r\n%s\r\n" % (len(data), data))

    async def _stream(self, proto: _StreamProtocol, n: int, first: int) -> None:
        for k in range(n):
            sched = first + k * self.itl_ns
            delay = (sched - time.perf_counter_ns()) / NS
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.perf_counter_ns()
            self._write(proto, {"choices": [{"index": 0, "delta": {"content": f" {k}:{sched}:{sent}"}}]})
        self._write(proto, {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}})
        self._write(proto, None, b"data: [DONE]\n\n")
        if proto.transport is not None and not proto.transport.is_closing():
            proto.transport.write(b"0\r\n\r\n")


async def _serve(port: int, ttft_ms: float, itl_ms: float) -> None:
    scheduler = _Scheduler(ttft_ms, itl_ms)
    server = await asyncio.get_running_loop().create_server(lambda: _StreamProtocol(scheduler), "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


# ----------------------------------------------------------------------------- clients


@dataclass
class Stream:
    send_ns: int = 0
    recv_ns: int = 0
    stamps: list[tuple[int, int, int, int]] = field(default_factory=list)  # (k, sched, sent, client stamp)
    error: str | None = None


def _tokens(text: str) -> list[tuple[int, int, int]]:
    out = []
    for part in text.split():
        k, sched, sent = part.split(":")
        out.append((int(k), int(sched), int(sent)))
    return out


async def run_ours(url: str, streams: int, tokens: int) -> list[Stream]:
    from arms.client import make_http_client, stream_chat
    from arms.metrics import CONTENT

    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "max_tokens": tokens}
    async with make_http_client(url, streams) as http:
        records = await asyncio.gather(*(stream_chat(http, body, read_timeout=60) for _ in range(streams)))
    out = []
    for rec in records:
        s = Stream(send_ns=rec.send_ns, error=rec.error)
        times = [t for t, kind in zip(rec.event_ns, rec.event_kind) if kind == CONTENT]
        s.stamps = [(k, sched, sent, t) for (k, sched, sent), t in zip(_tokens(rec.text), times)]
        out.append(s)
    return out


async def run_aiohttp(url: str, streams: int, tokens: int) -> list[Stream]:
    import aiohttp

    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "max_tokens": tokens}

    async def one(session: aiohttp.ClientSession) -> Stream:
        s = Stream(send_ns=time.perf_counter_ns())
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            async for line in resp.content:
                t = time.perf_counter_ns()
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                _take_event(s, line[6:], t)
        return s

    connector = aiohttp.TCPConnector(limit=streams + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        return list(await asyncio.gather(*(one(session) for _ in range(streams))))


async def run_httpx(url: str, streams: int, tokens: int) -> list[Stream]:
    import httpx

    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "max_tokens": tokens}

    async def one(client: httpx.AsyncClient) -> Stream:
        s = Stream(send_ns=time.perf_counter_ns())
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                t = time.perf_counter_ns()
                if not line.startswith("data: ") or line.startswith("data: [DONE]"):
                    continue
                _take_event(s, line[6:], t)
        return s

    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        return list(await asyncio.gather(*(one(client) for _ in range(streams))))


def _take_event(s: Stream, data: bytes | str, t: int) -> None:
    """What a typical client does with each event as it comes: parse it, keep the tokens."""
    chunk = json.loads(data)
    if "recv" in chunk:
        s.recv_ns = chunk["recv"]
    for choice in chunk.get("choices", []):
        content = choice.get("delta", {}).get("content")
        if content:
            ((k, sched, sent),) = _tokens(content)
            s.stamps.append((k, sched, sent, t))


CLIENTS = {"ours": run_ours, "aiohttp": run_aiohttp, "httpx": run_httpx}


# ----------------------------------------------------------------------------- stats


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass
class Result:
    client: str
    streams: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    server_lag_p99_ms: float
    events: int
    wall_s: float
    cpu_s: float
    errors: int

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0

    @property
    def capacity(self) -> float:
        return self.events / self.cpu_s if self.cpu_s else 0.0


def measure(client: str, url: str, streams: int, tokens: int) -> Result:
    fn = CLIENTS[client]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = asyncio.run(fn(url, streams, tokens))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    ttft, itl, lag = [], [], []
    events = 0
    for s in results:
        if not s.stamps:
            continue
        events += len(s.stamps)
        k0, sched0, sent0, t0 = s.stamps[0]
        ttft.append((t0 - sched0) / 1e6)
        for (_, sa, _, ta), (_, sb, sentb, tb) in zip(s.stamps, s.stamps[1:]):
            itl.append(abs((tb - ta) - (sb - sa)) / 1e6)
        lag.extend((sent - sched) / 1e6 for _, sched, sent, _ in s.stamps)
    return Result(
        client, streams, pct(ttft, 50), pct(ttft, 99), pct(itl, 50), pct(itl, 99), pct(lag, 99),
        events, wall, cpu, sum(1 for s in results if s.error or not s.stamps),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--streams", type=int, nargs="*", default=[1, 16, 64, 256])
    parser.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--clients", nargs="*", default=list(CLIENTS))
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.serve, args.ttft_ms, args.itl_ms))
        return 0

    from arms.server import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms)],
        stdout=subprocess.PIPE, start_new_session=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        print(f"schedule: TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, {args.tokens} tokens per stream; server in its own process")
        header = f"{'client':8} {'streams':>7} {'TTFT err p50':>12} {'p99':>8} {'ITL err p50':>11} {'p99':>8} {'srv lag p99':>11} {'events/s':>9} {'ev/CPU-s':>9} {'errors':>6}"
        print(header)
        rows: dict[tuple[str, int], Result] = {}
        for streams in args.streams:
            for client in args.clients:
                r = measure(client, url, streams, args.tokens)
                rows[(client, streams)] = r
                print(
                    f"{client:8} {streams:7d} {r.ttft_p50_ms:10.2f}ms {r.ttft_p99_ms:6.2f}ms {r.itl_p50_ms:9.2f}ms {r.itl_p99_ms:6.2f}ms"
                    f" {r.server_lag_p99_ms:9.2f}ms {r.events_per_s:9.0f} {r.capacity:9.0f} {r.errors:6d}",
                    flush=True,
                )
        if "ours" in args.clients:
            print("\nratios (other / ours): p99 TTFT error, p99 ITL error, events per CPU-second (ours / other)")
            for streams in args.streams:
                ours = rows[("ours", streams)]
                for client in args.clients:
                    if client == "ours":
                        continue
                    other = rows[(client, streams)]
                    print(
                        f"  {streams:4d} streams vs {client:8}: TTFT p99 x{other.ttft_p99_ms / max(ours.ttft_p99_ms, 1e-6):.1f}, "
                        f"ITL p99 x{other.itl_p99_ms / max(ours.itl_p99_ms, 1e-6):.1f}, capacity x{ours.capacity / max(other.capacity, 1e-6):.2f}"
                    )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
