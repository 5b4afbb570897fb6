"""The embedded serving simulator as a process: started with its CLI flags, asked over
HTTP, faults injected, every process group killed after."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.paths import ROOT
from tests.unit.test_simulator import (  # noqa: F401 - helpers and fixtures
    FAST,
    StreamResult,
    conversation,
    stream_chat,
    words,
)

REPO_ROOT = ROOT


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


@dataclass
class Sim:
    """A running simulator process."""

    proc: subprocess.Popen[bytes]
    url: str
    stdout_path: Path
    stderr_path: Path
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=10.0)

    def metrics(self) -> dict[str, float]:
        text = self.client.get("/metrics").text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def tokenize(self, messages: list[dict[str, Any]]) -> int:
        return self.client.post("/tokenize", json={"messages": messages}).json()["count"]

    def chat(self, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
        return self.client.post("/v1/chat/completions", json={"messages": messages, **extra})

    def stderr(self) -> str:
        return self.stderr_path.read_text()


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """Factory: start a simulator process with CLI flags; every process group is killed after."""
    sims: list[Sim] = []

    def start(*flags: str, wait_healthy: bool = True) -> Sim:
        port = _free_port()
        n = len(sims)
        out, err = tmp_path / f"sim{n}.out", tmp_path / f"sim{n}.err"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(
                [sys.executable, "-m", "arms.simulator", "--port", str(port), *flags],
                stdout=fo,
                stderr=fe,
                cwd=REPO_ROOT,
                env=_env(),
                start_new_session=True,
            )
        sim = Sim(proc, f"http://127.0.0.1:{port}", out, err)
        sims.append(sim)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return sim
            if wait_healthy:
                try:
                    if sim.client.get("/health", timeout=0.5).status_code == 200:
                        return sim
                except httpx.TransportError:
                    pass
            elif "listening" in out.read_text():
                return sim
            time.sleep(0.03)
        raise AssertionError(f"simulator did not come up: {err.read_text()}")

    yield start
    for sim in sims:
        sim.client.close()
        _kill_group(sim.proc)


def test_returning_conversation_resumes_in_its_slot(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "2", "--cached-tokens-style", "llamacpp", *FAST)
    conv = conversation("a", 500)
    first = stream_chat(sim.url, conv, max_tokens=8, temperature=0)
    assert first.usage()["prompt_tokens_details"]["cached_tokens"] == 0
    n_first = sim.tokenize(conv)
    assert first.usage()["prompt_tokens"] == n_first

    conv2 = conv + [{"role": "assistant", "content": first.text}, {"role": "user", "content": words("tail", 20)}]
    second = stream_chat(sim.url, conv2, max_tokens=8, temperature=0)
    usage = second.usage()
    assert usage["prompt_tokens"] == sim.tokenize(conv2)
    assert usage["prompt_tokens_details"]["cached_tokens"] == n_first + 8

    # A cold prompt of the same length lands in the other (empty) slot and pays it all.
    cold_conv = conversation("z", usage["prompt_tokens"] - 26)
    assert sim.tokenize(cold_conv) == usage["prompt_tokens"]
    cold = stream_chat(sim.url, cold_conv, max_tokens=8)
    assert cold.usage()["prompt_tokens_details"]["cached_tokens"] == 0
    # The server's own prefill time (llama-server's timings.prompt_ms, in model time):
    # the client's TTFT adds HTTP and scheduling noise that a busy machine inflates.
    warm_ms, cold_ms = (r.final()["timings"]["prompt_ms"] for r in (second, cold))
    assert warm_ms < cold_ms / 3, (warm_ms, cold_ms)
    states = sim.client.get("/slots").json()
    assert [s["state"] for s in states] == ["idle", "idle"]
    assert sorted(s["n_tokens"] for s in states) == sorted(
        [usage["prompt_tokens"] + 8, cold.usage()["prompt_tokens"] + 8]
    )


def test_prefix_cache_hits_when_conversations_outnumber_slots(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "1", "--prefix-cache-tokens", "100000", *FAST)
    a, b = conversation("a", 100), conversation("b", 100)
    a1 = sim.chat(a, max_tokens=6).json()
    sim.chat(b, max_tokens=6)  # b takes the only slot; a's state goes to the cache
    a2_messages = a + [a1["choices"][0]["message"], {"role": "user", "content": "go on"}]
    a2 = sim.chat(a2_messages, max_tokens=6).json()
    assert a2["usage"]["prompt_tokens_details"]["cached_tokens"] == sim.tokenize(a) + 6
    m = sim.metrics()
    assert m["sim_cache_lookups_total"] == 3
    assert m["sim_cache_hits_total"] == 1
    assert m["sim_prefix_cache_tokens_used"] > 0


def test_prefix_cache_idle_when_every_conversation_has_a_slot(start_sim: Callable[..., Sim]) -> None:
    """Seed 000: three conversations on four slots -> lookups, zero hits, full reuse."""
    sim = start_sim("--slots", "4", "--prefix-cache-tokens", "100000", *FAST)
    convs = [conversation(name, 80) for name in ("a", "b", "c")]
    replies = [sim.chat(c, max_tokens=5).json() for c in convs]
    for conv, reply in zip(convs, replies):
        follow = conv + [reply["choices"][0]["message"], {"role": "user", "content": "next step"}]
        usage = sim.chat(follow, max_tokens=5).json()["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == sim.tokenize(conv) + 5
    m = sim.metrics()
    assert m["sim_cache_lookups_total"] == 6
    assert m["sim_cache_hits_total"] == 0


def test_requests_queue_when_all_slots_are_busy(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "1", "--decode-tps", "100", "--prefill-tps", "10000", "--step-overhead-s", "0.0")
    results: list[StreamResult] = []
    go = threading.Barrier(3)

    def run(i: int) -> None:
        go.wait()
        time.sleep(0.05 * i)
        results.append(stream_chat(sim.url, conversation(f"q{i}", 30), max_tokens=25))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    max_deferred = 0.0
    while any(t.is_alive() for t in threads):
        max_deferred = max(max_deferred, sim.metrics()["sim_requests_deferred"])
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert max_deferred >= 1
    # Order by arrival at the server (the engine numbers requests as they come).
    results.sort(key=lambda r: int(r.events[0]["id"].rsplit("-", 1)[1]))
    firsts = [r.first_at for r in results]
    assert all(t is not None for t in firsts)
    # Each request holds the only slot 0.25 s (25 tokens at 100/s), so first tokens come a
    # whole reply apart; on free slots they would come 0.05 s apart, as the requests were
    # sent. Compared by when first tokens arrive, not by TTFT, which also counts how late
    # a busy machine let each client thread send.
    gaps = [b - a for a, b in zip(firsts, firsts[1:])]  # type: ignore[operator]
    assert min(gaps) > 0.15, gaps
    assert sim.metrics()["sim_requests_deferred"] == 0


def test_speculative_decoding_emits_multi_token_events(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--draft-k", "4", "--acceptance", "0.8", *FAST)
    result = stream_chat(sim.url, conversation("s", 20), max_tokens=40)
    chunks = result.content_events()
    assert max(len(c.split()) for c in chunks) > 1
    assert len(result.text.split()) == 40
    assert len(chunks) < 40
    m = sim.metrics()
    assert m["sim_draft_tokens_total"] > 0
    assert 0 < m["sim_draft_accepted_tokens_total"] <= m["sim_draft_tokens_total"]
    assert m["sim_generation_tokens_total"] == 40


@pytest.mark.parametrize("style", ["openai", "llamacpp", "omlx", "dspark"])
def test_cached_tokens_style(start_sim: Callable[..., Sim], style: str) -> None:
    sim = start_sim("--cached-tokens-style", style, *FAST)
    conv = conversation("c", 40)
    n_prompt = sim.tokenize(conv)
    sim.chat(conv, max_tokens=4)
    body = sim.chat(conv, max_tokens=4).json()  # identical prompt: all but the last token reused
    streamed = stream_chat(sim.url, conv, max_tokens=4)
    expected = n_prompt - 1
    final, usage = streamed.final(), streamed.usage()
    if style == "openai":
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == expected
        assert usage["prompt_tokens_details"]["cached_tokens"] == expected
    elif style == "llamacpp":
        for timings in (body["timings"], final["timings"]):
            assert timings["cache_n"] == expected
            assert timings["prompt_n"] == 1
            assert timings["predicted_n"] == 4
            assert timings["prompt_ms"] >= 0 and timings["predicted_ms"] > 0
        assert usage["prompt_tokens_details"]["cached_tokens"] == expected
    elif style == "omlx":
        assert body["usage"]["cached_tokens"] == expected
        assert usage["cached_tokens"] == expected
        assert "prompt_tokens_details" not in usage
    else:
        assert body["x_mlx_dspark"]["cached_tokens"] == expected
        assert final["x_mlx_dspark"] == {
            "mode": "baseline",
            "accept_len": 1.0,
            "target_forwards": 4,
            "prompt_tokens": n_prompt,
            "cached_tokens": expected,
            "completion_tokens": 4,
        }
        assert "prompt_tokens_details" not in usage


def test_endpoints_startup_delay_and_profile_json(start_sim: Callable[..., Sim]) -> None:
    profile = json.dumps({"slots": 3, "model": "json-model", "startup_delay_s": 1.0})
    sim = start_sim("--profile-json", profile, "--slots", "2", wait_healthy=False)
    assert sim.proc.poll() is None, sim.stderr()
    assert "simulator listening on http://127.0.0.1:" in sim.stdout_path.read_text()
    resp = sim.client.get("/health")
    assert resp.status_code == 503 and resp.json() == {"status": "loading"}
    deadline = time.monotonic() + 5
    while sim.client.get("/health").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sim.client.get("/health").json() == {"status": "ok"}
    model = sim.client.get("/v1/models").json()["data"][0]
    assert model["id"] == "json-model" and model["owned_by"] == "simulator"
    assert model["meta"] == {"simulated": True, "build": "1", "slots": 2, "ctx_size": 32768, "time_scale": 1.0}
    slots = sim.client.get("/slots").json()
    assert slots == [{"id": i, "state": "idle", "n_ctx": 32768, "n_tokens": 0} for i in range(2)]
    tok = sim.client.post("/tokenize", json={"content": "one two  three"}).json()
    assert tok == {"tokens": ["one", "two", "three"], "count": 3}
    text = sim.client.get("/metrics").text
    for name in (
        "requests_total",
        "prompt_tokens_total",
        "prompt_tokens_cached_total",
        "generation_tokens_total",
        "cache_lookups_total",
        "cache_hits_total",
        "draft_tokens_total",
        "draft_accepted_tokens_total",
        "errors_total",
    ):
        assert f"# TYPE sim_{name} counter" in text
    for name in ("requests_deferred", "slots_busy", "memory_bytes", "prefix_cache_tokens_used"):
        assert f"# TYPE sim_{name} gauge" in text
    assert sim.metrics()["sim_memory_bytes"] == 2_000_000_000 + 2 * 940_000_000
    # Greedy answers repeat exactly.
    conv = conversation("g", 5)
    texts = {sim.chat(conv, temperature=0, max_tokens=5).json()["choices"][0]["message"]["content"] for _ in range(2)}
    assert len(texts) == 1
    # Clean shutdown on SIGTERM.
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=10) == 0


def test_bad_requests_and_context_limit(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--ctx-size", "100", "--default-max-tokens", "8", *FAST)
    resp = sim.chat([{"role": "user", "content": words("w", 90)}], max_tokens=10)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "context_length_exceeded" and "100" in err["message"]
    assert sim.chat([{"role": "user", "content": words("w", 50)}], max_tokens=10).status_code == 200
    bad = sim.client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "error" in bad.json()
    assert sim.client.post("/v1/chat/completions", json={"model": "x"}).status_code == 400
    assert sim.metrics()["sim_errors_total"] == 3


def test_invalid_profile_exits_2(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "0", wait_healthy=False)
    assert sim.proc.wait(timeout=10) == 2
    assert "slots" in sim.stderr()
    sim2 = start_sim("--profile-json", '{"bogus": 1}', wait_healthy=False)
    assert sim2.proc.wait(timeout=10) == 2


def test_fault_refuse_start(start_sim: Callable[..., Sim]) -> None:
    message = "Private ANE procedure-bank compiler is unavailable"
    sim = start_sim("--profile-json", json.dumps({"faults": {"refuse_start": message}}), wait_healthy=False)
    assert sim.proc.wait(timeout=10) == 3
    assert message in sim.stderr()
    assert "listening" not in sim.stdout_path.read_text()


def test_fault_error_5xx_every(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-error-5xx-every", "2", *FAST)
    conv = conversation("e", 5)
    codes = [sim.chat(conv, max_tokens=2).status_code for _ in range(4)]
    assert codes == [200, 503, 200, 503]
    resp = sim.chat(conv, max_tokens=2)
    assert resp.status_code == 200
    assert sim.metrics()["sim_errors_total"] == 2


def test_fault_malformed_every(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-malformed-every", "2", *FAST)
    conv = conversation("m", 5)
    clean = stream_chat(sim.url, conv, max_tokens=5)
    assert not any("{not json" in line for line in clean.raw)
    broken = stream_chat(sim.url, conv, max_tokens=5, strict=False)
    index = broken.raw.index("data: {not json")
    assert 1 < index < len(broken.raw) - 1  # after content, before the end of the stream
    assert len(broken.text.split()) == 5


def test_fault_stall_keeps_connection_open(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-stall-every", "1", "--fault-stall-after-tokens", "2", *FAST)
    body = {"messages": conversation("st", 5), "stream": True, "max_tokens": 20}
    received: list[str] = []
    with httpx.Client(timeout=httpx.Timeout(10.0, read=0.7)) as client:
        with pytest.raises(httpx.ReadTimeout):
            with client.stream("POST", sim.url + "/v1/chat/completions", json=body) as resp:
                for line in resp.iter_lines():
                    if line:
                        received.append(line)
    contents = [json.loads(line[6:])["choices"][0]["delta"].get("content") for line in received]
    assert " ".join(c for c in contents if c).split() == contents[1].split() + contents[2].split()
    assert len(" ".join(c for c in contents if c).split()) == 2
    assert "data: [DONE]" not in received
    assert sim.client.get("/health").status_code == 200


def test_client_disconnect_frees_the_slot(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--slots", "1", "--decode-tps", "50", "--prefill-tps", "10000")
    body = {"messages": conversation("d", 5), "stream": True, "max_tokens": 500}  # ~10 s
    with httpx.Client(timeout=10.0) as client:
        with client.stream("POST", sim.url + "/v1/chat/completions", json=body) as resp:
            seen = 0
            for line in resp.iter_lines():
                if line and "content" in line:
                    seen += 1
                if seen >= 3:
                    break
    deadline = time.monotonic() + 3
    while sim.client.get("/slots").json()[0]["state"] != "idle":
        assert time.monotonic() < deadline, "slot still busy after the client left"
        time.sleep(0.05)
    start = time.monotonic()
    assert sim.chat(conversation("d2", 5), max_tokens=3).status_code == 200
    assert time.monotonic() - start < 2


def test_fault_crash_after_requests(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--fault-crash-after-requests", "2", *FAST)
    conv = conversation("k", 5)
    assert sim.chat(conv, max_tokens=2).status_code == 200
    result = stream_chat(sim.url, conv, max_tokens=2)  # the second completes, then the crash
    assert len(result.text.split()) == 2
    assert sim.proc.wait(timeout=10) == 1
    with pytest.raises(httpx.TransportError):
        sim.client.get("/health")
